"""The arena on games with chance: OpenSpiel positions as pgx states, pubeval, one-player
evaluation, pairing scores with intervals, the human player on 2048."""

import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel
import pytest

import arena
from arena.players import HumanPlayer
from arena.pubeval import pubeval, pubeval_inputs
from arena.ratings import pairing_scores, wilson_interval
from configs import UsageError
from envs.pgx_env import pgx_chance_rules
from envs.pgx_openspiel import (
    PGX_TO_OPENSPIEL_2048,
    advance_backgammon,
    backgammon_board,
    backgammon_micro_moves,
    pgx_states_from_openspiel,
)


def _positions(name, games, seed=0):
    """The player-to-move states of random games of an OpenSpiel game (chance drawn)."""
    game = pyspiel.load_game(name)
    rng = np.random.default_rng(seed)
    states = []
    for _ in range(games):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(int(rng.choice(outcomes, p=probs)))
                continue
            states.append(state.clone())
            state.apply_action(int(rng.choice(state.legal_actions())))
    return states


def test_backgammon_moves_translate_to_pgx_moves_that_reach_the_same_board():
    """Every legal OpenSpiel move of random positions, played as its pgx moves from the
    translated state: each pgx move is legal there, and the board ends as OpenSpiel's."""
    states = _positions("backgammon", 2)[::3]
    translated = pgx_states_from_openspiel("backgammon", states)
    rows, sequences, expected = [], [], []
    for row, state in enumerate(states):
        mover = state.current_player()
        for action, moves in backgammon_micro_moves(state).items():
            rows.append(row)
            sequences.append(list(moves) + [0] * (4 - len(moves)))  # 0: pgx's no-op
            expected.append(backgammon_board(state.child(action), mover))
    # The rows' states in one program (eager jnp ops compile one program apiece).
    current = jax.jit(lambda t, rows: jax.tree.map(lambda x: x[rows], t))(
        translated, np.array(rows)
    )
    sequences = np.asarray(sequences)  # [M, 4]
    for depth in range(4):
        moves = jnp.asarray(sequences[:, depth])
        legal = np.asarray(current.legal_action_mask)[np.arange(len(rows)), sequences[:, depth]]
        assert legal.all() or (sequences[:, depth][~legal] == 0).all()
        current = advance_backgammon(current, moves)
    np.testing.assert_array_equal(np.asarray(current._board), np.stack(expected))
    assert len(rows) > 200  # many moves checked, doubles and the bar among them


def test_2048_positions_translate_with_openspiels_legal_moves():
    states = _positions("2048(max_tile=131072)", 1)[::2]
    translated = pgx_states_from_openspiel("2048", states)
    afterstate = jax.jit(pgx_chance_rules("2048").afterstate)
    for row, state in enumerate(states):
        legal = np.asarray(translated.legal_action_mask[row])
        assert {PGX_TO_OPENSPIEL_2048[a] for a in np.flatnonzero(legal)} == set(
            state.legal_actions()
        )
    # Each move slides the tiles as OpenSpiel does (before the new tile).
    for pgx_action in range(4):
        after, _ = afterstate(translated, jnp.full(len(states), pgx_action))
        for row, state in enumerate(states):
            os_action = PGX_TO_OPENSPIEL_2048[pgx_action]
            if os_action not in state.legal_actions():
                continue
            child = state.child(os_action)  # a chance node: the tile not yet placed
            tiles = np.asarray(child.observation_tensor(0))
            board = np.where(tiles > 0, np.log2(np.maximum(tiles, 1)), 0)
            np.testing.assert_array_equal(np.asarray(after.state._board[row]), board)


def test_pubeval_inputs_and_preferences():
    points = np.zeros(24, int)
    points[5] = 3  # three of the mover's checkers on its 6-point
    points[23] = -1  # an opponent's blot on the mover's 24-point
    x = pubeval_inputs(points, opponent_bar=2, mover_off=4)
    # Tesauro's order: the 24-point's five inputs first, the 1-point's last.
    assert x[0] == 1.0 and x[1:5].sum() == 0  # the blot
    six = 5 * (24 - 6)
    np.testing.assert_array_equal(x[six : six + 5], [0, 0, 1, 1, 0])  # two or more, exactly 3
    assert x[120] == 2 and x[121] == 4 and x.sum() == 1 + 2 + 2 + 4
    assert pubeval(points, 0, 0, 15) == 99_999_999.0  # all off: the best there is
    # A race (no contact): a checker borne off beats the same checker left on the 1-point.
    race = np.zeros(24, int)
    race[0], race[23] = 1, -15
    assert pubeval(np.zeros(24, int) - race.clip(max=0), 0, 0, 15) > pubeval(race, 0, 0, 14)


def test_pubeval_beats_random_and_the_arena_scores_have_intervals():
    records = arena.run_tournament("backgammon", ["pubeval", "random"], 6, seed=3)
    scores = pairing_scores(records, ["pubeval", "random"])
    assert scores["pubeval"]["random"]["score"] >= 5 / 6
    assert scores["pubeval"]["random"]["games"] == 6
    lo, hi = scores["pubeval"]["random"]["ci95"]
    assert lo < scores["pubeval"]["random"]["score"] <= hi
    with pytest.raises(UsageError, match="backgammon only"):
        arena.make_player("pubeval", pyspiel.load_game("tic_tac_toe"))


def test_wilson_interval_hand_values():
    # 19 wins of 20: the textbook interval [0.764, 0.991].
    lo, hi = wilson_interval(19 / 20, 20)
    assert abs(lo - 0.7639) < 1e-3 and abs(hi - 0.9911) < 1e-3
    assert wilson_interval(1.0, 200)[1] == 1.0 and wilson_interval(0.5, 0) == (0.0, 1.0)


def test_solo_evaluation_scores_tiles_and_resumes(tmp_path):
    game = pyspiel.load_game("2048(max_tile=131072)")
    first = arena.evaluate_solo(game, "random", 3, seed=1, out_dir=tmp_path)
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    tiles = first.highest_tiles
    assert len(lines) == 3 and first.scores.shape == (3,) and tiles.min() >= 16
    assert (tiles & (tiles - 1) == 0).all()  # powers of two
    assert first.summary.mean.low <= first.summary.mean.value <= first.summary.mean.high
    # The same seeds replay the same episodes; a finished evaluation plays none again.
    again = arena.evaluate_solo(game, "random", 4, seed=1, out_dir=tmp_path)
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 4
    np.testing.assert_array_equal(again.scores[:3], first.scores)
    record = json.loads(lines[0])
    assert record["score"] == first.scores[0] and record["highest_tile"] == tiles[0]
    with pytest.raises(UsageError, match="terminal rewards"):
        arena.make_player("mcts:10", game)
    with pytest.raises(UsageError, match="one-player"):
        arena.evaluate_solo(pyspiel.load_game("backgammon"), "random", 1)


def test_human_player_moves_in_2048():
    game = pyspiel.load_game("2048(max_tile=131072)")
    state = _positions("2048(max_tile=131072)", 1)[0]
    legal = state.legal_actions()
    illegal = [a for a in range(4) if a not in legal]
    typed = ([f"{illegal[0]}\n"] if illegal else []) + [f"{state.action_to_string(0, legal[0])}\n"]
    out = io.StringIO()
    human = HumanPlayer("human", stdin=io.StringIO("".join(typed)), stdout=out)
    assert human.step(state) == legal[0]
    assert "legal moves" in out.getvalue()
    del game
