"""jumanji adapter: JAX-native puzzles and combinatorial tasks batched with vmap, auto-reset inside
jit.

Two ways in, like the gymnax adapter:

- `jumanji_functions(source, num_envs)`: a pure `reset(key)` / `step(env_state, actions)` pair
  over a `JumanjiEnvState` pytree, for a fully jitted (Anakin) loop; `jumanji_spec(source)` is its
  spec.
- `JumanjiEnv`: the host-side `BatchedEnv` (numpy `step`, which refuses illegal actions) plus
  `step_device` (JAX arrays, no transfer, no check) and `.env_state` (the whole device-side state,
  as `functions.step` takes it).

`source` is a registered jumanji id (`jumanji.registered_environments()`, e.g. `Snake-v1`,
`Game2048-v1`, `RubiksCube-partly-scrambled-v0`, `Minesweeper-v0`), or a user's own environment
in jumanji's API (`envs.user.UserEnv`): `reset(key) -> (state, TimeStep)`,
`step(state, action) -> (state, TimeStep)`, `action_spec`, `observation_spec`.

Actions: a `DiscreteArray` action spec gives its `num_values` actions; a `MultiDiscreteArray`
one is flattened into one index over the product of its sizes, in row-major order (Minesweeper's
`(row, col)` is `row * 10 + col`), and unflattened inside `step`. Float actions are refused.

Observations: a top-level field named `action_mask` is the legal mask, `[A]` or, for a
MultiDiscrete space, the action shape's (Minesweeper's `[10, 10]`), flattened row-major; without
one every action is legal. Where the mask allows nothing, every action is legal: the env's own
step decides what an action does there (Snake ends the episode of a snake that boxed itself in).
What is left of the observation, cast to float32 (integer values kept as values, not one-hot):
a single array is the observation itself (Game2048's board of tile exponents `[4, 4]` becomes
one image plane `[4, 4, 1]`; a 2-d grid gets a trailing channel axis, a scalar becomes `[1]`);
one grid (`[H, W]` or `[H, W, C]`, H and W at least 4) with a few numbers beside it (at most 8
values each) is an image with each number as a constant plane after the grid's channels, for a
conv net (Snake-v1: its grid `[12, 12, 5]` and its step count, `[12, 12, 6]`; Minesweeper: its
board `[10, 10]`, mine count and step count, `[10, 10, 3]`); anything else is each array
flattened and concatenated, in the observation's field order, into one vector `[D]`
(RubiksCube: the cube's colours `[6, 3, 3]` then the step count, `[55]`).

Episodes end where jumanji's TimeStep is LAST: with `discount == 0` a termination, with
`discount > 0` a truncation (a time limit; most jumanji envs end their own time limits with
discount 0, which reads as a termination here). `max_episode_steps` adds a time limit of ours,
which truncates. Same-step auto-reset: where an episode ends, the env is reset with a fresh key in
the same jitted step, and the returned observation and mask are the new episode's. `to_play` is 0,
rewards are float32, and `episode_return` is the sum of the ended episode's rewards.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from jumanji import specs
from jumanji.types import StepType

from configs.caching import built_once
from configs.errors import UsageError
from envs.base import EnvSpec, TimeStep, checked_time_limit
from envs.jax_env import JaxEnv, end_episodes, one_player_timestep, where_rows
from envs.user import UserEnv, same_observations, traced

__all__ = [
    "JumanjiEnv",
    "JumanjiEnvState",
    "JumanjiFunctions",
    "jumanji_functions",
    "jumanji_spec",
]

_LAST = int(StepType.LAST)
_MASK = "action_mask"  # the observation field that holds the legal actions


class JumanjiEnvState(NamedTuple):
    """The device-side state of a batch of jumanji envs and their running episode statistics."""

    env: Any  # batched jumanji State, leading axis [B]
    key: jax.Array  # PRNG key for new episodes
    episode_return: jax.Array  # [B] float32, return so far in the current episode
    episode_length: jax.Array  # [B] int32, steps so far in the current episode


class JumanjiFunctions(NamedTuple):
    """Pure, jittable batched env functions (same-step auto-reset), for a jitted loop."""

    reset: Callable[[jax.Array], tuple[JumanjiEnvState, TimeStep]]  # key -> (state, first step)
    step: Callable[[JumanjiEnvState, jax.Array], tuple[JumanjiEnvState, TimeStep]]  # actions [B]


class _Loaded(NamedTuple):
    """One jumanji env, how our actions become its actions, and how its observations are shown."""

    env: Any  # jumanji Environment, or a user's object with its API
    to_action: Callable[[jax.Array], jax.Array]  # a flat index [] int32 -> the env's action
    observe: Callable[[Any], tuple[jax.Array, jax.Array]]  # one jumanji observation ->
    #   (float32 network input [*obs_shape], legal mask [A] bool)
    spec: EnvSpec


def _name(source: str | UserEnv) -> str:
    return source.name if isinstance(source, UserEnv) else f"jumanji:{source}"


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0].strip() if lines else type(e).__name__


def _make(env_id: str) -> Any:
    """`jumanji.make(env_id)`: UsageError naming close registered ids if unknown."""
    registered = sorted(jumanji.registered_environments())
    if env_id not in registered:
        close = difflib.get_close_matches(env_id, registered, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(
            f"unknown jumanji env {env_id!r}: {hint}registered: {', '.join(registered)}"
        )
    try:
        return jumanji.make(env_id)
    except Exception as e:
        raise UsageError(
            f"jumanji cannot make {env_id!r}: {type(e).__name__}: {_one_line(e)}"
        ) from None


def _layout(tree: Any) -> str:
    """Shapes and dtypes of a pytree of arrays, on one line."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return ", ".join(
        f"{jax.tree_util.keystr(path) or 'array'}: {leaf.dtype}{list(leaf.shape)}"
        for path, leaf in leaves
    )


