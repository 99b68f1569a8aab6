"""Tesauro's pubeval: the classic benchmark evaluation for backgammon, as an arena player.

Gerald Tesauro published pubeval (1993) as a public benchmark opponent: a linear evaluation of the
position after a move, with one weight vector for contact positions and one for races, trained by
him on expert preferences. It plays the legal move whose resulting position scores highest. It is
weak by today's standards (TD-Gammon and GNU Backgammon beat it about 60-70% of games) and
stronger than any random or rollout-free heuristic: the usual yardstick of a learned backgammon
agent.

The weights below are the published ones (as distributed with Tesauro's `pubeval.c`, here with
its input scalings folded in, as GNU Backgammon's copy has them: the (n - 3) / 2 of four or more
checkers on a point, the bar's / 2 and the borne-off's / 15). The input encoding is Tesauro's:
for each of the mover's points 24 down to 1, five inputs: an opponent's blot, one of the mover's
checkers, two or more, exactly three, and the checkers beyond three; then the opponent's checkers
on the bar and the mover's borne off. The code is this project's own.

A double in OpenSpiel's backgammon is two moves of two checkers by the same player: the player
scores each pair of them together (the position after both), as pubeval scores a whole roll.
"""

from __future__ import annotations

import numpy as np
import pyspiel

from arena.players import Player, PlayerSpec, _no_settings, register_player
from configs import UsageError

__all__ = ["PubevalPlayer", "pubeval", "pubeval_inputs"]

# fmt: off
_CONTACT = np.array([
    .25696, -.66937, -1.66135, -2.02487, -2.53398 / 2.0,
    -.16092, -1.11725, -1.06654, -.92830, -1.99558 / 2.0,
    -1.10388, -.80802, .09856, -.62086, -1.27999 / 2.0,
    -.59220, -.73667, .89032, -.38933, -1.59847 / 2.0,
    -1.50197, -.60966, 1.56166, -.47389, -1.80390 / 2.0,
    -.83425, -.97741, -1.41371, .24500, .10970 / 2.0,
    -1.36476, -1.05572, 1.15420, .11069, -.38319 / 2.0,
    -.74816, -.59244, .81116, -.39511, .11424 / 2.0,
    -.73169, -.56074, 1.09792, .15977, .13786 / 2.0,
    -1.18435, -.43363, 1.06169, -.21329, .04798 / 2.0,
    -.94373, -.22982, 1.22737, -.13099, -.06295 / 2.0,
    -.75882, -.13658, 1.78389, .30416, .36797 / 2.0,
    -.69851, .13003, 1.23070, .40868, -.21081 / 2.0,
    -.64073, .31061, 1.59554, .65718, .25429 / 2.0,
    -.80789, .08240, 1.78964, .54304, .41174 / 2.0,
    -1.06161, .07851, 2.01451, .49786, .91936 / 2.0,
    -.90750, .05941, 1.83120, .58722, 1.28777 / 2.0,
    -.83711, -.33248, 2.64983, .52698, .82132 / 2.0,
    -.58897, -1.18223, 3.35809, .62017, .57353 / 2.0,
    -.07276, -.36214, 4.37655, .45481, .21746 / 2.0,
    .10504, -.61977, 3.54001, .04612, -.18108 / 2.0,
    .63211, -.87046, 2.47673, -.48016, -1.27157 / 2.0,
    .86505, -1.11342, 1.24612, -.82385, -2.77082 / 2.0,
    1.23606, -1.59529, .10438, -1.30206, -4.11520 / 2.0,
    5.62596 / 2.0, -2.75800 / 15.0,
])
_RACE = np.array([
    .00000, -.17160, .27010, .29906, -.08471 / 2.0,
    .00000, -1.40375, -1.05121, .07217, -.01351 / 2.0,
    .00000, -1.29506, -2.16183, .13246, -1.03508 / 2.0,
    .00000, -2.29847, -2.34631, .17253, .08302 / 2.0,
    .00000, -1.27266, -2.87401, -.07456, -.34240 / 2.0,
    .00000, -1.34640, -2.46556, -.13022, -.01591 / 2.0,
    .00000, .27448, .60015, .48302, .25236 / 2.0,
    .00000, .39521, .68178, .05281, .09266 / 2.0,
    .00000, .24855, -.06844, -.37646, .05685 / 2.0,
    .00000, .17405, .00430, .74427, .00576 / 2.0,
    .00000, .12392, .31202, -.91035, -.16270 / 2.0,
    .00000, .01418, -.10839, -.02781, -.88035 / 2.0,
    .00000, 1.07274, 2.00366, 1.16242, .22520 / 2.0,
    .00000, .85631, 1.06349, 1.49549, .18966 / 2.0,
    .00000, .37183, -.50352, -.14818, .12039 / 2.0,
    .00000, .13681, .13978, 1.11245, -.12707 / 2.0,
    .00000, -.22082, .20178, -.06285, -.52728 / 2.0,
    .00000, -.13597, -.19412, -.09308, -1.26062 / 2.0,
    .00000, 3.05454, 5.16874, 1.50680, 5.35000 / 2.0,
    .00000, 2.19605, 3.85390, .88296, 2.30052 / 2.0,
    .00000, .92321, 1.08744, -.11696, -.78560 / 2.0,
    .00000, -.09795, -.83050, -1.09167, -4.94251 / 2.0,
    .00000, -1.00316, -3.66465, -2.56906, -9.67677 / 2.0,
    .00000, -2.77982, -7.26713, -3.40177, -12.32252 / 2.0,
    .00000 / 2.0, 3.42040 / 15.0,
])
# fmt: on
assert _CONTACT.shape == _RACE.shape == (122,)

