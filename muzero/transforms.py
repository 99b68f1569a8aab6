"""Value and reward transforms: scalars to network outputs and back, and the loss between them.

MuZero predicts values and rewards as a categorical distribution over an integer support [-S, S]
of h-transformed scalars (h compresses large returns so one support covers every Atari game); a
scalar target becomes a "two-hot" distribution on the two bins around h(x). A scalar transform
(one output, squared error) is the option for games whose values already lie in [-1, 1].
"""

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

__all__ = [
    "ValueTransform",
    "make_transform",
    "h_transform",
    "h_inverse",
    "scalar_to_two_hot",
    "two_hot_to_scalar",
    "logits_to_scalar",
    "categorical_transform",
    "scalar_transform",
]

DEFAULT_EPS = 1e-3


class ValueTransform(NamedTuple):
    """How a scalar value or reward is predicted by a network head, decoded and trained.

    Attributes:
      num_bins: width of the network head's output: 2 * support_size + 1, or 1 for a scalar.
      encode: `encode(x [...]) -> target [..., num_bins]`: the target the head is fit to.
      decode_logits: `decode_logits(logits [..., num_bins]) -> x [...]`: the predicted scalar.
      loss: `loss(logits [..., num_bins], target_scalar [...]) -> [...]`: cross-entropy to the
        two-hot target (categorical) or squared error (scalar), per element.
    """

    num_bins: int
    encode: Callable[[chex.Array], chex.Array]
    decode_logits: Callable[[chex.Array], chex.Array]
    loss: Callable[[chex.Array, chex.Array], chex.Array]


def h_transform(x: chex.Array, eps: float = DEFAULT_EPS) -> chex.Array:
    """`h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` (Pohlen et al. 2018), elementwise."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def h_inverse(y: chex.Array, eps: float = DEFAULT_EPS) -> chex.Array:
    """The exact inverse of `h_transform`, elementwise."""
    # With s = sqrt(|x| + 1): eps s^2 + s - (1 + eps + |y|) = 0, and |x| = (s - 1)(s + 1).
    # s - 1 is written without cancellation, so small |y| keep their precision.
    a = 4.0 * eps * (jnp.abs(y) + 1.0 + eps)
    s_minus_1 = 2.0 * jnp.abs(y) / (jnp.sqrt(1.0 + a) + 1.0 + 2.0 * eps)
    return jnp.sign(y) * s_minus_1 * (s_minus_1 + 2.0)


def scalar_to_two_hot(x: chex.Array, support_size: int) -> chex.Array:
    """Project `x [...]` onto the integer support [-S, S]: `[..., 2S + 1]` probabilities.

    Values outside the support are clipped to its ends. The expectation of the result is `x`.
    """
    x = jnp.clip(x, -support_size, support_size)
    low = jnp.floor(x)
    frac = x - low  # weight of the upper bin
    low_index = (low + support_size).astype(jnp.int32)
    high_index = jnp.minimum(low_index + 1, 2 * support_size)
    num_bins = 2 * support_size + 1
    # At x = S the upper index clips onto the lower one; its weight frac is then 0.
    return (
        jax.nn.one_hot(low_index, num_bins) * (1.0 - frac)[..., None]
        + jax.nn.one_hot(high_index, num_bins) * frac[..., None]
    )


def two_hot_to_scalar(probs: chex.Array, support_size: int) -> chex.Array:
    """The expectation of `probs [..., 2S + 1]` over the support [-S, S]: `[...]`."""
    chex.assert_axis_dimension(probs, -1, 2 * support_size + 1)
    support = jnp.arange(-support_size, support_size + 1, dtype=probs.dtype)
    return jnp.sum(probs * support, axis=-1)


def logits_to_scalar(
    logits: chex.Array, support_size: int, eps: float = DEFAULT_EPS, use_h: bool = True
) -> chex.Array:
    """Decode categorical `logits [..., 2S + 1]` to scalars `[...]` (expectation, then h^-1)."""
    y = two_hot_to_scalar(jax.nn.softmax(logits, axis=-1), support_size)
    return h_inverse(y, eps) if use_h else y


def categorical_transform(
    support_size: int, eps: float = DEFAULT_EPS, use_h: bool = True
) -> ValueTransform:
    """Categorical outputs over [-S, S] of (by default) h-transformed scalars: MuZero's choice."""
    if not isinstance(support_size, int) or support_size < 1:
        raise ValueError(f"support_size must be an integer >= 1, got {support_size!r}")
    if use_h and not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")

    def encode(x):
        return scalar_to_two_hot(h_transform(x, eps) if use_h else x, support_size)

    def decode_logits(logits):
        return logits_to_scalar(logits, support_size, eps, use_h)

    def loss(logits, target_scalar):
        chex.assert_equal_shape_prefix([logits, target_scalar], target_scalar.ndim)
        target = jax.lax.stop_gradient(encode(target_scalar))
        return -jnp.sum(target * jax.nn.log_softmax(logits, axis=-1), axis=-1)

    return ValueTransform(2 * support_size + 1, encode, decode_logits, loss)


def scalar_transform() -> ValueTransform:
    """One output read as the scalar itself, trained with squared error."""

    def encode(x):
        return x[..., None]

    def decode_logits(logits):
        chex.assert_axis_dimension(logits, -1, 1)
        return logits[..., 0]

    def loss(logits, target_scalar):
        chex.assert_equal_shape_prefix([logits, target_scalar], target_scalar.ndim)
        return jnp.square(decode_logits(logits) - jax.lax.stop_gradient(target_scalar))

    return ValueTransform(1, encode, decode_logits, loss)


def make_transform(support: int, eps: float = DEFAULT_EPS) -> ValueTransform:
    """Categorical over [-support, support] of h-transformed scalars, or a scalar output at 0."""
    return categorical_transform(support, eps) if support > 0 else scalar_transform()
