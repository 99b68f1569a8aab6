"""The policies Sampled MuZero samples and learns: over a box, a squashed Gaussian or a
categorical per dimension; over a discrete space, a categorical.

`BoxPolicy`: a policy over a box of continuous actions, a tanh-squashed diagonal Gaussian (the
default, `NetworkConfig.box_policy="gaussian"`); `FactorisedBoxPolicy`: one categorical over
`box_bins` evenly spaced values per dimension ("categorical"). BENCHMARKS.md compares the two.

A network's policy head gives `2 * D` outputs per state: the Gaussian's mean and log standard
deviation of each of the D dimensions (`u ~ N(mean, std)`), and the action is `tanh(u)` mapped
onto the box's bounds. Why this head (and not a categorical per dimension): its samples are the
box's real values, so Sampled MuZero's K draws cover the box without a grid, the dynamics take
the action vector itself, and its log-probability is exact (the change of variables of tanh),
which the corrected prior and the policy loss need; SAC and Sampled EfficientZero (LightZero)
use it. The log standard deviation is squashed into [`MIN_LOG_STD`, `MAX_LOG_STD`] (SAC's
range), so that the policy loss cannot collapse the Gaussian onto one sample.

Everything here is a pure function of arrays, usable inside `jit`.
"""

from __future__ import annotations

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp

import search

__all__ = [
    "MAX_LOG_STD",
    "MIN_LOG_STD",
    "BoxPolicy",
    "CategoricalPolicy",
    "FactorisedBoxPolicy",
    "make_box_policy",
]

MIN_LOG_STD, MAX_LOG_STD = -5.0, 2.0
# Squashed actions are kept this far inside (-1, 1) so that atanh stays finite.
_EDGE = 1e-6
# sigmoid(_LOG_STD_SHIFT) = -MIN_LOG_STD / (MAX_LOG_STD - MIN_LOG_STD): log_std 0 at output 0
_LOG_STD_SHIFT = math.log(-MIN_LOG_STD / MAX_LOG_STD)


def _to_unit(actions: chex.Array, low: tuple[float, ...], high: tuple[float, ...]) -> chex.Array:
    """Actions of the box [low, high] [..., D] -> [-1, 1] (what the dynamics take)."""
    low_, high_ = jnp.asarray(low), jnp.asarray(high)
    return 2.0 * (actions.astype(jnp.float32) - low_) / (high_ - low_) - 1.0