def _same_states(name: str, at_reset: Any, at_step: Any) -> None:
    """UsageError, one line, unless reset's and step's states have one structure, shapes, dtypes:
    the auto-reset selects between a stepped state and a fresh one."""
    same = jax.tree.structure(at_reset) == jax.tree.structure(at_step) and all(
        a.shape == b.shape and a.dtype == b.dtype
        for a, b in zip(jax.tree.leaves(at_reset), jax.tree.leaves(at_step), strict=True)
    )
    if not same:
        raise UsageError(
            f"{name}: its reset and its step return states of different shapes or dtypes "
            f"(reset: {_layout(at_reset)}; step: {_layout(at_step)}); they must match"
        )


def _action_spec(env: Any) -> Any:
    spec = env.action_spec
    # A property since jumanji 1.0, a method before.
    return spec() if callable(spec) and not isinstance(spec, specs.Spec) else spec


def _actions(name: str, spec: Any) -> tuple[int, Callable[[jax.Array], jax.Array]]:
    """(A, flat index -> the env's action) for a discrete or multi-discrete action spec."""
    if isinstance(spec, specs.MultiDiscreteArray):
        sizes = tuple(int(n) for n in np.asarray(spec.num_values).ravel())
        shape, dtype = tuple(spec.shape), spec.dtype

        def to_action(index: jax.Array) -> jax.Array:
            return jnp.stack(jnp.unravel_index(index, sizes)).reshape(shape).astype(dtype)

        return math.prod(sizes), to_action
    if isinstance(spec, specs.DiscreteArray):
        dtype = spec.dtype
        return int(spec.num_values), lambda index: index.astype(dtype)
    if isinstance(spec, specs.Array) and jnp.issubdtype(spec.dtype, jnp.floating):
        raise UsageError(
            f"{name} has a {type(spec).__name__} action spec of {np.dtype(spec.dtype).name}: "
            "jumanji's continuous actions are not taken yet (boxes are, from gymnax and "
            "Gymnasium); only DiscreteArray or MultiDiscreteArray actions"
        )
    raise UsageError(
        f"{name} has a {type(spec).__name__} action spec: only DiscreteArray or "
        "MultiDiscreteArray actions are supported"
    )


# A grid is a leaf `[H, W]` or `[H, W, C]` of at least this many rows and columns (a Rubik's
# cube's `[6, 3, 3]` faces are no image); numbers beside it up to this many become its planes.
_GRID_SIDE, _PLANE_VALUES = 4, 8


def _is_grid(leaf: Any) -> bool:
    return leaf.ndim in (2, 3) and min(leaf.shape[:2]) >= _GRID_SIDE


def _is_mask(path: tuple[Any, ...]) -> bool:
    key = path[0] if len(path) == 1 else None
    return getattr(key, "name", getattr(key, "key", None)) == _MASK


