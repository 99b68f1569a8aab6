"""The Sebulba runtime and `podracer train`: smoke runs of each mode, resume, stop, bad input."""

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import configs
from podracer import cli
from selfplay import actors
from selfplay import train as train_module
from selfplay.checkpoints import Checkpointer
from tests import fakes
from tests.fakes import TINY


def _tiny(preset: str, *extra: str) -> configs.ExperimentConfig:
    overrides = list(TINY) + list(extra)
    if preset == "cartpole_vtrace":
        overrides = [
            "learner.batch_size=2",
            "actors.envs_per_thread=4",
            "actors.unroll_length=8",
            "network.mlp_sizes=[16,16]",
            "learner.log_every_s=0.5",
            "learner.checkpoint_every=2",
            *extra,
        ]
    return configs.load_config(preset, overrides)


@pytest.mark.plots
@pytest.mark.parametrize(
    "preset, extra",
    [
        ("tic_tac_toe_muzero", []),
        ("tic_tac_toe_alphazero", []),
        ("cartpole_vtrace", []),
        # AlphaZero's exact model searched by Gumbel MuZero, as pgx's own AlphaZero example does.
        (
            "tic_tac_toe_alphazero",
            ["search.algorithm=gumbel_muzero", "search.qtransform=completed_by_mix_value"],
        ),
    ],
    ids=["muzero", "alphazero", "vtrace", "alphazero-gumbel"],
)
def test_smoke_run_of_each_mode(preset, extra, tmp_path):
    config = _tiny(preset, "learner.max_updates=4", *extra)
    result = train_module.train(config, tmp_path / "run", progress=False)
    assert result.stopped_by == "max_updates"
    assert result.updates == 4
    assert result.frames > 0
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["name"] == preset
    assert (run / "checkpoints" / "4").is_dir()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r["step"] <= 4 for r in records)
    assert any("loss" in r for r in records)
    assert (run / "learning_curves.png").is_file()


def test_a_resume_with_another_learning_rate_runs_the_programs_it_has_at_that_rate(tmp_path):
    # The smoke run's config (above): the same programs where this process ran it.
    config = _tiny("cartpole_vtrace", "learner.max_updates=4")
    run = tmp_path / "run"
    train_module.train(config, run, progress=False)
    halved = dataclasses.replace(config.optimizer, learning_rate=config.optimizer.learning_rate / 2)
    more = config.replace(
        optimizer=halved,
        learner=dataclasses.replace(config.learner, max_updates=8),
        # The store's settings are the run's, outside the agent's programs (AGENT_FREE_FIELDS).
        replay=dataclasses.replace(config.replay, queue_size=config.replay.queue_size + 1),
    )
    with fakes.traced_programs() as traced:
        again = train_module.train(more, run, progress=False)
    assert again.resumed_from == 4 and again.updates == 8
    # The peak rate is an input of the update (muzero.TrainState.learning_rate), not a constant
    # of its program, and the queue is built from the run's config: the resume traced none of
    # the run's programs again ...
    assert not {"act", "make_batch", "update"} & set(traced), traced
    # ... and each update ran at its invocation's rate (a linear decay over 6,000 updates from
    # that peak: within 0.2% of it over these 8).
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    started = max(i for i, r in enumerate(records) if r.get("status") == "compiling")
    for peak, lines in ((config, records[:started]), (more, records[started:])):
        rates = [r["learning_rate"] for r in lines if "learning_rate" in r]
        assert rates, lines
        np.testing.assert_allclose(rates, peak.optimizer.learning_rate, rtol=2e-3)
    # A checkpoint holds the state but its rate, as before the rate was a field of the state:
    # those checkpoints resume, and these resume with an older podracer.
    checkpoints = Checkpointer(run / "checkpoints", None)
    saved = checkpoints.restore()
    checkpoints.close()
    assert set(saved) == {"params", "opt_state", "step", "key", "target_params"}