@dataclasses.dataclass(frozen=True)
class BoxPolicy:
    """The squashed Gaussian over the box [low, high] (one bound per dimension)."""

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self):
        if len(self.low) != len(self.high) or not self.low:
            raise ValueError(f"BoxPolicy: bounds {self.low} and {self.high} must match, D >= 1")
        if not all(
            math.isfinite(lo) and math.isfinite(hi) and lo < hi
            for lo, hi in zip(self.low, self.high, strict=True)
        ):
            raise ValueError(
                f"BoxPolicy: every dimension needs finite bounds low < high, got {self.low}, "
                f"{self.high}"
            )

    @property
    def num_dims(self) -> int:
        """D, the dimensions of an action."""
        return len(self.low)

    @property
    def num_outputs(self) -> int:
        """The policy head's outputs: a mean and a log standard deviation per dimension."""
        return 2 * self.num_dims

    def _split(self, outputs: chex.Array) -> tuple[chex.Array, chex.Array]:
        """outputs [..., 2D] -> mean [..., D], log_std [..., D] in [MIN_LOG_STD, MAX_LOG_STD]."""
        chex.assert_axis_dimension(outputs, -1, self.num_outputs)
        outputs = outputs.astype(jnp.float32)
        mean, raw = outputs[..., : self.num_dims], outputs[..., self.num_dims :]
        # a zero output (a zero-initialised head) is a standard deviation of 1: K draws then
        # spread over the box from the first search on
        log_std = MIN_LOG_STD + (MAX_LOG_STD - MIN_LOG_STD) * jax.nn.sigmoid(raw + _LOG_STD_SHIFT)
        return mean, log_std

    def dynamics_input(self, actions: chex.Array) -> chex.Array:
        """What the dynamics take of actions [..., D]: the vector scaled to [-1, 1]."""
        return _to_unit(actions, self.low, self.high)

    def from_unit(self, unit: chex.Array) -> chex.Array:
        """[-1, 1] [..., D] -> actions of the box."""
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        return low + 0.5 * (unit + 1.0) * (high - low)

    def sample(
        self, rng_key: chex.PRNGKey, outputs: chex.Array, num_samples: int
    ) -> tuple[chex.Array, chex.Array]:
        """K actions per row and their log-probabilities.

        Args:
          outputs: [B, 2D] the policy head's.
        Returns:
          actions [B, K, D] in the box, log_probs [B, K].
        """
        chex.assert_rank(outputs, 2)
        mean, log_std = self._split(outputs)  # [B, D]
        noise = jax.random.normal(rng_key, (outputs.shape[0], num_samples, self.num_dims))
        u = mean[:, None] + jnp.exp(log_std)[:, None] * noise  # [B, K, D]
        actions = self.from_unit(jnp.clip(jnp.tanh(u), -1.0 + _EDGE, 1.0 - _EDGE))
        return actions, self.log_prob(outputs, actions)

    def log_prob(self, outputs: chex.Array, actions: chex.Array) -> chex.Array:
        """log pi(actions) [..., K] of actions [..., K, D] under outputs [..., 2D]; the density
        over the box (the tanh's and the bounds' Jacobians included, so that it integrates to 1
        over the box)."""
        chex.assert_rank(actions, outputs.ndim + 1)
        mean, log_std = self._split(outputs)
        unit = jnp.clip(_to_unit(actions, self.low, self.high), -1.0 + _EDGE, 1.0 - _EDGE)
        u = jnp.arctanh(unit)  # [..., K, D]
        z = (u - mean[..., None, :]) * jnp.exp(-log_std[..., None, :])
        gaussian = -0.5 * z**2 - log_std[..., None, :] - 0.5 * math.log(2 * math.pi)
        half_width = 0.5 * (jnp.asarray(self.high) - jnp.asarray(self.low))
        jacobian = jnp.log(1.0 - unit**2) + jnp.log(half_width)
        return jnp.sum(gaussian - jacobian, axis=-1)

    def entropy(self, outputs: chex.Array) -> chex.Array:
        """[...] the entropy of the Gaussian before the squash (what the regulariser raises:
        the squashed one has no closed form)."""
        _, log_std = self._split(outputs)
        return jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e), axis=-1)

    def mode(self, outputs: chex.Array) -> chex.Array:
        """[..., D] the squashed mean: the greedy action."""
        mean, _ = self._split(outputs)
        return self.from_unit(jnp.tanh(mean))


@dataclasses.dataclass(frozen=True)
class CategoricalPolicy:
    """Softmax over A actions, sampled without replacement (a discrete space too large to
    enumerate, searched by Sampled MuZero): the same methods as `BoxPolicy`'s."""

    num_actions: int

    @property
    def num_outputs(self) -> int:
        """The policy head's outputs: one logit per action."""
        return self.num_actions

    def sample(
        self, rng_key: chex.PRNGKey, outputs: chex.Array, num_samples: int
    ) -> tuple[chex.Array, chex.Array, chex.Array]:
        """K distinct actions [B, K] with their log-probabilities [B, K] and a constant proposal
        (`search.sample_categorical`: the search's prior is pi over the set)."""
        return search.sample_categorical(rng_key, outputs, num_samples, replace=False)

    def dynamics_input(self, actions: chex.Array) -> chex.Array:
        """What the dynamics take of actions [...]: the indices as they are."""
        return actions

    def log_prob(self, outputs: chex.Array, actions: chex.Array) -> chex.Array:
        """log pi(actions) [..., K] of indices [..., K] under logits [..., A]."""
        chex.assert_rank(actions, outputs.ndim)
        log_policy = jax.nn.log_softmax(outputs.astype(jnp.float32), axis=-1)
        return jnp.take_along_axis(log_policy, actions.astype(jnp.int32), axis=-1)

    def entropy(self, outputs: chex.Array) -> chex.Array:
        """[...] the softmax's entropy."""
        log_policy = jax.nn.log_softmax(outputs.astype(jnp.float32), axis=-1)
        return -jnp.sum(jnp.exp(log_policy) * log_policy, axis=-1)


