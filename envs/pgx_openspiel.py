"""OpenSpiel states as pgx states, for agents trained on pgx's games with chance.

The arena referees with OpenSpiel; an AlphaZero or Stochastic MuZero agent trained on pgx's `2048`
or `backgammon` searches pgx states. A deterministic game's pgx state is rebuilt by replaying the
OpenSpiel moves (their ids coincide, `pgx_replay`); with chance the ids differ (OpenSpiel's chance
outcomes, backgammon's moves of two checkers at once), so the position itself is translated:

- 2048: OpenSpiel's tiles (values) -> pgx's board (powers of two); OpenSpiel's moves are up,
  right, down, left, pgx's left, up, right, down (`PGX_TO_OPENSPIEL_2048`). The legal moves are
  OpenSpiel's: it refuses a move whose only change is a merge into a tile that merged on the
  previous move (its legality check reads the previous move's merge marks), which pgx allows.
- backgammon: OpenSpiel's points and bars -> pgx's board from the mover's side, and the dice
  still to play. pgx moves one checker by one die; an OpenSpiel move is a whole roll's checkers
  (a double: two moves of two), so `backgammon_micro_moves` lists each legal OpenSpiel move as
  its pgx moves, in OpenSpiel's order.

Tested against play: the pgx moves of every legal OpenSpiel move are legal in the translated
state, and lead to the board OpenSpiel reaches (tests/test_arena_chance.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel

from configs.caching import built_once

__all__ = [
    "OPENSPIEL_GAMES",
    "PGX_TO_OPENSPIEL_2048",
    "advance_backgammon",
    "backgammon_board",
    "backgammon_micro_moves",
    "pgx_states_from_openspiel",
]

# pgx game -> the OpenSpiel game the arena referees it with. OpenSpiel's 2048 ends when a tile
# reaches `max_tile` (2048 by default); pgx's goes on until no move is left.
OPENSPIEL_GAMES = {"2048": "2048(max_tile=131072)", "backgammon": "backgammon()"}

# pgx's 2048 move (left, up, right, down) -> OpenSpiel's (0 up, 1 right, 2 down, 3 left).
PGX_TO_OPENSPIEL_2048 = (3, 0, 1, 2)

_BAR, _PASS = 100, -1  # OpenSpiel backgammon's checker-move positions for the bar and a pass


@built_once()
def _jitted() -> dict[str, Callable]:
    """The jitted translations, built once. The games are made here, outside the traced
    functions: made inside, their arrays became constants of the compiled programs, which
    jaxlib 0.10 then failed to pass on the second call ("supplied 12 arguments but compiled
    program expected 15")."""
    import pgx  # JAX and pgx only where an agent plays
    from pgx import backgammon

    game_2048, game_backgammon = pgx.make("2048"), pgx.make("backgammon")

    def states_2048(boards, legal):
        state = jax.vmap(game_2048.init)(jax.random.split(jax.random.PRNGKey(0), boards.shape[0]))
        state = state.replace(_board=boards, legal_action_mask=legal)
        return state.replace(observation=jax.vmap(game_2048.observe)(state))

    def states_backgammon(boards, playable, played):
        batch = boards.shape[0]
        keys = jax.random.split(jax.random.PRNGKey(0), batch)
        state = jax.vmap(game_backgammon.init)(keys)
        dice = jnp.where(playable[:, :2] >= 0, playable[:, :2], playable[:, 2:])  # [N, 2]
        legal = jax.vmap(backgammon._legal_action_mask)(boards, playable)
        state = state.replace(
            current_player=jnp.zeros(batch, jnp.int32),
            _turn=jnp.zeros(batch, jnp.int32),
            _board=boards,
            _dice=dice,
            _playable_dice=playable,
            _played_dice_num=played.astype(jnp.int32),
            legal_action_mask=legal,
        )
        return state.replace(observation=jax.vmap(game_backgammon.observe)(state))

    def advance(state, action):
        state = jax.vmap(backgammon._update_by_action)(state, action)
        return state.replace(observation=jax.vmap(game_backgammon.observe)(state))

    return {
        "2048": jax.jit(states_2048),
        "backgammon": jax.jit(states_backgammon),
        "advance": jax.jit(advance),
    }


def pgx_states_from_openspiel(env_id: str, states: Sequence[pyspiel.State]) -> Any:
    """The batched pgx State of each OpenSpiel state (a player to move) of `2048` or
    `backgammon`, with its legal moves and its mover's observation."""
    if env_id == "2048":
        boards = np.stack([_board_2048(state) for state in states])  # [N, 16]
        legal = np.zeros((len(states), 4), bool)  # OpenSpiel's legal moves, in pgx's order
        for row, state in enumerate(states):
            moves = set(state.legal_actions())
            legal[row] = [PGX_TO_OPENSPIEL_2048[a] in moves for a in range(4)]
        # NumPy in, as it is: `jnp.asarray` of host data runs a program of its own.
        return _jitted()["2048"](boards, legal)
    if env_id == "backgammon":
        rows = [_backgammon_row(state) for state in states]
        boards, playable, played = (np.stack(x) for x in zip(*rows, strict=True))
        jitted = _jitted()["backgammon"]
        return jitted(boards, playable, played)
    raise ValueError(
        f"no OpenSpiel translation for pgx:{env_id}; known: {', '.join(OPENSPIEL_GAMES)}"
    )


def _board_2048(state: pyspiel.State) -> np.ndarray:
    tiles = np.asarray(state.observation_tensor(), np.float64)  # [16] tile values, 0 empty
    return np.where(tiles > 0, np.log2(np.maximum(tiles, 1.0)), 0).astype(np.int32)


def _backgammon_row(state: pyspiel.State) -> tuple[np.ndarray, np.ndarray, int]:
    """(pgx board [28], playable dice [4], dice played) of an OpenSpiel state, mover's side."""
    mover = state.current_player()
    if mover not in (0, 1):
        raise ValueError(f"no player to move in:\n{state}")
    board = backgammon_board(state, mover)
    tensor = np.asarray(state.observation_tensor(mover))  # [200]
    dice = [int(d) - 1 for d in tensor[198:200]]  # pgx writes 1..6 as 0..5
    # OpenSpiel plays a double as two moves of two checkers: the second follows a move, not a
    # roll, by the same player.
    history = state.full_history()
    second_half = bool(history) and history[-1].player == mover
    if dice[0] == dice[1]:
        playable = [dice[0]] * 2 + ([-1, -1] if second_half else [dice[0]] * 2)
        played = 2 if second_half else 0
    else:
        playable, played = dice + [-1, -1], 0
    return board, np.asarray(playable, np.int32), played


def backgammon_board(state: pyspiel.State, player: int) -> np.ndarray:
    """pgx's board [28] of an OpenSpiel backgammon state from `player`'s side: index i is the
    player's point 24 - i (the player's checkers positive), then the bars and the borne off."""
    board = np.zeros(28, np.int32)
    for pos in range(24):
        # Player 0's OpenSpiel position is pgx's index; player 1 moves the other way.
        index = pos if player == 0 else 23 - pos
        board[index] = state.board(player, pos) - state.board(1 - player, pos)
    tensor = np.asarray(state.observation_tensor(player))  # [200], the player's own first
    board[24], board[25] = int(tensor[192]), -int(tensor[195])  # bars
    board[26], board[27] = int(tensor[193]), -int(tensor[196])  # borne off
    return board


def _micro(mover: int, pos: int, num: int) -> int:
    """pgx's move `src * 6 + die - 1` of OpenSpiel's checker move (pos, num)."""
    if pos == _PASS:
        return 0  # pgx's no-op
    if pos == _BAR:
        return 6 + num - 1
    index = pos if mover == 0 else 23 - pos
    return (2 + index) * 6 + num - 1


def backgammon_micro_moves(state: pyspiel.State) -> dict[int, tuple[int, ...]]:
    """Each legal OpenSpiel move of `state` as the pgx moves that make it, in order."""
    mover = state.current_player()
    moves = {}
    for action in state.legal_actions():
        checkers = state.spiel_move_to_checker_moves(mover, action)
        micro = tuple(_micro(mover, c.pos, c.num) for c in checkers if c.pos != _PASS)
        moves[action] = micro or (0,)
    return moves


def advance_backgammon(state: Any, action: jax.Array) -> Any:
    """pgx's backgammon states after one move each (`action` [B]; 0, the no-op, leaves a state
    as it is) within the mover's turn: no roll, no change of player, the observation updated."""
    return _jitted()["advance"](state, action)
