"""V-trace (Espeholt et al. 2018): off-policy value targets and advantages, and the IMPALA loss.

All functions are time-major over a batch: `[T, B]`. The formulas follow `rlax.vtrace` (a test
checks they agree); they are written here so product code does not depend on rlax.
"""

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from muzero.config import LossConfig
from muzero.losses import LossFn
from muzero.networks import ActorCriticNetworks
from muzero.types import VTraceBatch

__all__ = ["VTraceOutput", "vtrace", "vtrace_td_error_and_advantage", "make_vtrace_loss"]


class VTraceOutput(NamedTuple):
    """V-trace's outputs, each [T, B]."""

    errors: chex.Array  # v_s - V(x_s): the value function's error to its V-trace target.
    pg_advantage: chex.Array  # clipped rho_s (r_s + gamma_s q_{s+1} - V(x_s)).
    q_estimate: chex.Array  # r_s + gamma_s q_{s+1}: the return estimate of the action taken.


def vtrace(
    v_tm1: chex.Array,
    v_t: chex.Array,
    r_t: chex.Array,
    discount_t: chex.Array,
    rho_tm1: chex.Array,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    stop_target_gradients: bool = True,
) -> chex.Array:
    """V-trace errors `v_s - V(x_s)`, `[T, B]`.

    Args:
      v_tm1: [T, B] values of the states the actions were taken in.
      v_t: [T, B] values of the next states.
      r_t: [T, B] rewards.
      discount_t: [T, B] discounts (0 at episode ends).
      rho_tm1: [T, B] importance ratios pi(a|x) / mu(a|x) of the actions taken.
      lambda_: mixes n-step (1) and 1-step (0) targets.
      clip_rho_threshold: clip of rho in the targets' TD errors.
      stop_target_gradients: no gradient through the targets.
    """
    chex.assert_rank([v_tm1, v_t, r_t, discount_t, rho_tm1], 2)
    chex.assert_equal_shape([v_tm1, v_t, r_t, discount_t, rho_tm1])
    c_tm1 = jnp.minimum(1.0, rho_tm1) * lambda_
    clipped_rho_tm1 = jnp.minimum(clip_rho_threshold, rho_tm1)
    td_errors = clipped_rho_tm1 * (r_t + discount_t * v_t - v_tm1)

    def backward(error_t, inputs):
        td_error, discount, c = inputs
        error = td_error + discount * c * error_t
        return error, error

    # No convolutions in this scan, so it does not hit the CPU backend's slow scanned gradients.
    _, errors = jax.lax.scan(
        backward, jnp.zeros_like(v_t[0]), (td_errors, discount_t, c_tm1), reverse=True
    )
    target_tm1 = errors + v_tm1
    if stop_target_gradients:
        target_tm1 = jax.lax.stop_gradient(target_tm1)
    return target_tm1 - v_tm1


def vtrace_td_error_and_advantage(
    v_tm1: chex.Array,
    v_t: chex.Array,
    r_t: chex.Array,
    discount_t: chex.Array,
    rho_tm1: chex.Array,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    stop_target_gradients: bool = True,
) -> VTraceOutput:
    """V-trace errors, policy-gradient advantages and Q estimates, each `[T, B]` (see `vtrace`)."""
    errors = vtrace(
        v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_, clip_rho_threshold, stop_target_gradients
    )
    targets_tm1 = errors + v_tm1
    # The next state's target, mixed with its value by lambda; the last bootstraps from v_t.
    q_bootstrap = jnp.concatenate(
        [lambda_ * targets_tm1[1:] + (1.0 - lambda_) * v_tm1[1:], v_t[-1:]], axis=0
    )
    q_estimate = r_t + discount_t * q_bootstrap
    pg_advantage = jnp.minimum(clip_pg_rho_threshold, rho_tm1) * (q_estimate - v_tm1)
    if stop_target_gradients:
        q_estimate = jax.lax.stop_gradient(q_estimate)
        pg_advantage = jax.lax.stop_gradient(pg_advantage)
    return VTraceOutput(errors, pg_advantage, q_estimate)