def test_a_failing_actor_thread_stops_the_run_with_its_message(tmp_path, monkeypatch):
    real_make_env = actors.make_env
    calls = []

    def make_failing_env(name, num_envs, seed=0, **options):
        env = real_make_env(name, num_envs, seed=seed, **options)
        calls.append(name)
        # The first env is the spec probe; the actors' envs fail after a few steps.
        return env if len(calls) == 1 else fakes.FailingEnv(env, fail_after=3)

    monkeypatch.setattr(actors, "make_env", make_failing_env)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="environment exploded"):
        train_module.train(
            _tiny("tic_tac_toe_muzero", "learner.max_updates=1000"),
            tmp_path / "run",
            progress=False,
        )
    assert time.monotonic() - started < 120  # stopped, never hung


def test_a_run_whose_updates_stop_stops_as_stalled_with_a_final_checkpoint(tmp_path, monkeypatch):
    # The learner never updates again after its second update (as if each wait for a sample
    # came back empty for ever): after learner.stall_timeout_s the run stops itself, saving.
    from selfplay.sebulba import SebulbaRuntime

    real_learn = SebulbaRuntime.learn

    def learn_twice(self):
        if self.step >= 2:
            time.sleep(0.01)
            return False
        return real_learn(self)

    monkeypatch.setattr(SebulbaRuntime, "learn", learn_twice)
    config = _tiny("tic_tac_toe_alphazero", "learner.max_updates=1000", "learner.stall_timeout_s=1")
    result = train_module.train(config, tmp_path / "run", progress=False)
    # Which counter stops first is the machine's: the actors stop too once the replay's rate
    # limit holds them, and under load they may pause for a second before the first update.
    stalled = r"stalled: no (frame|update|frame and no update) for 1 s \(learner.stall_timeout_s\)"
    assert re.fullmatch(stalled, result.stopped_by), result.stopped_by
    assert checkpoint_steps(tmp_path / "run")[-1] == result.updates <= 2  # the final checkpoint


def _podracer(*args, **kwargs):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "podracer", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def checkpoint_steps(run: pathlib.Path) -> list[int]:
    """The updates `run` holds checkpoints of, in order."""
    return sorted(int(p.name) for p in (run / "checkpoints").glob("*") if p.name.isdigit())


@contextlib.contextmanager
def interrupt_this_process_once(saved_past: tuple[pathlib.Path, int], timeout=240.0):
    """While inside, a thread sends SIGINT to this process (Ctrl-C) once the run in
    `saved_past[0]` holds a checkpoint later than update `saved_past[1]` (at `timeout` seconds
    regardless, so a run that never gets there still ends): for `cli.main(["train", ...])`
    called in the test's process, which then runs the programs the test's own run built
    (`selfplay.programs`) instead of a fresh interpreter's tracing them all again. The
    command's handler takes the signal: the run has saved, so it is inside it. A command that
    returns first (a failure) gets no signal."""
    run, after = saved_past
    returned = threading.Event()

    def wait_then_interrupt():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and checkpoint_steps(run)[-1:] <= [after]:
            if returned.wait(0.2):
                return
        if not returned.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=wait_then_interrupt, daemon=True)
    thread.start()
    try:
        yield
    finally:
        returned.set()
        thread.join()


