"""Podracer's search engine: mctx's batched MCTS, the same tree, built with fewer operations.

`search.run` runs its simulations here (`SearchConfig(engine="podracer")`) or in mctx's own loop
(`engine="mctx"`); both build the same tree from the same keys. This module imports only jax,
chex and numpy: the rules that choose an action at a node come from `search.selection`, the
model from the caller. What it does differently from mctx, per simulation:

* **The descent is a loop over depth for the whole batch**, not a `vmap` of one row's
  `while_loop`. Every row still descending is at the same depth, so the depth is one scalar:
  the root's step is taken once before the loop (no per-level choice between a root and an
  interior rule, which mctx's `lax.cond` turns into computing both under `vmap`), and a tree of
  decision and chance nodes (Stochastic MuZero) alternates the two rules by the depth's parity
  instead of computing both at every level. The loop carries a few [B] vectors and the path it
  took, never the tree.
* **The backup is one pass over the recorded path**: the discounted returns along it (a loop up
  the levels over [B] scalars; on an accelerator straight-line code for paths of up to 64
  levels, so no loop whose stop depends on data, which on a GPU waits on the host at every
  level) and one
  scatter per tree field for every node and edge of the path together, the new node's writes
  included. mctx's backup is a
  `while_loop` from the leaf up through `parents`, four scatters per level, which under `vmap`
  also selects between the old and the new version of the whole tree at every level.
* **The tie-break noise of PUCT** (`1e-7 * uniform` per node, mctx's) comes from the same
  threefry hash as `jax.random`'s, bit for bit, written out round by round: on a CPU jax
  computes each threefry call as a loop of five steps, and a descent calls it twice per level
  (the key's split and the noise); it was half of mctx's MuZero search there with a small model.
  Keys that are not raw threefry keys go through `jax.random`.

The arithmetic of selection, expansion and backup is mctx's, operation for operation, so the
visit counts and actions are mctx's and the values equal up to the last bit of XLA's fusion
choices (tests/test_search_engine.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["NodeRows", "Rule", "Tree", "run_simulations", "split_key"]

UNVISITED = -1  # children_index of an action never expanded (mctx.Tree.UNVISITED)
NO_PARENT = -1  # parents and action_from_parent of the root and of empty slots
ROOT_INDEX = 0


class Tree(NamedTuple):
    """A batch of search trees: mctx.Tree's arrays, under the same names and meanings."""

    node_visits: chex.Array  # [B, N] int32
    raw_values: chex.Array  # [B, N], the model's value of each node
    node_values: chex.Array  # [B, N], the search's value of each node
    parents: chex.Array  # [B, N] int32, NO_PARENT at the root and in empty slots
    action_from_parent: chex.Array  # [B, N] int32
    children_index: chex.Array  # [B, N, A] int32, UNVISITED where not expanded
    children_prior_logits: chex.Array  # [B, N, A]
    children_visits: chex.Array  # [B, N, A] int32
    children_rewards: chex.Array  # [B, N, A]
    children_discounts: chex.Array  # [B, N, A]
    children_values: chex.Array  # [B, N, A]
    embeddings: Any  # [B, N, ...]


class NodeRows(NamedTuple):
    """The statistics of one node per batch row (or of one node: drop the leading B)."""

    prior_logits: chex.Array  # [B, A]
    visits: chex.Array  # [B, A] int32, the children's visits
    qvalues: chex.Array  # [B, A], reward + discount * child value (0 where unvisited)
    node_visits: chex.Array  # [B] int32
    node_value: chex.Array  # [B]
    raw_value: chex.Array  # [B]

    def children(self, part: slice) -> NodeRows:
        """The same rows restricted to the children in `part` (a decision or chance part)."""
        return self._replace(
            prior_logits=self.prior_logits[..., part],
            visits=self.visits[..., part],
            qvalues=self.qvalues[..., part],
        )


class Rule(NamedTuple):
    """How a node chooses its action: `select(rows, uniform) -> action [B] int32`.

    `uniform` is [B, noise_size] float uniform in [0, 1), one draw per row from the row's
    selection key exactly as `jax.random.uniform(key, (noise_size,))` draws it (mctx's PUCT
    tie-break); None when `noise_size` is 0.
    """

    select: Callable[[NodeRows, chex.Array | None], chex.Array]
    noise_size: int = 0


