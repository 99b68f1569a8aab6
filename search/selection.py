"""How a node chooses its action: mctx's rules (PUCT, Gumbel MuZero's, chance nodes'), each once.

Written on one node's statistics ([A] children), or on a batch of nodes ([B, A]): every
reduction is over the last axis. `search.policy` uses them inside mctx's loop
(`SearchConfig(engine="mctx")`) and builds `search.engine`'s rules from them (`engine="podracer"`).
The arithmetic is mctx 0.0.71's, operation for operation, so both engines reproduce mctx's
choices; the q-transforms are mctx's too, on a node's statistics (`NodeRows`) instead of a tree
and an index. This module imports only jax, chex and numpy.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from search.engine import NodeRows

__all__ = [
    "completed_by_mix_value",
    "considered_visits_table",
    "gumbel_interior_scores",
    "gumbel_root_scores",
    "illegal_by_prior",
    "masked_argmax",
    "by_min_max",
    "by_parent_and_siblings",
    "puct_scores",
    "score_considered",
]


def illegal_by_prior(prior_logits: chex.Array) -> chex.Array:
    """[..., A] bool: actions the model marked illegal (`mask_invalid_logits`' finfo.min, or
    -inf). Half of finfo.min leaves room for the max-shift in mask_invalid_logits."""
    return prior_logits <= jnp.finfo(prior_logits.dtype).min / 2


def masked_argmax(to_argmax: chex.Array, invalid_actions: chex.Array) -> chex.Array:
    """[...] int32: the best valid action (mctx's `masked_argmax`; all invalid: action 0)."""
    return jnp.argmax(jnp.where(invalid_actions, -jnp.inf, to_argmax), axis=-1).astype(jnp.int32)


def puct_scores(
    prior_logits: chex.Array,
    visits: chex.Array,
    node_visits: chex.Array,
    value_score: chex.Array,
    uniform: chex.Array,
    *,
    pb_c_init: float,
    pb_c_base: float,
) -> chex.Array:
    """PUCT's score of each child (MuZero, Appendix B; mctx's `muzero_action_selection`).

    Args:
      prior_logits: [..., A]; visits: [..., A] the children's visits; node_visits: [...];
      value_score: [..., A] the q-transform's normalised Q; uniform: [..., A] in [0, 1), the
      tie-break (scaled by 1e-7, as mctx).
    """
    node_visits = jnp.asarray(node_visits)[..., None]
    pb_c = pb_c_init + jnp.log((node_visits + pb_c_base + 1.0) / pb_c_base)
    prior_probs = jax.nn.softmax(prior_logits)
    policy_score = jnp.sqrt(node_visits) * pb_c * prior_probs / (visits + 1)
    return value_score + policy_score + 1e-7 * uniform


def gumbel_interior_scores(
    prior_logits: chex.Array, completed_qvalues: chex.Array, visits: chex.Array
) -> chex.Array:
    """Gumbel MuZero's deterministic selection below the root: visits that follow
    softmax(logits + completed Q) (mctx's `gumbel_muzero_interior_action_selection`)."""
    probs = jax.nn.softmax(prior_logits + completed_qvalues)
    return probs - visits / (1 + jnp.sum(visits, keepdims=True, axis=-1))


def score_considered(considered_visit, gumbel, logits, normalized_qvalues, visit_counts):
    """Sequential halving's score (mctx's `seq_halving.score_considered`): gumbel + logits +
    Q among the actions with exactly `considered_visit` visits, -inf elsewhere."""
    low_logit = -1e9
    logits = logits - jnp.max(logits, keepdims=True, axis=-1)
    penalty = jnp.where(visit_counts == considered_visit, 0, -jnp.inf)
    chex.assert_equal_shape([gumbel, logits, normalized_qvalues, penalty])
    return jnp.maximum(low_logit, gumbel + logits + normalized_qvalues) + penalty


def considered_visits_table(max_num_considered_actions: int, num_simulations: int) -> np.ndarray:
    """[max_num_considered_actions + 1, num_simulations] int32: for each number of considered
    actions, the visit count sequential halving allows at each simulation (mctx's
    `get_table_of_considered_visits`)."""

    def sequence(num_considered: int) -> list[int]:
        if num_considered <= 1:
            return list(range(num_simulations))
        log2max = int(math.ceil(math.log2(num_considered)))
        out: list[int] = []
        visits = [0] * num_considered
        considered = num_considered
        while len(out) < num_simulations:
            extra = max(1, int(num_simulations / (log2max * considered)))
            for _ in range(extra):
                out.extend(visits[:considered])
                for i in range(considered):
                    visits[i] += 1
            considered = max(2, considered // 2)
        return out[:num_simulations]

    return np.array([sequence(m) for m in range(max_num_considered_actions + 1)], np.int32)


def gumbel_root_scores(
    rows: NodeRows,
    completed_qvalues: chex.Array,
    gumbel: chex.Array,
    num_considered: chex.Array,
    table: np.ndarray,
) -> chex.Array:
    """Gumbel MuZero's score at the root (mctx's `gumbel_muzero_root_action_selection` before
    its mask): sequential halving over the `num_considered` [...] actions, with the visit count
    it allows at this simulation (the root's visits so far) from `table`."""
    simulation_index = jnp.sum(rows.visits, -1)
    considered_visit = jnp.asarray(table)[num_considered, simulation_index]
    return score_considered(
        considered_visit[..., None], gumbel, rows.prior_logits, completed_qvalues, rows.visits
    )


# --- q-transforms on a node's statistics (mctx's `qtransforms`) ---------------------------------


def by_parent_and_siblings(rows: NodeRows, epsilon: float = 1e-8) -> chex.Array:
    """Q normalised to [0, 1] by the min and max over the node's value and its children's Q;
    unvisited children get the minimum (mctx's `qtransform_by_parent_and_siblings`)."""
    node_value = rows.node_value[..., None]
    visited = rows.visits > 0
    safe_qvalues = jnp.where(visited, rows.qvalues, node_value)
    min_value = jnp.minimum(node_value, jnp.min(safe_qvalues, axis=-1, keepdims=True))
    max_value = jnp.maximum(node_value, jnp.max(safe_qvalues, axis=-1, keepdims=True))
    completed_by_min = jnp.where(visited, rows.qvalues, min_value)
    return (completed_by_min - min_value) / jnp.maximum(max_value - min_value, epsilon)


def by_min_max(rows: NodeRows, *, min_value: float, max_value: float) -> chex.Array:
    """Q normalised by a fixed range; unvisited children score 0 (mctx's
    `qtransform_by_min_max`)."""
    value_score = jnp.where(rows.visits > 0, rows.qvalues, min_value)
    return (value_score - min_value) / (max_value - min_value)


def completed_by_mix_value(
    rows: NodeRows, *, value_scale: float, maxvisit_init: float, epsilon: float = 1e-8
) -> chex.Array:
    """Gumbel MuZero's completed Q: unvisited children get the mixed value, all rescaled to
    [0, 1] and scaled by (maxvisit_init + max visits) * value_scale (mctx's
    `qtransform_completed_by_mix_value` with its defaults)."""
    visits, qvalues = rows.visits, rows.qvalues
    visited = visits > 0
    prior_probs = jax.nn.softmax(rows.prior_logits)
    # The mixed value (Gumbel paper, Appendix D).
    sum_visit_counts = jnp.sum(visits, axis=-1)
    prior_probs = jnp.maximum(jnp.finfo(prior_probs.dtype).tiny, prior_probs)
    sum_probs = jnp.sum(jnp.where(visited, prior_probs, 0.0), axis=-1)
    weighted_q = jnp.sum(
        jnp.where(
            visited,
            prior_probs * qvalues / jnp.where(visited, sum_probs[..., None], 1.0),
            0.0,
        ),
        axis=-1,
    )
    mixed_value = (rows.raw_value + sum_visit_counts * weighted_q) / (sum_visit_counts + 1)
    completed = jnp.where(visited, qvalues, mixed_value[..., None])
    min_value = jnp.min(completed, axis=-1, keepdims=True)
    max_value = jnp.max(completed, axis=-1, keepdims=True)
    completed = (completed - min_value) / jnp.maximum(max_value - min_value, epsilon)
    visit_scale = maxvisit_init + jnp.max(visits, axis=-1, keepdims=True)
    return visit_scale * value_scale * completed
