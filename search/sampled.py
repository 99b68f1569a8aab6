"""Sampled MuZero's pieces (Hubert et al. 2021, "Learning and Planning in Complex Action Spaces").

A node of a sampled search has K children, one per action drawn from a proposal beta by the
caller's `sample_fn(params, rng_key, embedding, K)`. Its prior over them is the paper's corrected
one: `(beta_hat / beta) * pi`, where `beta_hat` is the empirical distribution of the K draws
(`count / K`), `pi` the model's policy and `beta` the proposal. With `beta = pi` (draws from the
policy itself) the prior is `beta_hat`; a set drawn without replacement (each action at most once)
passes a constant `beta` and gets `pi` renormalised over the set. A draw repeated in a node's
samples is one child: its first slot takes the prior of all its copies, the others are marked
illegal (the search never selects them).

`search.run(..., sample_fn=...)` with `SearchConfig(algorithm="sampled_muzero")` searches such
trees; this module holds the pure functions it is built from, and `sample_categorical`, the
`sample_fn` of a discrete space too large to enumerate.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "SampledNode",
    "check_samples",
    "corrected_prior_logits",
    "sample_categorical",
    "take_slot",
]


class SampledNode(NamedTuple):
    """What a sampled tree keeps per node: the model's embedding and the actions it sampled."""

    embedding: Any  # [B, ...] the caller's
    actions: chex.Array  # [B, K, ...] the node's sampled actions, one per child slot


def sample_categorical(
    rng_key: chex.PRNGKey, logits: chex.Array, num_samples: int, *, replace: bool = False
) -> tuple[chex.Array, chex.Array, chex.Array]:
    """K actions of a categorical policy, as a `sample_fn` returns them.

    Args:
      rng_key: consumed.
      logits: [B, A] the policy's logits (illegal actions: -inf or `finfo.min`).
      num_samples: K; without replacement at most A.
      replace: False draws K distinct actions (Gumbel top-k; the set is returned in increasing
        order, so that with K = A the children are the actions themselves, in order); True draws
        K times from the policy.
    Returns:
      actions [B, K] int32, log_probs [B, K] (the policy's log-probabilities of them) and
      proposal_log_probs [B, K]: the policy's own with replacement (beta = pi), zeros without
      (a constant: the prior is pi over the set).
    """
    chex.assert_rank(logits, 2)
    num_actions = logits.shape[-1]
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(
            f"search.sample_categorical: num_samples must be >= 1, got {num_samples!r}"
        )
    if not replace and num_samples > num_actions:
        raise ValueError(
            f"search.sample_categorical: {num_samples} samples without replacement from "
            f"{num_actions} actions; take num_samples <= {num_actions} or replace=True"
        )
    log_policy = jax.nn.log_softmax(logits, axis=-1)  # [B, A]
    if replace:
        actions = jax.random.categorical(
            rng_key, logits, axis=-1, shape=(num_samples, logits.shape[0])
        ).T.astype(jnp.int32)  # [B, K]
        log_probs = jnp.take_along_axis(log_policy, actions, axis=-1)
        return actions, log_probs, log_probs
    gumbel = jax.random.gumbel(rng_key, logits.shape, logits.dtype)  # [B, A]
    _, top = jax.lax.top_k(log_policy + gumbel, num_samples)  # [B, K]
    actions = jnp.sort(top, axis=-1).astype(jnp.int32)
    log_probs = jnp.take_along_axis(log_policy, actions, axis=-1)
    return actions, log_probs, jnp.zeros_like(log_probs)


