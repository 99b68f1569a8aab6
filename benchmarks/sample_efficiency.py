"""Sample efficiency: the return of each agent at fixed frame marks, measured the same way for all.

    .venv/bin/python benchmarks/sample_efficiency.py --games Breakout SpaceInvaders \\
        --presets minatar_efficientzero minatar_breakout_vtrace --frames 500000 --png-dir docs

Trains every `--presets` on every `--games` (gymnax's MinAtar: Asterix, Breakout, Freeway,
SpaceInvaders; `env.name` is set to `gymnax:<game>-MinAtar`) for `--frames` environment frames
(`learner.max_frames`; `--set` overrides any field of every run), with `evaluation.at_frames` at
each of `--marks` up to the budget, and prints one JSON line per run:

- `marks`: at each mark, `self_play` (the mean return of the self-play episodes that ended in the
  last 10% of frames before it, weighted by episodes) and `greedy` (the evaluator's greedy return
  over `evaluation.games` episodes, of the parameters at the mark; `--eval-games` sets the count);
- `ratio_to_<preset>`: each mark's self-play and greedy returns over the `--baseline` preset's
  (V-trace's by default) on the same game, measured in the same invocation;
- the wall time, the frames and updates, frames/s, and the load.

`--png-dir` writes one PNG per game: return against frames, every agent on one axis (self-play
as lines, greedy evaluations as points). `--ablation NAME=KEY=VALUE,KEY=VALUE` adds runs of the
first preset with those overrides, under NAME (an ablation on one game: `--ablation
"reanalyse=reanalyse.fraction=1"`). `--runs DIR ...` adds run directories trained earlier (by
this command or `podracer train`; each one's `config.json` names its game, preset and seed):
they are summarised, compared and drawn beside the invocation's own runs, so agents trained in
separate invocations share one axis. `--presets` with no name trains nothing:

    .venv/bin/python benchmarks/sample_efficiency.py --games SpaceInvaders --presets \\
        --runs runs/a/SpaceInvaders-minatar_efficientzero-* runs/b/SpaceInvaders-*_vtrace-*
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
from configs import UsageError  # noqa: E402
from selfplay.evaluation import read_run_config  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402
from selfplay.train import train  # noqa: E402

MINATAR = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
MARKS = (100_000, 250_000, 500_000, 1_000_000)


def self_play_at(records: list[dict], mark: int) -> float | None:
    """The episode-weighted mean return of the self-play episodes logged in (0.9 mark, mark]
    (the nearest window after the mark where none was logged there)."""
    played = [r for r in records if "episode_return" in r and r.get("episodes")]
    window = [r for r in played if 0.9 * mark < r["frames"] <= mark]
    if not window:
        after = [r for r in played if r["frames"] > mark]
        window = after[:1]
    episodes = sum(r["episodes"] for r in window)
    if not episodes:
        return None
    return sum(r["episode_return"] * r["episodes"] for r in window) / episodes


def summarize(records: list[dict], marks: list[int]) -> dict[str, dict]:
    """Each mark's self-play and greedy returns."""
    evaluated = [r for r in records if "eval/frames" in r]
    out = {}
    for i, mark in enumerate(marks):
        greedy = evaluated[i]["eval/return"] if i < len(evaluated) else None
        play = self_play_at(records, mark)
        out[str(mark)] = {
            "self_play": None if play is None else round(play, 2),
            "greedy": None if greedy is None else round(greedy, 2),
            "greedy_frames": evaluated[i]["eval/frames"] if i < len(evaluated) else None,
        }
    return out


# Fields this command sets on every run: not reported as an earlier run's own changes.
_SET_BY_COMMAND = ("env.name", "seed", "learner.max_", "evaluation.")


def changes(config: configs.ExperimentConfig) -> list[str]:
    """`KEY=VALUE` for each field where a run's config differs from its preset's."""

    def leaves(tree, prefix=""):
        if isinstance(tree, dict):
            for key, value in tree.items():
                yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix[:-1], tree

    try:
        preset = dict(leaves(configs.to_dict(configs.load_config(config.name))))
    except UsageError:  # a config file's own name, no preset to differ from
        return [f"(not a preset: {config.name})"]
    return [
        f"{key}={json.dumps(value)}"
        for key, value in leaves(configs.to_dict(config))
        if preset.get(key) != value and not key.startswith(_SET_BY_COMMAND)
    ]


def earlier_run(run_dir: str, marks: list[int]) -> tuple[str, dict]:
    """The game of a run trained earlier and its line, as the invocation's own runs' (`set`:
    its changes to its preset; the wall time and frames/s from its metrics, the first record's
    to the last's)."""
    config = read_run_config(run_dir)
    records = read_metrics(run_dir)
    game = config.env.name.removeprefix("gymnax:").removesuffix("-MinAtar")
    timed = [r for r in records if "time" in r]
    seconds = timed[-1]["time"] - timed[0]["time"] if len(timed) > 1 else None
    frames = max((r.get("frames", 0) for r in records), default=0)
    changed = changes(config)
    return game, {
        "benchmark": "sample_efficiency",
        "game": game,
        "agent": config.name,
        "preset": config.name,
        "overrides": [],
        "set": changed,
        "seed": config.seed,
        "mode": config.mode,
        "frames": frames,
        "updates": max((r.get("step", 0) for r in records), default=0),
        "seconds": None if seconds is None else round(seconds, 1),
        "frames_per_s": round(frames / seconds, 1) if seconds else None,
        "marks": summarize(records, [m for m in marks if m <= frames]),
        "run_dir": str(run_dir),
        "loadavg_1m": None,
        "label": " ".join([config.name, *changed, f"(seed {config.seed})"]),
    }


