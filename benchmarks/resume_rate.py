"""A run resumed at another learning rate (as a PBT member's interval after an exploit or an
explore of `optimizer.learning_rate`), against the same resume at the rate it had: the seconds
of each, in one process after a first stretch built the run's programs.

    .venv/bin/python benchmarks/resume_rate.py --preset tic_tac_toe_muzero --rounds 3

The peak learning rate is an input of the update (`muzero.TrainState.learning_rate`), so both
resumes run the programs the first stretch built: the ceiling is the same-rate resume, and
`ratio_to_same_rate` near 1 says a new rate builds nothing. Each round resumes once at the
run's rate and once at a rate the process has not seen (alternated), `--updates` updates each,
with the persistent compilation cache on (a temporary folder the first stretch fills, as a
user's `~/.cache/podracer/jax` would be). Small networks (the tests' sizes, `--overrides` to
change them): the time is the resume's start and a few updates, not training.

Lines: {"config": "same_rate" | "other_rate", "preset": ..., "cpu_s": median, "wall_s":
median, "rounds": N} and, on "other_rate", "ratio_to_same_rate" (of the CPU seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
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
        rate, updates = config.optimizer.learning_rate, args.updates
        times: dict[str, list[tuple[float, float]]] = {"same_rate": [], "other_rate": []}
        for round_ in range(args.rounds):
            for name in (
                ("same_rate", "other_rate") if round_ % 2 == 0 else ("other_rate", "same_rate")
            ):
                updates += args.updates
                # A rate no earlier stretch had: 0.5x, 0.25x, ... of the run's.
                new = rate if name == "same_rate" else rate * 0.5 ** (len(times[name]) + 1)
                resumed = config.replace(
                    optimizer=dataclasses.replace(config.optimizer, learning_rate=new),
                    learner=dataclasses.replace(config.learner, max_updates=updates),
                )
                cpu, wall = time.process_time(), time.perf_counter()
                result = train_module.train(resumed, run_dir, progress=False, plot=False)
                times[name].append((time.process_time() - cpu, time.perf_counter() - wall))
                assert result.updates == updates, result
    same_cpu = statistics.median(c for c, _ in times["same_rate"])
    for name, samples in times.items():
        line = {
            "config": name,
            "preset": args.preset,
            "cpu_s": round(statistics.median(c for c, _ in samples), 2),
            "wall_s": round(statistics.median(w for _, w in samples), 2),
            "rounds": args.rounds,
        }
        if name == "other_rate":
            line["ratio_to_same_rate"] = round(line["cpu_s"] / same_cpu, 2)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
