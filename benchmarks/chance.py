"""The games-with-chance bars: train a preset for 30 minutes, then measure its checkpoints.

    .venv/bin/python benchmarks/chance.py train --preset game2048_stochastic_muzero --out runs/bars
    .venv/bin/python benchmarks/chance.py game2048 --runs runs/bars/game2048_stochastic_muzero \\
        runs/bars/game2048_muzero --episodes 100
    .venv/bin/python benchmarks/chance.py backgammon --runs runs/bars/backgammon_alphazero \\
        --opponents random,pubeval --games 200

`train` runs `podracer train --config PRESET` for `--minutes` (the preset's own 30) into
`OUT/PRESET`, samples the machine's load (`/proc/loadavg`) every 30 s beside it, and prints one
JSON line: frames, updates, seconds, the load's mean and range.

`game2048` plays each run's checkpoints (every `--every`-th, and the last) greedily on OpenSpiel's
2048 through the arena (`arena.evaluate_solo`, the `ckpt:` player, `--episodes` episodes with the
same seeds for every checkpoint) and prints one JSON line per checkpoint: the frames it had
trained on (from the run's metrics), the mean score and the IQM with 95% bootstrap intervals, the
highest tile's median and maximum, and `random`'s mean as the floor; then one line comparing the
runs at equal frames (each checkpoint of the first run against the second run's first checkpoint
with at least as many frames: the ratio of their mean scores). `--png` draws the curves.

`backgammon` plays each run's checkpoints against each opponent (`--games`, half with each
colour, OpenSpiel's backgammon as referee) and prints one JSON line per checkpoint and opponent:
the frames, the agent's score (wins + draws / 2 over games) with its 95% Wilson interval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def train(preset: str, out: Path, minutes: float | None, extra: list[str]) -> dict:
    """Runs the preset with `podracer train`, sampling the load; returns the JSON line."""
    run_dir = out / preset
    command = [sys.executable, "-m", "podracer", "train", "--config", preset, "--quiet"]
    command += ["--run-dir", str(run_dir), *extra]
    if minutes is not None:
        command.append(f"learner.max_seconds={60 * minutes}")
    loads: list[float] = []
    done = threading.Event()

    def sample():
        while not done.wait(30.0):
            loads.append(_load())

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    loads.append(_load())
    sampler.start()
    try:
        proc = subprocess.run(command, check=False)
    finally:
        done.set()
        sampler.join()
    seconds = time.monotonic() - started
    last = {}
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if "frames" in record:
                last = record
    return {
        "benchmark": "chance_train",
        "preset": preset,
        "run_dir": str(run_dir),
        "exit_code": proc.returncode,
        "wall_seconds": round(seconds, 1),
        "frames": last.get("frames"),
        "updates": last.get("updates"),
        "load_mean": round(sum(loads) / len(loads), 2),
        "load_min": min(loads),
        "load_max": max(loads),
        "cores": os.cpu_count(),
    }


def _frames_at(run_dir: Path) -> dict[int, int]:
    """Frames trained on at each logged step (the run's metrics.jsonl)."""
    frames = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "step" in record and "frames" in record:
            frames[int(record["step"])] = int(record["frames"])
    return frames


def _checkpoints(run_dir: Path, every: int) -> list[tuple[int, int]]:
    """(step, frames) of every `every`-th checkpoint and the last, with the frames at each: those
    of the first log line at or after the step (a checkpoint is written between log lines)."""
    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    chosen = [s for i, s in enumerate(steps) if i % every == every - 1 or s == steps[-1]]
    logged = _frames_at(run_dir)
    out = []
    for step in chosen:
        later = [s for s in logged if s >= step]
        out.append((step, logged[min(later)] if later else max(logged.values())))
    return out


def evaluate_2048(runs: list[Path], episodes: int, every: int, seed: int) -> list[dict]:
    """One line per checkpoint of each run (OpenSpiel's 2048, greedy), then the equal-frames
    comparison of the first run against the second (at each of the first run's checkpoints, the
    second run's first checkpoint with at least as many frames)."""
    import pyspiel

    from arena.solo import evaluate_solo

    game = pyspiel.load_game("2048(max_tile=131072)")
    lines = []
    floor = evaluate_solo(game, "random", episodes, seed=seed)
    for run in runs:
        for step, frames in _checkpoints(run, every):
            started = time.monotonic()
            result = evaluate_solo(game, f"ckpt:{run},step={step}", episodes, seed=seed)
            line = {
                "benchmark": "chance_2048",
                "run": run.name,
                "step": step,
                "frames": frames,
                **result.as_dict(),
                "random_mean": floor.summary.mean.value,
                "ratio_to_random": round(result.summary.mean.value / floor.summary.mean.value, 3),
                "eval_seconds": round(time.monotonic() - started, 1),
                "load": _load(),
            }
            print(json.dumps(line), flush=True)
            lines.append(line)
    if len(runs) == 2:
        first = [x for x in lines if x["run"] == runs[0].name]
        second = [x for x in lines if x["run"] == runs[1].name]
        pairs = []
        for a in first:
            # The second run's checkpoint with the fewest frames not below the first's: equal
            # frames, or a few more for the second run (the comparison leans its way).
            later = [b for b in second if b["frames"] >= a["frames"]]
            if later:
                b = min(later, key=lambda x: x["frames"])
                pairs.append(
                    {
                        "frames": [a["frames"], b["frames"]],
                        "mean": [a["mean"]["value"], b["mean"]["value"]],
                        "ratio": round(a["mean"]["value"] / b["mean"]["value"], 3),
                    }
                )
        line = {
            "benchmark": "chance_2048_equal_frames",
            "runs": [r.name for r in runs],
            "pairs": pairs,
            "last_ratio": pairs[-1]["ratio"] if pairs else None,
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
    return lines


def evaluate_backgammon(
    runs: list[Path], opponents: list[str], games: int, every: int, seed: int
) -> list[dict]:
    """One line per checkpoint of each run and opponent: the agent's score and its interval."""
    from arena.matches import load_game, run_tournament
    from arena.ratings import pairing_scores

    game = load_game("backgammon")
    lines = []
    for run in runs:
        for step, frames in _checkpoints(run, every):
            agent = f"ckpt:{run},step={step}"
            for opponent in opponents:
                started = time.monotonic()
                records = run_tournament(game, [agent, opponent], games, seed=seed)
                score = pairing_scores(records, [agent, opponent])[agent][opponent]
                wins = sum(
                    1
                    for r in records
                    if r.returns[r.players.index(agent)] > r.returns[1 - r.players.index(agent)]
                )
                line = {
                    "benchmark": "chance_backgammon",
                    "run": run.name,
                    "step": step,
                    "frames": frames,
                    "opponent": opponent,
                    "games": score["games"],
                    "wins": wins,
                    "score": round(score["score"], 4),
                    "ci95": [round(x, 4) for x in score["ci95"]],
                    "eval_seconds": round(time.monotonic() - started, 1),
                    "load": _load(),
                }
                print(json.dumps(line), flush=True)
                lines.append(line)
    return lines


def plot(lines: list[dict], path: Path, title: str) -> None:
    """The curves: mean score (2048) or score against each opponent (backgammon) by frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    curves: dict[str, list[tuple[int, float, float, float]]] = {}
    for x in lines:
        if x["benchmark"] == "chance_2048":
            key = x["run"]
            m = x["mean"]
            curves.setdefault(key, []).append((x["frames"], m["value"], *m["ci95"]))
        elif x["benchmark"] == "chance_backgammon":
            key = f"{x['run']} vs {x['opponent']}"
            curves.setdefault(key, []).append((x["frames"], x["score"], *x["ci95"]))
    for key, points in curves.items():
        points.sort()
        frames = [p[0] for p in points]
        ax.plot(frames, [p[1] for p in points], marker="o", label=key)
        ax.fill_between(frames, [p[2] for p in points], [p[3] for p in points], alpha=0.2)
    random_means = {x["random_mean"] for x in lines if "random_mean" in x}
    for value in random_means:
        ax.axhline(value, color="grey", linestyle=":", label="random")
    ax.set_xlabel("frames (environment steps)")
    ax.set_ylabel("mean score" if random_means else "score (win = 1)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("train", help="train a preset, sampling the machine's load")
    run.add_argument("--preset", required=True)
    run.add_argument("--out", default="runs/bars", help="the run goes to OUT/PRESET")
    run.add_argument("--minutes", type=float, default=None, help="default: the preset's")
    run.add_argument("overrides", nargs="*", help="key.path=value overrides")
    for name in ("game2048", "backgammon"):
        sub = commands.add_parser(name, help=f"measure checkpoints on {name}")
        sub.add_argument("--runs", nargs="+", required=True, help="run directories")
        sub.add_argument("--every", type=int, default=1, help="every N-th checkpoint (and last)")
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument("--png", default=None, help="draw the curves here")
        if name == "game2048":
            sub.add_argument("--episodes", type=int, default=100)
        else:
            sub.add_argument("--games", type=int, default=100, help="games per opponent")
            sub.add_argument("--opponents", default="random,pubeval")
    args = parser.parse_args(argv)
    if args.command == "train":
        line = train(args.preset, Path(args.out), args.minutes, args.overrides)
        print(json.dumps(line), flush=True)
        return
    runs = [Path(r) for r in args.runs]
    if args.command == "game2048":
        lines = evaluate_2048(runs, args.episodes, args.every, args.seed)
        title = "2048: greedy mean score by frames (OpenSpiel's 2048)"
    else:
        opponents = args.opponents.split(",")
        lines = evaluate_backgammon(runs, opponents, args.games, args.every, args.seed)
        title = "backgammon: score against each opponent by frames"
    if args.png:
        plot(lines, Path(args.png), title)


if __name__ == "__main__":
    main()
