"""Population Based Training against random search and the hand-tuned preset, at equal frames.

    .venv/bin/python benchmarks/pbt.py --png docs/pbt_breakout_vtrace.png

The default (`--engine program`): V-trace on MinAtar `--game` (`minatar_breakout_vtrace`'s
settings) from wide windows (`--explore`: the learning rate, the entropy cost and the baseline
cost, each over three orders of magnitude), for each of `--meta-seeds`:
  - PBT: a population of `--population` members in one program (`selfplay.population`), each
    `--frames` frames, a decision every `--interval-frames`;
  - random search: the same program without exploits: the same members, the same first values
    (drawn from the same windows with the same seed), the same frames, never taking each
    other's states: what a user would otherwise do with the same frames;
  - the hand-tuned preset, one run of `--frames` (`podracer train`'s loop, seed = meta-seed).
One JSON line per meta-seed: each member's return at the end (the episode-weighted mean return
of the self-play episodes in the last 10% of its frames, as benchmarks/sample_efficiency.py
measures it), the best of each arm, whether PBT's best beats random search's, and PBT's best over
the preset's; then a summary line with the issue's bars. `--png` draws, for the first meta-seed,
every member's return and values over frames (PBT beside random search) and the preset's curve.

A check of the script end to end (about 3 minutes on 2 cores), writing to a temporary folder:

    .venv/bin/python benchmarks/pbt.py --frames 20480 --interval-frames 5120 --meta-seeds 0 \
        --run-root /tmp/pbt --png /tmp/pbt/pbt.png

`--plot-runs PBT_DIR RANDOM_DIR --png PATH` only draws the picture from two saved populations
(`podracer pbt` and `podracer pbt --random-search` folders), `--preset-marks FRAMES:RETURN ...`
the preset's curve: `docs/pbt_spaceinvaders_muzero.png` is

    .venv/bin/python benchmarks/pbt.py --plot-runs runs/si_pbt runs/si_random \
        --preset-marks 100000:15.54 250000:27.80 500000:65.43 \
        --png docs/pbt_spaceinvaders_muzero.png

`--engine ray` runs the older comparison on Ray Tune: a population of `--preset` (default
`minatar_efficientzero` with uniform windows) against `--seeds` independent seeds, each its own
process; on this 2-core CPU it needs about 6 hours (one run alone made 181 frames/s, six at once
33 each, 2026-11-27). Its end-to-end check (4 to 6 minutes on a busy 2-core CPU):

    .venv/bin/python benchmarks/pbt.py --engine ray --frames 6000 --interval-frames 3000 \
        --population 2 --seeds 1 --run-root /tmp/pbt --png /tmp/pbt/pbt.png \
        --set replay.priority_alpha=0 network.mlp_sizes=[32,32] network.latent_size=32 \
        network.head_hidden=16 network.projection_hidden=16 network.projection_size=16 \
        network.predictor_hidden=16 network.value_prefix_hidden=16 network.channels=4 \
        search.num_simulations=4 search.max_num_considered_actions=4 \
        reanalyse.num_simulations=2 learner.batch_size=16 replay.min_size=256 \
        replay.samples_per_insert=1 actors.envs_per_thread=8
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import configs  # noqa: E402
from selfplay import pbt  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "sample_efficiency", os.path.join(_HERE, "sample_efficiency.py")
)
assert _spec is not None and _spec.loader is not None
sample_efficiency = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sample_efficiency)

PROGRAM_PRESET = "minatar_breakout_vtrace"
PROGRAM_EXPLORE = (
    "optimizer.learning_rate=1e-5:1e-2:log",
    "loss.entropy_cost=1e-4:1e-1:log",
    "loss.baseline_cost=0.01:10:log",
)
EXPLORE = (
    "replay.priority_alpha=0:1",
    "replay.priority_beta=0:1",
    "optimizer.learning_rate=3e-4:3e-3:log",
    "loss.consistency_weight=0.5:8:log",
)


def final_return(records: list[dict], frames: int) -> float | None:
    """The self-play return over the last 10% of `frames` (sample_efficiency's measure)."""
    return sample_efficiency.self_play_at(records, frames)


def curve(records: list[dict]) -> tuple[list[int], list[float]]:
    """Self-play return against frames, one point per log line that ended episodes."""
    points = [(r["frames"], r["episode_return"]) for r in records if r.get("episodes")]
    return [p[0] for p in points], [p[1] for p in points]


def plot(path: str, members: dict, seeds: dict, lines: list[dict], explore, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 1 + len(explore)
    figure, axes = plt.subplots(rows, 1, figsize=(9, 3 + 2 * rows), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (member, records) in enumerate(sorted(members.items())):
        axes[0].plot(*curve(records), color=colors[i % len(colors)], label=f"member {member}")
    for seed, records in sorted(seeds.items()):
        axes[0].plot(*curve(records), color="grey", linestyle="--", alpha=0.7, label=f"seed {seed}")
    axes[0].set_ylabel("self-play return")
    axes[0].legend(fontsize=7, ncol=2)
    axes[0].set_title(title)
    intervals = [e for e in lines if e["event"] == "interval"]
    for row, spec in enumerate(explore, start=1):
        for i, member in enumerate(sorted(members)):
            mine = [e for e in intervals if e["member"] == member]
            # Each value held over the interval that ended at its line's frames.
            xs = [0] + [e["frames"] for e in mine]
            ys = [e["values"][spec.key] for e in mine]
            if ys:
                axes[row].step(xs, [ys[0], *ys], where="pre", color=colors[i % len(colors)])
        for e in (e for e in lines if e["event"] == "exploit"):
            axes[row].axvline(e["frames"], color="black", alpha=0.15)
        axes[row].set_ylabel(spec.key.split(".")[-1], fontsize=8)
        axes[row].set_yscale("log" if spec.log else "linear")
    axes[-1].set_xlabel("frames (each member's: the experience behind its parameters)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("program", "ray"), default="program")
    parser.add_argument("--game", default=None, choices=sample_efficiency.MINATAR)
    parser.add_argument("--preset", default=None)
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--meta-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--seeds-at-once",
        type=int,
        default=None,
        help="seeds training at a time beside the population (default: all)",
    )
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--interval-frames", type=int, default=None)
    parser.add_argument("--explore", nargs="+", default=None)
    parser.add_argument("--set", nargs="*", default=None)
    parser.add_argument("--run-root", default="runs/pbt_benchmark")
    parser.add_argument("--png", default=None)
    parser.add_argument(
        "--plot-runs",
        nargs=2,
        metavar=("PBT_DIR", "RANDOM_DIR"),
        help="only draw --png from two saved populations in one program (podracer pbt and "
        "podracer pbt --random-search), with --preset-marks as the preset's curve",
    )
    parser.add_argument(
        "--preset-marks",
        nargs="*",
        default=[],
        metavar="FRAMES:RETURN",
        help="--plot-runs: the preset's return at some frames (e.g. a mean over seeds)",
    )
    args = parser.parse_args(argv)
    if args.plot_runs:
        return plot_runs(args)
    if args.engine == "program":
        return program_main(args)
    args.game = args.game or "SpaceInvaders"
    args.preset = args.preset or "minatar_efficientzero"
    args.frames = args.frames or 500_000
    args.interval_frames = args.interval_frames or 100_000
    args.explore = args.explore or list(EXPLORE)
    args.set = ["replay.priority_alpha=0"] if args.set is None else args.set
    overrides = [
        f"env.name=gymnax:{args.game}-MinAtar",
        "evaluation.every_s=0",
        "learner.max_seconds=0",
        "learner.max_updates=0",
        f"learner.max_frames={args.frames}",
        *args.set,
    ]
    config = configs.load_config(args.preset, overrides)
    settings = pbt.PopulationSettings(
        config,
        args.population,
        args.interval_frames,
        args.frames,
        tuple(pbt.parse_explore(e, config) for e in args.explore),
    )
    pbt.check_settings(settings)
    root = os.path.join(args.run_root, f"{args.game}-{time.strftime('%m%d-%H%M%S')}")
    from selfplay.pbt_tune import run_population  # Ray

    started = time.monotonic()
    # The seeds train beside the population, each its own `podracer train` process, so that
    # the two halves share the machine alike and the whole comparison takes the time of one.
    seed_pool = ThreadPoolExecutor(max_workers=args.seeds_at_once or max(args.seeds, 1))
    seed_runs = {
        seed: seed_pool.submit(
            train_seed, config.replace(seed=seed), os.path.join(root, f"seed_{seed}")
        )
        for seed in range(args.seeds)
    }
    population = run_population(settings, os.path.join(root, "population"))
    population_s = time.monotonic() - started
    results, members, seeds = [], {}, {}
    for member in population.members:
        records = read_metrics(pbt.member_dir(os.path.join(root, "population"), member.member))
        members[member.member] = records
        results.append(
            {
                "benchmark": "pbt",
                "game": args.game,
                "agent": f"member_{member.member}",
                "frames": member.frames,
                "self_play": final_return(records, member.frames),
                "values": member.values,
                "seconds": round(population_s, 1),  # the population's, all members together
            }
        )
    for seed, run in seed_runs.items():
        run_dir = os.path.join(root, f"seed_{seed}")
        if (returncode := run.result()) != 0:
            raise SystemExit(f"seed {seed} failed (exit {returncode}): {run_dir}/train.log")
        records = read_metrics(run_dir)
        seeds[seed] = records
        frames = records[-1]["frames"] if records else 0
        results.append(
            {
                "benchmark": "pbt",
                "game": args.game,
                "agent": f"seed_{seed}",
                "frames": frames,
                "self_play": final_return(records, frames),
                "seconds": round(records[-1]["time"], 1) if records else None,
            }
        )
    best = max((r for r in results if r["agent"].startswith("member")), key=_score)
    seed_scores = [r["self_play"] for r in results if r["agent"].startswith("seed")]
    seed_scores = [s for s in seed_scores if s is not None]
    best_seed = max(seed_scores) if seed_scores else None
    for line in results:
        line["ratio_to_best_seed"] = _ratio(line["self_play"], best_seed)
        line["loadavg_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(line), flush=True)
    summary = {
        "benchmark": "pbt",
        "game": args.game,
        "preset": args.preset,
        "set": args.set,
        "explore": args.explore,
        "population": args.population,
        "seeds": args.seeds,
        "frames": args.frames,
        "best_member": best["agent"],
        "best_member_self_play": best["self_play"],
        "best_seed_self_play": best_seed,
        "mean_seed_self_play": sum(seed_scores) / len(seed_scores) if seed_scores else None,
        "ratio_to_best_seed": _ratio(best["self_play"], best_seed),
        "population_finished": population.finished,
        "run_dir": root,
    }
    print(json.dumps(summary), flush=True)
    if args.png:
        lines = pbt.read_events(os.path.join(root, "population"))
        independent = f"{args.seeds} independent seed{'s' if args.seeds != 1 else ''}"
        title = f"PBT on MinAtar {args.game}: {args.population} members and {independent}"
        plot(args.png, members, seeds, lines, settings.explore, title)
        print(json.dumps({"benchmark": "pbt", "png": args.png}), flush=True)
    return [*results, summary]


def program_main(args) -> list[dict]:
    """PBT in one program against random search in one program and the preset, per meta-seed."""
    from selfplay.run import split_cpu

    game = args.game or "Breakout"
    preset = args.preset or PROGRAM_PRESET
    frames = args.frames or 1_000_000
    interval = args.interval_frames or 100_000
    base = configs.load_config(preset, [f"env.name=gymnax:{game}-MinAtar", *(args.set or [])])
    split_cpu(base.devices.cpu_devices)  # before JAX starts: the members over both cores
    from selfplay.population import run_in_program
    from selfplay.train import train

    root = os.path.join(args.run_root, f"{game}-{time.strftime('%m%d-%H%M%S')}")
    lines, plotted = [], None
    for meta_seed in args.meta_seeds:
        config = base.replace(seed=meta_seed)
        settings = pbt.PopulationSettings(
            config,
            args.population,
            interval,
            frames,
            tuple(pbt.parse_explore(e, config) for e in args.explore or PROGRAM_EXPLORE),
        )
        pbt.check_settings(settings)
        arms: dict[str, dict] = {}
        for arm, exploit in (("pbt", True), ("random_search", False)):
            run_dir = os.path.join(root, f"meta_{meta_seed}", arm)
            started = time.monotonic()
            result = run_in_program(settings, run_dir, exploit=exploit, progress=False)
            seconds = time.monotonic() - started
            returns = [
                final_return(read_metrics(pbt.member_dir(run_dir, i)), result.frames)
                for i in range(args.population)
            ]
            arms[arm] = {
                "returns": [None if r is None else round(r, 3) for r in returns],
                "best": max((r for r in returns if r is not None), default=None),
                "final_values": result.values.tolist(),
                "frames_per_member": result.frames,
                "seconds": round(seconds, 1),
                "frames_per_s": round(args.population * result.frames / seconds, 1),
                "run_dir": run_dir,
            }
        preset_dir = os.path.join(root, f"meta_{meta_seed}", "preset")
        tuned = config.replace(
            learner=dataclasses.replace(
                config.learner, max_frames=frames, max_seconds=0.0, max_updates=0
            ),
            evaluation=dataclasses.replace(config.evaluation, every_s=0.0),
        )
        outcome = train(tuned, preset_dir, progress=False, plot=False)
        preset_return = final_return(read_metrics(preset_dir), outcome.frames)
        pbt_best, random_best = arms["pbt"]["best"], arms["random_search"]["best"]
        line = {
            "benchmark": "pbt",
            "engine": "program",
            "game": game,
            "preset": preset,
            "meta_seed": meta_seed,
            "population": args.population,
            "frames": frames,
            "interval_frames": interval,
            "explore": list(args.explore or PROGRAM_EXPLORE),
            **{f"{arm}_{k}": v for arm, fields in arms.items() for k, v in fields.items()},
            "preset_return": None if preset_return is None else round(preset_return, 3),
            "pbt_beats_random_search": (
                pbt_best is not None and random_best is not None and pbt_best > random_best
            ),
            "pbt_best_over_preset": _ratio(pbt_best, preset_return),
            "random_best_over_preset": _ratio(random_best, preset_return),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
        if plotted is None:
            plotted = (arms, preset_dir, settings)
    wins = sum(line["pbt_beats_random_search"] for line in lines)
    ratios = [line["pbt_best_over_preset"] for line in lines if line["pbt_best_over_preset"]]
    summary = {
        "benchmark": "pbt",
        "engine": "program",
        "game": game,
        "meta_seeds": len(lines),
        "pbt_wins": wins,
        "bar_wins": f">= 2 of {len(lines)}",
        "median_pbt_best_over_preset": sorted(ratios)[len(ratios) // 2] if ratios else None,
        "bar_over_preset": 0.9,
        "met": wins >= 2 and bool(ratios) and sorted(ratios)[len(ratios) // 2] >= 0.9,
        "run_dir": root,
    }
    print(json.dumps(summary), flush=True)
    if args.png and plotted is not None:
        arms, preset_dir, settings = plotted
        plot_program(args.png, arms, read_metrics(preset_dir), settings, game)
        print(json.dumps({"benchmark": "pbt", "png": args.png}), flush=True)
    return [*lines, summary]


def plot_runs(args) -> list[dict]:
    """`--png` drawn from two saved populations (PBT's and random search's folders): each arm's
    best is the best of its last interval's fitness."""
    if not args.png:
        raise SystemExit("--plot-runs draws --png: give it")
    arms = {}
    for arm, run_dir in zip(("pbt", "random_search"), args.plot_runs, strict=True):
        last = {
            e["member"]: e["fitness"] for e in pbt.read_events(run_dir) if e["event"] == "interval"
        }
        arms[arm] = {"run_dir": run_dir, "best": max(last.values(), default=None)}
    marks = [mark.split(":") for mark in args.preset_marks]
    preset = [{"frames": int(f), "episode_return": float(r), "episodes": 1} for f, r in marks]
    settings = pbt.read_settings(pathlib.Path(args.plot_runs[0]))
    if settings is None:
        raise SystemExit(f"{args.plot_runs[0]} holds no population (pbt.json)")
    game = settings.config.env.name.split(":")[-1].removesuffix("-MinAtar")
    plot_program(args.png, arms, preset, settings, game)
    line = {
        "benchmark": "pbt",
        "png": args.png,
        **{f"{a}_best": v["best"] for a, v in arms.items()},
    }
    print(json.dumps(line), flush=True)
    return [line]


def plot_program(path: str, arms: dict, preset: list[dict], settings, game: str) -> None:
    """Every member's return and values over frames, PBT's and random search's side by side,
    the preset's return on both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 1 + len(settings.explore)
    figure, axes = plt.subplots(rows, 2, figsize=(12, 2.6 * rows + 1), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, arm in enumerate(("pbt", "random_search")):
        run_dir = arms[arm]["run_dir"]
        events = pbt.read_events(run_dir)
        for i in range(settings.population):
            records = read_metrics(pbt.member_dir(run_dir, i))
            color = colors[i % len(colors)]
            axes[0, column].plot(*curve(records), color=color, label=f"member {i}")
            for row, spec in enumerate(settings.explore, start=1):
                xs = [0] + [r["frames"] for r in records]
                ys = [r[f"explore/{spec.key}"] for r in records]
                if ys:
                    axes[row, column].step(xs, [ys[0], *ys], where="pre", color=color)
                axes[row, column].set_yscale("log" if spec.log else "linear")
                axes[row, column].set_ylabel(spec.key.split(".")[-1], fontsize=8)
        for e in (e for e in events if e["event"] == "exploit"):
            for row in range(1, rows):
                axes[row, column].axvline(e["frames"], color="black", alpha=0.1)
        axes[0, column].plot(*curve(preset), color="black", linestyle="--", label="preset")
        axes[0, column].set_title(
            f"{'PBT' if arm == 'pbt' else 'random search'}: best {arms[arm]['best']:.2f}"
            if arms[arm]["best"] is not None
            else arm
        )
        axes[0, column].set_ylabel("self-play return")
        axes[0, column].legend(fontsize=7, ncol=2)
        axes[-1, column].set_xlabel("frames (each member's)")
    agent = "MuZero" if settings.config.mode == "muzero" else "V-trace"
    figure.suptitle(
        f"{agent} on MinAtar {game}: {settings.population} members, PBT and random search "
        f"from the same windows and first values"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def train_seed(config, run_dir: str) -> int:
    """`podracer train` of `config` in `run_dir`, its output in `run_dir/train.log`: its exit
    status."""
    os.makedirs(run_dir, exist_ok=True)
    config_path = os.path.join(run_dir, "benchmark_config.json")
    with open(config_path, "w") as f:
        json.dump(configs.to_dict(config), f)
    command = [sys.executable, "-m", "podracer", "train", "--config", config_path]
    with open(os.path.join(run_dir, "train.log"), "w") as log:
        return subprocess.run(
            [*command, "--run-dir", run_dir, "--quiet"], stdout=log, stderr=subprocess.STDOUT
        ).returncode


def _ratio(value: float | None, baseline: float | None) -> float | None:
    """`value / baseline` to 3 places; None where either is missing or the baseline is 0."""
    return round(value / baseline, 3) if value is not None and baseline else None


def _score(line: dict) -> float:
    return line["self_play"] if line["self_play"] is not None else float("-inf")


if __name__ == "__main__":
    main()
