"""gymnax adapter: JAX-native single-agent environments batched with vmap, auto-reset inside jit.

Two ways in, like the pgx adapter:

- `gymnax_functions(source, num_envs)`: a pure `reset(key)` / `step(env_state, actions)` pair over
  a `GymnaxEnvState` pytree, for a fully jitted (Anakin) loop; `gymnax_spec(source)` is its spec.
- `GymnaxEnv`: the host-side `BatchedEnv` (numpy `step`) plus `step_device` (JAX arrays, no
  transfer) and `.env_state` (the whole device-side state, as `functions.step` takes it).

A user's own environment in gymnax's API (`py:<module>:<callable>`, `envs.user`) goes through
the same functions. Every gymnax env with a discrete action space or a box of one axis is
accepted (`gymnax.registered_envs`), e.g. `CartPole-v1`, `Acrobot-v1`, `MountainCar-v0`,
`Breakout-MinAtar`, `Catch-bsuite`, and the boxes `Pendulum-v1` and `MountainCarContinuous-v0`
(actions [B, D] floats within `EnvSpec.action_bounds`: Sampled MuZero, the Gaussian V-trace).
Each step is gymnax's own `step`, which steps, separates termination from the time limit and
auto-resets in the same call.

Time limits: an episode is truncated when it reaches the env params' `max_steps_in_episode`
without terminating (gymnax >= 1.0 keeps the time limit out of `step_env`'s `terminated`, and so
do we: `truncated` is the time limit and nothing else). gymnax's defaults apply unless
`max_episode_steps` overrides them: CartPole-v1 500, Acrobot-v1 500, MountainCar-v0 200, the
MinAtar games 1000 (Asterix, Breakout, Seaquest, SpaceInvaders) and 2500 for Freeway, which never
terminates by itself (in MinAtar its 2500-frame end is the game's; here it is a truncation).
gymnax's MinAtar has no sticky actions (MinAtar's default is 0.1) and uses the minimal action sets.

Observations, cast to float32, channels-last: vectors stay `[D]` (CartPole `[4]`, Acrobot `[6]`),
MinAtar's planes are `[10, 10, C]` (Breakout C=4, SpaceInvaders 6, Freeway 7, Seaquest 10), 2-d
grids (bsuite Catch `[10, 5]`, DeepSea) get a trailing channel axis `[H, W, 1]`, and a discrete
observation (FrozenLake's cell index) becomes a one-hot `[N]`. Every action is legal in every
state (`legal_mask` all True), `to_play` is 0, and `episode_return` is the sum of gymnax's rewards.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import gymnax
import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from configs.caching import built_once
from configs.errors import UsageError
from envs.base import EnvSpec, TimeStep, box_bounds, checked_time_limit
from envs.jax_env import JaxEnv, end_episodes, one_player_timestep
from envs.user import UserEnv, same_observations, traced

__all__ = [
    "GymnaxEnv",
    "GymnaxEnvState",
    "GymnaxFunctions",
    "gymnax_functions",
    "gymnax_spec",
]


class GymnaxEnvState(NamedTuple):
    """The device-side state of a batch of gymnax envs and their running episode statistics."""

    env: Any  # batched gymnax EnvState (a flax struct), leading axis [B]
    key: jax.Array  # PRNG key for the envs' randomness and new episodes
    episode_return: jax.Array  # [B] float32, return so far in the current episode
    episode_length: jax.Array  # [B] int32, steps so far in the current episode


class GymnaxFunctions(NamedTuple):
    """Pure, jittable batched env functions (same-step auto-reset), for a jitted loop."""

    reset: Callable[[jax.Array], tuple[GymnaxEnvState, TimeStep]]  # key -> (state, first TimeStep)
    step: Callable[[GymnaxEnvState, jax.Array], tuple[GymnaxEnvState, TimeStep]]  # actions [B]


class _Loaded(NamedTuple):
    """One gymnax env with its params (time limit applied) and how its observations are shown."""

    env: Any  # gymnax Environment
    params: Any  # its EnvParams, `max_steps_in_episode` overridden where asked
    observe: Callable[[jax.Array], jax.Array]  # one raw observation -> float32 network input
    spec: EnvSpec


@built_once()  # one gymnax env object per (id, limit): jit caches key on its identity
def _load(source: str | UserEnv, max_episode_steps: int | None) -> _Loaded:
    """The env of `source` (a registered id, or a user's gymnax-API env) with its time limit
    (checked by `checked_time_limit`); UsageError if bad."""
    if isinstance(source, UserEnv):
        env, params, name = source.env, source.params, source.name
    else:
        (env, params), name = _make(source), f"gymnax:{source}"
    action_space = env.action_space(params)
    action_bounds = _box_bounds(name, action_space)
    if max_episode_steps is not None:
        params = params.replace(max_steps_in_episode=max_episode_steps)
    observation_space = env.observation_space(params)

    def observe(raw: jax.Array) -> jax.Array:
        if isinstance(observation_space, spaces.Discrete):  # a state index: one-hot [N]
            return jax.nn.one_hot(raw, observation_space.n, dtype=jnp.float32)
        obs = raw.astype(jnp.float32)
        # A 2-d grid is one image plane: [H, W] -> [H, W, 1] for channels-last conv nets.
        return obs[..., None] if obs.ndim == 2 else obs

    key = jax.random.PRNGKey(0)
    # Shapes only, no compute; gymnax's `reset` takes the params as traced values, as `step`.
    raw_obs, state = traced(name, lambda: jax.eval_shape(env.reset, key, params), "reset")
    if isinstance(source, UserEnv):  # gymnax's own envs are known to trace and keep shapes
        # gymnax's `step` selects between `step_env`'s and `reset_env`'s observations, and
        # fails on two shapes with JAX's words: `step_env`'s own are compared first.
        for step in (getattr(env, "step_env", None), env.step):
            if step is not None:
                stepped = traced(
                    name, lambda step=step: jax.eval_shape(step, key, state, 0, params)
                )
                same_observations(name, raw_obs, stepped[0])
    obs = jax.eval_shape(observe, raw_obs)
    spec = EnvSpec(
        name=name,
        family="gymnax",
        num_actions=len(action_bounds[0]) if action_bounds else int(action_space.n),
        action_bounds=action_bounds,
        observation_shape=tuple(int(d) for d in obs.shape),
        observation_dtype="float32",
        num_players=1,
        two_player_zero_sum=False,
        discount=1.0,
        deterministic=False,
        max_episode_steps=int(params.max_steps_in_episode),
    )
    return _Loaded(env, params, observe, spec)


def _box_bounds(name: str, action_space) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """None for a discrete space; a box's (low, high) per dimension (Sampled MuZero's and the
    Gaussian V-trace's); UsageError for another space or a box they cannot parametrise."""
    if isinstance(action_space, spaces.Discrete):
        return None
    if not isinstance(action_space, spaces.Box):
        raise UsageError(
            f"{name} has a {type(action_space).__name__} action space; the agents take a "
            "Discrete space or a Box"
        )
    return box_bounds(name, tuple(action_space.shape), action_space.low, action_space.high)


def _make(env_id: str) -> tuple[Any, Any]:
    """`gymnax.make(env_id)`: UsageError naming close registered ids if unknown."""
    registered = list(gymnax.registered_envs)
    if env_id not in registered:
        close = difflib.get_close_matches(env_id, registered, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(
            f"unknown gymnax env {env_id!r}: {hint}registered: {', '.join(registered)}"
        )
    try:
        return gymnax.make(env_id)
    except Exception as e:  # e.g. MNISTBandit-bsuite downloads its data set on construction
        raise UsageError(f"gymnax cannot make {env_id!r}: {type(e).__name__}: {e}") from None


def _name(source: str | UserEnv) -> str:
    return source.name if isinstance(source, UserEnv) else f"gymnax:{source}"


def gymnax_spec(source: str | UserEnv, max_episode_steps: int | None = None) -> EnvSpec:
    """The `EnvSpec` of gymnax env `source` (a registered id, e.g. "CartPole-v1", or a user's
    gymnax-API env); UsageError on a bad name."""
    return _load(source, checked_time_limit(_name(source), max_episode_steps)).spec


def gymnax_functions(
    source: str | UserEnv, num_envs: int, max_episode_steps: int | None = None
) -> GymnaxFunctions:
    """Pure `reset(key)` and `step(env_state, actions)` for `num_envs` copies of a gymnax env.

    `source` is gymnax's name (e.g. "Breakout-MinAtar") or a user's gymnax-API environment
    (`envs.user.UserEnv`); `max_episode_steps` overrides its time
    limit (see the module docstring for the defaults). The same arguments return the same
    functions, so that jit compiles them once. UsageError on a bad name, a continuous env or a
    bad limit.
    """
    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")
    return _cached_functions(
        source, int(num_envs), checked_time_limit(_name(source), max_episode_steps)
    )


@built_once()
def _cached_functions(
    source: str | UserEnv, num_envs: int, max_episode_steps: int | None
) -> GymnaxFunctions:
    return _functions(_load(source, max_episode_steps), num_envs)


def _functions(loaded: _Loaded, num_envs: int) -> GymnaxFunctions:
    env, params, observe = loaded.env, loaded.params, loaded.observe
    num_actions = loaded.spec.num_actions
    vreset = jax.vmap(env.reset, in_axes=(0, None))
    # gymnax's own `step` (not `step_env`): it splits termination from the time limit and
    # auto-resets in the same call, and some envs override it (DeepSea keeps its regret counters
    # across episodes). It builds a fresh episode for every env on every step; for these small
    # envs that costs less than a batch-wide `lax.cond` would save.
    vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    vobserve = jax.vmap(observe)
    all_legal = jnp.ones((num_envs, num_actions), bool)

    def timestep(raw_obs, reward, done, truncated, ep_return, ep_length) -> TimeStep:
        observation = vobserve(raw_obs)  # [B, *obs_shape] float32
        return one_player_timestep(
            observation, all_legal, reward, done, truncated, ep_return, ep_length
        )

    def reset(key: jax.Array) -> tuple[GymnaxEnvState, TimeStep]:
        key, reset_key = jax.random.split(key)
        raw_obs, state = vreset(jax.random.split(reset_key, num_envs), params)
        zeros_f = jnp.zeros(num_envs, jnp.float32)
        zeros_i = jnp.zeros(num_envs, jnp.int32)
        no = jnp.zeros(num_envs, bool)
        env_state = GymnaxEnvState(state, key, zeros_f, zeros_i)
        return env_state, timestep(raw_obs, zeros_f, no, no, zeros_f, zeros_i)

    box = loaded.spec.is_box

    def step(env_state: GymnaxEnvState, actions: jax.Array) -> tuple[GymnaxEnvState, TimeStep]:
        # a box's actions [B, D] as they are (gymnax clips them to its bounds), indices [B]
        chex.assert_shape(actions, (num_envs, num_actions) if box else (num_envs,))
        actions = actions.astype(jnp.float32) if box else actions.astype(jnp.int32)
        chex.assert_shape([env_state.episode_return, env_state.episode_length], (num_envs,))
        key, step_key = jax.random.split(env_state.key)
        raw_obs, state, reward, terminated, time_up, _ = vstep(
            jax.random.split(step_key, num_envs), env_state.env, actions, params
        )  # raw_obs and state are already the next episode's where the episode ended
        terminated = terminated.astype(bool)  # [B]
        done = terminated | time_up  # [B]
        truncated = time_up & ~terminated  # [B], reaching the limit on a terminal step terminates
        reward = reward.astype(jnp.float32).reshape(num_envs)  # [B] (a box's env: [B, 1])
        ep_return = env_state.episode_return + reward
        ep_length = env_state.episode_length + 1
        ended_return, ended_length, ep_return, ep_length = end_episodes(ep_return, ep_length, done)
        ts = timestep(
            raw_obs,
            reward,
            done,
            truncated,
            ended_return,
            ended_length,
        )
        next_env_state = GymnaxEnvState(state, key, ep_return, ep_length)
        return next_env_state, ts

    return GymnaxFunctions(reset=reset, step=step)


class GymnaxEnv(JaxEnv):
    """`num_envs` copies of a gymnax env as a `BatchedEnv`; the state stays on device."""

    def __init__(
        self,
        source: str | UserEnv,
        num_envs: int,
        seed: int = 0,
        *,
        max_episode_steps: int | None = None,
    ):
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        max_episode_steps = checked_time_limit(_name(source), max_episode_steps)
        loaded = _load(source, max_episode_steps)
        self.gymnax_env = loaded.env
        self.gymnax_params = loaded.params
        functions = gymnax_functions(source, num_envs, max_episode_steps)
        super().__init__(loaded.spec, num_envs, functions, seed)
