"""Host stepping speed of the Gymnasium adapter against envpool's, on the same task.

    .venv/bin/python benchmarks/gymnasium_vs_envpool.py                    # CartPole, 8 and 32
    .venv/bin/python benchmarks/gymnasium_vs_envpool.py --env ALE/Pong-v5:Pong-v5 --calls 300

Builds `gymnasium:<id>` and `envpool:<id>` through `envs.make_env` (the adapters as a run's actor
threads step them, with their checks and episode statistics), resets both, and times `--calls`
synchronous `step` calls of uniformly random actions (drawn beforehand, the same for both) at
each `--num-envs`. The two are timed in turn, A then B, for `--rounds` rounds, so that a change
in the machine's load falls on both; each rate is the median over the rounds. Prints one JSON
line per configuration: env steps per second of each (`num_envs * calls / seconds`) and their
`ratio` (gymnasium / envpool). `--env GYM:POOL` names a task whose ids differ between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1", help="ID, or GYMNASIUM_ID:ENVPOOL_ID")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--calls", type=int, default=2000, help="step calls per timing")
    parser.add_argument("--rounds", type=int, default=3)
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
    return out


if __name__ == "__main__":
    main()
