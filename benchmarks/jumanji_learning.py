"""One jumanji learning figure: MuZero against V-trace on jumanji's Game2048-v1 at equal frames.

The two runs, one after the other (each takes both cores), on a 2-core CPU:

    .venv/bin/podracer train --config gymnax_cartpole_muzero \\
        --run-dir runs/jumanji_game2048_muzero env.name=jumanji:Game2048-v1 network.torso=mlp \\
        'network.mlp_sizes=[256,128]' network.value_support=60 network.reward_support=30 \\
        learner.max_frames=3800000 learner.max_seconds=0 evaluation.every_s=0
    .venv/bin/podracer train --config gymnax_cartpole_vtrace \\
        --run-dir runs/jumanji_game2048_vtrace env.name=jumanji:Game2048-v1 network.torso=mlp \\
        'network.mlp_sizes=[256,128]' optimizer.learning_rate=1e-4 learner.log_every_s=0.2 \\
        learner.max_frames=3800000 learner.max_seconds=0 evaluation.every_s=0

then the summary and the figure:

    .venv/bin/python benchmarks/jumanji_learning.py \\
        --plot docs/jumanji_game2048_muzero_vs_vtrace.png

Both presets are the CartPole ones (Anakin, both cores) with the board as a dense network's input
(jumanji's 2048 board of tile exponents is a [4, 4, 1] plane; `torso=mlp` flattens it: the
default resnet costs MuZero's search about 10x more per frame on a CPU). MuZero's value and
reward supports are widened to those of `game2048_muzero` (scores reach thousands); V-trace's
value is one scalar with no reward scaling, and at the preset's learning rate (1e-3) its
policy's entropy was 0 from its first record on (a 6.4M-frame probe: 2,500 from 3.4M to 4.8M
frames, below random's return before 2.6M and after 5.1M), so its learning rate is 1e-4. V-trace
steps about 25x as many frames a second as MuZero, so it logs every 0.2 s (not 5): about as many
frames per record.

Prints one JSON line per run: its env and mode, the frames it trained, `final_return` (the
episode-weighted mean return of the self-play episodes that ended in the last 10% of the frames
both runs reached), `return_at` (the same over the 10% of those frames before each of 5 evenly
spaced marks), `random_return` (a uniformly random legal-action policy's mean over
`--random-episodes` episodes, measured here through `envs.make_env`), and `wall_s` (the run's own
clock at its last record); then one line with MuZero's final return over V-trace's at those
equal frames. The returns are the training (self-play) episodes' own: MuZero's act by a
25-simulation search sampled at temperature 1 with Dirichlet noise, V-trace's sample its policy.

2026-12-06, 2 cores of an Intel Xeon: 3,800,064 frames each, MuZero in 616 s, V-trace in 25 s;
random 1,118 (1,000 episodes); over the last 10% of frames MuZero 2,217 and V-trace 3,150 (0.70x).
MuZero passed 2,000 by 0.4M frames and stayed at 2,000-2,400; V-trace stayed at random's until
0.75M, then passed 3,000 by 1.5M frames.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np  # noqa: E402

import envs  # noqa: E402
from configs import UsageError  # noqa: E402
from selfplay.evaluation import read_run_config  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402

TASK = "game2048"
DATE = "2026-12-06"
MARKS = 5
LABELS = {"muzero": "MuZero", "vtrace": "V-trace"}


def played(records: list[dict]) -> list[dict]:
    """The records that logged ended self-play episodes."""
    return [r for r in records if "episode_return" in r and r.get("episodes")]


def mean_return(records: list[dict], low: float, high: float) -> float | None:
    """The episode-weighted mean return of the episodes logged in frames (low, high]."""
    window = [r for r in played(records) if low < r["frames"] <= high]
    episodes = sum(r["episodes"] for r in window)
    if not episodes:
        return None
    return sum(r["episode_return"] * r["episodes"] for r in window) / episodes


def random_return(env_name: str, episodes: int, seed: int = 0) -> tuple[float, float]:
    """(mean, standard error) of a uniformly random legal-action policy's episode return: each of
    `episodes // 5` envs plays its first 5 episodes (all of them, so short episodes are not
    over-represented)."""
    per_env = 5
    num_envs = max(episodes // per_env, 1)
    env = envs.make_env(env_name, num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    returns: list[list[float]] = [[] for _ in range(num_envs)]
    ts = env.reset()
    while min(len(r) for r in returns) < per_env:
        actions = (rng.random(ts.legal_mask.shape) * ts.legal_mask).argmax(axis=1)
        ts = env.step(actions)
        for i in np.flatnonzero(ts.done):
            if len(returns[i]) < per_env:
                returns[i].append(float(ts.episode_return[i]))
    env.close()
    values = np.array([x for r in returns for x in r])
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


def summarize(run_dir: str, frames: int, random: float) -> dict:
    """One run's line, its returns measured over the first `frames` frames (both runs')."""
    config = read_run_config(run_dir)
    records = read_metrics(run_dir)
    width = frames / 10
    marks = [round(frames * k / MARKS) for k in range(1, MARKS + 1)]
    final = mean_return(records, frames - width, frames)
    return {
        "benchmark": "jumanji_learning",
        "env": config.env.name,
        "mode": config.mode,
        "preset": config.name,
        "frames": max(r.get("frames", 0) for r in records),
        "compared_at_frames": frames,
        "episodes": sum(r["episodes"] for r in played(records) if r["frames"] <= frames),
        "final_return": None if final is None else round(final, 1),
        "return_at": {
            str(m): None if (v := mean_return(records, m - width, m)) is None else round(v, 1)
            for m in marks
        },
        "random_return": round(random, 1),
        "wall_s": round(max(r.get("time", 0.0) for r in records), 1),
        "run_dir": run_dir,
    }


def binned(records: list[dict], width: int) -> tuple[list[float], list[float]]:
    """Episode-weighted mean returns in bins of `width` frames, at each bin's right edge."""
    bins: dict[int, list[float]] = {}
    for r in played(records):
        b = bins.setdefault((r["frames"] - 1) // width, [0.0, 0.0])
        b[0] += r["episode_return"] * r["episodes"]
        b[1] += r["episodes"]
    xs = sorted(bins)
    return [(x + 1) * width for x in xs], [bins[x][0] / bins[x][1] for x in xs]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def plot(runs: list[dict], random: float, path: str) -> None:
    """Both runs' self-play return against frames, the random policy's as a dashed line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8, 4.8), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for i, run in enumerate(runs):
        records = read_metrics(run["run_dir"])
        xs, ys = binned(records, max(run["frames"] // 50, 1))  # bins of 2% of the run
        final = "-" if run["final_return"] is None else f"{run['final_return']:,.0f}"
        label = (
            f"{LABELS.get(run['mode'], run['mode'])} ({final} over the last 10%, "
            f"{run['wall_s'] / 60:.1f} min)"
        )
        ax.plot(xs, ys, "-", color=f"C{i}", linewidth=1.5, label=label)
    ax.axhline(random, color="grey", linestyle="--", linewidth=1.2, label=f"random ({random:,.0f})")
    ax.set_xlabel("environment frames")
    ax.set_ylabel("episode return (score)")
    env = runs[0]["env"]
    cores = os.cpu_count()
    ax.set_title(
        f"{env}: MuZero vs V-trace at equal frames (self-play episodes)\n"
        f"{cores} cores of an {cpu_name()}, {DATE}",
        fontsize="medium",
    )
    ax.set_xlim(0, max(run["frames"] for run in runs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:g}M"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("muzero", nargs="?", default=f"runs/jumanji_{TASK}_muzero")
    parser.add_argument("vtrace", nargs="?", default=f"runs/jumanji_{TASK}_vtrace")
    parser.add_argument("--random-episodes", type=int, default=1000)
    parser.add_argument("--plot", default=None, metavar="PNG")
    args = parser.parse_args(argv)
    try:
        configs = [read_run_config(d) for d in (args.muzero, args.vtrace)]
        records = [read_metrics(d) for d in (args.muzero, args.vtrace)]
    except (UsageError, OSError) as error:
        parser.error(str(error))
    names = {c.env.name for c in configs}
    if len(names) != 1:
        parser.error(f"the runs are of different envs: {sorted(names)}")
    if not all(played(r) for r in records):
        parser.error("a run logged no ended episodes")
    frames = min(max(r["frames"] for r in played(recs)) for recs in records)  # equal frames
    random, random_sem = random_return(names.pop(), args.random_episodes)
    runs = [summarize(d, frames, random) for d in (args.muzero, args.vtrace)]
    for run in runs:
        run["random_return_sem"] = round(random_sem, 1)
        run["random_episodes"] = args.random_episodes
        print(json.dumps(run), flush=True)
    muzero, vtrace = runs
    ratio = (
        round(muzero["final_return"] / vtrace["final_return"], 2)
        if muzero["final_return"] and vtrace["final_return"]
        else None
    )
    print(
        json.dumps(
            {
                "benchmark": "jumanji_learning",
                "env": muzero["env"],
                "frames": frames,
                "muzero_over_vtrace": ratio,
                "muzero_final_return": muzero["final_return"],
                "vtrace_final_return": vtrace["final_return"],
                "random_return": round(random, 1),
            }
        ),
        flush=True,
    )
    if args.plot:
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        plot(runs, random, args.plot)
        print(json.dumps({"benchmark": "jumanji_learning", "png": args.plot}), flush=True)
    return runs


if __name__ == "__main__":
    main()
