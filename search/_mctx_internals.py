"""The one module that imports mctx's private `mctx._src`; all other code uses mctx's public API.

mctx exports `search` (a fresh search from an empty tree) but not the steps it is made of.
`search.run`'s mctx engine (`SearchConfig(engine="mctx")`) needs them for what mctx has no public
way to do, so mctx is pinned (`mctx==0.0.71` in pyproject.toml): a new mctx may move or change
any of these.

* `instantiate_tree_from_root`, `simulate`, `expand`, `backward`: mctx's empty tree, and one
  simulation's descent, node creation and backup. The continued search (`run(..., tree=t)`,
  subtree reuse) runs mctx's simulation loop on a tree that already holds nodes, which
  `mctx.search` cannot; the fresh PUCT search runs the same loop because `mctx.search` wraps the
  selection in a per-level `lax.cond` that costs about 3% of its throughput on a CPU (Gumbel MuZero,
  whose root and interior selections differ, goes through `mctx.search`).
* `StochasticRecurrentState`, `make_stochastic_recurrent_fn`, `mask_tree`,
  `make_stochastic_action_selection_fn`: how `mctx.stochastic_muzero_policy` runs decision and
  chance nodes in one tree of A + C children (the wrapped embedding, which mctx does not export;
  the A + C padding of each node's prior; the slicing of a tree to its decision or chance part;
  the selection at each kind of node).
  `search.run` builds the same search with its own (masked) PUCT at the decision nodes.
"""

from mctx._src.base import StochasticRecurrentState
from mctx._src.policies import (
    _make_stochastic_action_selection_fn as make_stochastic_action_selection_fn,
)
from mctx._src.policies import _make_stochastic_recurrent_fn as make_stochastic_recurrent_fn
from mctx._src.policies import _mask_tree as mask_tree
from mctx._src.search import backward, expand, instantiate_tree_from_root, simulate

__all__ = [
    "backward",
    "expand",
    "instantiate_tree_from_root",
    "make_stochastic_action_selection_fn",
    "make_stochastic_recurrent_fn",
    "mask_tree",
    "simulate",
    "StochasticRecurrentState",
]
