"""What Anakin's prioritised replay costs: frames/s of the runtime with uniform windows against
the same run with `replay.priority_alpha` > 0, measured in one process, alternating.

    .venv/bin/python benchmarks/anakin_priorities.py --preset minatar_efficientzero \
        --env gymnax:SpaceInvaders-MinAtar --rounds 3 --seconds 20

Both runtimes (`selfplay.anakin.AnakinRuntime`, one CPU device as the MinAtar presets run) are
built, compiled and filled to their first updates before any clock starts; then each round times
`--seconds` of iterations (`AnakinRuntime.learn`: play, the ring, the updates) of one and then
the other. Prioritised sampling adds a cumulative sum over the device's ring (capacity windows)
and a search per update, and a scatter of the minibatch's new priorities. One JSON line per
configuration: the median frames/s over the rounds and `ratio_to_uniform`.
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

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 1)  # the MinAtar presets' one device

import configs  # noqa: E402
import muzero  # noqa: E402
from selfplay.anakin import AnakinRuntime  # noqa: E402


def _started(config) -> AnakinRuntime:
    """A runtime past its compilation, its ring's filling and its first learning iteration."""
    optimizer = muzero.make_optimizer(config.optimizer)
    runtime = AnakinRuntime(config, optimizer)
    params = jax.jit(runtime.agent.init)(jax.random.PRNGKey(0))
    state = muzero.init_train_state(params, optimizer, jax.random.PRNGKey(1), runtime.agent.target)
    runtime.start(state, jax.random.PRNGKey(2))
    while runtime.step == 0:
        runtime.learn()
    runtime.learn()
    return runtime


def _frames_per_s(runtime: AnakinRuntime, seconds: float) -> float:
    frames, start = runtime.frames, time.perf_counter()
    while time.perf_counter() - start < seconds:
        runtime.learn()
    return (runtime.frames - frames) / (time.perf_counter() - start)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="minatar_efficientzero")
    parser.add_argument("--env", default="gymnax:SpaceInvaders-MinAtar")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--beta", type=float, default=0.4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="timed per configuration")
    args = parser.parse_args(argv)
    settings = {
        "uniform": ["replay.priority_alpha=0"],
        "prioritised": [f"replay.priority_alpha={args.alpha}", f"replay.priority_beta={args.beta}"],
    }
    runtimes = {
        name: _started(configs.load_config(args.preset, [f"env.name={args.env}", *overrides]))
        for name, overrides in settings.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(args.rounds):
        for name, runtime in runtimes.items():
            rates[name].append(_frames_per_s(runtime, args.seconds))
    uniform = statistics.median(rates["uniform"])
    lines = []
    for name, overrides in settings.items():
        median = statistics.median(rates[name])
        line = {
            "preset": args.preset,
            "env": args.env,
            "config": name,
            "overrides": overrides,
            "frames_per_s": round(median, 1),
            "rounds": [round(r, 1) for r in rates[name]],
            "ratio_to_uniform": round(median / uniform, 3),
            "updates_per_iteration": runtimes[name].plan.updates,
            "ring_windows": runtimes[name].plan.ring * runtimes[name].plan.games,
            "platform": jax.devices()[0].platform,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
