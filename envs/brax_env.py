"""brax adapter: JAX physics (continuous control) batched with vmap, auto-reset inside jit.

`brax:<env>` names one of brax's registered environments (`brax.envs.get_environment`: `ant`,
`halfcheetah`, `hopper`, `humanoid`, `walker2d`, `reacher`, `inverted_pendulum`, ..., and `fast`,
a trivial one for tests). Like gymnax's adapter it gives:

- `brax_functions(env_id, num_envs, max_episode_steps)`: a pure `reset(key)` /
  `step(env_state, actions)` pair over a `BraxEnvState` pytree, for Anakin's jitted loop (the
  physics runs inside it); `brax_spec(env_id)` is its spec.
- `BraxEnv`: the host-side `BatchedEnv` (numpy `step`, Sebulba and the evaluator).

Actions are a box: `env.action_size` torques in [-1, 1] (brax's convention), float vectors
[B, D] (Sampled MuZero, the Gaussian V-trace). Observations are brax's `[observation_size]`
vectors as float32. Episodes end where brax says (`done`: a fallen walker) or at the time limit,
1,000 steps by default (brax's training default; `max_episode_steps` overrides it), which is a
truncation. Ended environments restart from a fresh `reset` in the same step (only when one has
ended: a `lax.cond`), so an episode's start varies as in brax's own training.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from configs.caching import built_once
from configs.errors import UsageError
from envs.base import EnvSpec, TimeStep, checked_time_limit
from envs.jax_env import JaxEnv, end_episodes, one_player_timestep, where_rows

__all__ = ["BraxEnv", "BraxEnvState", "BraxFunctions", "brax_functions", "brax_spec"]

DEFAULT_EPISODE_STEPS = 1000


class BraxEnvState(NamedTuple):
    """The device-side state of a batch of brax envs and their running episode statistics."""

    env: Any  # batched brax State (pipeline state, observation, ...), leading axis [B]
    key: jax.Array  # PRNG key for new episodes
    episode_return: jax.Array  # [B] float32
    episode_length: jax.Array  # [B] int32


class BraxFunctions(NamedTuple):
    """Pure, jittable batched env functions (same-step auto-reset), for a jitted loop."""

    reset: Callable[[jax.Array], tuple[BraxEnvState, TimeStep]]
    step: Callable[[BraxEnvState, jax.Array], tuple[BraxEnvState, TimeStep]]  # actions [B, D]


@built_once()
def _load(env_id: str, max_episode_steps: int) -> tuple[Any, EnvSpec]:
    """brax's env of `env_id` and its spec; UsageError naming the registered ones if unknown."""
    with contextlib.redirect_stdout(io.StringIO()):  # mujoco's mjx prints a missing extra
        from brax import envs as brax_envs

    registered = sorted(brax_envs._envs)  # brax's own registry: get_environment reads it
    if env_id not in registered:
        raise UsageError(f"unknown brax env {env_id!r}: registered: {', '.join(registered)}")
    env = brax_envs.get_environment(env_id)
    size = int(env.action_size)
    # Shapes only: brax's own `observation_size` runs a reset operation by operation (hundreds
    # of small XLA compiles, about 7 s of CPU for halfcheetah).
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    observation = jax.eval_shape(env.reset, key).obs
    spec = EnvSpec(
        name=f"brax:{env_id}",
        family="brax",
        num_actions=size,
        action_bounds=((-1.0,) * size, (1.0,) * size),
        observation_shape=(int(observation.shape[-1]),),
        observation_dtype="float32",
        num_players=1,
        two_player_zero_sum=False,
        discount=1.0,
        deterministic=False,
        max_episode_steps=max_episode_steps,
    )
    return env, spec


def _limit(env_id: str, max_episode_steps: int | None) -> int:
    limit = checked_time_limit(f"brax:{env_id}", max_episode_steps)
    return DEFAULT_EPISODE_STEPS if limit is None else limit


def brax_spec(env_id: str, max_episode_steps: int | None = None) -> EnvSpec:
    """The `EnvSpec` of brax env `env_id`; UsageError on a bad name or limit."""
    return _load(env_id, _limit(env_id, max_episode_steps))[1]


def brax_functions(
    env_id: str, num_envs: int, max_episode_steps: int | None = None
) -> BraxFunctions:
    """Pure `reset(key)` and `step(env_state, actions [B, D])` for `num_envs` copies of a brax
    env (the same arguments return the same functions, so that jit compiles them once)."""
    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")
    return _cached_functions(env_id, int(num_envs), _limit(env_id, max_episode_steps))


@built_once()
def _cached_functions(env_id: str, num_envs: int, max_episode_steps: int) -> BraxFunctions:
    env, spec = _load(env_id, max_episode_steps)
    size = spec.num_actions
    vreset, vstep = jax.vmap(env.reset), jax.vmap(env.step)
    all_legal = jnp.ones((num_envs, size), bool)

    def timestep(obs, reward, done, truncated, ep_return, ep_length) -> TimeStep:
        observation = obs.astype(jnp.float32)  # [B, obs]
        return one_player_timestep(
            observation, all_legal, reward, done, truncated, ep_return, ep_length
        )

    def reset(key: jax.Array) -> tuple[BraxEnvState, TimeStep]:
        key, reset_key = jax.random.split(key)
        state = vreset(jax.random.split(reset_key, num_envs))
        zeros_f, zeros_i = jnp.zeros(num_envs, jnp.float32), jnp.zeros(num_envs, jnp.int32)
        no = jnp.zeros(num_envs, bool)
        return (
            BraxEnvState(state, key, zeros_f, zeros_i),
            timestep(state.obs, zeros_f, no, no, zeros_f, zeros_i),
        )

    def step(env_state: BraxEnvState, actions: jax.Array) -> tuple[BraxEnvState, TimeStep]:
        chex.assert_shape(actions, (num_envs, size))
        state = vstep(env_state.env, jnp.clip(actions.astype(jnp.float32), -1.0, 1.0))
        reward = state.reward.astype(jnp.float32)  # [B]
        terminated = state.done > 0  # [B]
        ep_length = env_state.episode_length + 1
        time_up = (ep_length >= max_episode_steps) & ~terminated
        done = terminated | time_up
        ep_return = env_state.episode_return + reward
        ended_return, ended_length, ep_return, ep_length = end_episodes(ep_return, ep_length, done)
        key, reset_key = jax.random.split(env_state.key)

        def restart(state):  # the ended envs from a fresh reset, the others as they are
            return where_rows(done, vreset(jax.random.split(reset_key, num_envs)), state)

        state = jax.lax.cond(jnp.any(done), restart, lambda state: state, state)
        ts = timestep(state.obs, reward, done, time_up, ended_return, ended_length)
        return BraxEnvState(state, key, ep_return, ep_length), ts

    return BraxFunctions(reset=reset, step=step)


class BraxEnv(JaxEnv):
    """`num_envs` copies of a brax env as a `BatchedEnv`; the state stays on device."""

    def __init__(
        self, env_id: str, num_envs: int, seed: int = 0, *, max_episode_steps: int | None = None
    ):
        functions = brax_functions(env_id, num_envs, max_episode_steps)
        super().__init__(brax_spec(env_id, max_episode_steps), num_envs, functions, seed)
