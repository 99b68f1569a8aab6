"""Reanalyse: fresh targets for sampled windows, at the time they are learned from.

MuZero Reanalyse (Schrittwieser et al. 2021) and EfficientZero (Ye et al. 2021) learn more from
each frame by recomputing the targets of old data with newer networks:

- policy targets: a share of each batch's windows is searched again with the newest parameters,
  at every unroll step, over the stored observations (AlphaZero: the stored game states);
- value targets: the n-step returns bootstrap from the target network's value of the stored
  observation, or from a fresh search's root value, instead of the actors' stale search value;
- the off-policy correction: older windows bootstrap sooner (`decayed_td_steps`).

Everything here is pure: the agent supplies how to search and how to evaluate a batch of
positions (`SearchFn`, `ValueFn`), so the same code serves the learned model and the exact one.
Typical use, inside an agent's jitted `make_batch`:

    fresh = reanalyse_window(window, context, search_fn, value_fn, config, unroll_steps=K,
                             td_steps=n, td_steps_decay_every=0)
    batch = muzero_batch(fresh.window, weights, bootstrap_value=fresh.bootstrap_value,
                         window_td_steps=fresh.window_td_steps, ...)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from muzero.config import ReanalyseConfig
from muzero.targets import decayed_td_steps
from muzero.types import Trajectory

__all__ = ["BatchContext", "Reanalysed", "SearchFn", "ValueFn", "reanalyse_window"]

Params = Any
# search_fn(params, key, positions [M, ...], legal_mask [M, A]) -> (policy [M, A], value [M]),
# or with a third output, Sampled MuZero's drawn actions [M, S, ...] that its policy [M, S]
# weighs (which replace the window's `sampled_actions`)
SearchFn = Callable[[Params, jax.Array, Any, chex.Array], tuple]
# value_fn(params, positions [M, ...]) -> value [M] (the network's, for the player to move)
ValueFn = Callable[[Params, Any], chex.Array]


class BatchContext(NamedTuple):
    """What a batch's targets may read besides the sampled windows."""

    params: Params  # the newest parameters: the fresh searches run with them
    target_params: Params | None  # the target network's: value bootstraps; None: none kept
    key: jax.Array  # the fresh searches' randomness (root noise, action sampling)
    step: jax.Array  # [] int32 the learner's update count: the windows' age


class Reanalysed(NamedTuple):
    """A window with fresh targets, and what `muzero_batch` / `alphazero_batch` take with it."""

    window: Trajectory  # the sampled window, its `search_policy` replaced where reanalysed
    bootstrap_value: chex.Array | None  # [L, N] the values to bootstrap from; None: stored
    window_td_steps: chex.Array | None  # [N] int32 each window's n; None: the config's


def reanalyse_window(
    window: Trajectory,
    context: BatchContext,
    search_fn: SearchFn,
    value_fn: ValueFn,
    config: ReanalyseConfig,
    *,
    search_positions: Any,
    value_positions: Any,
    unroll_steps: int,
    td_steps: int,
    td_steps_decay_every: int,
) -> Reanalysed:
    """Fresh targets for `window` (leaves [L, N, ...]) as `config` asks.

    Args:
      window: the sampled windows; `legal_mask`, `search_policy`, `search_value` and
        `policy_version` are read.
      context: the newest and the target parameters, a key and the learner's step.
      search_fn, value_fn: how to search and evaluate a batch of positions.
      config: which share to search (`fraction`: the first round(fraction * N) windows, which
        the replay sampled at random), with which parameters (`network`: the context's newest
        or its target's) and where values bootstrap from (`value`).
      search_positions: what `search_fn` reads of each step, leaves [L, N, ...] (MuZero:
        `window.observation`; AlphaZero: the stored game states); None where nothing is searched.
      value_positions: what `value_fn` reads of each step, leaves [L, N, ...] (the
        observations).
      unroll_steps: K: the policy targets of steps 0..K are searched (AlphaZero: 0).
      td_steps: n of the value targets.
      td_steps_decay_every: the off-policy correction's pace (`decayed_td_steps`); 0: off.
    """
    length, batch = window.action.shape[:2]
    if unroll_steps + 1 > length:
        raise ValueError(f"windows of {length} steps cannot give {unroll_steps + 1} policy targets")
    searched = round(config.fraction * batch)  # static: the first `searched` windows
    window_td_steps = None
    if td_steps_decay_every:
        window_td_steps = decayed_td_steps(
            window.policy_version[0], context.step, td_steps, td_steps_decay_every
        )  # [N]
    bootstrap_value = None
    if config.value == "target_network":
        if context.target_params is None:
            raise ValueError("reanalyse value 'target_network' needs a target network")
        chex.assert_tree_shape_prefix(value_positions, (length, batch))
        values = value_fn(context.target_params, _flat(value_positions))  # [L * N]
        bootstrap_value = values.reshape((length, batch))
    if not searched:
        return Reanalysed(window, bootstrap_value, window_td_steps)

    chex.assert_tree_shape_prefix(search_positions, (length, batch))
    search_params = context.params
    if config.network == "target":
        if context.target_params is None:
            raise ValueError("reanalyse network 'target' needs a target network")
        search_params = context.target_params
    policy_key, value_key = jax.random.split(context.key)
    steps = unroll_steps + 1
    chosen = lambda x: x[:steps, :searched]  # noqa: E731 - [K+1, M, ...]
    policy, _, *drawn = search_fn(
        search_params,
        policy_key,
        _flat(jax.tree.map(chosen, search_positions)),
        _flat(chosen(window.legal_mask)),
    )  # [(K+1) * M, A]
    policy = policy.reshape((steps, searched, -1)).astype(window.search_policy.dtype)
    window = window._replace(search_policy=window.search_policy.at[:steps, :searched].set(policy))
    if drawn and window.sampled_actions is not None:  # the actions the fresh policy weighs
        actions = drawn[0].reshape((steps, searched) + drawn[0].shape[1:])
        window = window._replace(
            sampled_actions=window.sampled_actions.at[:steps, :searched].set(
                actions.astype(window.sampled_actions.dtype)
            )
        )
    if config.value == "search":
        # Each reanalysed window's step k bootstraps from a fresh search at step k + n.
        horizon = (
            jnp.full((searched,), td_steps, jnp.int32)
            if window_td_steps is None
            else window_td_steps[:searched]
        )
        rows = jnp.minimum(jnp.arange(steps)[:, None] + horizon[None, :], length - 1)  # [K+1, M]
        columns = jnp.broadcast_to(jnp.arange(searched)[None, :], rows.shape)
        at_rows = lambda x: x[rows, columns]  # noqa: E731 - [K+1, M, ...]
        _, values, *_ = search_fn(
            search_params,
            value_key,
            _flat(jax.tree.map(at_rows, search_positions)),
            _flat(at_rows(window.legal_mask)),
        )  # [(K+1) * M]
        stored = window.search_value.astype(jnp.float32)
        bootstrap_value = stored.at[rows, columns].set(values.reshape(rows.shape))
    return Reanalysed(window, bootstrap_value, window_td_steps)


def _flat(tree: Any) -> Any:
    """Leaves [S, M, ...] -> [S * M, ...]."""
    return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)