@dataclasses.dataclass(frozen=True)
class FactorisedBoxPolicy:
    """A categorical per dimension over `bins` evenly spaced values from low to high (both
    included), the dimensions independent: the same methods as `BoxPolicy`'s. Its actions are
    the grid's values; an action off the grid counts as its nearest value."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    bins: int

    def __post_init__(self):
        BoxPolicy(self.low, self.high)  # the same checks of the bounds
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 2:
            raise ValueError(f"FactorisedBoxPolicy: bins must be an integer >= 2, got {self.bins}")

    @property
    def num_dims(self) -> int:
        """D, the dimensions of an action."""
        return len(self.low)

    @property
    def num_outputs(self) -> int:
        """The policy head's outputs: `bins` logits per dimension."""
        return self.num_dims * self.bins

    def _log_policy(self, outputs: chex.Array) -> chex.Array:
        """outputs [..., D * bins] -> log-probabilities [..., D, bins]."""
        chex.assert_axis_dimension(outputs, -1, self.num_outputs)
        logits = outputs.astype(jnp.float32).reshape(
            outputs.shape[:-1] + (self.num_dims, self.bins)
        )
        return jax.nn.log_softmax(logits, axis=-1)

    def _values(self) -> chex.Array:
        """[D, bins] the grid of each dimension."""
        steps = jnp.linspace(0.0, 1.0, self.bins)  # [bins]
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        return low[:, None] + (high - low)[:, None] * steps[None, :]

    def _indices(self, actions: chex.Array) -> chex.Array:
        """actions [..., D] -> the nearest grid index of each dimension [..., D] int32."""
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        position = (actions.astype(jnp.float32) - low) / (high - low) * (self.bins - 1)
        return jnp.clip(jnp.round(position), 0, self.bins - 1).astype(jnp.int32)

    def dynamics_input(self, actions: chex.Array) -> chex.Array:
        """What the dynamics take of actions [..., D]: the vector scaled to [-1, 1]."""
        return _to_unit(actions, self.low, self.high)

    def sample(
        self, rng_key: chex.PRNGKey, outputs: chex.Array, num_samples: int
    ) -> tuple[chex.Array, chex.Array]:
        """K actions per row (each dimension drawn on its own) and their log-probabilities:
        actions [B, K, D] on the grid, log_probs [B, K]."""
        chex.assert_rank(outputs, 2)
        log_policy = self._log_policy(outputs)  # [B, D, bins]
        batch = outputs.shape[0]
        index = jax.random.categorical(
            rng_key, log_policy[:, None], axis=-1, shape=(batch, num_samples, self.num_dims)
        )  # [B, K, D]
        actions = self._values()[jnp.arange(self.num_dims), index]  # [B, K, D]
        return actions, self.log_prob(outputs, actions)

    def log_prob(self, outputs: chex.Array, actions: chex.Array) -> chex.Array:
        """log pi(actions) [..., K] of actions [..., K, D] under outputs [..., D * bins]."""
        chex.assert_rank(actions, outputs.ndim + 1)
        log_policy = self._log_policy(outputs)[..., None, :, :]  # [..., 1, D, bins]
        index = self._indices(actions)[..., None]  # [..., K, D, 1]
        log_policy = jnp.broadcast_to(log_policy, index.shape[:-1] + (self.bins,))
        return jnp.sum(jnp.take_along_axis(log_policy, index, axis=-1)[..., 0], axis=-1)

    def entropy(self, outputs: chex.Array) -> chex.Array:
        """[...] the sum of the dimensions' entropies."""
        log_policy = self._log_policy(outputs)
        return -jnp.sum(jnp.exp(log_policy) * log_policy, axis=(-2, -1))

    def mode(self, outputs: chex.Array) -> chex.Array:
        """[..., D] each dimension's most probable value: the greedy action."""
        index = jnp.argmax(self._log_policy(outputs), axis=-1)  # [..., D]
        return self._values()[jnp.arange(self.num_dims), index]


def make_box_policy(
    kind: str, bounds: tuple[tuple[float, ...], tuple[float, ...]], bins: int
) -> BoxPolicy | FactorisedBoxPolicy:
    """The policy over a box of `bounds` that `NetworkConfig.box_policy` names ("gaussian" or
    "categorical", the latter with `bins` values per dimension)."""
    if kind == "categorical":
        return FactorisedBoxPolicy(*bounds, bins=bins)
    return BoxPolicy(*bounds)
