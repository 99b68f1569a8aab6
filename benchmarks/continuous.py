"""Continuous control: Sampled MuZero against the Gaussian V-trace and a peer, return over frames.

    .venv/bin/python benchmarks/continuous.py --seeds 0 1 2 \\
        --rejax /work/peers/rejax/pendulum.jsonl --png docs/pendulum_continuous.png
    .venv/bin/python benchmarks/continuous.py --env gymnax:MountainCarContinuous-v0 \\
        --frames 500000 --systems sampled_muzero --seeds 0

Why: the issue of continuous actions sets a bar on Pendulum-v1 (gymnax): Sampled MuZero's mean
self-play return over the last 10% of 200,000 agent steps at -250 or above, and above the
Gaussian V-trace's at the same frames; and asks where a strong model-free peer stands (rejax's
SAC and PPO, run by `benchmarks/rejax_pendulum.py` in a virtual environment of their own, whose
JSON lines `--rejax` reads) and whether MountainCarContinuous-v0 reaches its goal (a return above
90) within 500,000 steps.

What runs, per system (`--systems`) and seed (`--seeds`), one process after the other:
`podracer train --config <preset> env.name=<--env> seed=S learner.max_frames=<--frames>
evaluation.every_s=0 learner.log_every_s=0.1` in `--run-root/<system>-seed<S>/` (`sampled_muzero`:
`pendulum_sampled_muzero`, with `--set` overrides; `vtrace`: `pendulum_vtrace`). The figures come
from each run's `metrics.jsonl`: `episode_return` (the mean return of the self-play episodes
that ended since the previous line) against `frames` (agent steps, all environments together).

Printed, one JSON line each:
- per run: `last10` (the mean of the run's `episode_return` lines at or past 90% of the frames),
  `best` (its highest line), `reached_goal` (`best` > `--goal`, MountainCar's 90), the wall time;
- per system: the mean and the per-seed `last10` over seeds;
- the comparison: Sampled MuZero's mean `last10` against the bar (`--bar`, -250) and against
  V-trace's (`ratio_to_vtrace`: V-trace's over ours, both negative on Pendulum: above 1 means
  ours is higher), and rejax's where given (its greedy evaluations in the last 10%).

`--png` draws each system's mean curve over seeds (self-play returns, binned by frames) and
rejax's mean evaluation curves.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

PRESETS = {"sampled_muzero": "pendulum_sampled_muzero", "vtrace": "pendulum_vtrace"}


def _records(run_dir: pathlib.Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def curve(run_dir: pathlib.Path) -> list[tuple[int, float]]:
    """(frames, episode_return) of each line of a run's metrics that has a return."""
    return [
        (int(r["frames"]), float(r["episode_return"]))
        for r in _records(run_dir)
        if "episode_return" in r and "frames" in r
    ]


def last_share(points: list[tuple[int, float]], frames: int, share: float = 0.1) -> float:
    """The mean return of the points at or past (1 - share) of `frames`; NaN if none."""
    tail = [value for at, value in points if at >= (1.0 - share) * frames]
    return statistics.fmean(tail) if tail else float("nan")


def run_one(system: str, seed: int, args) -> dict:
    run_dir = pathlib.Path(args.run_root) / f"{system}-seed{seed}"
    command = [
        sys.executable,
        "-m",
        "podracer",
        "train",
        "--config",
        PRESETS[system],
        "--run-dir",
        str(run_dir),
        f"env.name={args.env}",
        f"seed={seed}",
        f"learner.max_frames={args.frames}",
        "learner.max_seconds=0",
        "learner.max_updates=0",
        "evaluation.every_s=0",
        "learner.log_every_s=0.1",  # V-trace's runs take seconds: a curve needs many lines
        *(args.set if system == "sampled_muzero" else []),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{system} seed {seed} failed: {done.stderr.strip().splitlines()[-1:]}")
    points = curve(run_dir)
    best = max((value for _, value in points), default=float("nan"))
    return {
        "benchmark": "continuous",
        "system": system,
        "env": args.env,
        "seed": seed,
        "frames": args.frames,
        "last10": round(last_share(points, args.frames), 2),
        "best": round(best, 2),
        "reached_goal": bool(best > args.goal),
        "wall_s": round(wall, 1),
        "overrides": args.set if system == "sampled_muzero" else [],
        "run_dir": str(run_dir),
    }


def rejax_last10(path: str, frames: int) -> dict[str, dict]:
    """rejax's runs (benchmarks/rejax_pendulum.py's lines): per algorithm, the mean greedy
    evaluation return in the last 10% of `frames`, per seed and over seeds."""
    lines = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]
    by_run: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for line in lines:
        if "frames" in line and "return" in line:
            by_run.setdefault((line["algorithm"], line["seed"]), []).append(
                (int(line["frames"]), float(line["return"]))
            )
    out: dict[str, dict] = {}
    for (algorithm, seed), points in sorted(by_run.items()):
        entry = out.setdefault(algorithm, {"per_seed": {}, "curves": []})
        entry["per_seed"][seed] = round(last_share(points, frames), 2)
        entry["curves"].append(points)
    for entry in out.values():
        entry["mean"] = round(statistics.fmean(entry["per_seed"].values()), 2)
    return out