def _observer(name: str, observation: Any, num_actions: int) -> Callable:
    """`observe(one observation) -> (float32 input, legal mask [A])`, by the module docstring's
    rule, checked against `observation`'s shapes (from `jax.eval_shape`)."""
    leaves = jax.tree_util.tree_flatten_with_path(observation)[0]
    masks = [leaf for path, leaf in leaves if _is_mask(path)]
    if masks and math.prod(masks[0].shape) != num_actions:
        raise UsageError(
            f"{name}: its observation's action_mask has shape {list(masks[0].shape)}, which does "
            f"not match its {num_actions} actions: it must have {num_actions} entries, one per "
            "action (a MultiDiscrete space's: one per combination, in the action spec's shape; "
            "one mask per agent is a multi-agent environment, which is not supported)"
        )
    if len(masks) == len(leaves):
        raise UsageError(f"{name}: its observation holds nothing but an action_mask")

    rest = [leaf for path, leaf in leaves if not _is_mask(path)]
    grids = [i for i, leaf in enumerate(rest) if _is_grid(leaf)]
    # One grid and a few numbers beside it (Snake's step count, Minesweeper's mine count): an
    # image with each number as a constant plane, for a conv net; else one flat vector.
    as_image = (
        len(rest) > 1
        and len(grids) == 1
        and all(i in grids or math.prod(leaf.shape) <= _PLANE_VALUES for i, leaf in enumerate(rest))
    )

    def observe(obs: Any) -> tuple[jax.Array, jax.Array]:
        parts = jax.tree_util.tree_flatten_with_path(obs)[0]
        rest = [leaf.astype(jnp.float32) for path, leaf in parts if not _is_mask(path)]
        if len(rest) == 1:
            x = rest[0]
            if x.ndim == 2:  # a grid is one image plane: [H, W, 1] for channels-last conv nets
                x = x[..., None]
            elif x.ndim == 0:
                x = x.reshape(1)
        elif as_image:
            grid = rest[grids[0]]
            grid = grid[..., None] if grid.ndim == 2 else grid  # [H, W, C]
            values = jnp.concatenate([leaf.ravel() for i, leaf in enumerate(rest) if i != grids[0]])
            planes = jnp.broadcast_to(values, (*grid.shape[:2], values.size))  # [H, W, k]
            x = jnp.concatenate([grid, planes], axis=-1)  # [H, W, C + k]
        else:
            x = jnp.concatenate([leaf.ravel() for leaf in rest])  # [D]
        mask = [leaf for path, leaf in parts if _is_mask(path)]
        if not mask:
            return x, jnp.ones(num_actions, bool)
        legal = mask[0].reshape(num_actions).astype(bool)
        # No legal action: all are, and the env's step decides what they do (Snake boxed in: end).
        return x, jnp.where(legal.any(), legal, True)

    return observe


@built_once()  # one jumanji env object per (source, limit): jit caches key on its identity
def _load(source: str | UserEnv, max_episode_steps: int | None) -> _Loaded:
    """The env of `source` (a registered id, or a user's jumanji-API env) with our time limit
    (checked by `checked_time_limit`), checked by tracing (no compute); UsageError if bad."""
    if isinstance(source, UserEnv):
        if source.api != "jumanji":
            raise UsageError(f"{source.name} speaks the {source.api} API, not jumanji's")
        env, name = source.env, source.name
    else:
        env, name = _make(source), f"jumanji:{source}"
    num_actions, to_action = _actions(name, _action_spec(env))
    key = jax.random.PRNGKey(0)
    state, first = traced(name, lambda: jax.eval_shape(env.reset, key), "reset")  # shapes only
    action = jax.eval_shape(to_action, jax.ShapeDtypeStruct((), jnp.int32))
    # jumanji's own envs trace and keep their shapes too; checking them costs a few ms.
    stepped_state, stepped = traced(name, lambda: jax.eval_shape(env.step, state, action))
    same_observations(name, first.observation, stepped.observation)
    _same_states(name, state, stepped_state)
    if stepped.reward.shape != () or stepped.discount.shape != ():
        raise UsageError(
            f"{name}: its step returns a reward of shape {list(stepped.reward.shape)}: only "
            "single-agent environments with one scalar reward are supported"
        )
    observe = _observer(name, first.observation, num_actions)
    obs, _ = jax.eval_shape(observe, first.observation)
    spec = EnvSpec(
        name=name,
        family="jumanji",
        num_actions=num_actions,
        observation_shape=tuple(int(d) for d in obs.shape),
        observation_dtype="float32",
        num_players=1,
        two_player_zero_sum=False,
        discount=1.0,
        deterministic=False,
        max_episode_steps=max_episode_steps,
    )
    return _Loaded(env, to_action, observe, spec)


