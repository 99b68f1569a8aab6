"""MuZero and AlphaZero losses, each built as `loss_fn(params, batch, key) -> (loss, metrics)`.

The loss functions are pure and jittable; `metrics` maps names to scalars. Examples are weighted
by the batch's importance weights (prioritized replay) and averaged over the batch. Typical use:

    nets = make_muzero_networks(NetworkConfig(), observation_shape, num_actions)
    config = LossConfig(unroll_steps=5, td_steps=10)
    loss_fn = make_muzero_loss(nets, config)
    window, indices, weights = replay.sample(...)  # leaves [config.window_length, N, ...]
    batch = muzero_batch(window, weights, unroll_steps=5, td_steps=10, discount=0.997,
                         two_player=False)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, key)
    replay.update_priorities(indices, make_muzero_priority_fn(nets)(params, batch))
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from muzero.networks import AlphaZeroNetworks, MuZeroNetworks
from muzero.types import AlphaZeroBatch, MuZeroBatch

__all__ = [
    "LossConfig",
    "LossFn",
    "make_muzero_loss",
    "make_alphazero_loss",
    "make_muzero_priority_fn",
    "policy_cross_entropy",
    "scale_gradient",
]

LossFn = Callable[[Any, Any, chex.PRNGKey], tuple[chex.Array, dict[str, chex.Array]]]


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Targets and weights of the MuZero, AlphaZero and V-trace losses."""

    unroll_steps: int = 5  # K: dynamics steps unrolled from each sampled state (MuZero).
    td_steps: int = 10  # n: rewards summed before bootstrapping from a stored search value.
    discount: float = 0.997  # Learning discount per step (1.0 for board games).
    two_player: bool = False  # Alternating two-player zero-sum game: discount between plies < 0.
    value_loss_weight: float = 0.25  # Weight of the value loss (MuZero Reanalyze uses 0.25).
    reward_loss_weight: float = 1.0  # Weight of the reward loss (MuZero).
    policy_loss_weight: float = 1.0  # Weight of the policy cross-entropy.
    dynamics_gradient_scale: float = 0.5  # Gradient into the latent kept at each unroll step.
    baseline_cost: float = 0.5  # V-trace: weight of the value loss 0.5 * (v_s - V(x))^2.
    entropy_cost: float = 0.01  # V-trace: weight of the policy-entropy bonus.
    clip_rho_threshold: float = 1.0  # V-trace: clip of the importance ratio in the value target.
    clip_pg_rho_threshold: float = 1.0  # V-trace: clip of the importance ratio in the gradient.
    vtrace_lambda: float = 1.0  # V-trace: lambda mixing n-step and 1-step targets.

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(
                    f"LossConfig.{field} must be {expected}, got {getattr(self, field)!r}")

        check(_is_int(self.unroll_steps) and self.unroll_steps >= 1, "unroll_steps",
              "an integer >= 1")
        check(_is_int(self.td_steps) and self.td_steps >= 1, "td_steps", "an integer >= 1")
        check(_is_real(self.discount) and 0 <= self.discount <= 1, "discount", "in [0, 1]")
        check(isinstance(self.two_player, bool), "two_player", "a bool")
        for name in ("value_loss_weight", "reward_loss_weight", "policy_loss_weight",
                     "baseline_cost", "entropy_cost"):
            check(_is_real(getattr(self, name)) and getattr(self, name) >= 0, name, ">= 0")
        check(_is_real(self.dynamics_gradient_scale) and 0 <= self.dynamics_gradient_scale <= 1,
              "dynamics_gradient_scale", "in [0, 1]")
        for name in ("clip_rho_threshold", "clip_pg_rho_threshold"):
            check(_is_real(getattr(self, name)) and getattr(self, name) > 0, name, "> 0")
        check(_is_real(self.vtrace_lambda) and 0 <= self.vtrace_lambda <= 1, "vtrace_lambda",
              "in [0, 1]")

    @property
    def window_length(self) -> int:
        """L = K + n + 1: the length of the replay windows `muzero.targets.muzero_batch` takes."""
        return self.unroll_steps + self.td_steps + 1


