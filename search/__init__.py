"""Batched Monte-Carlo tree search on mctx, for learned models and exact simulators.

Public API (one page: search/README.md):

* `SearchConfig`: every setting of a search, frozen and validated.
* `run(params, rng_key, root, recurrent_fn, config, *, invalid_actions=None, tree=None)`:
  one batched search (MuZero PUCT or Gumbel MuZero) -> `SearchOutput`.
* `reuse_subtree(tree, action, *, keep=None, max_nodes=None)`: continue from the chosen child.
* `make_exact_recurrent_fn(step_fn, prediction_fn, *, two_player=True)`: AlphaZero's exact model.
* `select_action(rng_key, visit_probs, temperature)`: sample with a temperature, or greedy at 0.
* `mask_invalid_logits(logits, invalid_actions)`: how a model marks illegal actions in the tree.

This package imports only jax, chex, numpy and mctx.
"""

from search.config import SearchConfig
from search.exact_model import PredictionFn, StepFn, make_exact_recurrent_fn
from search.policy import SearchOutput, mask_invalid_logits, run, select_action
from search.reuse import reuse_subtree

__all__ = [
    "PredictionFn",
    "SearchConfig",
    "SearchOutput",
    "StepFn",
    "make_exact_recurrent_fn",
    "mask_invalid_logits",
    "reuse_subtree",
    "run",
    "select_action",
]
