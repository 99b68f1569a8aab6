"""A tiny regression problem in the learner's `loss_fn(params, batch, key)` contract.

Shared by the learner tests and the worker scripts they launch in subprocesses.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RegressionBatch(NamedTuple):
    """Inputs and targets of `regression_loss`, the batch on axis 0 ([B]) or 1 ([T, B])."""

    x: jax.Array  # [B, 4] or [T, B, 4]
    y: jax.Array  # [B] or [T, B]


def init_params(key: jax.Array, width: int = 16) -> dict[str, jax.Array]:
    """A one-hidden-layer MLP from 4 inputs to 1 output."""
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (4, width)) / 2.0,
        "b1": jnp.zeros((width,)),
        "w2": jax.random.normal(k2, (width, 1)) / jnp.sqrt(width),
        "b2": jnp.zeros((1,)),
    }


def make_batch(key: jax.Array, batch_size: int, time: int | None = None) -> RegressionBatch:
    """Random inputs and a fixed nonlinear target; `time` makes it time-major [T, B]."""
    lead = (batch_size,) if time is None else (time, batch_size)
    x = jax.random.normal(key, (*lead, 4))
    y = jnp.sin(x[..., 0]) + x[..., 1] * x[..., 2] - 0.5 * x[..., 3]
    return RegressionBatch(x=x, y=y)


def loss_fn(params, batch: RegressionBatch, key: jax.Array):
    """Mean squared error of the MLP, with its parts as metrics (the key is unused)."""
    del key
    hidden = jnp.tanh(batch.x @ params["w1"] + params["b1"])
    pred = (hidden @ params["w2"] + params["b2"])[..., 0]
    err = (pred - batch.y) ** 2
    return jnp.mean(err), {"mse": jnp.mean(err), "rmse": jnp.sqrt(jnp.mean(err))}