def jumanji_spec(source: str | UserEnv, max_episode_steps: int | None = None) -> EnvSpec:
    """The `EnvSpec` of jumanji env `source` (e.g. "Snake-v1"); UsageError on a bad one."""
    return _load(source, checked_time_limit(_name(source), max_episode_steps)).spec


def jumanji_functions(
    source: str | UserEnv, num_envs: int, max_episode_steps: int | None = None
) -> JumanjiFunctions:
    """Pure `reset(key)` and `step(env_state, actions)` for `num_envs` copies of a jumanji env.

    `source` is jumanji's id (e.g. "Snake-v1") or a user's env in jumanji's API;
    `max_episode_steps` adds a time limit that truncates. The same arguments return the same
    functions, so that jit compiles them once. UsageError on a bad name, env or limit.
    """
    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")
    return _cached_functions(
        source, int(num_envs), checked_time_limit(_name(source), max_episode_steps)
    )


@built_once()
def _cached_functions(
    source: str | UserEnv, num_envs: int, max_episode_steps: int | None
) -> JumanjiFunctions:
    return _functions(_load(source, max_episode_steps), num_envs)


def _functions(loaded: _Loaded, num_envs: int) -> JumanjiFunctions:
    vreset = jax.vmap(loaded.env.reset)
    vstep = jax.vmap(loaded.env.step)
    vobserve = jax.vmap(loaded.observe)
    vaction = jax.vmap(loaded.to_action)
    limit = loaded.spec.max_episode_steps

    def fresh(key: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        """New episodes: (batched state, observation [B, *obs_shape], legal mask [B, A])."""
        state, first = vreset(jax.random.split(key, num_envs))
        return (state, *vobserve(first.observation))

    timestep = one_player_timestep  # obs [B, *obs_shape] float32, legal [B, A]

    def reset(key: jax.Array) -> tuple[JumanjiEnvState, TimeStep]:
        key, reset_key = jax.random.split(key)
        state, obs, legal = fresh(reset_key)
        zeros_f = jnp.zeros(num_envs, jnp.float32)
        zeros_i = jnp.zeros(num_envs, jnp.int32)
        no = jnp.zeros(num_envs, bool)
        env_state = JumanjiEnvState(state, key, zeros_f, zeros_i)
        return env_state, timestep(obs, legal, zeros_f, no, no, zeros_f, zeros_i)

    def step(env_state: JumanjiEnvState, actions: jax.Array) -> tuple[JumanjiEnvState, TimeStep]:
        chex.assert_shape(actions, (num_envs,))
        chex.assert_shape([env_state.episode_return, env_state.episode_length], (num_envs,))
        key, reset_key = jax.random.split(env_state.key)
        state, ts = vstep(env_state.env, vaction(actions.astype(jnp.int32)))
        last = ts.step_type == _LAST  # [B]
        terminated = last & (ts.discount == 0)  # [B]; LAST with discount > 0: a time limit
        reward = ts.reward.astype(jnp.float32)  # [B]
        ep_return = env_state.episode_return + reward
        ep_length = env_state.episode_length + 1
        done = last if limit is None else last | (ep_length >= limit)  # [B]
        truncated = done & ~terminated  # [B], reaching our limit on a terminal step terminates
        obs, legal = vobserve(ts.observation)

        def auto_reset(stepped):
            return where_rows(done, fresh(reset_key), stepped)

        # A batch-wide cond skips the batched reset on the many steps where no episode ended
        # (resets can be dear: RubiksCube scrambles, Sudoku and BinPack draw instances); a
        # `where` alone would build B fresh episodes every step.
        state, obs, legal = jax.lax.cond(
            done.any(), auto_reset, lambda stepped: stepped, (state, obs, legal)
        )
        ended_return, ended_length, ep_return, ep_length = end_episodes(ep_return, ep_length, done)
        ts = timestep(
            obs,
            legal,
            reward,
            done,
            truncated,
            ended_return,
            ended_length,
        )
        next_env_state = JumanjiEnvState(state, key, ep_return, ep_length)
        return next_env_state, ts

    return JumanjiFunctions(reset=reset, step=step)


class JumanjiEnv(JaxEnv):
    """`num_envs` copies of a jumanji env as a `BatchedEnv`; the state stays on device. `step`
    refuses an action the observation's `action_mask` forbids; `step_device` does not check."""

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
        self.source = source
        self.jumanji_env = loaded.env
        functions = jumanji_functions(source, num_envs, max_episode_steps)
        super().__init__(loaded.spec, num_envs, functions, seed)