def run_simulations(
    params: Any,
    rng_key: chex.PRNGKey,
    tree: Tree,
    recurrent_fn: Callable,
    *,
    root_rule: Rule,
    interior_rules: Sequence[Rule],
    num_simulations: int,
    max_depth: int,
    first_new_node: chex.Array | int = 1,
    levels_per_check: int = 1,
) -> Tree:
    """Adds `num_simulations` simulations to `tree`, consuming `rng_key` as mctx's search does.

    Args:
      params: passed to `recurrent_fn`.
      rng_key: consumed.
      tree: the tree to grow, with room for `num_simulations` new nodes after its existing ones.
      recurrent_fn: `(params, rng_key, action [B], embedding) -> (output, next_embedding)`, the
        output with `prior_logits` [B, A], `value`, `reward` and `discount` [B]
        (`mctx.RecurrentFnOutput`).
      root_rule: the selection at the root (depth 0).
      interior_rules: the selection at depth d >= 1 is `interior_rules[(d - 1) % len]`: one rule,
        or a chance rule and a decision rule for a tree whose levels alternate.
      num_simulations: simulations to run.
      max_depth: the deepest a simulation descends, in edges from the root.
      first_new_node: [B] or a number: the slot of each row's first new node (1 for a fresh
        tree); simulation `s` writes its node at `first_new_node + s`.
      levels_per_check: cycles of `interior_rules` the descent takes between two checks of
        whether any row still descends (`SearchConfig.descent_levels_per_check`); 0: no check,
        `max_depth` levels (at most the tree's size) in a loop of known trip count, and the
        backup's returns in one too.
    Returns:
      The grown tree.
    """
    batch_size, num_nodes = tree.node_values.shape
    rules = (root_rule, *interior_rules)
    uses_noise = any(rule.noise_size for rule in rules)
    path_length = min(max_depth, num_nodes)

    def simulation(sim, carry):
        rng_key, tree = carry
        rng_key, simulate_key, expand_key = split_key(rng_key, 3)
        # The rows' selection keys matter only to a rule that draws noise (PUCT's tie-break).
        row_keys = _row_keys(split_key(simulate_key, batch_size)) if uses_noise else None
        path, tree = _descend(
            tree,
            row_keys,
            root_rule,
            tuple(interior_rules),
            max_depth,
            path_length,
            levels_per_check,
        )
        new_node = first_new_node + sim
        leaf = jnp.where(path.next_node == UNVISITED, new_node, path.next_node)  # [B]
        fixed = levels_per_check == 0
        return rng_key, _expand_and_backup(
            params, expand_key, tree, recurrent_fn, path, leaf, fixed_trip_count=fixed
        )

    _, tree = jax.lax.fori_loop(0, num_simulations, simulation, (rng_key, tree))
    return tree


class _Descent(NamedTuple):
    """The state of the batch's descent, all rows at the same `depth` while they continue."""

    depth: chex.Array  # [] int32, levels selected so far
    keys: Any  # the rows' keys (`_row_keys`; None without noise)
    node: chex.Array  # [B] int32, the node where the row's last action was selected
    action: chex.Array  # [B] int32, that action
    next_node: chex.Array  # [B] int32, the child it leads to (UNVISITED: to be expanded)
    continuing: chex.Array  # [B] bool
    path_nodes: chex.Array  # [B, D] int32, the node of each level; N (no node) past the path
    path_actions: chex.Array  # [B, D] int32, the action selected there


def _rows_at(tree: Tree, node: chex.Array) -> NodeRows:
    """The statistics of node `node[b]` of each row b ([B] -> [B, A] and [B])."""
    rows = jnp.arange(node.shape[0])

    def at(x):
        return x[rows, node]

    return NodeRows(
        prior_logits=at(tree.children_prior_logits),
        visits=at(tree.children_visits),
        # tree.qvalues(node) in mctx: the same sum, on the node's row.
        qvalues=at(tree.children_rewards) + at(tree.children_discounts) * at(tree.children_values),
        node_visits=at(tree.node_visits),
        node_value=at(tree.node_values),
        raw_value=at(tree.raw_values),
    )


