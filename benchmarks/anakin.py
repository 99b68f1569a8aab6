"""Anakin's speed on gymnax environments, against two ceilings measured in the same process.

    .venv/bin/python benchmarks/anakin.py                            # CartPole and Breakout
    .venv/bin/python benchmarks/anakin.py --envs gymnax:CartPole-v1 --seconds 10

For each environment, on the same devices (`--cpu-devices`, default 2: both cores of a 2-core
CPU split into two JAX devices; on an accelerator, every local device), one JSON line per
configuration, all measured in one run:

- `env_only`: the environment alone, random actions, `--envs-per-device` environments per device
  stepped `--steps` times in a jitted `lax.scan` per call (the ceiling: no network at all).
- `ppo`: a purejaxrl-style fully jitted PPO loop written here: the V-trace preset's actor-critic
  network, a rollout of the same B environments x T steps per device, GAE (gamma 0.99, lambda
  0.95), `--ppo-epochs` epochs of `--ppo-minibatches` minibatches (purejaxrl's CartPole default:
  4 x 4), gradients averaged over the devices (`pmean`); the whole iteration is one jit, as in
  purejaxrl (updates inside `lax.scan`).
- `anakin_vtrace`, `anakin_muzero`: the runtime itself (`selfplay.anakin.AnakinRuntime.learn`, one
  iteration per call) on the presets `gymnax_cartpole_vtrace` / `gymnax_cartpole_muzero` (or the
  MinAtar ones), with the same B and T.

Each line gives environment steps per second (all devices), `ratio_to_env_only` and
`ratio_to_ppo`; compile time is excluded (one call before the clock starts). The issue's bar:
Anakin V-trace >= 1.0x the PPO loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _split_cpu(argv) -> None:
    # Before JAX starts: the CPU's cores as JAX devices.
    count = 2
    if "--cpu-devices" in argv:
        count = int(argv[argv.index("--cpu-devices") + 1])
    import jax

    if count:
        jax.config.update("jax_num_cpu_devices", count)


_split_cpu(sys.argv)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import configs  # noqa: E402
import muzero  # noqa: E402
from envs import env_spec, jax_env_functions  # noqa: E402
from selfplay.anakin import AnakinRuntime  # noqa: E402

PRESETS = {
    "gymnax:CartPole-v1": ("gymnax_cartpole_vtrace", "gymnax_cartpole_muzero"),
    "gymnax:Breakout-MinAtar": ("minatar_breakout_vtrace", "minatar_breakout_muzero"),
}


def _sharded(fn, mesh, in_specs, out_specs):
    return jax.jit(
        jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    )


def _per_device_keys(mesh, seed: int):
    return jax.device_put(
        jax.random.split(jax.random.PRNGKey(seed), mesh.devices.size),
        jax.sharding.NamedSharding(mesh, P(muzero.AXIS)),
    )


def _timed(call, seconds: float) -> tuple[int, float]:
    """Calls `call()` (which blocks) until `seconds` pass; returns (calls, wall seconds)."""
    call()  # compiles
    calls, start = 0, time.perf_counter()
    while calls < 2 or time.perf_counter() - start < seconds:
        call()
        calls += 1
    return calls, time.perf_counter() - start


def bench_env_only(env_name, envs, steps, mesh, seconds) -> float:
    functions = jax_env_functions(env_name, envs)
    num_actions = env_spec(env_name).num_actions

    def run(keys):  # per device: keys [1, 2]
        key = keys[0]
        state, timestep = functions.reset(key)

        def step(carry, k):
            state, total = carry
            actions = jax.random.randint(k, (envs,), 0, num_actions)
            state, timestep = functions.step(state, actions)
            return (state, total + timestep.reward.sum()), None

        (state, total), _ = jax.lax.scan(step, (state, 0.0), jax.random.split(key, steps))
        return total[None]

    fn = _sharded(run, mesh, (P(muzero.AXIS),), P(muzero.AXIS))
    keys = _per_device_keys(mesh, 0)
    calls, wall = _timed(lambda: jax.block_until_ready(fn(keys)), seconds)
    return calls * steps * envs * mesh.devices.size / wall


def bench_ppo(config, envs, steps, mesh, seconds, epochs, minibatches) -> float:
    """Steps/s of the purejaxrl-style PPO loop (see the module docstring)."""
    spec = env_spec(config.env.name)
    functions = jax_env_functions(config.env.name, envs)
    networks = muzero.make_actor_critic_networks(
        config.network, spec.observation_shape, spec.num_actions
    )
    optimizer = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(2.5e-4, eps=1e-5))
    gamma, lam, clip, vf_coef, ent_coef = 0.99, 0.95, 0.2, 0.5, 0.01
    rows = envs * steps
    if rows % minibatches:
        raise SystemExit(f"--ppo-minibatches {minibatches} must divide {rows} samples")

    def loss_fn(params, batch):
        obs, action, old_logp, old_value, advantage, target = batch
        logits, value = networks.apply(params, obs)
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1)[:, 0]
        value_clipped = old_value + jnp.clip(value - old_value, -clip, clip)
        value_loss = (
            0.5 * jnp.maximum(jnp.square(value - target), jnp.square(value_clipped - target)).mean()
        )
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        ratio = jnp.exp(logp - old_logp)
        actor_loss = -jnp.minimum(
            ratio * advantage, jnp.clip(ratio, 1 - clip, 1 + clip) * advantage
        ).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return actor_loss + vf_coef * value_loss - ent_coef * entropy

    def init(keys):
        key = keys[0]
        params = networks.init(jax.random.PRNGKey(0))  # the same on every device
        state, timestep = functions.reset(key)
        return params, optimizer.init(params), state, timestep, key

    def iteration(carry):
        params, opt_state, state, timestep, key = carry

        def act(c, _):
            state, timestep, key = c
            key, k = jax.random.split(key)
            obs = timestep.observation.astype(jnp.float32)
            logits, value = networks.apply(params, obs)
            action = jax.random.categorical(k, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
            state, next_ts = functions.step(state, action)
            return (state, next_ts, key), (obs, action, logp, value, next_ts.reward, next_ts.done)

        (state, timestep, key), traj = jax.lax.scan(act, (state, timestep, key), None, steps)
        obs, action, logp, value, reward, done = traj  # [T, B, ...]
        _, last_value = networks.apply(params, timestep.observation.astype(jnp.float32))

        def gae(c, x):
            advantage, next_value = c
            value_t, reward_t, done_t = x
            delta = reward_t + gamma * next_value * (1 - done_t) - value_t
            advantage = delta + gamma * lam * (1 - done_t) * advantage
            return (advantage, value_t), advantage

        _, advantages = jax.lax.scan(
            gae, (jnp.zeros_like(last_value), last_value), (value, reward, done), reverse=True
        )
        targets = advantages + value
        flat = jax.tree.map(
            lambda x: x.reshape((rows,) + x.shape[2:]),
            (obs, action, logp, value, advantages, targets),
        )

        def epoch(c, _):
            params, opt_state, key = c
            key, k = jax.random.split(key)
            order = jax.random.permutation(k, rows)
            batches = jax.tree.map(
                lambda x: x[order].reshape((minibatches, rows // minibatches) + x.shape[1:]), flat
            )

            def update(c, batch):
                params, opt_state = c
                grads = jax.lax.pmean(jax.grad(loss_fn)(params, batch), muzero.AXIS)
                updates, opt_state = optimizer.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), None

            (params, opt_state), _ = jax.lax.scan(update, (params, opt_state), batches)
            return (params, opt_state, key), None

        (params, opt_state, key), _ = jax.lax.scan(epoch, (params, opt_state, key), None, epochs)
        return params, opt_state, state, timestep, key

    specs = P(muzero.AXIS)
    carry_specs = (P(), P(), specs, specs, specs)

    def per_device(carry):  # leading [1] device axis on the per-device parts
        params, opt_state, state, timestep, key = carry
        squeeze = lambda t: jax.tree.map(lambda x: x[0], t)  # noqa: E731
        expand = lambda t: jax.tree.map(lambda x: x[None], t)  # noqa: E731
        params, opt_state, state, timestep, key = iteration(
            (params, opt_state, squeeze(state), squeeze(timestep), squeeze(key))
        )
        return params, opt_state, expand(state), expand(timestep), expand(key)

    def init_per_device(keys):
        params, opt_state, state, timestep, key = init(keys)
        expand = lambda t: jax.tree.map(lambda x: x[None], t)  # noqa: E731
        return params, opt_state, expand(state), expand(timestep), expand(key)

    init_fn = _sharded(init_per_device, mesh, (specs,), carry_specs)
    step_fn = jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(carry_specs,),
            out_specs=carry_specs,
            check_vma=False,
        ),
        donate_argnums=0,
    )
    carry = [init_fn(_per_device_keys(mesh, 1))]

    def call():
        carry[0] = step_fn(carry[0])
        jax.block_until_ready(carry[0])

    calls, wall = _timed(call, seconds)
    return calls * steps * envs * mesh.devices.size / wall


def bench_runtime(config, seconds) -> tuple[float, int]:
    """Steps/s of AnakinRuntime.learn on `config`, its learning phase (after the replay fills)."""
    optimizer = muzero.make_optimizer(config.optimizer)
    runtime = AnakinRuntime(config, optimizer)
    params = jax.jit(runtime.agent.init)(jax.random.PRNGKey(0))
    state = muzero.init_train_state(params, optimizer, jax.random.PRNGKey(1))
    runtime.start(state, jax.random.PRNGKey(2))
    while runtime.step == 0:  # compile, fill the replay, first updates
        runtime.learn()
    runtime.learn()  # the first learning iteration compiles the updates
    frames, start = runtime.frames, time.perf_counter()
    while time.perf_counter() - start < seconds:
        runtime.learn()
    return (runtime.frames - frames) / (time.perf_counter() - start), runtime.plan.updates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--seconds", type=float, default=20.0, help="measured per configuration")
    parser.add_argument("--cpu-devices", type=int, default=2, help="JAX devices on a CPU (0: one)")
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--ppo-minibatches", type=int, default=4)
    parser.add_argument("--skip-muzero", action="store_true", help="no anakin_muzero line")
    args = parser.parse_args(argv)
    devices = jax.devices()
    mesh = muzero.make_mesh(devices)
    for env_name in args.envs:
        vtrace_preset, muzero_preset = PRESETS[env_name]
        vtrace = configs.presets.get(vtrace_preset)
        envs, steps = vtrace.actors.envs_per_thread, vtrace.actors.unroll_length
        base = {
            "env": env_name,
            "devices": len(devices),
            "platform": devices[0].platform,
            "envs_per_device": envs,
            "steps_per_iteration": steps,
        }
        results = {}
        results["env_only"] = bench_env_only(env_name, envs, steps, mesh, args.seconds)
        results["ppo"] = bench_ppo(
            vtrace, envs, steps, mesh, args.seconds, args.ppo_epochs, args.ppo_minibatches
        )
        results["anakin_vtrace"], vtrace_updates = bench_runtime(vtrace, args.seconds)
        extra = {
            "anakin_vtrace": {"preset": vtrace_preset, "updates_per_iteration": vtrace_updates},
            "ppo": {"epochs": args.ppo_epochs, "minibatches": args.ppo_minibatches},
        }
        if not args.skip_muzero:
            mz = configs.presets.get(muzero_preset)
            results["anakin_muzero"], mz_updates = bench_runtime(mz, args.seconds)
            extra["anakin_muzero"] = {
                "preset": muzero_preset,
                "updates_per_iteration": mz_updates,
                "envs_per_device": mz.actors.envs_per_thread,
                "simulations": mz.search.num_simulations,
            }
        for name, steps_per_s in results.items():
            line = {
                **base,
                "config": name,
                "steps_per_s": round(steps_per_s, 1),
                "ratio_to_env_only": round(steps_per_s / results["env_only"], 4),
                "ratio_to_ppo": round(steps_per_s / results["ppo"], 3),
                **extra.get(name, {}),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
