"""Which board symmetries a game's rules respect, in its adapter's observation and action layout.

`board_symmetries(spec)` returns `muzero.BoardSymmetries` for the games below, or None:

    tic_tac_toe (OpenSpiel, pgx)      the 8 symmetries of the 3x3 square; actions are cells
    go (OpenSpiel go(board_size=N),   the 8 symmetries of the NxN square; actions are cells
        pgx go_9x9, go_19x19)         then pass (which stays pass)
    connect_four (OpenSpiel, pgx)     the left-right mirror; actions are columns

Every adapter here gives board observations channels-last [H, W, C] with cell (h, w) the cell of
action h * W + w (tic-tac-toe, go) or of column w (connect four); tests/test_symmetries.py checks
that against the rules by replaying mirrored and rotated games.
"""

from __future__ import annotations

import muzero
from envs.base import EnvSpec

__all__ = ["board_symmetries"]


def _game(spec: EnvSpec) -> tuple[str, int | None]:
    """(game, board size) of a board game this module knows, else ("", None)."""
    name = spec.name.partition(":")[2]
    if spec.family == "pgx":
        if name in ("tic_tac_toe", "connect_four"):
            return name, None
        if name in ("go_9x9", "go_19x19"):
            return "go", int(name.rsplit("x", 1)[1])
        return "", None
    if spec.family == "openspiel":
        import pyspiel

        game = pyspiel.load_game(name)
        short = game.get_type().short_name
        if short in ("tic_tac_toe", "connect_four"):
            return short, None
        if short == "go":
            return "go", int(game.get_parameters()["board_size"])
    return "", None


def board_symmetries(spec: EnvSpec) -> muzero.BoardSymmetries | None:
    """The symmetries of `spec`'s game in its observation/action layout; None if none is known."""
    game, size = _game(spec)
    if not game or len(spec.observation_shape) != 3:
        return None
    height, width = spec.observation_shape[:2]
    if game == "tic_tac_toe" and (height, width) == (3, 3) and spec.num_actions == 9:
        return muzero.dihedral_symmetries(3, 9)
    if game == "go" and (height, width) == (size, size) and spec.num_actions == size * size + 1:
        return muzero.dihedral_symmetries(size, spec.num_actions)
    if game == "connect_four" and spec.num_actions == width:
        return muzero.mirror_symmetries(height, width, spec.num_actions)
    return None
