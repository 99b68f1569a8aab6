"""Bad input and bad luck at a larger budget than the tests': the counts of cases tried and
handled, one JSON line per kind.

    python benchmarks/bad_input.py                       # everything (minutes: the runs train)
    python benchmarks/bad_input.py --examples 2000       # more generated examples per kind
    python benchmarks/bad_input.py --skip-runs           # no training runs

Kinds:
  overrides, config_files, train_cli, arena_cli, search_masks, search_inputs   generated
      (hypothesis, random seed), with the checks of tests/test_bad_input.py: one clear line (at
      most three) or accepted, never another exception; search_inputs: wrong shapes and dtypes
      given to `search.run`, refused in one error naming the input
  worst_values    every field of every preset meets "-1", "nan", "1e308", "", "x"
  damaged         each of eight kinds of damage to the newest of three checkpoints, --trials
                  times: the arena refuses it in one line; the resume sets it aside and goes on
                  from the newest whole one with its saved state
  kills           a process that saves checkpoints and replays, SIGKILLed at a random moment,
                  --kills times: the newest whole checkpoint restores its saved state
  tournaments     generated tournaments that play (--examples / 2): small games, the cheap
                  players that suit each and now and then one that does not, every format and
                  option; each plays and writes its results, or is refused in one line
  unusual_arena   tests/test_bad_input.py's valid but unusual tournaments (`podracer arena` in
                  this process): each plays and writes its results or is refused in one line
  unusual_runs    tests/test_bad_input.py's valid but unusual configs, a few updates each
                  (`podracer train` in a subprocess): each trains (exit 0) or is refused in the
                  one line expected (a batch larger than the replay, a run that diverges)

A line: {"kind": ..., "tried": N, "handled": N, "accepted": N (where it applies), "seconds": S,
"failures": [first few]}; `ratio` is handled / tried (the baseline: every case handled).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import test_bad_input as cases  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WORKER = str(ROOT / "tests" / "_checkpoint_worker.py")


class Tally:
    def __init__(self, kind: str):
        self.kind, self.tried, self.handled, self.accepted = kind, 0, 0, 0
        self.failures: list[str] = []
        self.start = time.monotonic()

    def check(self, check, *args) -> None:
        self.tried += 1
        try:
            result = check(*args)
        except BaseException as error:  # noqa: BLE001 - counted, and the first few kept
            if isinstance(error, KeyboardInterrupt):
                raise
            if len(self.failures) < 5:
                self.failures.append(f"{args!r}: {type(error).__name__}: {error}"[:600])
            return
        self.handled += 1
        from configs import ExperimentConfig

        is_code = isinstance(result, int) and not isinstance(result, bool)
        self.accepted += result is True or (is_code and result == 0)
        self.accepted += isinstance(result, ExperimentConfig)

    def report(self, **extra) -> None:
        line = {
            "kind": self.kind,
            "tried": self.tried,
            "handled": self.handled,
            "accepted": self.accepted,
            "ratio": round(self.handled / max(self.tried, 1), 4),
            "seconds": round(time.monotonic() - self.start, 1),
            **extra,
            "failures": self.failures,
        }
        print(json.dumps(line), flush=True)


def generated(kind: str, strategy, check, examples: int) -> None:
    tally = Tally(kind)
    budget = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )

    @budget
    @given(strategy)
    def run(example):
        tally.check(check, *example) if isinstance(example, tuple) else tally.check(check, example)

    run()
    tally.report()


def _scratch(prefix: str) -> pathlib.Path:
    """A folder for one part's files, removed when the benchmark exits."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def parsing(examples: int) -> None:
    folder = _scratch("podracer-bad-input-")
    generated(
        "overrides",
        st.tuples(st.sampled_from(cases.PRESETS), cases.overrides),
        cases.check_overrides,
        examples,
    )
    changes = st.lists(st.tuples(st.sampled_from(cases.FIELDS), cases.json_value), max_size=3)
    generated(
        "config_files",
        st.tuples(st.sampled_from(cases.PRESETS), changes.filter(bool)),
        lambda preset, c: cases.check_config_file(preset, c, folder),
        examples,
    )
    tally = Tally("worst_values")
    for preset in cases.PRESETS:
        for field in cases.FIELDS:
            for raw in cases.WORST:
                tally.check(cases.check_overrides, preset, [f"{field}={raw}"])
    tally.report()

    def started(*args, **kwargs):
        raise cases.Started

    (folder / "file").write_text("not a folder")
    (folder / "config.json").write_text("{not json")
    no_help = lambda argv: not any(a in ("-h", "--help") for a in argv)  # noqa: E731
    with (
        mock.patch("selfplay.train.train", started),
        mock.patch("selfplay.launch.launch_local", started),
        mock.patch("selfplay.launch.supervise", started),
        mock.patch("selfplay.processes.initialize", started),
        mock.patch("selfplay.run.split_cpu", lambda count: None),
        mock.patch("selfplay.train.enable_compilation_cache", lambda: None),
    ):
        os.environ.pop("PODRACER_JOB_PROCESS", None)
        generated(
            "train_cli",
            st.lists(cases.train_token(folder), max_size=6).filter(no_help),
            lambda argv: cases.check_command(["train", *argv]),
            examples,
        )

    def solo_started(game, spec, *args, **kwargs):
        from arena.players import make_player

        make_player(spec, game)
        raise cases.Started

    with (
        mock.patch("arena.matches._check_manifest", started),
        mock.patch("arena.solo.evaluate_solo", solo_started),
    ):
        generated(
            "arena_cli",
            cases.arena_argv(folder).filter(no_help),
            lambda argv: cases.check_command(["arena", *argv]),
            examples,
        )


