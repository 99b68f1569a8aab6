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

Games with chance (2048's tile, backgammon's dice) are searched by Stochastic MuZero's tree
(`make_exact_stochastic_model`): the move leads to an afterstate (the position before chance
acts), whose children are the chance outcomes, each with its true probability. Chance nodes are
**expanded over the outcome distribution**, not sampled: at a chance node the search takes the
outcome with the largest `probability / (visits + 1)`, so its outcomes' visits follow their
probabilities and its value is their probability-weighted mean, without sampling noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import mctx

from search.policy import StochasticModel, mask_invalid_logits

__all__ = [
    "AfterstateFn",
    "ChanceStepFn",
    "PredictionFn",
    "StepFn",
    "make_exact_recurrent_fn",
    "make_exact_stochastic_model",
]

# step_fn(state [B], action [B]) -> (next_state [B], reward [B], terminal [B], legal_mask [B, A])
StepFn = Callable[[Any, chex.Array], tuple[Any, chex.Array, chex.Array, chex.Array]]
# prediction_fn(params, state [B]) -> (prior_logits [B, A], value [B])
PredictionFn = Callable[[Any, Any], tuple[chex.Array, chex.Array]]
# afterstate_fn(state [B], action [B]) -> (afterstate [B], chance_probs [B, C])
AfterstateFn = Callable[[Any, chex.Array], tuple[Any, chex.Array]]
# chance_step_fn(afterstate [B], outcome [B]) -> (next_state [B], mover's reward [B],
#   terminal [B], legal_mask [B, A], same_player [B]: the mover moves again in next_state)
ChanceStepFn = Callable[
    [Any, chex.Array], tuple[Any, chex.Array, chex.Array, chex.Array, chex.Array]
]


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


def make_exact_stochastic_model(
    afterstate_fn: AfterstateFn,
    chance_step_fn: ChanceStepFn,
    prediction_fn: PredictionFn,
    *,
    two_player: bool = True,
    discount: float = 1.0,
) -> StochasticModel:
    """AlphaZero's exact model of a game with chance, for `algorithm="stochastic_muzero"`.

    Args:
      afterstate_fn: `(state, action [B]) -> (afterstate, chance_probs [B, C])`: the move
        applied, chance not yet; the probabilities of the C outcomes there (rows sum to 1; a move
        that involves no chance puts all on one outcome). Batched, jittable.
      chance_step_fn: `(afterstate, outcome [B]) -> (next_state, reward [B], terminal [B],
        legal_mask [B, A], same_player [B])`: the outcome applied. `reward` is the mover's
        reward for the move; `same_player` says the mover is also to move in `next_state` (only
        read in two-player games).
      prediction_fn: `(params, state) -> (prior_logits [B, A], value [B])`, as for
        `make_exact_recurrent_fn`.
      two_player: discount -1 where the other player moves next, +1 where the mover moves again.
      discount: the one-player discount per step.
    Returns:
      A `StochasticModel`. An afterstate's first value (before any of its outcomes is searched)
      is that of one outcome drawn from the true probabilities: its reward plus its state's
      discounted value, one network call; averaging all C (21 dice rolls) would cost C calls per
      expanded move. As the search visits the outcomes, the chance node's value becomes their
      probability-weighted mean.
    """

    def chance_transition(params, afterstate, outcome):
        next_state, reward, terminal, legal_mask, same_player = chance_step_fn(afterstate, outcome)
        prior_logits, value = prediction_fn(params, next_state)
        chex.assert_rank(
            [reward, terminal, legal_mask, same_player, prior_logits, value], [1, 1, 2, 1, 2, 1]
        )
        chex.assert_equal_shape([legal_mask, prior_logits])
        legal_mask = legal_mask | terminal[:, None]  # a terminal node: a finite softmax
        continuing = jnp.logical_not(terminal)
        per_step = jnp.where(same_player, 1.0, -1.0) if two_player else discount
        step_discount = jnp.where(continuing, per_step, 0.0).astype(value.dtype)
        output = mctx.ChanceRecurrentFnOutput(
            action_logits=mask_invalid_logits(prior_logits, jnp.logical_not(legal_mask)),
            value=jnp.where(continuing, value, 0.0),
            reward=reward.astype(value.dtype),
            discount=step_discount,
        )
        return output, next_state

    def decision_fn(params, rng_key, action, state):
        afterstate, chance_probs = afterstate_fn(state, action)
        chex.assert_rank(chance_probs, 2)
        chance_logits = jnp.log(jnp.maximum(chance_probs, jnp.finfo(chance_probs.dtype).tiny))
        # Impossible outcomes get the illegal logit: the search never expands them.
        chance_logits = mask_invalid_logits(chance_logits, chance_probs <= 0)
        drawn = jax.random.categorical(rng_key, chance_logits).astype(jnp.int32)  # [B]
        sample, _ = chance_transition(params, afterstate, drawn)
        output = mctx.DecisionRecurrentFnOutput(
            chance_logits=chance_logits,
            afterstate_value=sample.reward + sample.discount * sample.value,
        )
        return output, afterstate

    def chance_fn(params, rng_key, outcome, afterstate):
        del rng_key
        return chance_transition(params, afterstate, outcome)

    return StochasticModel(decision_fn, chance_fn)