def corrected_prior_logits(
    actions: chex.Array, log_probs: chex.Array, proposal_log_probs: chex.Array
) -> tuple[chex.Array, chex.Array]:
    """The search's prior over a node's K samples: log(beta_hat / beta * pi), repeats merged.

    Args:
      actions: [B, K, ...] sampled actions (indices or vectors).
      log_probs: [B, K] log pi of each.
      proposal_log_probs: [B, K] log beta of each (up to a constant per row).
    Returns:
      prior_logits [B, K] (log-probabilities over the distinct samples; `finfo.min` at repeats)
      and unused [B, K] bool: True at each slot whose action an earlier slot already holds, or
      that the policy gives no probability (an illegal action drawn by a set that takes them
      all, its logit masked: `mask_invalid_logits`); the search never selects these. A row
      with nothing else keeps its first slot.
    """
    chex.assert_rank(log_probs, 2)
    batch_size, num_samples = log_probs.shape
    chex.assert_shape(proposal_log_probs, (batch_size, num_samples))
    chex.assert_axis_dimension(actions, 0, batch_size)
    chex.assert_axis_dimension(actions, 1, num_samples)
    flat = actions.reshape(batch_size, num_samples, -1)  # [B, K, D]
    same = jnp.all(flat[:, :, None, :] == flat[:, None, :, :], axis=-1)  # [B, K, K]
    counts = jnp.sum(same, axis=-1)  # [B, K], copies of each slot's action (itself included)
    earlier = jnp.tril(jnp.ones((num_samples, num_samples), bool), k=-1)  # [K, K]: j < k
    impossible = log_probs <= 0.5 * jnp.finfo(log_probs.dtype).min  # -inf or a masked logit's
    repeat = jnp.any(same & earlier, axis=-1) | impossible  # [B, K]
    only_first = jnp.all(repeat, axis=-1, keepdims=True) & (jnp.arange(num_samples) == 0)
    repeat = repeat & ~only_first
    log_beta_hat = jnp.log(counts.astype(log_probs.dtype) / num_samples)
    logits = log_beta_hat + log_probs - proposal_log_probs  # [B, K]
    logits = jnp.where(only_first, 0.0, jnp.where(repeat, -jnp.inf, logits))
    logits = jax.nn.log_softmax(logits, axis=-1)
    return jnp.where(repeat, jnp.finfo(logits.dtype).min, logits), repeat


def take_slot(actions: chex.Array, slot: chex.Array) -> chex.Array:
    """actions [B, K, ...] at slot [B] -> [B, ...]."""
    return jax.vmap(lambda row, k: row[k])(actions, slot)


def check_samples(
    caller: str,
    actions: chex.Array,
    log_probs: chex.Array,
    proposal_log_probs: chex.Array,
    shape: tuple[int, int],
    bounds: tuple[Any, Any] | None,
) -> None:
    """What a `sample_fn` returned, checked: shapes and dtypes always (one error naming it);
    NaN actions or log-probabilities and actions outside `bounds` [low, high] (broadcast against
    one action) where the values are known (not traced), naming the rows."""
    batch_size, num_samples = shape
    if actions.ndim < 2 or actions.shape[:2] != (batch_size, num_samples):
        raise ValueError(
            f"{caller}: sample_fn returned actions of shape {actions.shape}; expected "
            f"[B={batch_size}, K={num_samples}, ...]"
        )
    for name, x in (("log_probs", log_probs), ("proposal_log_probs", proposal_log_probs)):
        if x.shape != (batch_size, num_samples) or not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(
                f"{caller}: sample_fn returned {name} of shape {x.shape} and dtype {x.dtype}; "
                f"expected floats of shape [B={batch_size}, K={num_samples}]"
            )
    integer = jnp.issubdtype(actions.dtype, jnp.integer)
    if not integer and not jnp.issubdtype(actions.dtype, jnp.floating):
        raise ValueError(
            f"{caller}: sample_fn returned actions of dtype {actions.dtype}; expected integer "
            "indices (a discrete space) or floats (a box)"
        )
    if any(isinstance(x, jax.core.Tracer) for x in (actions, log_probs, proposal_log_probs)):
        return
    values = np.asarray(actions).reshape(batch_size, -1)  # [B, K * D]
    bad = ~np.isfinite(values).all(axis=-1) if not integer else np.zeros(batch_size, bool)
    for x in (log_probs, proposal_log_probs):
        bad |= np.isnan(np.asarray(x)).any(axis=-1)
    rows = np.flatnonzero(bad)
    if rows.size:
        raise ValueError(
            f"{caller}: sample_fn returned NaN or infinite actions or log-probabilities in rows "
            f"{rows[:8].tolist()}"
        )
    if bounds is not None:
        low, high = (np.asarray(b) for b in bounds)
        values = np.asarray(actions)
        outside = (values < low) | (values > high)
        rows = np.flatnonzero(outside.reshape(batch_size, -1).any(axis=-1))
        if rows.size:
            raise ValueError(
                f"{caller}: sample_fn returned actions outside the bounds [{low.tolist()}, "
                f"{high.tolist()}] in rows {rows[:8].tolist()}"
            )
