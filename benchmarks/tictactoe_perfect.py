"""Does the tic-tac-toe preset reach perfect play in 5 minutes? One JSON line per mode.

    python benchmarks/tictactoe_perfect.py                       # MuZero, then AlphaZero, 300 s
    python benchmarks/tictactoe_perfect.py --mode alphazero --seconds 120
    python benchmarks/tictactoe_perfect.py --mode muzero search.num_simulations=64

Each mode trains its preset (`tic_tac_toe_muzero`, `tic_tac_toe_alphazero`) with
`selfplay.train.train` for `--seconds` of wall-clock time (`learner.max_seconds`; the clock
starts after the run is set up, and includes compilation and filling the replay). Then the
final checkpoint's greedy agent (no noise, most visited move) plays every sequence of opponent
moves, as first and as second player (`selfplay.evaluation.tic_tac_toe_report`): it is perfect
when it loses none of those games.

Time to perfect: the run keeps every checkpoint (one per `learner.checkpoint_every` updates), and
after training `--checks` of them, evenly spaced, are checked the same way, so the checks do not
slow the training down; `time_to_perfect_s` is the training time (from the call to `train`) of
the first checked checkpoint from which every later checked one is perfect (null if the final
one is not). The machine's load average is printed
with each line, because other processes slow the training down.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

# Run as `python benchmarks/tictactoe_perfect.py`, this folder is first on sys.path and its
# search.py would hide the `search` package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import configs  # noqa: E402
from selfplay import evaluation  # noqa: E402
from selfplay.checkpoints import Checkpointer, restore_params  # noqa: E402
from selfplay.train import train  # noqa: E402

PRESETS = {"muzero": "tic_tac_toe_muzero", "alphazero": "tic_tac_toe_alphazero"}


def _checkpoint_times(run_dir: pathlib.Path) -> dict[int, dict]:
    """step -> the checkpoint's metadata (wall time of the save, frames)."""
    ckpt = Checkpointer(run_dir / "checkpoints", None, read_only=True)
    try:
        return {step: ckpt.restore_metadata(step) for step in ckpt.all_steps()}
    finally:
        ckpt.close()


def run_mode(
    mode: str,
    seconds: float,
    run_dir: pathlib.Path,
    overrides: list[str],
    max_checks: int,
    num_simulations: int | None,
) -> dict:
    preset = PRESETS[mode]
    config = configs.load_config(
        preset,
        [
            f"learner.max_seconds={seconds}",
            "learner.max_updates=0",
            "learner.keep_checkpoints=1000",  # every checkpoint, for the time to perfect
            *overrides,
        ],
    )
    load_before = os.getloadavg()[0]
    started = time.time()
    result = train(config, run_dir, progress=False)
    load_after = os.getloadavg()[0]

    eval_config, agent, params = evaluation.load_agent(run_dir, num_simulations=num_simulations)
    metadata = _checkpoint_times(run_dir)
    final_step = max(metadata)
    steps = sorted(metadata)
    if max_checks <= 1:
        steps = [final_step]
    elif len(steps) > max_checks:  # evenly spaced, always with the final one
        picks = np.linspace(0, len(steps) - 1, max_checks).round().astype(int)
        steps = [steps[i] for i in sorted(set(picks.tolist()))]
    checks = []
    for step in steps:
        params = restore_params(run_dir, step, target=params)
        report = evaluation.tic_tac_toe_report(eval_config, agent, params)
        checks.append(
            {
                "step": step,
                "train_s": round(metadata[step]["time"] - started, 1),
                "losses_as_first": report["losses_as_first"],
                "losses_as_second": report["losses_as_second"],
                "positions": report["positions"],
            }
        )
    perfect = [c["losses_as_first"] == c["losses_as_second"] == 0 for c in checks]
    time_to_perfect = None
    if perfect[-1]:
        first = len(perfect) - 1
        while first > 0 and perfect[first - 1]:
            first -= 1
        time_to_perfect = checks[first]["train_s"]
    final = checks[-1]
    return {
        "mode": mode,
        "preset": preset,
        "overrides": overrides,
        "train_seconds": round(result.seconds, 1),
        "updates": result.updates,
        "frames": result.frames,
        "stopped_by": result.stopped_by,
        "perfect": perfect[-1],
        "losses_as_first": final["losses_as_first"],
        "losses_as_second": final["losses_as_second"],
        "eval_simulations": eval_config.search.num_simulations,
        "time_to_perfect_s": time_to_perfect,
        "checks": checks,
        "cpu_count": os.cpu_count(),
        "jax_platform": jax.default_backend(),
        "load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "run_dir": str(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["muzero", "alphazero", "both"], default="both")
    parser.add_argument(
        "--seconds",
        type=float,
        default=300.0,
        help="training wall-clock budget per mode (learner.max_seconds)",
    )
    parser.add_argument(
        "--run-dir",
        type=pathlib.Path,
        default=None,
        help="where the runs go (<dir>/<mode>); default: a temporary directory",
    )
    parser.add_argument(
        "--checks",
        type=int,
        default=10,
        help="checkpoints checked, evenly spaced, the final one included "
        "(1: the final one only, no time to perfect)",
    )
    parser.add_argument(
        "--eval-simulations",
        type=int,
        default=None,
        help="search budget of the check (default: the preset's)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.path=value",
        help="config overrides applied to the preset(s)",
    )
    args = parser.parse_args(argv)
    modes = ["muzero", "alphazero"] if args.mode == "both" else [args.mode]
    root = args.run_dir or pathlib.Path(tempfile.mkdtemp(prefix="tictactoe_perfect_"))
    all_perfect = True
    for mode in modes:
        run_dir = root / mode
        if (run_dir / "checkpoints").exists():
            print(f"{run_dir} already holds a run; pass a new --run-dir", file=sys.stderr)
            return 2
        line = run_mode(
            mode, args.seconds, run_dir, list(args.overrides), args.checks, args.eval_simulations
        )
        all_perfect &= line["perfect"]
        print(json.dumps(line), flush=True)
    return 0 if all_perfect else 1


if __name__ == "__main__":
    sys.exit(main())
