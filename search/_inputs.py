"""The checks `search`'s public functions make of what they are given: one error naming the
function and the input, before anything is traced. Arrays may be NumPy or JAX arrays, or tracers
under `jit` (where only shapes and dtypes are known); nested lists are read as the array they
spell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["as_actions", "as_array", "as_mask", "check_floating", "checked_step"]


def as_array(x: Any) -> Any:
    """`x`, with nested lists and tuples made an array (`jnp`: under `jit` they may hold
    tracers)."""
    return jnp.asarray(x) if isinstance(x, (list, tuple)) else x


def check_floating(caller: str, name: str, x: chex.Array) -> None:
    """TypeError, one line, unless `x` is a floating-point array."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"{caller}: {name} must be a floating-point array, got {x.dtype} "
            "(cast it, e.g. .astype(jnp.float32))"
        )


def as_mask(caller: str, mask: Any, shape: tuple[int, ...]) -> chex.Array:
    """`mask` as an array of `shape`, True or nonzero where an action is illegal; TypeError, one
    line, for a dtype that is not boolean, integer or real."""
    mask = as_array(mask)
    if not any(jnp.issubdtype(mask.dtype, kind) for kind in (jnp.bool_, jnp.integer, jnp.floating)):
        raise TypeError(
            f"{caller}: invalid_actions must be boolean (True where illegal) or 0/1, "
            f"got {mask.dtype}"
        )
    chex.assert_shape(mask, shape)
    return mask


def as_actions(caller: str, action: Any, batch_size: int, num_actions: int) -> chex.Array:
    """`action` as [B] integers; given concrete values, ValueError, one line, for one outside
    [0, num_actions) (under `jit`, where they are unknown, JAX's indexing clamps them)."""
    action = as_array(action)
    if not jnp.issubdtype(action.dtype, jnp.integer):
        raise TypeError(f"{caller}: action must be an integer array, got {action.dtype}")
    chex.assert_shape(action, (batch_size,))
    if not isinstance(action, jax.core.Tracer):
        values = np.asarray(action)  # [B], on the host once
        outside = np.flatnonzero((values < 0) | (values >= num_actions))
        if outside.size:
            raise ValueError(
                f"{caller}: action of rows {outside[:8].tolist()} outside [0, {num_actions}): "
                f"{values[outside[:8]].tolist()}"
            )
    return action


def _shapes(tree: Any) -> Any:
    return jax.tree.map(jnp.shape, tree)


def checked_step(
    caller: str, name: str, step_fn: Callable, root_value: chex.Array, root_embedding: Any = None
) -> Callable:
    """`step_fn`, a model's step `(params, rng_key, action, embedding) -> (output, embedding)`,
    checked as it is traced (nothing is added to the program where the model is right): the
    output's integer or boolean fields become the root value's float dtype (the tree's, which
    would otherwise take them in a loop carry of another dtype), and with `root_embedding` the
    next embedding must have its structure and shapes (the tree keeps one such per node):
    ValueError, one line, naming `name`."""
    floating = root_value.dtype
    wanted = None if root_embedding is None else _shapes(root_embedding)

    def as_float(x):
        dtype = jnp.result_type(x)
        return x if jnp.issubdtype(dtype, jnp.floating) else jnp.asarray(x, floating)

    def step(params, rng_key, action, embedding):
        output, next_embedding = step_fn(params, rng_key, action, embedding)
        if wanted is not None and _shapes(next_embedding) != wanted:
            got = str(_shapes(next_embedding))[:200]
            raise ValueError(
                f"{caller}: {name} returned a next embedding of shapes {got}; the root's embedding "
                f"has {str(wanted)[:200]}, and the tree keeps one of those per node"
            )
        return jax.tree.map(as_float, output), next_embedding

    return step