def _wait_for_checkpoint(run: pathlib.Path, process, timeout=240.0, after: int = -1):
    """Waits for a checkpoint of an update later than `after`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if checkpoint_steps(run)[-1:] > [after]:
            return
        if process.poll() is not None:
            raise AssertionError(f"training exited early: {process.communicate()}")
        time.sleep(0.5)
    raise AssertionError("no checkpoint appeared")


def test_killed_run_resumes_and_sigint_stops_with_a_final_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--quiet", "--no-plot", *TINY]
    args += ["learner.max_updates=100000"]
    process = _podracer(*args)
    _wait_for_checkpoint(run, process)
    process.kill()  # no chance to clean up: as a crash
    process.communicate(timeout=60)
    checkpoints = Checkpointer(run / "checkpoints", None)
    resumes_from, saved = checkpoints.latest_step(), checkpoints.restore_metadata()
    checkpoints.close()

    logged_before = len((run / "metrics.jsonl").read_text().splitlines())
    process = _podracer(*args)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        # Two new metric lines: the resumed run is past start-up and learning.
        if len((run / "metrics.jsonl").read_text().splitlines()) >= logged_before + 2:
            break
        time.sleep(0.5)
    before = checkpoint_steps(run)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "resumed from update" in stdout
    after = checkpoint_steps(run)
    assert max(after) >= max(before)  # the final checkpoint at the stopped step
    # The resumed run counts its frames and time on from the checkpoint it resumed from.
    final = re.search(r"at update \d+, ([\d,]+) frames in .*resumed from update (\d+)\.", stdout)
    assert final, stdout
    assert int(final.group(2)) == resumes_from
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    again = [r for r in records if r.get("status") == "compiling"][-1]
    assert again["frames"] == saved["frames"] > 0 and again["time"] >= saved["seconds"] > 0
    assert int(final.group(1).replace(",", "")) > saved["frames"]
    assert not (run / "learning_curves.png").exists()  # --no-plot


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "no_such_preset"], "unknown preset 'no_such_preset'"),
        (["search.no_such_field=3"], "unknown config field 'search.no_such_field'"),
        (["search.num_simulations=many"], "search.num_simulations must be an integer"),
        (["search.num_simulations=0"], "SearchConfig.num_simulations must be an integer >= 1"),
        (["--config", "tic_tac_toe_muzero", "env.name=openspiel:no_such_game"], "no_such_game"),
        (["env.name=pgx:no_such_game"], "no_such_game"),  # the default preset is pgx AlphaZero
        (["env.name=openspiel:connect_four"], "alphazero searches with the rules as its model"),
        (["learner.max_updates"], "is not key.path=value"),
        # Taken as the current folder: a config.json there was read as the run's own.
        (["--run-dir", ""], "--run-dir is empty"),
        (
            ["devices.cpu_convolutions=fast"],
            "DevicesConfig.cpu_convolutions must be 'xla' or 'eigen'",
        ),
        (
            ["runtime=anakin", "replay.checkpoint=true"],
            "ReplayConfig.checkpoint must be false with runtime=anakin",
        ),
        (
            ["--config", "cartpole_vtrace", "replay.checkpoint=true"],
            "or mode=vtrace (its queue holds a few trajectories in flight, no replay)",
        ),
        # The board presets pick min-max Q for PUCT; Gumbel needs its completed Q named too.
        (
            ["search.algorithm=gumbel_muzero"],
            "SearchConfig.qtransform must be None or 'completed_by_mix_value' with algorithm",
        ),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(args, message, tmp_path, capsys):
    code = cli.main(["train", "--run-dir", str(tmp_path / "run"), *args])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def test_unwritable_run_directory(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = cli.main(["train", "--run-dir", str(blocker / "run")])
    captured = capsys.readouterr()
    assert code == 2
    assert "cannot write to run directory" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_help_lists_presets_and_fields(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in configs.presets.names():
        assert name in out
    assert "search.num_simulations" in out and "learner.max_updates" in out


def test_the_learner_input_pipeline_keeps_updates_in_flight_and_the_replay_consistent(
    tmp_path, monkeypatch
):
    from selfplay import learner_input, run, sebulba

    # The updates in flight after each dispatch, and which thread builds each batch in what
    # order with the updates (`InFlight.add` follows each update's dispatch).
    most, order = [], []
    add, build = learner_input.InFlight.add, learner_input.LearnerInput.build

    def recording_add(self, metrics, item, timer):
        order.append(("update", threading.current_thread().name))
        add(self, metrics, item, timer)
        most.append(len(self))

    def recording_build(self, sampled):
        order.append(("build", threading.current_thread().name))
        return build(self, sampled)

    monkeypatch.setattr(learner_input.InFlight, "add", recording_add)
    monkeypatch.setattr(learner_input.LearnerInput, "build", recording_build)
    runtimes = []

    def make_runtime(config, optimizer):
        runtimes.append(sebulba.SebulbaRuntime(config, optimizer))
        return runtimes[-1]

    config = _tiny(
        "tic_tac_toe_muzero",
        "learner.max_updates=30",
        "learner.prefetch=2",
        "learner.log_every_s=0.05",
        "replay.capacity=256",  # small: the actors overwrite windows whose priorities are due
        "replay.priority_alpha=1",
        "replay.priority_beta=0.4",
        "replay.priority_beta_anneal_updates=60",
    )
    result = run.run(config, tmp_path / "run", make_runtime, progress=False)
    assert result.stopped_by == "max_updates" and result.updates == 30
    (runtime,) = runtimes
    # Importance weights' beta rose from 0.4 halfway to 1 over the 30 of 60 annealing updates.
    assert runtime.replay.beta == pytest.approx(0.7)
    assert len(most) == 30 and max(most) == 2  # never more than `prefetch` in flight
    assert len(runtime.in_flight) == 0  # the last ones were waited for at the end
    # Each batch is built by the learner's thread just before its update, so that the device
    # runs them in that order and no thread waits for a build.
    learner = threading.current_thread().name
    assert order == [("build", learner), ("update", learner)] * 30
    runtime.store.check_consistency()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    learning = [r for r in records if "loss" in r]
    assert learning and all(0 <= r["learner_wait_share"] <= 1 for r in learning)
    assert any(r.get("time/input/sample_s", 0) > 0 for r in records)
    assert any(r.get("time/learner/device_s", 0) > 0 for r in records)


def test_an_update_whose_priorities_are_not_finite_stops_the_run_in_one_line():
    import numpy as np

    from selfplay import learner_input
    from selfplay.lifetime import Diverged
    from selfplay.metrics import StageTimer

    written = []

    class Store:
        def update_priorities(self, indices, priorities):
            written.append(priorities)

    def done(priorities):
        return learner_input.Prefetched(None, np.arange(2), np.asarray(priorities), 0.0)

    in_flight = learner_input.InFlight(Store(), limit=0)
    in_flight.add({}, done([1.0, 0.5]), StageTimer())
    with pytest.raises(Diverged, match="an update's priorities hold NaN or inf") as raised:
        in_flight.add({}, done([1.0, np.nan]), StageTimer())
    assert len(str(raised.value).splitlines()) == 1
    assert len(written) == 1  # the replay never holds them


def test_the_accelerator_paths_run_on_two_cpu_devices_and_learn(tmp_path):
    # `devices.accelerator_paths=on` on 2 CPU devices, as on a GPU box: Sebulba's actors on
    # device 0 with the fused pgx act+step, the learner on device 1 with its state donated and
    # its batches prefetched across devices; Sebulba's segments from device 0 into the replay on
    # device 1; Anakin with its updates inside the iteration's jit.
    proc = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).parent / "_devices_worker.py"), str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    sebulba, anakin = results["sebulba"], results["anakin"]
    assert sebulba["devices"] == [[0], [1]] and sebulba["donates_state"] and sebulba["fused"]
    # Targets are built on the learner's device, not queued behind the actors' searches.
    assert sebulba["batch_built_on"] == [1]
    assert anakin["learn_in_jit"]
    for result in (sebulba, anakin):
        assert result["stopped_by"] == "max_updates", result
        losses = result["losses"]  # self-play's targets move: falls, not monotonically
        assert len(losses) >= 3 and min(losses[1:]) < 0.95 * losses[0], losses
    # The fused step counts the game's step as search: no separate env stage.
    assert sebulba["actor_stages"] == ["queue", "search"]
    # A segment per device call on device 0 fed the replay on the learner's device 1.
    segments = results["segments"]
    assert segments["stopped_by"] == "max_updates" and segments["replay_on"] == [1]
    assert segments["donates_state"] and segments["windows"] > 0
    # Anakin's updates one by one over the 2 CPU devices: the host waits for them every
    # `bound` (400 dispatched at once hung in XLA:CPU's all-reduce, deaf to SIGTERM).
    one_by_one = results["one_by_one"]
    assert one_by_one["stopped_by"] == "max_updates" and not one_by_one["learn_in_jit"]
    assert one_by_one["updates_per_iteration"] > one_by_one["bound"], one_by_one
    assert one_by_one["waits"] > 0 and one_by_one["most_ahead"] <= one_by_one["bound"], one_by_one
    # Each run built each of its programs once: the actor threads share the fused act+step and
    # the environments' reset (built at once by both threads, each once compiled its own), and
    # over 2 devices Anakin's second iteration took the first's program (a zero-size output
    # left to XLA came back replicated and compiled the iteration again).
    assert results["lowered_again"] == {name: [] for name in results["lowered_again"]}, results
    assert len(results["lowered_again"]) == 4