def search_masks(examples: int) -> None:
    import numpy as np

    def check(legal, algorithm):
        chosen, sampled = cases._searched(algorithm)(~np.asarray(legal, bool))
        for row in range(cases.BATCH):
            assert legal[row][int(chosen[row])] and legal[row][int(sampled[row])]
        return True

    generated(
        "search_masks",
        st.tuples(cases.masks, st.sampled_from(["muzero", "gumbel_muzero"])),
        check,
        min(examples, 300),
    )


def search_inputs(examples: int) -> None:
    generated("search_inputs", cases.wrong_search_inputs, cases.search_refuses, examples)


def damaged(trials: int) -> None:
    import numpy as np

    from configs import UsageError
    from selfplay.checkpoints import Checkpointer, restore_params
    from tests.test_checkpoints import CONFIG, DAMAGE, _big_state

    tally = Tally("damaged")
    base = _scratch("podracer-damaged-")
    pristine = base / "pristine"
    ckpt = Checkpointer(pristine / "checkpoints", max_to_keep=3)
    for step in (1, 2, 3):
        ckpt.save(step, _big_state(step), CONFIG)
    ckpt.close()

    def case(name: str, trial: int) -> None:
        run = base / f"{name.replace(' ', '_')}-{trial}"
        shutil.copytree(pristine, run)
        DAMAGE[name][0](run / "checkpoints" / "3")
        try:
            restore_params(run)
            raise AssertionError("the arena read a damaged checkpoint")
        except UsageError as error:
            assert "\n" not in str(error) and "is damaged" in str(error)
        resumer = Checkpointer(run / "checkpoints", max_to_keep=3)
        found = resumer.newest_whole(_big_state(0), CONFIG, set_aside_in=run)
        resumer.close()
        assert found.step == 2 and len(found.damaged) == 1
        np.testing.assert_array_equal(found.state.params["big"], _big_state(2).params["big"])

    for trial in range(trials):
        for name in DAMAGE:
            tally.check(case, name, trial)
    tally.report(kinds=list(DAMAGE))


def kills(count: int) -> None:
    import numpy as np

    from selfplay.checkpoints import Checkpointer, load_replay
    from tests._checkpoint_worker import CONFIG, state

    tally = Tally("kills")
    base = _scratch("podracer-kills-")
    moments = random.Random(0)
    steps = []

    def case(i: int) -> None:
        run = base / f"run{i}"
        writer = subprocess.Popen(
            [sys.executable, WORKER, "save-loop", str(run)],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(moments.uniform(0.3, 2.0))
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=60)
        ckpt = Checkpointer(run / "checkpoints", max_to_keep=3)
        found = ckpt.newest_whole(state(0), CONFIG, set_aside_in=run)
        ckpt.close()
        steps.append(found.step)
        if found.step is not None:
            np.testing.assert_array_equal(
                found.state["params"]["w"], state(found.step)["params"]["w"]
            )
            replay = load_replay(run, 0, found.step)
            assert replay is None or int(replay["uid"][0]) == found.step

    for i in range(count):
        tally.check(case, i)
    tally.report(resumed_steps=steps)


def tournaments(examples: int) -> None:
    """Generated tournaments that play (no stand-ins), as tests/test_bad_input.py's: each plays
    and writes its results or is refused in one line."""
    folder = _scratch("podracer-tournaments-")
    outs = iter(range(10**9))
    generated(
        "tournaments",
        cases.played_tournament(),
        lambda argv: cases.check_tournament(argv, folder / f"t{next(outs)}"),
        examples,
    )


def unusual_arena() -> None:
    """tests/test_bad_input.py's valid but unusual tournaments: each plays (exit 0, its
    results.json written) or is refused in the one line expected."""
    tally = Tally("unusual_arena")
    base = _scratch("podracer-arena-")

    for name in cases.UNUSUAL_ARENA:
        tally.check(cases.check_unusual_tournament, name, base / name.replace(" ", "_"))
    tally.report()


def unusual_runs() -> None:
    """tests/test_bad_input.py's valid but unusual runs, each `podracer train` in a process of
    its own: the run trains (exit 0) or is refused in one line holding the expected text."""
    tally = Tally("unusual_runs")
    base = _scratch("podracer-unusual-")
    outcomes = {}

    def case(name: str) -> int:
        overrides, refusal, _ = cases.UNUSUAL_RUNS[name]
        done = subprocess.run(
            [sys.executable, "-m", "podracer", "train", "--quiet"]
            + ["--run-dir", str(base / name.replace(" ", "_").replace(",", ""))]
            + cases.RUN_BASE
            + overrides,
            capture_output=True,
            text=True,
            timeout=900,
            env=ENV,
        )
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        if refusal is None:
            assert done.returncode == 0, done.stderr[-2000:]
            outcomes[name] = "ran"
            return 0
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and refusal in lines[0], done.stderr
        outcomes[name] = lines[0][:200]
        return 2

    for name in cases.UNUSUAL_RUNS:
        tally.check(case, name)
    tally.report(outcomes=outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="per generated kind")
    parser.add_argument("--trials", type=int, default=3, help="of each kind of damage")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--skip-runs", action="store_true", help="no training runs")
    args = parser.parse_args()
    parsing(args.examples)
    search_masks(args.examples)
    search_inputs(args.examples)
    tournaments(args.examples // 2)
    unusual_arena()
    damaged(args.trials)
    kills(args.kills)
    if not args.skip_runs:
        unusual_runs()


if __name__ == "__main__":
    main()
