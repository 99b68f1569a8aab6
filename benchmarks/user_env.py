"""A user's own JAX environment by import path against the same task through its family.

    .venv/bin/python benchmarks/user_env.py                    # CartPole: 2 to 3 minutes on 2 cores
    .venv/bin/python benchmarks/user_env.py --rounds 5 --updates 8000
    .venv/bin/python benchmarks/user_env.py --user py:gymnax:make \
        --user-options '{"env_id": "CartPole-v1"}'           # the same code both sides

The bar: an environment named `py:<module>:<callable>` (`envs.user`) runs at >= 0.95x the
frames/s of the same environment named by its family. The pair is CartPole written in gymnax's
API as a user would (`py:examples.cartpole_gymnax:make`, one `[4]` vector as its state) and
gymnax's own (`gymnax:CartPole-v1`, four scalars). Both go through the same adapter
(`envs.gymnax_env`), so a gap between them is the cost of the two CartPoles as written, which
is reported as found, not tuned away; `--user py:gymnax:make` with `env_id` CartPole-v1 names
gymnax's own CartPole by import path, the same code on both sides, so that its ratio is what the
`py:` path itself costs. Two configurations, each side timed in turn in one
process for `--rounds` rounds (the first of each pair swapped every round), so that a change in
this machine's load, which varies 3x with the hour, falls on both; each figure is the median:

- `env_step`: the environment alone, at each `--num-envs`: `envs.jax_env_functions`'s `step`
  in a jitted `lax.scan` of `--steps` steps with uniformly random actions drawn inside the scan
  (on the first of the JAX devices the preset's `devices.cpu_devices` makes), compiled before
  the clock starts. In each round the two sides' scans alternate call by call (each call
  `block_until_ready`, the state carried on) until each has run `--min-seconds`, since on this
  shared machine a burst of load can outlast a whole block of one side's calls.
  frames = calls x num_envs x steps.
- `anakin_train`: training as a user runs it, `selfplay.train.train` on the preset
  `gymnax_cartpole_vtrace` (V-trace, Anakin, both cores as two JAX devices) with `env.name` set
  to each side, `--updates` learner updates, in-run evaluation off, no plot, in a fresh
  temporary run directory. Each side first trains once untimed (`--warmup-updates`, past one
  mid-run checkpoint), which compiles: a later run of the same config compiles nothing
  (`selfplay/programs.py`). The figure is the run's own: the frames between the first and the
  last record of its `metrics.jsonl` over the seconds between them, i.e. the training loop
  with its periodic checkpoints, but without the run directory's set-up, the first state's
  build and the final save, which are the same for both sides and would only dilute the ratio
  towards 1. `*_wall` fields give `result.frames` over the wall seconds of the whole `train`
  call, for comparison.

Prints a leading `machine` line (JAX's version, devices, CPU count), then one JSON line per
configuration: each side's frames/s, `ratio` (user / family: of the medians), `ratio_range`
(the lowest and highest of the rounds' own ratios) and the `bar`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
# The checkout's root, where `examples` lives: `py:` imports from the working folder, so without
# this the user's module would be found only when run from the root.
sys.path.append(os.path.dirname(_HERE))

import configs  # noqa: E402
from selfplay.run import split_cpu  # noqa: E402

PRESET = "gymnax_cartpole_vtrace"
FAMILY = "gymnax:CartPole-v1"
USER = "py:examples.cartpole_gymnax:make"
# `--user py:gymnax:make --user-options '{"env_id": "CartPole-v1"}'`: gymnax's own CartPole by
# import path, the same code on both sides, so that the ratio is what `py:` itself costs.
OPTIONS: dict[str, dict] = {FAMILY: {}, USER: {}}
BAR = 0.95

# Before JAX starts: the preset's devices (both cores as two JAX devices), for both parts.
split_cpu(configs.load_config(PRESET).devices.cpu_devices)

import jax  # noqa: E402

from envs import env_spec, jax_env_functions  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402
from selfplay.train import train  # noqa: E402


def env_stepper(name: str, num_envs: int, steps: int) -> Callable[[], float]:
    """A compiled scan of `steps` random-action steps of `num_envs` environments; what is
    returned runs it once more (the state carried on) and gives its seconds."""
    functions = jax_env_functions(name, num_envs, **OPTIONS[name])
    num_actions = env_spec(name, **OPTIONS[name]).num_actions

    @jax.jit
    def run(state, key):
        def body(carry, k):
            state, total = carry
            actions = jax.random.randint(k, (num_envs,), 0, num_actions)
            state, timestep = functions.step(state, actions)
            return (state, total + timestep.reward.sum()), None

        key, keys = jax.random.split(key)
        (state, total), _ = jax.lax.scan(body, (state, 0.0), jax.random.split(keys, steps))
        return state, key, total

    key = jax.random.PRNGKey(0)
    carry = jax.block_until_ready(run(jax.jit(functions.reset)(key)[0], key))  # compiles

    def call() -> float:
        nonlocal carry
        start = time.perf_counter()
        carry = jax.block_until_ready(run(*carry[:2]))
        return time.perf_counter() - start

    return call


def env_step_rates(num_envs: int, steps: int, min_seconds: float, rounds: int) -> dict:
    """Frames/s of each side, one figure a round. Within a round the two alternate call by call
    (the first of each pair swapped every pair) until each has run `min_seconds`: a burst of
    the other job's load lasts longer than a call and so falls on both."""
    calls = {name: env_stepper(name, num_envs, steps) for name in (FAMILY, USER)}
    rates: dict[str, list[float]] = {FAMILY: [], USER: []}
    for _ in range(rounds):
        seconds, pairs = dict.fromkeys(calls, 0.0), 0
        while pairs < 2 or min(seconds.values()) < min_seconds:
            for name in (FAMILY, USER) if pairs % 2 == 0 else (USER, FAMILY):
                seconds[name] += calls[name]()
            pairs += 1
        for name in calls:
            rates[name].append(pairs * num_envs * steps / seconds[name])
    return rates


