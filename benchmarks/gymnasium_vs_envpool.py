"""The Gymnasium adapter against envpool's on the same task: host stepping, and Sebulba training.

    .venv/bin/python benchmarks/gymnasium_vs_envpool.py                    # CartPole, 8 and 32
    .venv/bin/python benchmarks/gymnasium_vs_envpool.py --env ALE/Pong-v5:Pong-v5 --calls 300
    .venv/bin/python benchmarks/gymnasium_vs_envpool.py --sebulba cartpole_vtrace cartpole_muzero

Builds `gymnasium:<id>` and `envpool:<id>` through `envs.make_env` (the adapters as a run's actor
threads step them, with their checks and episode statistics), resets both, and times `--calls`
synchronous `step` calls of uniformly random actions (drawn beforehand, the same for both) at
each `--num-envs`. The two are timed in turn, A then B, for `--rounds` rounds, so that a change
in the machine's load falls on both; each rate is the median over the rounds. Prints one JSON
line per configuration: env steps per second of each (`num_envs * calls / seconds`) and their
`ratio` (gymnasium / envpool). `--env GYM:POOL` names a task whose ids differ between the two.

`--sebulba PRESET ...`: the preset's whole Sebulba run on each (its actor threads stepping the
environments on the host, the search or the policy, the learner), `--updates` updates from a
fresh run directory, the two alternated for `--rounds` rounds after one untimed run each (which
compiles; a later run of the same config in the process compiles nothing). Its line gives the
training loop's frames/s from the run's `metrics.jsonl` (the frames between its first and last
records over the seconds between them) and their ratio.
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

import numpy as np  # noqa: E402

from envs import env_spec, make_env  # noqa: E402


def steps_per_second(name: str, num_envs: int, actions: np.ndarray) -> float:
    """Env steps per second of `make_env(name, num_envs)` stepped with `actions` [calls, B]."""
    env = make_env(name, num_envs, seed=0)
    try:
        env.reset(0)
        env.step(actions[0])  # a first step outside the clock: lazy set-up, warm caches
        started = time.perf_counter()
        for row in actions[1:]:
            env.step(row)
        seconds = time.perf_counter() - started
    finally:
        env.close()
    return num_envs * (len(actions) - 1) / seconds


def training_frames_per_second(preset: str, name: str, updates: int) -> float:
    """Frames/s of the training loop of `preset` on `name`, `updates` updates, a fresh run."""
    import configs
    from selfplay.metrics import read_metrics
    from selfplay.train import train

    overrides = [f"env.name={name}", f"learner.max_updates={updates}", "evaluation.every_s=0"]
    config = configs.load_config(preset, [*overrides, "learner.max_seconds=0"])
    with tempfile.TemporaryDirectory(prefix="gymnasium-bench-") as folder:
        run_dir = os.path.join(folder, "run")
        train(config, run_dir, progress=False, plot=False)
        records = [r for r in read_metrics(run_dir) if "frames" in r and "time" in r]
    first, last = records[0], records[-1]
    return (last["frames"] - first["frames"]) / (last["time"] - first["time"])


def sebulba(preset: str, gym_id: str, pool_id: str, updates: int, rounds: int) -> dict:
    names = {"gymnasium": f"gymnasium:{gym_id}", "envpool": f"envpool:{pool_id}"}
    for name in names.values():
        training_frames_per_second(preset, name, max(updates // 10, 20))  # compiles
    rates: dict[str, list[float]] = {"gymnasium": [], "envpool": []}
    for r in range(rounds):
        for kind in ("gymnasium", "envpool") if r % 2 == 0 else ("envpool", "gymnasium"):
            rates[kind].append(training_frames_per_second(preset, names[kind], updates))
    gym_rate, pool_rate = (statistics.median(rates[k]) for k in ("gymnasium", "envpool"))
    return {
        "benchmark": "gymnasium_vs_envpool",
        "config": "sebulba_train",
        "preset": preset,
        "env": gym_id if gym_id == pool_id else f"{gym_id}:{pool_id}",
        "gymnasium_frames_per_s": round(gym_rate),
        "envpool_frames_per_s": round(pool_rate),
        "ratio": round(gym_rate / pool_rate, 3),
        "updates": updates,
        "rounds": rounds,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1", help="ID, or GYMNASIUM_ID:ENVPOOL_ID")
    parser.add_argument("--num-envs", type=int, nargs="*", default=[8, 32])
    parser.add_argument("--calls", type=int, default=2000, help="step calls per timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sebulba", nargs="*", default=[], help="presets to train on each")
    parser.add_argument("--updates", type=int, default=300, help="updates a timed training run")
    args = parser.parse_args(argv)
    gym_id, _, pool_id = args.env.partition(":")
    pool_id = pool_id or gym_id
    num_actions = env_spec(f"envpool:{pool_id}").num_actions
    out = []
    for num_envs in args.num_envs:
        rng = np.random.default_rng(0)
        actions = rng.integers(0, num_actions, (args.calls + 1, num_envs)).astype(np.int32)
        rates: dict[str, list[float]] = {"gymnasium": [], "envpool": []}
        for _ in range(args.rounds):
            rates["gymnasium"].append(steps_per_second(f"gymnasium:{gym_id}", num_envs, actions))
            rates["envpool"].append(steps_per_second(f"envpool:{pool_id}", num_envs, actions))
        gym_rate, pool_rate = (statistics.median(rates[k]) for k in ("gymnasium", "envpool"))
        line = {
            "benchmark": "gymnasium_vs_envpool",
            "env": gym_id if gym_id == pool_id else args.env,
            "num_envs": num_envs,
            "gymnasium_steps_per_s": round(gym_rate),
            "envpool_steps_per_s": round(pool_rate),
            "ratio": round(gym_rate / pool_rate, 3),
            "calls": args.calls,
            "rounds": args.rounds,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(line), flush=True)
        out.append(line)
    for preset in args.sebulba:
        line = sebulba(preset, gym_id, pool_id, args.updates, args.rounds)
        print(json.dumps(line), flush=True)
        out.append(line)
    return out


if __name__ == "__main__":
    main()