def _binned_mean(curves: list[list[tuple[int, float]]], frames: int, bins: int = 20):
    """The mean over runs of each run's mean return per frame bin: (bin centres, means)."""
    width = frames / bins
    centres, means = [], []

    def inside(at: int, b: int) -> bool:  # the last bin takes the final line past `frames`
        return b * width <= at < (b + 1) * width or (b == bins - 1 and at >= frames)

    for b in range(bins):
        per_run = [
            statistics.fmean(v for at, v in points if inside(at, b))
            for points in curves
            if any(inside(at, b) for at, _ in points)
        ]
        if per_run:
            centres.append((b + 0.5) * width)
            means.append(statistics.fmean(per_run))
    return centres, means


def plot(path: str, curves: dict[str, list], rejax: dict[str, dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for system, runs in curves.items():
        x, y = _binned_mean(runs, args.frames)
        axes.plot(x, y, label=f"{system} (self-play, {len(runs)} seeds)")
    for algorithm, entry in rejax.items():
        x, y = _binned_mean(entry["curves"], args.frames)
        axes.plot(x, y, "--", label=f"rejax {algorithm.upper()} (greedy evaluation)")
    if args.bar is not None:
        axes.axhline(args.bar, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("agent steps")
    axes.set_ylabel("episode return")
    axes.set_title(f"{args.env}: return over agent steps (2-core CPU)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="gymnax:Pendulum-v1")
    parser.add_argument("--systems", nargs="+", choices=sorted(PRESETS), default=sorted(PRESETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=200_000, help="agent steps per run")
    parser.add_argument("--set", nargs="*", default=[], help="overrides of Sampled MuZero")
    parser.add_argument(
        "--bar", type=float, default=None, help="the bar on last10 (Pendulum's: -250)"
    )
    parser.add_argument("--goal", type=float, default=90.0, help="return that reaches the goal")
    parser.add_argument("--rejax", default=None, help="rejax_pendulum.py's JSON lines")
    parser.add_argument("--run-root", default="runs/continuous")
    parser.add_argument("--png", default=None)
    args = parser.parse_args(argv)
    if args.frames < 1:
        raise SystemExit("--frames must be >= 1")
    if args.bar is None and args.env == "gymnax:Pendulum-v1":
        args.bar = -250.0  # the bar is Pendulum's

    results: dict[str, list[dict]] = {}
    curves: dict[str, list] = {}
    for seed in args.seeds:  # seed by seed, the systems alternating: drift hits both alike
        for system in args.systems:
            line = run_one(system, seed, args)
            print(json.dumps(line), flush=True)
            results.setdefault(system, []).append(line)
            curves.setdefault(system, []).append(curve(pathlib.Path(line["run_dir"])))
    summary: dict[str, float] = {}
    for system, lines in results.items():
        summary[system] = statistics.fmean(line["last10"] for line in lines)
        print(
            json.dumps(
                {
                    "benchmark": "continuous_system",
                    "system": system,
                    "env": args.env,
                    "frames": args.frames,
                    "last10_mean": round(summary[system], 2),
                    "last10_per_seed": [line["last10"] for line in lines],
                    "reached_goal": [line["reached_goal"] for line in lines],
                }
            ),
            flush=True,
        )
    rejax = rejax_last10(args.rejax, args.frames) if args.rejax else {}
    if "sampled_muzero" in summary:
        ours = summary["sampled_muzero"]
        comparison = {
            "benchmark": "continuous_comparison",
            "env": args.env,
            "frames": args.frames,
            "sampled_muzero_last10": round(ours, 2),
        }
        if args.bar is not None:
            comparison.update(bar=args.bar, bar_met=bool(ours >= args.bar))
        if "vtrace" in summary:
            comparison["vtrace_last10"] = round(summary["vtrace"], 2)
            comparison["above_vtrace"] = bool(ours > summary["vtrace"])
            comparison["ratio_to_vtrace"] = round(summary["vtrace"] / ours, 3)
        for algorithm, entry in rejax.items():
            comparison[f"rejax_{algorithm}_last10"] = entry["mean"]
        print(json.dumps(comparison), flush=True)
    if args.png:
        plot(args.png, curves, rejax, args)


if __name__ == "__main__":
    main()
