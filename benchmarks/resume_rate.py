"""A run resumed with another value of an explorable field (as a PBT member's interval after an
exploit or an explore: the peak learning rate, or a setting of Sebulba's replay on the host),
against the same resume with the value it had: the seconds of each, in one process after a
first stretch built the run's programs.

    .venv/bin/python benchmarks/resume_rate.py --preset tic_tac_toe_muzero --rounds 3
    .venv/bin/python benchmarks/resume_rate.py --field replay.priority_alpha --rounds 3

The peak learning rate is an input of the update (`muzero.TrainState.learning_rate`), and the
replay on the host is built from each run's own config outside the agent's programs
(`selfplay.programs.AGENT_FREE_FIELDS`), so both resumes run the programs the first stretch
built: the ceiling is the resume with the same value, and `ratio_to_same_value` near 1 says a
new value builds nothing. Each round resumes once with the run's value and once with a value the
process has not seen (0.5x, 0.25x, ... of the run's; alternated), `--updates` updates each, with
the persistent compilation cache on (a temporary folder the first stretch fills, as a user's
`~/.cache/podracer/jax` would be). Small networks (the tests' sizes, `--overrides` to change
them): the time is the resume's start and a few updates, not training.

Lines: {"config": "same_value" | "other_value", "field": ..., "preset": ..., "cpu_s": median,
"wall_s": median, "rounds": N} and, on "other_value", "ratio_to_same_value" (of the CPU
seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

ROOT = os.path.dirname(_HERE)
sys.path.insert(0, ROOT)
from tests.test_train import TINY  # noqa: E402  (the tests' small networks and actors)

SMALL = [*TINY, "evaluation.every_s=0", "learner.checkpoint_every=1000000"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tic_tac_toe_muzero")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=4, help="updates of each resume")
    parser.add_argument("--field", default="optimizer.learning_rate", help="a float field")
    parser.add_argument("--overrides", nargs="*", default=SMALL)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        import jax

        import configs
        from selfplay import train as train_module

        if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # a cache of its own, empty at first
            jax.config.update("jax_compilation_cache_dir", os.path.join(folder, "jax-cache"))

        config = configs.load_config(
            args.preset, [*args.overrides, f"learner.max_updates={args.updates}"]
        )
        run_dir = os.path.join(folder, "run")
        train_module.train(config, run_dir, progress=False, plot=False)
        section, name = args.field.split(".")
        value, updates = getattr(getattr(config, section), name), args.updates
        times: dict[str, list[tuple[float, float]]] = {"same_value": [], "other_value": []}
        for round_ in range(args.rounds):
            for kind in (
                ("same_value", "other_value") if round_ % 2 == 0 else ("other_value", "same_value")
            ):
                updates += args.updates
                # A value no earlier stretch had: 0.5x, 0.25x, ... of the run's.
                new = value if kind == "same_value" else value * 0.5 ** (len(times[kind]) + 1)
                resumed = configs.apply_overrides(
                    config, [f"{args.field}={new!r}", f"learner.max_updates={updates}"]
                )
                cpu, wall = time.process_time(), time.perf_counter()
                result = train_module.train(resumed, run_dir, progress=False, plot=False)
                times[kind].append((time.process_time() - cpu, time.perf_counter() - wall))
                assert result.updates == updates, result
    same_cpu = statistics.median(c for c, _ in times["same_value"])
    for kind, samples in times.items():
        line = {
            "config": kind,
            "field": args.field,
            "preset": args.preset,
            "cpu_s": round(statistics.median(c for c, _ in samples), 2),
            "wall_s": round(statistics.median(w for _, w in samples), 2),
            "rounds": args.rounds,
        }
        if kind == "other_value":
            line["ratio_to_same_value"] = round(line["cpu_s"] / same_cpu, 2)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
