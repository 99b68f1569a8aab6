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

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from muzero.config import LossConfig, switched_on
from muzero.networks import AlphaZeroNetworks, MuZeroNetworks
from muzero.types import AlphaZeroBatch, MuZeroBatch

__all__ = [
    "LossFn",
    "make_muzero_loss",
    "make_alphazero_loss",
    "make_muzero_priority_fn",
    "cosine_similarity",
    "logits_entropy",
    "policy_cross_entropy",
    "scale_gradient",
]

LossFn = Callable[[Any, Any, chex.PRNGKey], tuple[chex.Array, dict[str, chex.Array]]]


def scale_gradient(x: chex.Array, scale: float) -> chex.Array:
    """Identity forward; multiplies the gradient flowing back through `x` by `scale`."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def policy_cross_entropy(logits: chex.Array, target: chex.Array) -> chex.Array:
    """`-sum_a target_a log softmax(logits)_a` over the last axis: `[..., A] -> [...]`."""
    chex.assert_equal_shape([logits, target])
    return -jnp.sum(jax.lax.stop_gradient(target) * jax.nn.log_softmax(logits), axis=-1)


def make_muzero_loss(
    networks: MuZeroNetworks, config: LossConfig, sampled_policy: Any = None
) -> LossFn:
    """MuZero's loss on a `MuZeroBatch`: policy, value and reward at K + 1 unroll steps.

    The K dynamics steps are a Python loop (K is static): on XLA's CPU backend the gradient
    through convolutions inside `lax.scan` was measured 16x slower than the unrolled steps.
    Step 0 has weight 1 and each later step 1/K; the gradient into the latent is scaled by
    `dynamics_gradient_scale` at each step (MuZero appendix). Absorbing steps past an episode's
    end train value and reward to 0 and are masked out of the policy loss.

    EfficientZero's additions, each where the config turns it on:
    - `value_prefix_horizon` H: the reward head is an LSTM over the unrolled latents whose
      output at step k is trained to `reward_target[:, k]`, the rewards summed since its reset
      (before steps 1, H + 1, ...); the networks need `value_prefix`.
    - `consistency_weight`: at each step k >= 1 inside the episode, the negative cosine
      similarity between the predicted projection of the dynamics' latent and the projection of
      the real observation's latent (`batch.unroll_observation[:, k - 1]`, stop-gradient, the
      same parameters: SimSiam), weighted 1/K like the other later steps; the networks need
      `project` and `predict_projection`.

    Sampled MuZero (`sampled_policy`: a box's `muzero.BoxPolicy` or `FactorisedBoxPolicy`, or a
    `CategoricalPolicy`; and the batch's `policy_actions`): the policy loss at step k is the
    paper's, `-sum_s target_s log pi(a_s)` over the S actions the search drew there, and
    `config.entropy_cost` weighs a bonus of the policy's entropy at the steps inside the episode
    (a Gaussian's would otherwise shrink onto the searched samples).
    """
    k_steps = config.unroll_steps
    horizon = config.value_prefix_horizon
    consistency = switched_on(config.consistency_weight)
    value_tf, reward_tf = networks.value_transform, networks.reward_transform
    if bool(horizon) != (networks.value_prefix is not None):
        raise ValueError(
            f"LossConfig.value_prefix_horizon {horizon} does not fit networks "
            f"{'with' if networks.value_prefix is not None else 'without'} a value prefix"
        )
    if consistency and networks.project is None:
        raise ValueError(
            "LossConfig.consistency_weight > 0 needs networks built with projection=True"
        )

    def loss_fn(params, batch: MuZeroBatch, key):
        del key
        n = batch.action.shape[0]
        chex.assert_axis_dimension(batch.action, 1, k_steps)  # [N, K] (a box's: [N, K, D])
        chex.assert_shape(
            [batch.value_target, batch.reward_target, batch.policy_mask], (n, k_steps + 1)
        )
        chex.assert_rank(batch.policy_target, 3)
        chex.assert_shape(batch.importance_weight, (n,))
        if (sampled_policy is None) != (batch.policy_actions is None):
            raise ValueError(
                "a Sampled MuZero batch (policy_actions) needs the loss's sampled_policy, and "
                "only it does"
            )

        latent = networks.represent(params, batch.observation)
        if consistency:
            target_projection = _consistency_targets(params, batch, networks)  # [N, K, P]
        carry = networks.prefix_carry(n) if networks.prefix_carry is not None else None
        value_loss = reward_loss = policy_loss = consistency_loss = entropy = jnp.zeros((n,))
        reward_logits = None
        for k in range(k_steps + 1):
            policy_logits, value_logits = networks.predict(params, latent)  # [N, A], [N, V]
            step_scale = 1.0 if k == 0 else 1.0 / k_steps
            value_loss += step_scale * value_tf.loss(value_logits, batch.value_target[:, k])
            if sampled_policy is None:
                step_policy_loss = policy_cross_entropy(policy_logits, batch.policy_target[:, k])
            else:  # [N, S] log pi of the drawn actions, weighed by the search's policy over them
                assert batch.policy_actions is not None
                log_probs = sampled_policy.log_prob(policy_logits, batch.policy_actions[:, k])
                target = jax.lax.stop_gradient(batch.policy_target[:, k])
                step_policy_loss = -jnp.sum(target * log_probs, axis=-1)
                entropy += (
                    step_scale * batch.policy_mask[:, k] * sampled_policy.entropy(policy_logits)
                )
            policy_loss += step_scale * batch.policy_mask[:, k] * step_policy_loss
            if k > 0:
                reward_loss += step_scale * reward_tf.loss(reward_logits, batch.reward_target[:, k])
            if k > 0 and consistency:
                assert networks.project is not None and networks.predict_projection is not None
                predicted = networks.predict_projection(params, networks.project(params, latent))
                similarity = cosine_similarity(predicted, target_projection[:, k - 1])  # [N]
                consistency_loss += step_scale * batch.policy_mask[:, k] * -similarity
            if k == 0:
                root_policy_logits, root_value_logits = policy_logits, value_logits
            if k < k_steps:
                action = batch.action[:, k]
                if sampled_policy is not None:
                    action = sampled_policy.dynamics_input(action)
                if networks.value_prefix is not None:
                    assert networks.prefix_carry is not None
                    if k % horizon == 0:
                        carry = networks.prefix_carry(n)
                    latent = networks.transition(params, latent, action)
                    reward_logits, carry = networks.value_prefix(params, latent, carry)
                else:
                    reward_logits, latent = networks.dynamics(params, latent, action)
                latent = scale_gradient(latent, config.dynamics_gradient_scale)

        per_example = (
            config.value_loss_weight * value_loss
            + config.reward_loss_weight * reward_loss
            + config.policy_loss_weight * policy_loss
            + config.consistency_weight * consistency_loss
        )  # [N]
        if sampled_policy is not None:
            per_example = per_example - config.entropy_cost * entropy
        weight = batch.importance_weight
        loss = jnp.mean(weight * per_example)
        root_value = value_tf.decode_logits(root_value_logits)
        metrics = {
            "loss": loss,
            "value_loss": jnp.mean(weight * value_loss),
            "reward_loss": jnp.mean(weight * reward_loss),
            "policy_loss": jnp.mean(weight * policy_loss),
            "policy_entropy": jnp.mean(
                logits_entropy(root_policy_logits)
                if sampled_policy is None
                else sampled_policy.entropy(root_policy_logits)
            ),
            "value_prediction": jnp.mean(root_value),
            "value_target": jnp.mean(batch.value_target[:, 0]),
            "value_abs_error": jnp.mean(jnp.abs(root_value - batch.value_target[:, 0])),
            "importance_weight": jnp.mean(weight),
        }
        if consistency:
            metrics["consistency_loss"] = jnp.mean(weight * consistency_loss)
        return loss, metrics

    return loss_fn


def _consistency_targets(params, batch: MuZeroBatch, networks: MuZeroNetworks) -> chex.Array:
    """The projections `[N, K, P]` of the real observations' latents at steps 1..K, with no
    gradient: the targets the dynamics' latents are pulled towards."""
    assert networks.project is not None
    observation = batch.unroll_observation
    if observation is None:
        raise ValueError(
            "the consistency loss needs the batch's unroll_observation (muzero_batch with "
            "unroll_observations=True)"
        )
    n, k = observation.shape[:2]
    chex.assert_equal_shape_prefix([batch.action, observation], 2)  # [N, K] or [N, K, D]
    flat = observation.reshape((n * k,) + observation.shape[2:])
    projection = networks.project(params, networks.represent(params, flat))  # [N * K, P]
    return jax.lax.stop_gradient(projection.reshape((n, k, -1)))


def cosine_similarity(x: chex.Array, y: chex.Array) -> chex.Array:
    """Cosine similarity over the last axis: `[..., P] -> [...]`."""
    chex.assert_equal_shape([x, y])
    x = x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-8)
    y = y / jnp.maximum(jnp.linalg.norm(y, axis=-1, keepdims=True), 1e-8)
    return jnp.sum(x * y, axis=-1)


def make_muzero_priority_fn(networks: MuZeroNetworks) -> Callable[[Any, MuZeroBatch], chex.Array]:
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
        loss = jnp.mean(
            weight
            * (config.value_loss_weight * value_loss + config.policy_loss_weight * policy_loss)
        )
        value = value_tf.decode_logits(value_logits)
        count = jnp.maximum(jnp.sum(batch.mask), 1.0)
        metrics = {
            "loss": loss,
            "value_loss": jnp.mean(weight * value_loss),
            "policy_loss": jnp.mean(weight * policy_loss),
            "policy_entropy": jnp.sum(batch.mask * logits_entropy(policy_logits)) / count,
            "value_abs_error": jnp.sum(batch.mask * jnp.abs(value - batch.value_target)) / count,
        }
        return loss, metrics

    return loss_fn


def logits_entropy(logits: chex.Array) -> chex.Array:
    """The entropy of softmax(logits) over the last axis: `[..., A] -> [...]`."""
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
