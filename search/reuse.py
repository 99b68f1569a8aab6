"""Subtree reuse: the chosen child's subtree becomes the root of the next search.

After a move is played, the part of the tree below the chosen action is still a valid search of
the new position, *if the model that built it is exact*: with a real simulator (AlphaZero on pgx)
the child's embedding is the true next state, so its visits and values remain correct. With a
learned model (MuZero) the subtree was built from the dynamics network's imagined latent, which is
not the representation of the real next observation, and the network's parameters may have changed
since; reusing it would mix statistics of two different models. So reuse is for exact models.

`reuse_subtree` keeps the chosen child and all its descendants, renumbered in their original order
(a parent is always created before its children, so order-preserving compaction keeps every parent
ahead of its children and the root at index 0). `search.run(..., tree=...)` then adds
`num_simulations` new nodes after the kept ones.

Shapes stay static: the kept tree has `max_nodes` slots (the oldest nodes win if the subtree is
larger). In a fixed-shape loop (`lax.scan` over moves), use the same `max_nodes` every move:
`run(tree=t)` returns `max_nodes + num_simulations` slots and `reuse_subtree(..., max_nodes=M)`
brings it back to `M`.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import mctx

from search import _inputs

__all__ = ["reuse_subtree"]

_NODE_FILL = {  # what an empty slot holds, per per-node field of mctx.Tree
    "node_visits": 0,
    "raw_values": 0,
    "node_values": 0,
    "children_prior_logits": 0,
    "children_values": 0,
    "children_visits": 0,
    "children_rewards": 0,
    "children_discounts": 0,
}


def reuse_subtree(
    tree: mctx.Tree,
    action: chex.Array,
    *,
    keep: chex.Array | None = None,
    max_nodes: int | None = None,
) -> mctx.Tree:
    """Makes the subtree under `action` at the root the new tree, keeping its statistics.

    Args:
      tree: a batched search tree (`SearchOutput.tree`), [B, N, ...].
      action: [B] integers in [0, A), the action played from each root (concrete values
        outside it: ValueError; under `jit` JAX's indexing clamps them).
      keep: [B] bool; rows where it is False come back empty, so the next search starts fresh
        (for a finished episode, or a new game). None keeps every row.
      max_nodes: slots in the returned tree; default N. The oldest nodes are kept when the
        subtree has more.
    Returns:
      A tree with [B, max_nodes, ...] leaves whose root (index 0) is the old child: its visit
      count, value and children are those the child had. Rows whose child was never visited are
      empty. Pass it to `search.run(..., tree=...)`.
    """
    batch_size, num_nodes = tree.node_values.shape
    num_actions = tree.children_index.shape[-1]
    action = _inputs.as_actions("search.reuse_subtree", action, batch_size, num_actions)
    max_nodes = num_nodes if max_nodes is None else int(max_nodes)
    if max_nodes < 1:
        raise ValueError(f"search.reuse_subtree: max_nodes must be >= 1, got {max_nodes}")
    if keep is None:
        keep = jnp.ones((batch_size,), dtype=bool)
    keep = _inputs.as_array(keep)
    chex.assert_shape(keep, (batch_size,))
    return jax.vmap(_reuse_row, in_axes=(0, 0, 0, None))(tree, action, keep, max_nodes)


def _reuse_row(tree: mctx.Tree, action, keep, max_nodes: int) -> mctx.Tree:
    """One row (unbatched tree): select, renumber and gather the subtree's nodes."""
    num_nodes = tree.node_values.shape[0]
    child = tree.children_index[mctx.Tree.ROOT_INDEX, action]  # [] or UNVISITED
    child = jnp.where(keep, child, mctx.Tree.UNVISITED)

    # member[i]: node i is the child or a descendant; parents[i] < i, so one pass in order.
    def mark(i, member):
        parent = tree.parents[i]
        inside = (i == child) | ((parent >= 0) & member[jnp.maximum(parent, 0)])
        return member.at[i].set(inside)

    member = jax.lax.fori_loop(0, num_nodes, mark, jnp.zeros((num_nodes,), dtype=bool))
    new_index = jnp.cumsum(member) - 1  # [N], order-preserving renumbering
    member = member & (new_index < max_nodes)
    new_index = jnp.where(member, new_index, mctx.Tree.UNVISITED)  # [N], -1 for dropped nodes

    # old_of_new[j]: the old index of new slot j, or num_nodes (an empty slot) where none.
    old_of_new = jnp.full((max_nodes,), num_nodes, dtype=jnp.int32)
    old_of_new = old_of_new.at[jnp.where(member, new_index, max_nodes)].set(
        jnp.arange(num_nodes, dtype=jnp.int32), mode="drop"
    )
    filled = old_of_new < num_nodes  # [max_nodes]

    def gather(x, fill):
        padded = jnp.concatenate([x, jnp.full((1,) + x.shape[1:], fill, dtype=x.dtype)], axis=0)
        return padded[old_of_new]

    def renumber(old):  # old node indices (or -1) -> new indices (or -1)
        return jnp.where(old >= 0, new_index[jnp.maximum(old, 0)], old)

    fields = {name: gather(getattr(tree, name), fill) for name, fill in _NODE_FILL.items()}
    parents = renumber(gather(tree.parents, mctx.Tree.NO_PARENT))
    action_from_parent = gather(tree.action_from_parent, mctx.Tree.NO_PARENT)
    is_root = jnp.arange(max_nodes) == mctx.Tree.ROOT_INDEX
    parents = jnp.where(is_root | ~filled, mctx.Tree.NO_PARENT, parents)
    action_from_parent = jnp.where(is_root | ~filled, mctx.Tree.NO_PARENT, action_from_parent)
    children_index = renumber(gather(tree.children_index, mctx.Tree.UNVISITED))
    embeddings = jax.tree.map(lambda x: gather(x, 0), tree.embeddings)
    return tree.replace(
        parents=parents,
        action_from_parent=action_from_parent,
        children_index=children_index,
        embeddings=embeddings,
        **fields,
    )