def train_rates(name: str, updates: int) -> tuple[float, float]:
    """(frames/s of the training loop from its metrics.jsonl, frames/s of the whole call)."""
    overrides = [f"env.name={name}", f"env.options={json.dumps(OPTIONS[name])}"]
    overrides += [f"learner.max_updates={updates}", "evaluation.every_s=0"]
    config = configs.load_config(PRESET, overrides)
    with tempfile.TemporaryDirectory(prefix="user-env-bench-") as folder:
        run_dir = os.path.join(folder, "run")
        start = time.perf_counter()
        result = train(config, run_dir, progress=False, plot=False)
        wall = time.perf_counter() - start
        records = [r for r in read_metrics(run_dir) if "frames" in r and "time" in r]
    if result.stopped_by != "max_updates":
        raise SystemExit(f"{name}: the run stopped by {result.stopped_by}, not max_updates")
    first, last = records[0], records[-1]
    loop = (last["frames"] - first["frames"]) / (last["time"] - first["time"])
    return loop, result.frames / wall


def alternated(measure: Callable[[str], float | tuple[float, ...]], rounds: int) -> dict:
    """`measure(name)` of both sides, `rounds` times each, the first of each pair swapped every
    round; a list of the results for each side."""
    results: dict[str, list] = {FAMILY: [], USER: []}
    for r in range(rounds):
        for name in (FAMILY, USER) if r % 2 == 0 else (USER, FAMILY):
            results[name].append(measure(name))
    return results


def ratio_range(user: list[float], family: list[float]) -> list[float]:
    """The lowest and highest of the rounds' own ratios (each round's two measured side by side):
    how far one round alone could be trusted on this shared machine."""
    ratios = [u / f for u, f in zip(user, family, strict=True)]
    return [round(min(ratios), 3), round(max(ratios), 3)]


def emit(line: dict, out: list[dict]) -> None:
    line = {"benchmark": "user_env", **line, "loadavg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(line), flush=True)
    out.append(line)


def main(argv=None) -> list[dict]:
    global USER
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000, help="env steps per jitted scan")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--min-seconds", type=float, default=1.0, help="each side, env_step round")
    parser.add_argument("--updates", type=int, default=4000, help="learner updates a timed run")
    parser.add_argument("--warmup-updates", type=int, default=600, help="the untimed first run")
    parser.add_argument(
        "--configs",
        nargs="+",
        choices=["env_step", "anakin_train"],
        default=["env_step", "anakin_train"],
        help="which to run",
    )
    parser.add_argument("--user", default=USER, help="the py: side (default: %(default)s)")
    parser.add_argument("--user-options", default="{}", help="its env.options, as JSON")
    args = parser.parse_args(argv)
    USER = args.user
    OPTIONS[USER] = json.loads(args.user_options)
    out: list[dict] = []
    emit(
        {
            "machine": {
                "jax": jax.__version__,
                "devices": [str(d) for d in jax.devices()],
                "cpu_count": os.cpu_count(),
            }
        },
        out,
    )
    pair = {"family": FAMILY, "user": USER, "user_options": OPTIONS[USER]}

    if "env_step" in args.configs:
        for num_envs in args.num_envs:
            rates = env_step_rates(num_envs, args.steps, args.min_seconds, args.rounds)
            family, user = (statistics.median(rates[name]) for name in (FAMILY, USER))
            emit(
                {
                    "config": "env_step",
                    "num_envs": num_envs,
                    **pair,
                    "family_frames_per_s": round(family),
                    "user_frames_per_s": round(user),
                    "ratio": round(user / family, 3),
                    "ratio_range": ratio_range(rates[USER], rates[FAMILY]),
                    "bar": BAR,
                    "steps": args.steps,
                    "rounds": args.rounds,
                },
                out,
            )

    if "anakin_train" in args.configs:
        for name in (FAMILY, USER):
            train_rates(name, args.warmup_updates)  # compiles
        rates = alternated(lambda name: train_rates(name, args.updates), args.rounds)
        (family, family_wall), (user, user_wall) = (
            tuple(statistics.median(run[i] for run in rates[name]) for i in (0, 1))
            for name in (FAMILY, USER)
        )
        emit(
            {
                "config": "anakin_train",
                "preset": PRESET,
                **pair,
                "family_frames_per_s": round(family),
                "user_frames_per_s": round(user),
                "ratio": round(user / family, 3),
                "ratio_range": ratio_range(
                    [run[0] for run in rates[USER]], [run[0] for run in rates[FAMILY]]
                ),
                "bar": BAR,
                "family_frames_per_s_wall": round(family_wall),
                "user_frames_per_s_wall": round(user_wall),
                "ratio_wall": round(user_wall / family_wall, 3),
                "updates": args.updates,
                "rounds": args.rounds,
            },
            out,
        )
    return out


if __name__ == "__main__":
    main()
