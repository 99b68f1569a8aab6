"""Population Based Training against independent seeds, from the same untuned point.

    .venv/bin/python benchmarks/pbt.py --game SpaceInvaders --png docs/pbt_spaceinvaders.png

Trains a population of `--population` members of `--preset` on MinAtar `--game` with `podracer
pbt`'s library (`selfplay.pbt_tune.run_population`, Ray on this machine), each member
`--frames` frames in intervals of `--interval-frames`, exploring `--explore`; then `--seeds`
independent runs of the same config (seeds 0, 1, ...), each `--frames` frames: the same frames in
all (population x frames). `--set` overrides every run's config; by default the untuned point of
issue 56: `minatar_efficientzero` with uniform windows (`replay.priority_alpha=0`), exploring the
priority and importance exponents, the learning rate and the consistency weight.

One JSON line per member and per seed: the self-play return at the end (the mean return of the
episodes that ended in the last 10% of the frames, weighted by episodes, as
benchmarks/sample_efficiency.py measures it), its ratio to the best seed's (measured in the same
invocation), the explored values at the end, the wall time; then one line for the comparison:
the best member's return, the best and the mean seed's, and the ratio of the best member's to the
best seed's. `--png` draws every member's and seed's return over frames, and each explored value
of every member over frames, in one figure. The full comparison is 4M frames (4 members and 4
seeds of 500k); the seeds train beside the population, each its own `podracer train` process,
`--seeds-at-once` at a time. On this project's 2-core CPU (2026-11-27) that is about 6 hours:
one run alone made 181 frames/s over its first 160 s (the default engine and mctx's alike), three
at once (the population's two members of one core each and one seed) 55-70 each over 80
minutes, six at once 33 each. A machine with a core per run (8) is where it belongs.

A check of the script end to end, 4 to 6 minutes on
a busy 2-core CPU (2026-11-27, load 5-9, XLA_FLAGS as tests/conftest.py sets them), writing to a
temporary folder (its PNG is not a result):

    .venv/bin/python benchmarks/pbt.py --frames 6000 --interval-frames 3000 --population 2 \
        --seeds 1 --run-root /tmp/pbt --png /tmp/pbt/pbt.png --set replay.priority_alpha=0 \
        network.mlp_sizes=[32,32] network.latent_size=32 network.head_hidden=16 \
        network.projection_hidden=16 network.projection_size=16 network.predictor_hidden=16 \
        network.value_prefix_hidden=16 network.channels=4 search.num_simulations=4 \
        search.max_num_considered_actions=4 reanalyse.num_simulations=2 learner.batch_size=16 \
        replay.min_size=256 replay.samples_per_insert=1 actors.envs_per_thread=8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
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
    parser.add_argument("--game", default="SpaceInvaders", choices=sample_efficiency.MINATAR)
    parser.add_argument("--preset", default="minatar_efficientzero")
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--seeds-at-once",
        type=int,
        default=None,
        help="seeds training at a time beside the population (default: all)",
    )
    parser.add_argument("--frames", type=int, default=500_000)
    parser.add_argument("--interval-frames", type=int, default=100_000)
    parser.add_argument("--explore", nargs="+", default=list(EXPLORE))
    parser.add_argument("--set", nargs="*", default=["replay.priority_alpha=0"])
    parser.add_argument("--run-root", default="runs/pbt_benchmark")
    parser.add_argument("--png", default=None)
    args = parser.parse_args(argv)
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