def scale_gradient(x: chex.Array, scale: float) -> chex.Array:
    """Identity forward; multiplies the gradient flowing back through `x` by `scale`."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def policy_cross_entropy(logits: chex.Array, target: chex.Array) -> chex.Array:
    """`-sum_a target_a log softmax(logits)_a` over the last axis: `[..., A] -> [...]`."""
    chex.assert_equal_shape([logits, target])
    return -jnp.sum(jax.lax.stop_gradient(target) * jax.nn.log_softmax(logits), axis=-1)


def make_muzero_loss(networks: MuZeroNetworks, config: LossConfig) -> LossFn:
    """MuZero's loss on a `MuZeroBatch`: policy, value and reward at K + 1 unroll steps.

    The K dynamics steps are a Python loop (K is static): on XLA's CPU backend the gradient
    through convolutions inside `lax.scan` was measured 16x slower than the unrolled steps.
    Step 0 has weight 1 and each later step 1/K; the gradient into the latent is scaled by
    `dynamics_gradient_scale` at each step (MuZero appendix). Absorbing steps past an episode's
    end train value and reward to 0 and are masked out of the policy loss.
    """
    k_steps = config.unroll_steps
    value_tf, reward_tf = networks.value_transform, networks.reward_transform

    def loss_fn(params, batch: MuZeroBatch, key):
        del key
        n = batch.action.shape[0]
        chex.assert_shape(batch.action, (n, k_steps))
        chex.assert_shape([batch.value_target, batch.reward_target, batch.policy_mask],
                          (n, k_steps + 1))
        chex.assert_rank(batch.policy_target, 3)
        chex.assert_shape(batch.importance_weight, (n,))

        latent = networks.represent(params, batch.observation)
        value_loss = reward_loss = policy_loss = jnp.zeros((n,))
        reward_logits = None
        for k in range(k_steps + 1):
            policy_logits, value_logits = networks.predict(params, latent)  # [N, A], [N, V]
            step_scale = 1.0 if k == 0 else 1.0 / k_steps
            value_loss += step_scale * value_tf.loss(value_logits, batch.value_target[:, k])
            policy_loss += step_scale * batch.policy_mask[:, k] * policy_cross_entropy(
                policy_logits, batch.policy_target[:, k])
            if k > 0:
                reward_loss += step_scale * reward_tf.loss(reward_logits,
                                                           batch.reward_target[:, k])
            if k == 0:
                root_policy_logits, root_value_logits = policy_logits, value_logits
            if k < k_steps:
                reward_logits, latent = networks.dynamics(params, latent, batch.action[:, k])
                latent = scale_gradient(latent, config.dynamics_gradient_scale)

        per_example = (config.value_loss_weight * value_loss
                       + config.reward_loss_weight * reward_loss
                       + config.policy_loss_weight * policy_loss)  # [N]
        weight = batch.importance_weight
        loss = jnp.mean(weight * per_example)
        root_value = value_tf.decode_logits(root_value_logits)
        metrics = {
            "loss": loss,
            "value_loss": jnp.mean(weight * value_loss),
            "reward_loss": jnp.mean(weight * reward_loss),
            "policy_loss": jnp.mean(weight * policy_loss),
            "policy_entropy": jnp.mean(_entropy(root_policy_logits)),
            "value_prediction": jnp.mean(root_value),
            "value_target": jnp.mean(batch.value_target[:, 0]),
            "value_abs_error": jnp.mean(jnp.abs(root_value - batch.value_target[:, 0])),
            "importance_weight": jnp.mean(weight),
        }
        return loss, metrics

    return loss_fn


def make_muzero_priority_fn(
        networks: MuZeroNetworks) -> Callable[[Any, MuZeroBatch], chex.Array]:
    """`priority_fn(params, batch) -> [N]`: new replay priorities `|v(s_0) - z_0|` of the
    sampled windows' start states, with `v` the current network's value (not the stale search
    value stored with the trajectory)."""

    def priority_fn(params, batch: MuZeroBatch):
        _, value_logits = networks.predict(params, networks.represent(params, batch.observation))
        value = networks.value_transform.decode_logits(value_logits)
        return jnp.abs(value - batch.value_target[:, 0])

    return priority_fn


def make_alphazero_loss(networks: AlphaZeroNetworks, config: LossConfig) -> LossFn:
    """AlphaZero's loss on an `AlphaZeroBatch`: policy cross-entropy to the search policy plus
    the value loss to the outcome / n-step target; states with mask 0 contribute nothing."""
    value_tf = networks.value_transform

    def loss_fn(params, batch: AlphaZeroBatch, key):
        del key
        n = batch.value_target.shape[0]
        chex.assert_shape([batch.value_target, batch.mask, batch.importance_weight], (n,))
        chex.assert_rank(batch.policy_target, 2)

        policy_logits, value_logits = networks.predict(params, batch.observation)
        value_loss = value_tf.loss(value_logits, batch.value_target)  # [N]
        policy_loss = policy_cross_entropy(policy_logits, batch.policy_target)  # [N]
        weight = batch.importance_weight * batch.mask
        # A plain mean over N (padding counts as 0) keeps the loss linear in the batch, so the
        # mean of per-device losses is the loss of the whole batch.
        loss = jnp.mean(weight * (config.value_loss_weight * value_loss
                                  + config.policy_loss_weight * policy_loss))
        value = value_tf.decode_logits(value_logits)
        count = jnp.maximum(jnp.sum(batch.mask), 1.0)
        metrics = {
            "loss": loss,
            "value_loss": jnp.mean(weight * value_loss),
            "policy_loss": jnp.mean(weight * policy_loss),
            "policy_entropy": jnp.sum(batch.mask * _entropy(policy_logits)) / count,
            "value_abs_error": jnp.sum(batch.mask * jnp.abs(value - batch.value_target)) / count,
        }
        return loss, metrics

    return loss_fn


def _entropy(logits: chex.Array) -> chex.Array:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
