"""Peer learning curves: rejax's SAC and PPO on gymnax's Pendulum-v1, greedy return vs env steps.

    /work/peers/rejax/venv/bin/python benchmarks/rejax_pendulum.py --algorithms sac ppo \\
        --seeds 0 1 2 --steps 200000 --eval-every 10000 --out /work/peers/rejax/pendulum.jsonl

Why: rejax (https://github.com/keraJLi/rejax) is a fully jitted JAX RL library on gymnax
environments, the closest peer to our own agents on continuous control. This records its learning
curves on `Pendulum-v1` so ours can be compared on the same environment, step budget and
evaluation protocol. rejax is never a dependency of the project: it lives in a virtual environment
of its own, and this script is run by that environment's python:

    python3.11 -m venv /work/peers/rejax/venv
    /work/peers/rejax/venv/bin/pip install rejax gymnax==0.0.9  # rejax 0.1.3, jax 0.10.2

gymnax is pinned below 1.0: rejax 0.1.3 asks only for `gymnax>=0.0.9`, so a plain `pip install
rejax` gets gymnax 1.0.1, whose `env.step` returns gymnasium's six values (`terminated`,
`truncated`) where rejax unpacks five, and every rejax algorithm fails at its first step
(`ValueError: too many values to unpack (expected 5)` in `rejax/algos/mixins.py`). gymnax 0.0.9
(the lowest version rejax names; its repository's `pdm.lock` has 0.0.8) has the five-value API.
This script refuses to run with gymnax >= 1.

Config: rejax's own tuned Pendulum config, `configs/gymnax/pendulum.yaml` of the rejax repository
(last changed in commit 4954fbf, 2024-11-14; unchanged in 0.1.3; the PyPI package ships no
configs, so it is copied into `CONFIGS` below verbatim). Only `total_timesteps` (`--steps`) and
`eval_freq` (`--eval-every`) are overridden: the tuned budgets are 150,000 steps for PPO and 10,000
for SAC (whose learning rate, 0.01, was tuned for that short budget), and its evaluation
frequencies (2,000 and 100 steps) are replaced by a common one. PPO's iteration is 100 envs x 100
steps = 10,000 env steps, so with the default `--eval-every` it is evaluated after every update.

What runs, per algorithm (`--algorithms`) and seed (`--seeds`), one after the other in this
process: `rejax.get_algo(name).create(**config)`, then `jax.jit(algo.train)(PRNGKey(seed))`, the
whole run (all updates and evaluations) one compiled program. rejax's `eval_callback` mechanism
runs the evaluation every `eval_freq` env steps (and once before training, at 0 steps) inside that
program; ours replaces its default callback (which samples actions from the stochastic policy)
with one that:

- runs `--eval-episodes` (128, rejax's own default) episodes of the *greedy* policy (PPO: the
  Gaussian's mean, clipped to the action range; SAC: tanh of the Gaussian's mean, scaled to the
  action range) with rejax's `evaluate` (the full 200-step episodes of gymnax's Pendulum, reset
  from the train state's current rng), and records their mean return as `return`;
- also runs the same number of episodes with rejax's own default (sampled) policy, recorded as
  `return_sampled` (what rejax's own training curves report);
- sends them to the host with `jax.experimental.io_callback(ordered=True)`, where the line is
  written as soon as the evaluation has run, so `wall_s` (seconds since the run's start, tracing
  and compilation included) is the time at which the system had those parameters.

One JSON line per evaluation, printed and appended to `--out`:

    {"system": "rejax", "algorithm": "sac", "seed": 0, "env": "Pendulum-v1", "frames": 10000,
     "return": -1234.5, "return_sampled": -1240.1, "wall_s": 12.3}

`frames` is rejax's `global_step`: environment steps taken by the training envs so far (SAC's
initial buffer fill included). After each run one summary line: `final_return`, the mean `return`
of the evaluations in the last 10% of steps (`frames >= 0.9 * steps`: with the defaults, those at
180k, 190k and 200k, listed in `final_frames`), the run's `wall_s` and `compile_s` (tracing and
compilation), the config used, and `versions` (python, rejax, jax, jaxlib, gymnax, flax, optax,
distrax). `--out` is appended to, so seeds run in separate invocations accumulate in one file.

Threads: XLA's CPU backend uses every core it is given; on a shared machine restrict it from the
outside (`taskset`), not from here.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import platform
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import rejax  # noqa: E402
from rejax.evaluate import evaluate  # noqa: E402
from rejax.networks import GaussianPolicy, SquashedGaussianPolicy  # noqa: E402

ENV = "Pendulum-v1"

# rejax's configs/gymnax/pendulum.yaml (commit 4954fbf), verbatim.
CONFIGS = {
    "ppo": {
        "env": "Pendulum-v1",
        "agent_kwargs": {"activation": "swish"},
        "num_envs": 100,
        "num_steps": 100,
        "num_epochs": 10,
        "num_minibatches": 10,
        "learning_rate": 0.001,
        "max_grad_norm": 10,
        "total_timesteps": 150_000,
        "eval_freq": 2000,
        "gamma": 0.995,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "normalize_observations": True,
    },
    "sac": {
        "env": "Pendulum-v1",
        "agent_kwargs": {"activation": "swish"},
        "num_envs": 1,
        "buffer_size": 10_000,
        "fill_buffer": 256,
        "batch_size": 256,
        "learning_rate": 0.01,
        "num_epochs": 1,
        "total_timesteps": 10_000,
        "eval_freq": 100,
        "gamma": 0.99,
        "polyak": 0.98,
        "target_entropy_ratio": None,
        "normalize_observations": True,
    },
}

VERSIONED = ("rejax", "jax", "jaxlib", "gymnax", "flax", "optax", "distrax")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_gymnax() -> None:
    major = int(importlib.metadata.version("gymnax").split(".")[0])
    if major >= 1:
        sys.exit("rejax 0.1.3 needs gymnax < 1 (five-value env.step): pip install gymnax==0.0.9")


def greedy_action(actor, obs):
    """The policy's most likely action: the Gaussian's mean, mapped into the action range."""
    mean = actor._action_dist(obs).mode()
    if isinstance(actor, SquashedGaussianPolicy):
        return actor.action_loc + jnp.tanh(mean) * actor.action_scale
    if isinstance(actor, GaussianPolicy):
        return jnp.clip(mean, *actor.action_range)
    raise TypeError(f"no greedy action for {type(actor).__name__}")


def make_greedy_act(algo, ts):
    def act(obs, rng):
        del rng
        if getattr(algo, "normalize_observations", False):
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        action = algo.actor.apply(ts.actor_ts.params, obs[None], method=greedy_action)
        return jnp.squeeze(action)

    return act


def make_eval_callback(episodes: int, emit):
    """An `eval_callback(algo, ts, rng)` that evaluates greedy and sampled policies and emits."""

    def eval_callback(algo, ts, rng):
        max_steps = algo.env_params.max_steps_in_episode
        rng_greedy, rng_sampled = jax.random.split(rng)
        _, greedy = evaluate(
            make_greedy_act(algo, ts), rng_greedy, algo.env, algo.env_params, episodes, max_steps
        )
        _, sampled = evaluate(
            algo.make_act(ts), rng_sampled, algo.env, algo.env_params, episodes, max_steps
        )
        result = (ts.global_step, greedy.mean(), sampled.mean())
        jax.experimental.io_callback(emit, None, *result, ordered=True)
        return result

    return eval_callback


def run(algorithm: str, seed: int, args, out) -> dict:
    config = copy.deepcopy(CONFIGS[algorithm])
    config["total_timesteps"] = args.steps
    config["eval_freq"] = args.eval_every
    head = {"system": "rejax", "algorithm": algorithm, "seed": seed, "env": ENV}
    evals: list[dict] = []
    t0 = time.monotonic()

    def write(line: dict) -> None:
        text = json.dumps(line)
        print(text, flush=True)
        out.write(text + "\n")
        out.flush()

    def emit(frames, greedy, sampled) -> None:
        line = {
            **head,
            "frames": int(frames),
            "return": round(float(greedy), 3),
            "return_sampled": round(float(sampled), 3),
            "wall_s": round(time.monotonic() - t0, 2),
        }
        evals.append(line)
        write(line)

    algo = rejax.get_algo(algorithm).create(**copy.deepcopy(config))
    algo = algo.replace(eval_callback=make_eval_callback(args.eval_episodes, emit))
    train = jax.jit(algo.train).lower(jax.random.PRNGKey(seed)).compile()
    compile_s = time.monotonic() - t0
    ts, curve = train(jax.random.PRNGKey(seed))
    jax.block_until_ready((ts, curve))
    wall_s = time.monotonic() - t0

    frames = np.asarray(curve[0])
    assert [e["frames"] for e in evals] == frames.tolist(), "io_callback lines out of order"
    final = [e for e in evals if e["frames"] >= 0.9 * args.steps]
    summary = {
        **head,
        "final_return": round(float(np.mean([e["return"] for e in final])), 3),
        "final_return_sampled": round(float(np.mean([e["return_sampled"] for e in final])), 3),
        "final_frames": [e["frames"] for e in final],
        "frames": int(frames[-1]),
        "wall_s": round(wall_s, 2),
        "compile_s": round(compile_s, 2),
        "eval_episodes": args.eval_episodes,
        "config": config,
        "versions": versions(),
    }
    write(summary)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=["sac", "ppo"], choices=sorted(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per run")
    parser.add_argument("--eval-every", type=int, default=10_000, help="env steps between evals")
    parser.add_argument("--eval-episodes", type=int, default=128)
    parser.add_argument("--out", default="rejax_pendulum.jsonl", help="JSONL file, appended to")
    args = parser.parse_args(argv)
    check_gymnax()

    print(json.dumps({"devices": [str(d) for d in jax.devices()], **versions()}), file=sys.stderr)
    with open(args.out, "a") as out:
        for algorithm in args.algorithms:
            for seed in args.seeds:
                run(algorithm, seed, args, out)


if __name__ == "__main__":
    main()