def plot(game: str, runs: list[dict], path: str) -> None:
    """Return against frames for every run of one game: self-play lines, greedy points."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for i, run in enumerate(runs):
        color = f"C{i}"
        records = read_metrics(run["run_dir"])
        played = [r for r in records if "episode_return" in r and r.get("episodes")]
        # Self-play in bins of 2% of the budget, episode-weighted.
        width = max(run["frames"] // 50, 1)
        bins: dict[int, list[float]] = {}
        for r in played:
            b = bins.setdefault(r["frames"] // width, [0.0, 0.0])
            b[0] += r["episode_return"] * r["episodes"]
            b[1] += r["episodes"]
        xs = sorted(bins)
        ax.plot(
            [(x + 1) * width for x in xs],
            [bins[x][0] / bins[x][1] for x in xs],
            "-",
            color=color,
            linewidth=1,
            label=f"{run['label']} (self-play)",
        )
        greedy = [(r["eval/frames"], r["eval/return"]) for r in records if "eval/frames" in r]
        if greedy:
            label = f"{run['label']} (greedy)"
            ax.plot(*zip(*greedy, strict=True), "o--", color=color, label=label)
    ax.set_xlabel("environment frames")
    ax.set_ylabel("episode return")
    ax.set_title(f"MinAtar {game}: return by frames")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=100)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", nargs="+", default=["Breakout"], choices=MINATAR)
    parser.add_argument(
        "--presets", nargs="*", default=["minatar_efficientzero", "minatar_breakout_vtrace"]
    )
    parser.add_argument("--baseline", default="minatar_breakout_vtrace")
    parser.add_argument("--frames", type=int, default=500_000)
    parser.add_argument("--marks", type=int, nargs="+", default=list(MARKS))
    parser.add_argument("--eval-games", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ablation", nargs="*", default=[], metavar="NAME=KEY=VALUE,...")
    parser.add_argument("--run-root", default="runs/sample_efficiency")
    parser.add_argument("--png-dir", default=None)
    parser.add_argument("--runs", nargs="*", default=[], metavar="RUN_DIR")
    args = parser.parse_args(argv)
    if not args.presets and (args.ablation or not args.runs):
        parser.error("--presets names no preset: give one, or --runs to compare earlier runs")
    marks = sorted(m for m in args.marks if m <= args.frames)
    if args.png_dir:
        # Made before the first run: a missing folder would otherwise end the command only
        # after every run had trained.
        os.makedirs(args.png_dir, exist_ok=True)
    earlier: dict[str, list[dict]] = {}
    for run_dir in args.runs:  # read first: a bad directory ends the command before any training
        try:
            game, run = earlier_run(run_dir, marks)
        except (UsageError, OSError) as error:
            parser.error(f"--runs {run_dir}: {error}")
        if game not in args.games:
            parser.error(f"--runs {run_dir} is a run of {game}, not of --games {args.games}")
        earlier.setdefault(game, []).append(run)
    variants = [(preset, preset, []) for preset in args.presets]
    for spec in args.ablation:
        name, _, overrides = spec.partition("=")
        variants.append((name, args.presets[0], [o for o in overrides.split(",") if o]))

    results = []
    for game in args.games:
        runs = []
        for label, preset, extra in variants:
            config = configs.load_config(
                preset,
                [
                    f"env.name=gymnax:{game}-MinAtar",
                    f"seed={args.seed}",
                    f"learner.max_frames={args.frames}",
                    "learner.max_seconds=0",
                    "learner.max_updates=0",
                    "evaluation.every_s=0",
                    f"evaluation.games={args.eval_games}",
                    f"evaluation.at_frames=[{','.join(map(str, marks))}]",
                    *args.set,
                    *extra,
                ],
            )
            # The seed in the name: runs of other seeds started in the same second do not meet.
            stamp = time.strftime("%m%d-%H%M%S")
            run_dir = os.path.join(args.run_root, f"{game}-{label}-seed{args.seed}-{stamp}")
            started = time.monotonic()
            result = train(config, run_dir, progress=False, make_evaluator=arena.RunEvaluator)
            seconds = time.monotonic() - started
            records = read_metrics(run_dir)
            run = {
                "benchmark": "sample_efficiency",
                "game": game,
                "agent": label,
                "preset": preset,
                "overrides": extra,  # this run's own (an ablation's)
                "set": args.set,  # every run's (`--set`)
                "seed": args.seed,
                "mode": config.mode,
                "frames": result.frames,
                "updates": result.updates,
                "seconds": round(seconds, 1),
                "frames_per_s": round(result.frames / seconds, 1),
                "marks": summarize(records, marks),
                "run_dir": str(result.run_dir),
                "loadavg_1m": round(os.getloadavg()[0], 2),
                "label": label,
            }
            runs.append(run)
        runs.extend(earlier.get(game, []))
        baseline = next(
            (r for r in runs if r["preset"] == args.baseline and not r["overrides"]), None
        )
        for run in runs:
            if baseline is not None and run is not baseline:
                ratios = {}
                for mark, values in run["marks"].items():
                    base = baseline["marks"][mark]
                    ratios[mark] = {
                        key: round(values[key] / base[key], 2)
                        if values[key] and base[key]
                        else None
                        for key in ("self_play", "greedy")
                    }
                run[f"ratio_to_{args.baseline}"] = ratios
            print(json.dumps(run), flush=True)
        if args.png_dir:
            path = os.path.join(args.png_dir, f"sample_efficiency_{game.lower()}.png")
            plot(game, runs, path)
            print(json.dumps({"benchmark": "sample_efficiency", "game": game, "png": path}))
        results.extend(runs)
    return results


if __name__ == "__main__":
    main()
