"""Batched Monte-Carlo tree search on mctx, for learned models and exact simulators.

Public API (one page: search/README.md):

* `SearchConfig`: every setting of a search, frozen and validated.
* `run(params, rng_key, root, recurrent_fn, config, *, invalid_actions=None, tree=None)`:
  one batched search (MuZero PUCT or Gumbel MuZero) -> `SearchOutput`.
* `reuse_subtree(tree, action, *, keep=None, max_nodes=None)`: continue from the chosen child.
* `make_exact_recurrent_fn(step_fn, prediction_fn, *, two_player=True)`: AlphaZero's exact model.
* `StochasticModel(decision_fn, chance_fn)`: a model with chance outcomes, searched by
  `SearchConfig(algorithm="stochastic_muzero")` (Stochastic MuZero's learned model, or
  `make_exact_stochastic_model`: AlphaZero's exact model of a game with chance).
* `SearchConfig(algorithm="sampled_muzero", num_samples=K)` with `run(..., sample_fn=...)`:
  Sampled MuZero over K actions per node drawn by the caller (continuous or very large action
  spaces); `sample_categorical(rng_key, logits, K, replace=...)`: the `sample_fn` of a discrete
  space.
* `select_action(rng_key, visit_probs, temperature)`: sample with a temperature, or greedy at 0.
* `mask_invalid_logits(logits, invalid_actions)`: how a model marks illegal actions in the tree.

This package imports only jax, chex, numpy and mctx.

Names are imported on first use: `search.config` (and the configs built on it) loads without
JAX.
"""

import importlib
from typing import TYPE_CHECKING

# Each public name and the module that defines it, imported on first use.
_SOURCES = {
    "PredictionFn": "search.exact_model",
    "SampleFn": "search.policy",
    "SearchConfig": "search.config",
    "SearchOutput": "search.policy",
    "StepFn": "search.exact_model",
    "StochasticModel": "search.policy",
    "AfterstateFn": "search.exact_model",
    "ChanceStepFn": "search.exact_model",
    "make_exact_stochastic_model": "search.exact_model",
    "make_exact_recurrent_fn": "search.exact_model",
    "mask_invalid_logits": "search.policy",
    "reuse_subtree": "search.reuse",
    "sample_categorical": "search.sampled",
    "run": "search.policy",
    "select_action": "search.policy",
}

__all__ = [
    "PredictionFn",
    "SampleFn",
    "SearchConfig",
    "SearchOutput",
    "StepFn",
    "StochasticModel",
    "AfterstateFn",
    "ChanceStepFn",
    "make_exact_recurrent_fn",
    "make_exact_stochastic_model",
    "mask_invalid_logits",
    "reuse_subtree",
    "run",
    "sample_categorical",
    "select_action",
]


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from search.config import SearchConfig
    from search.exact_model import (
        AfterstateFn,
        ChanceStepFn,
        PredictionFn,
        StepFn,
        make_exact_recurrent_fn,
        make_exact_stochastic_model,
    )
    from search.policy import (
        SampleFn,
        SearchOutput,
        StochasticModel,
        mask_invalid_logits,
        run,
        select_action,
    )
    from search.reuse import reuse_subtree
    from search.sampled import sample_categorical
