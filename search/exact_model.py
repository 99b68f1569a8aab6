"""The exact model: a `recurrent_fn` that steps a real JAX simulator (AlphaZero).

Two-player zero-sum convention, used throughout Podracer:

* A value is from the view of the player to move in that state.
* The reward on an edge is the reward of the player who took the action (for a game that ends on
  that move: +1 win, -1 loss, 0 draw, from the mover's view).
* The discount between plies is -1: the next state's value belongs to the opponent, so its sign
  flips on the way up. After a terminal state the discount is 0 and the terminal value is 0, so
  nothing below a terminal node reaches its ancestors.

With this convention mctx's backup `reward + discount * value` is negamax, and the root value and
Q-values are from the view of the player to move at the root.

A one-player game (`two_player=False`) uses the environment's discount and 0 after a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax.numpy as jnp
import mctx

from search.policy import mask_invalid_logits

__all__ = ["PredictionFn", "StepFn", "make_exact_recurrent_fn"]

# step_fn(state [B], action [B]) -> (next_state [B], reward [B], terminal [B], legal_mask [B, A])
StepFn = Callable[[Any, chex.Array], tuple[Any, chex.Array, chex.Array, chex.Array]]
# prediction_fn(params, state [B]) -> (prior_logits [B, A], value [B])
PredictionFn = Callable[[Any, Any], tuple[chex.Array, chex.Array]]


def make_exact_recurrent_fn(
    step_fn: StepFn, prediction_fn: PredictionFn, *, two_player: bool = True, discount: float = 1.0
) -> mctx.RecurrentFn:
    """Builds an mctx `recurrent_fn` whose embedding is the simulator's real (batched) state.

    Args:
      step_fn: `(state, action [B]) -> (next_state, reward [B], terminal [B], legal_mask [B, A])`,
        batched and jittable, with no auto-reset. `reward` is the mover's reward for this move;
        `legal_mask` is True for legal actions in `next_state`. `selfplay` provides one for pgx.
      prediction_fn: `(params, state) -> (prior_logits [B, A], value [B])`, value from the view of
        the player to move in `state` (for two-player games).
      two_player: alternating two-player zero-sum (discount -1 between plies) or one-player.
      discount: the one-player discount per step (ignored for two-player games).
    Returns:
      `recurrent_fn(params, rng_key, action, state) -> (RecurrentFnOutput, next_state)` where
      illegal actions of `next_state` carry `finfo.min` prior logits, so that `search.run` never
      selects them inside the tree.
    """

    def recurrent_fn(params, rng_key, action, state):
        del rng_key
        next_state, reward, terminal, legal_mask = step_fn(state, action)
        prior_logits, value = prediction_fn(params, next_state)
        chex.assert_rank([reward, terminal, legal_mask, prior_logits, value], [1, 1, 2, 2, 1])
        chex.assert_equal_shape([legal_mask, prior_logits])
        # Nothing to choose at a terminal node: leave its prior unmasked (finite softmax).
        legal_mask = legal_mask | terminal[:, None]
        continuing = jnp.logical_not(terminal)
        per_ply = -1.0 if two_player else discount
        output = mctx.RecurrentFnOutput(
            reward=reward.astype(value.dtype),
            discount=jnp.where(continuing, per_ply, 0.0).astype(value.dtype),
            prior_logits=mask_invalid_logits(prior_logits, jnp.logical_not(legal_mask)),
            value=jnp.where(continuing, value, 0.0),
        )
        return output, next_state

    return recurrent_fn
