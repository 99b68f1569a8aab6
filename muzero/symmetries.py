"""Board symmetries as data augmentation: each training example seen in a random orientation.

A board game whose rules do not change when the board is rotated or mirrored (tic-tac-toe and go:
the 8 symmetries of the square; connect four: the left-right mirror) gives, for each position in
the replay, as many equally valid training examples. AlphaGo Zero trained on random ones of its 8.
Here a symmetry is a permutation of the board's cells and of the action ids, applied to a batch
inside the loss (`with_symmetries`), one symmetry drawn per example from the loss's key:

    observation [N, H, W, C]   cell p of the new board is cell `cell_source[s, p]` of the old
    policy      [..., A]       new action a gets the probability of old action `action_source[s, a]`
    action      [N, K]         old action a becomes `action_image[s, a]` (MuZero's unrolled moves)

Values, rewards and masks do not change. Row 0 is always the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from muzero.types import AlphaZeroBatch, MuZeroBatch

__all__ = [
    "BoardSymmetries",
    "augment_alphazero_batch",
    "augment_muzero_batch",
    "dihedral_symmetries",
    "make_symmetries",
    "mirror_symmetries",
    "with_symmetries",
]


class BoardSymmetries(NamedTuple):
    """S permutations of an H x W board's cells and of A action ids (row 0: the identity)."""

    cell_source: np.ndarray  # [S, H*W] int32: old cell shown at each new cell
    action_source: np.ndarray  # [S, A] int32: old action whose probability each new action gets
    action_image: np.ndarray  # [S, A] int32: new id of each old action (inverse of the above)
    height: int
    width: int

    # S. The name shadows tuple.count(value) (mypy: an incompatible override); callers read
    # `symmetries.count`, and nothing calls tuple.count on it, so the name stays.
    @property
    def count(self) -> int:  # type: ignore[override]
        return int(self.cell_source.shape[0])


def make_symmetries(
    cell_source: np.ndarray, action_source: np.ndarray, height: int, width: int
) -> BoardSymmetries:
    """Checks that every row is a permutation and row 0 the identity; adds the inverses."""
    cell_source = np.asarray(cell_source, np.int32)
    action_source = np.asarray(action_source, np.int32)
    if cell_source.ndim != 2 or cell_source.shape[1] != height * width:
        raise ValueError(f"cell_source must be [S, {height * width}], got {cell_source.shape}")
    if action_source.ndim != 2 or action_source.shape[0] != cell_source.shape[0]:
        raise ValueError(
            f"action_source must be [{cell_source.shape[0]}, A], got {action_source.shape}"
        )
    for name, table in (("cell_source", cell_source), ("action_source", action_source)):
        identity = np.arange(table.shape[1])
        if not np.array_equal(table[0], identity):
            raise ValueError(f"{name}[0] must be the identity")
        if not all(np.array_equal(np.sort(row), identity) for row in table):
            raise ValueError(f"every row of {name} must be a permutation")
    action_image = np.argsort(action_source, axis=1).astype(np.int32)
    return BoardSymmetries(cell_source, action_source, action_image, height, width)


def _square_maps(size: int) -> np.ndarray:
    """[8, size*size]: the old cell at each new cell under the 8 symmetries of the square."""
    cells = np.arange(size * size).reshape(size, size)
    maps = []
    for flipped in (cells, cells.T):
        for turns in range(4):
            maps.append(np.rot90(flipped, turns).ravel())
    return np.stack(maps)  # row 0: no transpose, no turn


def dihedral_symmetries(size: int, num_actions: int) -> BoardSymmetries:
    """The 8 rotations and reflections of a square board whose actions are its cells (row-major,
    as the observation's H x W), optionally followed by non-board actions (go's pass) that every
    symmetry leaves in place."""
    cells = size * size
    if num_actions < cells:
        raise ValueError(
            f"a {size}x{size} board's actions must include its {cells} cells, got "
            f"{num_actions} actions"
        )
    cell_source = _square_maps(size)
    extra = np.broadcast_to(np.arange(cells, num_actions), (8, num_actions - cells))
    return make_symmetries(cell_source, np.concatenate([cell_source, extra], axis=1), size, size)