def _root_rows(tree: Tree) -> NodeRows:
    """The roots' statistics: slices at node 0, no gather."""
    return NodeRows(
        prior_logits=tree.children_prior_logits[:, ROOT_INDEX],
        visits=tree.children_visits[:, ROOT_INDEX],
        qvalues=tree.children_rewards[:, ROOT_INDEX]
        + tree.children_discounts[:, ROOT_INDEX] * tree.children_values[:, ROOT_INDEX],
        node_visits=tree.node_visits[:, ROOT_INDEX],
        node_value=tree.node_values[:, ROOT_INDEX],
        raw_value=tree.raw_values[:, ROOT_INDEX],
    )


def _descend(
    tree, keys, root_rule, interior_rules, max_depth, path_length, levels_per_check=1
) -> tuple[_Descent, Tree]:
    """mctx's `simulate` for the whole batch: from the root down to an unexpanded action or
    `max_depth`, recording the path. A row's key is split at every level it descends (the
    second half draws the level's noise), as mctx splits it.

    The tree goes through the loop unchanged and the caller updates the tree that comes out:
    XLA then updates it in place instead of copying every array the loop reads. Each iteration
    takes `levels_per_check` cycles of the interior rules: a level where no row continues
    changes nothing but the depth counter (past the path, which the backup does not read). With
    `levels_per_check` 0 the loop takes one cycle an iteration for as many as `path_length`
    levels need, a trip count known when it compiles: no check of the rows at all.
    """
    batch_size, num_nodes = tree.node_values.shape
    state = _Descent(
        depth=jnp.zeros((), jnp.int32),
        keys=keys,
        node=jnp.full((batch_size,), NO_PARENT, jnp.int32),
        action=jnp.full((batch_size,), NO_PARENT, jnp.int32),
        next_node=jnp.full((batch_size,), ROOT_INDEX, jnp.int32),
        continuing=jnp.ones((batch_size,), bool),
        path_nodes=jnp.full((batch_size, path_length), num_nodes, jnp.int32),
        path_actions=jnp.zeros((batch_size, path_length), jnp.int32),
    )
    state = _level(tree, state, root_rule, max_depth, at_root=True)

    def descend_levels(carry):
        state, tree = carry
        for _ in range(levels_per_check):
            for rule in interior_rules:  # one level per rule: the cycle of node kinds
                state = _level(tree, state, rule, max_depth, at_root=False)
        return state, tree

    if levels_per_check == 0:
        cycles = -(-(path_length - 1) // len(interior_rules))  # every level below the root's

        def descend_cycle(_, carry):
            state, tree = carry
            for rule in interior_rules:
                state = _level(tree, state, rule, max_depth, at_root=False)
            return state, tree

        return jax.lax.fori_loop(0, cycles, descend_cycle, (state, tree))
    return jax.lax.while_loop(lambda c: jnp.any(c[0].continuing), descend_levels, (state, tree))


def _level(tree: Tree, state: _Descent, rule: Rule, max_depth: int, at_root: bool) -> _Descent:
    """One level of the descent: the continuing rows select at their node and step down."""
    continuing = state.continuing
    node = jnp.where(continuing, state.next_node, state.node)
    keys, uniform = state.keys, None
    if keys is not None:
        next_keys, select_keys = _split_rows(keys)
        if rule.noise_size:
            uniform = _uniform_rows(select_keys, rule.noise_size)
        keys = jax.tree.map(lambda new, old: _where_rows(continuing, new, old), next_keys, keys)
    rows = _root_rows(tree) if at_root else _rows_at(tree, node)
    chosen = rule.select(rows, uniform)  # [B]
    action = jnp.where(continuing, chosen, state.action)
    child = tree.children_index[jnp.arange(node.shape[0]), node, chosen]
    next_node = jnp.where(continuing, child, state.next_node)
    depth = state.depth + 1

    def record(path, value):  # column `depth - 1` of the continuing rows
        old = jax.lax.dynamic_slice_in_dim(path, state.depth, 1, axis=1)
        new = jnp.where(continuing[:, None], value[:, None], old)
        return jax.lax.dynamic_update_slice_in_dim(path, new, state.depth, axis=1)

    return _Descent(
        depth=depth,
        keys=keys,
        node=node,
        action=action,
        next_node=next_node,
        continuing=continuing & (child != UNVISITED) & (depth < max_depth),
        path_nodes=record(state.path_nodes, node),
        path_actions=record(state.path_actions, action),
    )


# Paths up to this many levels are backed up in straight-line code on accelerators, which XLA
# fuses into a few kernels: a `while_loop` whose stop depends on data makes XLA:GPU copy each
# iteration's predicate to the host and wait for it (the device idles at every level of every
# simulation). `_UNROLLED_BACKUP_ON_CPU` takes that code on a CPU too (the tests' way to it).
_UNROLLED_BACKUP_LEVELS = 64
_UNROLLED_BACKUP_ON_CPU = False


def _expand_and_backup(
    params, key, tree: Tree, recurrent_fn, path: _Descent, leaf, fixed_trip_count: bool = False
) -> Tree:
    """mctx's `expand` and `backward` of one simulation, as one set of scatters (with
    `fixed_trip_count`, the returns in a loop over every level of the path array, whose trip
    count is known when it compiles).

    The backup's arithmetic is mctx's, level by level from the leaf up: the return
    `reward + discount * return`, the node's new value `(value * visits + return) / (visits +
    1)`, and the edge's value set to its child's new value.
    """
    batch_size, num_nodes = tree.node_values.shape
    rows = jnp.arange(batch_size)
    parent, action = path.node, path.action  # [B], [B]
    embedding = jax.tree.map(lambda x: x[rows, parent], tree.embeddings)
    step, next_embedding = recurrent_fn(params, key, action, embedding)
    num_actions = tree.children_index.shape[-1]
    chex.assert_shape(step.prior_logits, (batch_size, num_actions))
    chex.assert_shape([step.reward, step.discount, step.value], (batch_size,))

    # The path: nodes n_0 = root ... n_{L-1} = parent, actions a_d; n_L is the leaf.
    nodes, actions = path.path_nodes, path.path_actions  # [B, D]
    length = jnp.sum(nodes < num_nodes, axis=1)  # [B] L >= 1
    on_path = jnp.minimum(nodes, num_nodes - 1)  # [B, D] gatherable
    rows_d = rows[:, None]
    rewards = tree.children_rewards[rows_d, on_path, actions]  # [B, D]
    discounts = tree.children_discounts[rows_d, on_path, actions]
    values = tree.node_values[rows_d, on_path]
    visits = tree.node_visits[rows_d, on_path]

    # From the leaf up: level d updates node n_d through edge (n_d, a_d); the last edge's reward
    # and discount are the ones the model just gave (expand writes them before mctx's backup).
    last = jnp.arange(nodes.shape[1])[None, :] == length[:, None] - 1  # [B, D]
    rewards = jnp.where(last, step.reward[:, None], rewards)
    discounts = jnp.where(last, step.discount[:, None], discounts)

    inside = nodes < num_nodes  # [B, D]

    # [B, D], the return through edge (n_d, a_d), from the deepest level any row reached up.
    top = jnp.minimum(path.depth, nodes.shape[1])
    args = (rewards, discounts, inside, step.value, top)
    if fixed_trip_count:
        returns = _returns_in_a_fixed_loop(*args)
    elif nodes.shape[1] > _UNROLLED_BACKUP_LEVELS:
        returns = _returns_in_a_loop(*args)
    elif _UNROLLED_BACKUP_ON_CPU:
        returns = _returns_unrolled(*args)
    else:
        # Straight-line code where a loop waits on the host (GPU, TPU); on a CPU the loop, which
        # compiles faster (a 33-level chain took a third longer to compile a 32-simulation
        # search) and costs nothing there per level.
        returns = jax.lax.platform_dependent(
            *args, cpu=_returns_in_a_loop, default=_returns_unrolled
        )
    count = visits.astype(values.dtype)
    new_values = (values * count + returns) / (count + 1.0)  # [B, D], the new value of n_d
    # Edge (n_d, a_d) takes its child's new value: n_{d+1}'s, or the leaf's value.
    below = jnp.concatenate([new_values[:, 1:], new_values[:, :1]], axis=1)
    edge_values = jnp.where(last, step.value[:, None], below)  # [B, D]

    # One scatter per field; columns past a row's path have node N and are dropped.
    path_and_leaf = jnp.concatenate([nodes, leaf[:, None]], axis=1)  # [B, D + 1]

    def at_leaf(x, value):
        return x.at[rows, leaf].set(value)

    def at_new_edge(x, value):
        return x.at[rows, parent, action].set(value)

    return Tree(
        node_visits=tree.node_visits.at[rows_d, path_and_leaf].add(1, mode="drop"),
        raw_values=at_leaf(tree.raw_values, step.value),
        node_values=tree.node_values.at[rows_d, path_and_leaf].set(
            jnp.concatenate([new_values, step.value[:, None]], axis=1), mode="drop"
        ),
        parents=at_leaf(tree.parents, parent),
        action_from_parent=at_leaf(tree.action_from_parent, action),
        children_index=at_new_edge(tree.children_index, leaf),
        children_prior_logits=at_leaf(tree.children_prior_logits, step.prior_logits),
        children_visits=tree.children_visits.at[rows_d, nodes, actions].add(1, mode="drop"),
        children_rewards=at_new_edge(tree.children_rewards, step.reward),
        children_discounts=at_new_edge(tree.children_discounts, step.discount),
        children_values=tree.children_values.at[rows_d, nodes, actions].set(
            edge_values, mode="drop"
        ),
        embeddings=jax.tree.map(at_leaf, tree.embeddings, next_embedding),
    )


def _returns_in_a_loop(rewards, discounts, inside, leaf_value, top) -> chex.Array:
    """[B, D] the discounted return through each edge of the paths, `top` levels up from the
    leaf's value in a `while_loop` (levels from `top` on: zeros)."""

    def level_up(carry):  # level d - 1: the return through edge (n_{d-1}, a_{d-1})
        d, leaf_return, returns = carry
        d = d - 1

        def column(x):
            return jax.lax.dynamic_index_in_dim(x, d, axis=1, keepdims=False)

        updated = column(rewards) + column(discounts) * leaf_return
        returns = jax.lax.dynamic_update_index_in_dim(returns, updated, d, axis=1)
        return d, jnp.where(column(inside), updated, leaf_return), returns

    _, _, returns = jax.lax.while_loop(
        lambda c: c[0] > 0, level_up, (top, leaf_value, jnp.zeros_like(rewards))
    )
    return returns


def _returns_in_a_fixed_loop(rewards, discounts, inside, leaf_value, top) -> chex.Array:
    """`_returns_unrolled`'s sums in a `fori_loop` over every level (D, known when it
    compiles): no loop whose stop depends on data, and a body that compiles once."""
    del top
    depth = rewards.shape[1]

    def level_up(i, carry):  # level d = D - 1 - i
        leaf_return, returns = carry
        d = depth - 1 - i

        def column(x):
            return jax.lax.dynamic_index_in_dim(x, d, axis=1, keepdims=False)

        updated = column(rewards) + column(discounts) * leaf_return
        returns = jax.lax.dynamic_update_index_in_dim(returns, updated, d, axis=1)
        return jnp.where(column(inside), updated, leaf_return), returns

    _, returns = jax.lax.fori_loop(0, depth, level_up, (leaf_value, jnp.zeros_like(rewards)))
    return returns


def _returns_unrolled(rewards, discounts, inside, leaf_value, top) -> chex.Array:
    """`_returns_in_a_loop` in straight-line code over every level a path can have: a level below
    a row's path keeps its return, so the sums are the loop's (past `top`, where the loop leaves
    zeros, the columns hold sums that the backup's scatters drop)."""
    del top
    leaf_return, columns = leaf_value, []
    for d in reversed(range(rewards.shape[1])):
        updated = rewards[:, d] + discounts[:, d] * leaf_return
        columns.append(updated)
        leaf_return = jnp.where(inside[:, d], updated, leaf_return)
    return jnp.stack(columns[::-1], axis=1)


def _where_rows(rows: chex.Array, new: chex.Array, old: chex.Array) -> chex.Array:
    return jnp.where(rows.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)


# --- keys: jax.random's threefry, bit for bit, without its CPU loop -----------------------------


def _raw_threefry(key) -> bool:
    """Whether `key` is a raw uint32 threefry key whose splits and draws `_threefry2x32`
    reproduces (jax's default: threefry2x32, partitionable)."""
    return (
        isinstance(key, jax.Array | np.ndarray)
        and key.dtype == jnp.uint32
        and key.shape[-1:] == (2,)
        and _JAX_FLAGS.jax_default_prng_impl == "threefry2x32"
        and bool(_JAX_FLAGS.jax_threefry_partitionable)
    )


_JAX_FLAGS: Any = jax.config  # its flags are attributes that the type stubs do not list
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(key1, key2, count_hi, count_lo):
    """The Threefry-2x32 hash (20 rounds) as jax computes it, its five round groups unrolled.

    In `lax` ops on arrays of one shape: jnp's operators would each trace as a jitted function
    of their own, which made this a quarter of the time to trace a search."""
    key1, key2, count_hi, count_lo = jnp.broadcast_arrays(key1, key2, count_hi, count_lo)
    schedule = (key1, key2, lax.bitwise_xor(lax.bitwise_xor(key1, key2), np.uint32(0x1BD11BDA)))
    x0, x1 = lax.add(count_hi, schedule[0]), lax.add(count_lo, schedule[1])
    for group in range(5):
        for rotation in _ROTATIONS[group % 2]:
            x0 = lax.add(x0, x1)
            x1 = lax.bitwise_or(
                lax.shift_left(x1, np.uint32(rotation)),
                lax.shift_right_logical(x1, np.uint32(32 - rotation)),
            )
            x1 = lax.bitwise_xor(x0, x1)
        x0 = lax.add(x0, schedule[(group + 1) % 3])
        x1 = lax.add(lax.add(x1, schedule[(group + 2) % 3]), np.uint32(group + 1))
    return x0, x1


def _hash_counts(keys, count: int):
    """threefry(key, i) for i < count: [..., 2] keys -> two [..., count] uint32 arrays."""
    counter = jnp.arange(count, dtype=jnp.uint32)
    return _threefry2x32(keys[..., 0:1], keys[..., 1:2], jnp.zeros_like(counter), counter)


def split_key(key, num: int):
    """`jax.random.split(key, num)`: [2] -> [num, 2] for a raw threefry key (typed keys too)."""
    if not _raw_threefry(key):
        return jax.random.split(key, num)
    bits_hi, bits_lo = _hash_counts(key, num)
    return jnp.stack([bits_hi, bits_lo], axis=-1)


def _row_keys(keys):
    """The rows' keys as the descent carries them: raw threefry keys [B, 2] as two [B] uint32
    halves (no stacking or slicing between two hashes, which XLA's older CPU emitters would
    expand into each use), other keys as they are."""
    return (keys[:, 0], keys[:, 1]) if _raw_threefry(keys) else keys


def _split_rows(keys):
    """`jax.vmap(jax.random.split)(keys)`: the rows' two halves, each as `keys` ([B] pairs)."""
    if not isinstance(keys, tuple):
        both = jax.vmap(jax.random.split)(keys)
        return both[:, 0], both[:, 1]
    zero, one = np.uint32(0), np.uint32(1)
    return _threefry2x32(*keys, zero, zero), _threefry2x32(*keys, zero, one)


def _uniform_rows(keys, size: int) -> chex.Array:
    """`jax.vmap(lambda k: jax.random.uniform(k, (size,)))(keys)`: [B, size] float32."""
    if not isinstance(keys, tuple):
        return jax.vmap(lambda key: jax.random.uniform(key, (size,)))(keys)
    counter = jnp.arange(size, dtype=jnp.uint32)
    bits_hi, bits_lo = _threefry2x32(
        keys[0][:, None], keys[1][:, None], jnp.zeros_like(counter), counter
    )
    bits = bits_hi ^ bits_lo
    # jax.random.uniform's float32: the top 23 bits as the mantissa of a number in [1, 2), - 1.
    mantissa = (bits >> np.uint32(32 - 23)) | np.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - jnp.float32(1.0)