def make_vtrace_loss(
    networks: ActorCriticNetworks, config: LossConfig, box_policy: Any = None
) -> LossFn:
    """IMPALA's loss on a `VTraceBatch` [T, B]: policy gradient with V-trace advantages, value
    loss to the V-trace targets, and an entropy bonus.

    With `box_policy` (a `muzero.BoxPolicy`) the policy is its squashed Gaussian over a box: the
    network's outputs are its parameters [.., 2D], `behaviour_logits` the acting network's, the
    actions [T, B, D] vectors, and the entropy the Gaussian's before the squash.

    `loss = pg_loss + baseline_cost * 0.5 * mean(errors^2) - entropy_cost * entropy`, averaged
    over the T - 1 learned steps and B; the last step supplies only the bootstrap value.
    """
    if config.two_player:
        raise ValueError("LossConfig.two_player must be False for V-trace (a one-player agent)")

    def loss_fn(params, batch: VTraceBatch, key):
        del key
        t, b = batch.action.shape[:2]
        chex.assert_shape([batch.reward, batch.discount], (t, b))
        chex.assert_rank(batch.behaviour_logits, 3)
        if t < 2:
            raise ValueError(f"V-trace needs trajectories of at least 2 steps, got {t}")

        # The last step only bootstraps (no gradient reaches it): a separate forward pass keeps
        # it out of the backward pass, 1/T of the update's gradient work.
        learned = jax.tree.map(
            lambda x: x[:-1].reshape(((t - 1) * b,) + x.shape[2:]), batch.observation
        )
        logits, values = networks.apply(params, learned)
        logits = logits.reshape((t - 1, b, -1))  # [T-1, B, A]
        values = values.reshape((t - 1, b))  # [T-1, B]
        _, bootstrap_value = networks.apply(
            jax.lax.stop_gradient(params), jax.tree.map(lambda x: x[-1], batch.observation)
        )
        next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)  # [T-1, B]

        action = batch.action[:-1]  # [T-1, B]
        behaviour = batch.behaviour_logits[:-1].astype(jnp.float32)
        if box_policy is None:
            log_pi = jax.nn.log_softmax(logits)  # [T-1, B, A]
            log_mu = jax.nn.log_softmax(behaviour)
            log_pi_a = jnp.take_along_axis(log_pi, action[..., None], axis=-1)[..., 0]
            log_mu_a = jnp.take_along_axis(log_mu, action[..., None], axis=-1)[..., 0]
            entropy = jnp.mean(-jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1))
        else:  # action [T-1, B, D]: the density of each under the two Gaussians
            log_pi_a = box_policy.log_prob(logits, action[..., None, :])[..., 0]  # [T-1, B]
            log_mu_a = box_policy.log_prob(behaviour, action[..., None, :])[..., 0]
            entropy = jnp.mean(box_policy.entropy(logits))
        rho = jnp.exp(jax.lax.stop_gradient(log_pi_a) - log_mu_a)  # [T-1, B]

        discount_t = config.discount * batch.discount[:-1].astype(jnp.float32)
        reward_t = config.reward_scale * batch.reward[:-1].astype(jnp.float32)
        if batch.truncated is not None:
            # A step cut by a time limit bootstraps from its own state's value (the next step is
            # a new episode): r + discount * V(x_t), with the recursion still stopped there.
            cut = batch.truncated[:-1] > 0
            reward_t = reward_t + jnp.where(cut, config.discount * jax.lax.stop_gradient(values), 0)
        out = vtrace_td_error_and_advantage(
            values,
            jax.lax.stop_gradient(next_values),
            reward_t,
            discount_t,
            rho,
            config.vtrace_lambda,
            config.clip_rho_threshold,
            config.clip_pg_rho_threshold,
        )

        pg_loss = -jnp.mean(log_pi_a * out.pg_advantage)
        value_loss = 0.5 * jnp.mean(jnp.square(out.errors))
        loss = pg_loss + config.baseline_cost * value_loss - config.entropy_cost * entropy
        metrics = {
            "loss": loss,
            "pg_loss": pg_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "rho_mean": jnp.mean(rho),
            "value_mean": jnp.mean(values),
        }
        return loss, metrics

    return loss_fn