def mirror_symmetries(height: int, width: int, num_actions: int) -> BoardSymmetries:
    """The identity and the left-right mirror, for actions that are columns (connect four:
    A == width) or cells (row-major, A == height * width)."""
    cells = np.arange(height * width).reshape(height, width)
    cell_source = np.stack([cells.ravel(), cells[:, ::-1].ravel()])
    if num_actions == width:
        columns = np.arange(width)
        action_source = np.stack([columns, columns[::-1]])
    elif num_actions == height * width:
        action_source = cell_source
    else:
        raise ValueError(
            f"mirror actions must be the {width} columns or the {height * width} "
            f"cells, got {num_actions} actions"
        )
    return make_symmetries(cell_source, action_source, height, width)


def _permute_board(
    observation: chex.Array, cell_source: chex.Array, symmetries: BoardSymmetries
) -> chex.Array:
    """observation [N, H, W, C], cell_source [N, H*W] -> the permuted boards [N, H, W, C]."""
    n = observation.shape[0]
    chex.assert_shape(observation, (n, symmetries.height, symmetries.width, None))
    flat = observation.reshape(n, symmetries.height * symmetries.width, -1)  # [N, H*W, C]
    moved = jnp.take_along_axis(flat, cell_source[:, :, None], axis=1)
    return moved.reshape(observation.shape)


def augment_muzero_batch(
    batch: MuZeroBatch, symmetries: BoardSymmetries, index: chex.Array
) -> MuZeroBatch:
    """Each window n seen under symmetry `index[n]` ([N] int): the start observation, the
    unrolled actions and every step's policy target; values and rewards as they were."""
    n, k = batch.action.shape
    chex.assert_shape(index, (n,))
    chex.assert_shape(batch.policy_target, (n, k + 1, symmetries.action_source.shape[1]))
    action_source = jnp.asarray(symmetries.action_source)[index]  # [N, A]
    action_image = jnp.asarray(symmetries.action_image)[index]  # [N, A]
    cell_source = jnp.asarray(symmetries.cell_source)[index]  # [N, H*W]
    return batch._replace(
        observation=_permute_board(batch.observation, cell_source, symmetries),
        action=jnp.take_along_axis(action_image, batch.action, axis=1),
        policy_target=jnp.take_along_axis(batch.policy_target, action_source[:, None, :], axis=2),
    )


def augment_alphazero_batch(
    batch: AlphaZeroBatch, symmetries: BoardSymmetries, index: chex.Array
) -> AlphaZeroBatch:
    """Each state n seen under symmetry `index[n]` ([N] int): observation and policy target."""
    n = batch.value_target.shape[0]
    chex.assert_shape(index, (n,))
    chex.assert_shape(batch.policy_target, (n, symmetries.action_source.shape[1]))
    action_source = jnp.asarray(symmetries.action_source)[index]  # [N, A]
    cell_source = jnp.asarray(symmetries.cell_source)[index]  # [N, H*W]
    return batch._replace(
        observation=_permute_board(batch.observation, cell_source, symmetries),
        policy_target=jnp.take_along_axis(batch.policy_target, action_source, axis=1),
    )


LossFn = Callable[[Any, Any, jax.Array], tuple[jax.Array, Any]]


def with_symmetries(
    loss_fn: LossFn,
    symmetries: BoardSymmetries,
    augment: Callable[[Any, BoardSymmetries, chex.Array], Any],
) -> LossFn:
    """`loss_fn` on the batch seen through a uniformly random symmetry per example, drawn from the
    loss's key (each update and each shard of a replicated one draws its own)."""

    def loss(params, batch, key):
        symmetry_key, loss_key = jax.random.split(key)
        n = batch.importance_weight.shape[0]  # both batch types carry one weight per example
        index = jax.random.randint(symmetry_key, (n,), 0, symmetries.count)  # [N]
        return loss_fn(params, augment(batch, symmetries, index), loss_key)

    return loss
