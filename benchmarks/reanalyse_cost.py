"""What each sample-efficiency option costs: the update (with its targets) and the frames/s it
implies, against plain MuZero measured in the same run.

    .venv/bin/python benchmarks/reanalyse_cost.py --preset minatar_muzero --rounds 3

For plain MuZero and each option of `minatar_efficientzero` alone (reanalyse of every window with
the newest parameters, and of a quarter with the target network at 8 simulations as the preset
does; the target network, the consistency loss, the value prefix, the off-policy correction, the
conv representation) and
all of them as the preset sets them, on one device
of this machine: the time of one update of `--batch` windows with its targets built (the
`make_batch` of the agent, reanalyse's fresh searches included, then the update, one jitted call
as Anakin runs it) and of one acting step of `--envs` environments (the search; with the value
prefix its recurrent function is heavier). The configurations alternate within each round; each
line gives the median over the rounds and

    frames_per_s = 1 / (act_ms / envs + samples_per_insert / batch * update_ms) * 1000

the rate of a run at the preset's replay ratio if nothing else took time (the environment's own
step is far cheaper here), with `ratio_to_plain`.
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
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import configs  # noqa: E402
import muzero  # noqa: E402
from envs import env_spec  # noqa: E402
from selfplay.agent import make_agent  # noqa: E402

_TARGET = ["learner.target_update_every=200"]
_CONV = ["network.torso=resnet_mlp", "network.channels=16", "network.representation_blocks=0"]
OPTIONS = {
    "plain": [],
    "reanalyse": ["reanalyse.fraction=1"],
    # minatar_efficientzero's reanalyse: a quarter of each batch, 8 simulations, the target network
    "reanalyse_quarter_target": [
        "reanalyse.fraction=0.25",
        "reanalyse.num_simulations=8",
        "reanalyse.network=target",
        *_TARGET,
    ],
    "target_network": ["reanalyse.value=target_network", *_TARGET],
    "consistency": ["loss.consistency_weight=2"],
    "value_prefix": ["loss.value_prefix_horizon=5"],
    "off_policy_correction": ["loss.td_steps_decay_every=5000"],
    # minatar_efficientzero's representation: one 3x3 conv, flattened into the dense latent
    "conv_representation": _CONV,
    # minatar_efficientzero's settings
    "all": [
        *_CONV,
        "reanalyse.fraction=0.25",
        "reanalyse.num_simulations=8",
        "reanalyse.network=target",
        "reanalyse.value=target_network",
        *_TARGET,
        "loss.consistency_weight=2",
        "loss.value_prefix_horizon=5",
        "loss.td_steps_decay_every=5000",
    ],
}


def _window(spec, length: int, batch: int, rng) -> muzero.Trajectory:
    a = spec.num_actions
    return jax.tree.map(
        jnp.asarray,
        muzero.Trajectory(
            observation=rng.uniform(size=(length, batch, *spec.observation_shape)) < 0.1,
            action=rng.integers(0, a, (length, batch)).astype(np.int32),
            reward=rng.integers(0, 2, (length, batch)).astype(np.float32),
            discount=np.ones((length, batch), np.float32),
            search_policy=np.full((length, batch, a), 1.0 / a, np.float32),
            search_value=rng.normal(size=(length, batch)).astype(np.float32),
            legal_mask=np.ones((length, batch, a), bool),
            to_play=np.zeros((length, batch), np.int32),
            behaviour_logits=np.zeros((length, batch, a), np.float32),
            policy_version=np.zeros((length, batch), np.int32),
        ),
    )


def _timed(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    started = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - started) / repeats * 1000


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="minatar_muzero")
    parser.add_argument("--env", default="gymnax:Breakout-MinAtar")
    parser.add_argument("--batch", type=int, default=64, help="windows per update (a device's)")
    parser.add_argument("--envs", type=int, default=32, help="environments per acting step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=list(OPTIONS), choices=list(OPTIONS))
    args = parser.parse_args(argv)
    spec = env_spec(args.env)
    rng = np.random.default_rng(0)
    programs = {}
    for name in args.only:
        config = configs.load_config(args.preset, [f"env.name={args.env}", *OPTIONS[name]])
        agent = make_agent(config, spec)
        optimizer = muzero.make_optimizer(config.optimizer)
        update = muzero.make_update(agent.loss_fn, optimizer, target=agent.target)
        params = jax.jit(agent.init)(jax.random.key(0))
        state = muzero.init_train_state(params, optimizer, jax.random.key(1), agent.target)

        @jax.jit
        def learn(state, window, key, agent=agent, update=update):
            context = muzero.BatchContext(state.params, state.target_params, key, state.step)
            batch, _ = agent.make_batch(window, jnp.ones(window.action.shape[1]), context)
            return update(state, batch)[0]

        observation = jnp.zeros((args.envs, *spec.observation_shape), jnp.float32)
        acting = (params, jax.random.key(2), observation)
        legal = jnp.ones((args.envs, spec.num_actions), bool)
        programs[name] = (config, agent, learn, state, legal, acting)
    window_by_length: dict[int, muzero.Trajectory] = {}
    times: dict[str, dict[str, list[float]]] = {n: {"update": [], "act": []} for n in programs}
    for _ in range(args.rounds):
        for name, (_, agent, learn, state, legal, acting) in programs.items():
            length = agent.window_length
            if length not in window_by_length:
                window_by_length[length] = _window(spec, length, args.batch, rng)
            window = window_by_length[length]
            key = jax.random.key(3)
            times[name]["update"].append(_timed(learn, state, window, key, repeats=args.repeats))
            params, act_key, observation = acting
            greedy = jnp.zeros(args.envs, bool)
            times[name]["act"].append(
                _timed(
                    agent.act,
                    params,
                    act_key,
                    observation,
                    legal,
                    greedy,
                    None,
                    repeats=args.repeats,
                )
            )
    results = []
    plain_fps = None
    for name, (config, *_rest) in programs.items():
        update_ms = statistics.median(times[name]["update"])
        act_ms = statistics.median(times[name]["act"])
        ratio = config.replay.samples_per_insert / args.batch
        fps = 1000.0 / (act_ms / args.envs + ratio * update_ms)
        if name == "plain":
            plain_fps = fps
        result = {
            "benchmark": "reanalyse_cost",
            "option": name,
            "overrides": OPTIONS[name],
            "preset": args.preset,
            "update_ms": round(update_ms, 2),
            "act_ms": round(act_ms, 2),
            "frames_per_s": round(fps, 1),
            "ratio_to_plain": round(fps / plain_fps, 3) if plain_fps else None,
            "batch": args.batch,
            "envs": args.envs,
            "samples_per_insert": config.replay.samples_per_insert,
            "rounds": args.rounds,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    return results


if __name__ == "__main__":
    main()