_ALL_OFF = 99_999_999.0  # pubeval's score of a position with all the mover's checkers off


def pubeval_inputs(points: np.ndarray, opponent_bar: int, mover_off: int) -> np.ndarray:
    """Tesauro's 122 inputs of a position from the mover's side.

    Args:
      points: [24] the mover's points 1..24 (index 0 is the 1-point, the last the mover reaches):
        the mover's checkers positive, the opponent's negative.
      opponent_bar: the opponent's checkers on the bar (>= 0).
      mover_off: the mover's checkers borne off.
    """
    x = np.zeros(122)
    for i, n in enumerate(points[::-1]):  # the 24-point first, as Tesauro orders them
        n = int(n)
        if n == -1:
            x[5 * i] = 1.0
        elif n == 1:
            x[5 * i + 1] = 1.0
        elif n >= 2:
            x[5 * i + 2] = 1.0
            if n == 3:
                x[5 * i + 3] = 1.0
            elif n >= 4:
                x[5 * i + 4] = n - 3.0  # the weight holds the / 2
    x[120] = opponent_bar  # the weight holds the / 2
    x[121] = mover_off  # the weight holds the / 15
    return x


def pubeval(points: np.ndarray, mover_bar: int, opponent_bar: int, mover_off: int) -> float:
    """pubeval's score of a position from the mover's side (see `pubeval_inputs`); the race
    weights where no contact is left (every mover's checker past every opponent's)."""
    if mover_off == 15:
        return _ALL_OFF
    mine = np.flatnonzero(points > 0)
    theirs = np.flatnonzero(points < 0)
    race = (
        mover_bar == 0
        and opponent_bar == 0
        and (len(mine) == 0 or len(theirs) == 0 or mine.max() < theirs.min())
    )
    weights = _RACE if race else _CONTACT
    return float(weights @ pubeval_inputs(points, opponent_bar, mover_off))


def _position(state: pyspiel.State, player: int) -> tuple[np.ndarray, int, int, int]:
    """(points [24] from `player`'s 1-point, player's bar, opponent's bar, player's off)."""
    points = np.zeros(24, np.int64)
    for pos in range(24):
        # Player 0 moves up OpenSpiel's positions (its 1-point is pos 23), player 1 down.
        point = 23 - pos if player == 0 else pos
        points[point] = state.board(player, pos) - state.board(1 - player, pos)
    tensor = state.observation_tensor(player)  # [200]: its own bar, off, then the opponent's
    return points, int(tensor[192]), int(tensor[195]), int(tensor[193])


class PubevalPlayer(Player):
    """Plays the legal move (of a double: the pair of moves) that pubeval scores highest."""

    def step(self, state: pyspiel.State) -> int:
        player = state.current_player()
        best_action, best_score = None, -np.inf
        for action in state.legal_actions():
            child = state.child(action)
            score = self._score(child, player)
            if score > best_score:
                best_action, best_score = action, score
        assert best_action is not None
        return int(best_action)

    def _score(self, state: pyspiel.State, player: int) -> float:
        if state.is_terminal():
            return _ALL_OFF if state.returns()[player] > 0 else -_ALL_OFF
        if state.current_player() == player:  # a double's second half: the best of its moves
            return max(self._score(state.child(a), player) for a in state.legal_actions())
        points, bar, opponent_bar, off = _position(state, player)
        return pubeval(points, bar, opponent_bar, off)


def _make_pubeval(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> Player:
    _no_settings(spec)
    if game.get_type().short_name != "backgammon":
        raise UsageError(f"player {spec.text!r} plays backgammon only, not {game}")
    return PubevalPlayer(spec.text)


register_player(
    "pubeval",
    _make_pubeval,
    "pubeval: Tesauro's public backgammon evaluation (1993), the move it scores highest",
)
