"""Learning checks of the one-player presets: the return against time and frames, and the bars.

    .venv/bin/python benchmarks/one_player.py --config cartpole_muzero --seconds 600
    .venv/bin/python benchmarks/one_player.py --config minatar_breakout_vtrace --seconds 1800 \\
        --target 10 --png docs/minatar_breakout_vtrace_30min.png

Trains `--config` for `--seconds` of learner time (`learner.max_seconds`; `--set` overrides any
field) in `--run-dir`, with the run's evaluator on (`evaluation.every_s=--eval-every`: the greedy
agent's return over `evaluation.games` episodes), then prints one JSON line:

- `first_target_s` / `first_target_frames`: when the self-play episode return, averaged over each
  metrics window (`learner.log_every_s`), first reached `--target` (null if never);
- `last_mean`: the mean self-play return over the run's last `--last-seconds` (the stability
  bar: CartPole's is a mean >= 475 over the last 2 minutes of a 10-minute run); the same for the
  greedy evaluations (`eval_last_mean`);
- the frames, updates and seconds of the run.

`--png` writes the curves (self-play and greedy return against seconds and against frames), with
`--reference NAME=VALUE` lines drawn across them (a published baseline's final return).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import arena  # noqa: E402
import configs  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402
from selfplay.train import train  # noqa: E402


def summarize(records: list[dict], target: float, last_seconds: float) -> dict:
    """The bars' figures from a run's metrics records."""
    played = [r for r in records if "episode_return" in r]
    evaluated = [r for r in records if "eval/return" in r]
    end = records[-1]["time"] if records else 0.0
    first = next((r for r in played if r["episode_return"] >= target), None)
    last = [r["episode_return"] for r in played if r["time"] >= end - last_seconds]
    last_eval = [r["eval/return"] for r in evaluated if r["time"] >= end - last_seconds]
    return {
        "first_target_s": round(first["time"], 1) if first else None,
        "first_target_frames": first.get("frames") if first else None,
        "last_mean": round(sum(last) / len(last), 1) if last else None,
        "last_min": round(min(last), 1) if last else None,
        "eval_last_mean": round(sum(last_eval) / len(last_eval), 1) if last_eval else None,
        "best_window": round(max((r["episode_return"] for r in played), default=0.0), 1),
    }


def plot(records: list[dict], path: str, title: str, references: dict[str, float]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4), constrained_layout=True)
    FigureCanvasAgg(fig)
    for i, x_key in enumerate(("time", "frames")):
        ax = fig.add_subplot(1, 2, i + 1)
        for key, label, style in (
            ("episode_return", "self-play (window mean)", "-"),
            ("eval/return", "greedy evaluation", "o-"),
        ):
            points = [(r[x_key], r[key]) for r in records if key in r and x_key in r]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=label, linewidth=1, markersize=3)
        for name, value in references.items():
            ax.axhline(value, linestyle="--", color="grey", linewidth=1)
            ax.text(0, value, f" {name}", va="bottom", fontsize="small", color="grey")
        ax.set_xlabel("seconds" if x_key == "time" else "environment frames")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="a one-player preset or config .json")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seconds", type=float, default=600.0, help="learner time")
    parser.add_argument("--eval-every", type=float, default=30.0, help="evaluation.every_s")
    parser.add_argument("--target", type=float, default=475.0, help="the return the bar names")
    parser.add_argument("--last-seconds", type=float, default=120.0)
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--png", default=None, help="where to write the curves")
    parser.add_argument("--reference", nargs="*", default=[], metavar="NAME=RETURN")
    args = parser.parse_args(argv)
    config = configs.load_config(
        args.config,
        [
            f"learner.max_seconds={args.seconds}",
            "learner.max_updates=0",
            f"evaluation.every_s={args.eval_every}",
            *args.set,
        ],
    )
    run_dir = args.run_dir or os.path.join("runs", f"{config.name}-{time.strftime('%H%M%S')}")
    started = time.monotonic()
    result = train(config, run_dir, progress=False, make_evaluator=arena.RunEvaluator)
    records = read_metrics(run_dir)
    out = {
        "benchmark": "one_player",
        "config": config.name,
        "runtime": config.runtime,
        "mode": config.mode,
        "env": config.env.name,
        "seconds": round(time.monotonic() - started, 1),
        "frames": result.frames,
        "updates": result.updates,
        "target": args.target,
        **summarize(records, args.target, args.last_seconds),
        "run_dir": str(result.run_dir),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    if args.png:
        references = dict(
            (name, float(value)) for name, value in (r.split("=", 1) for r in args.reference)
        )
        plot(records, args.png, f"{config.name}: {config.mode} on {config.env.name}", references)
        out["png"] = args.png
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
