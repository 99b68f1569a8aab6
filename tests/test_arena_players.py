"""Players: spec grammar, the bots' moves, the human's input handling, OpenSpiel compatibility."""

import io

import numpy as np
import pyspiel
import pytest
from open_spiel.python.algorithms import evaluate_bots

from arena import players
from arena.players import (
    BatchedPlayer,
    HumanPlayer,
    is_batched,
    make_player,
    parse_spec,
    register_player,
    registered_players,
    split_specs,
)
from configs import UsageError

TTT = pyspiel.load_game("tic_tac_toe")


def play(game, actions):
    state = game.new_initial_state()
    for a in actions:
        state.apply_action(a)
    return state


def test_spec_grammar():
    assert parse_spec("mcts:1000,uct_c=1.4") == (
        "mcts",
        "1000",
        {"uct_c": "1.4"},
        "mcts:1000,uct_c=1.4",
    )
    assert parse_spec("minimax:depth=4") == ("minimax", None, {"depth": "4"}, "minimax:depth=4")
    assert parse_spec("ckpt:runs/ttt/step_100") == (
        "ckpt",
        "runs/ttt/step_100",
        {},
        "ckpt:runs/ttt/step_100",
    )
    assert parse_spec(" random ") == ("random", None, {}, "random")
    for bad in ("", "MCTS", "mcts:", "mcts:1,2", "mcts:uct_c=1,uct_c=2", ":5"):
        with pytest.raises(UsageError, match="malformed player spec"):
            parse_spec(bad)


def test_player_lists_keep_settings_with_their_spec():
    assert split_specs("mcts:1000,uct_c=1.4,random") == ["mcts:1000,uct_c=1.4", "random"]
    assert split_specs("minimax,depth=3,human") == ["minimax:depth=3", "human"]
    assert split_specs("random, mcts:5") == ["random", "mcts:5"]
    with pytest.raises(UsageError, match="empty item"):
        split_specs("random,,mcts")
    with pytest.raises(UsageError, match="no spec before it"):
        split_specs("uct_c=1,random")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("alphago", "unknown player 'alphago'"),
        ("mcts:many", "must be an integer"),
        ("mcts:0", "at least 2"),
        ("mcts:1", "at least 2"),  # OpenSpiel's UCT had no move after one: a traceback
        ("mcts:10,uct_c=-1", "finite number"),
        ("mcts:10,temperature=1", "unknown setting"),
        ("random:3", "takes no bare setting"),
        ("minimax:depth=0", "at least 1"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(spec, message):
    with pytest.raises(UsageError, match=message):
        make_player(spec, TTT)


def test_minimax_refuses_big_games_without_a_depth():
    connect_four = pyspiel.load_game("connect_four")
    with pytest.raises(UsageError, match="minimax:depth=4"):
        make_player("minimax", connect_four)
    player = make_player("minimax:depth=2", connect_four)
    # Red (player 0) has three in column 0 and must win at once.
    assert player.step(play(connect_four, [0, 1, 0, 1, 0, 2])) == 0
    with pytest.raises(UsageError, match="deterministic"):
        make_player("minimax", pyspiel.load_game("kuhn_poker"))


def test_minimax_wins_when_it_can_and_blocks_otherwise():
    # x (to move) has 0 and 1: 2 wins at once (6 would win too, later).
    state = play(TTT, [0, 4, 1, 8])
    for seed in range(5):
        assert make_player("minimax", TTT, seed=seed).step(state) == 2
    # o to move: x threatens 2 (0, 1); o must block.
    state = play(TTT, [0, 4, 1])
    for seed in range(5):
        assert make_player("minimax", TTT, seed=seed).step(state) == 2


def test_minimax_picks_among_equal_moves_at_random_and_mcts_is_seeded():
    first_moves = {
        make_player("minimax", TTT, seed=s).step(TTT.new_initial_state()) for s in range(6)
    }
    assert len(first_moves) > 1  # every first move draws with best play
    state = play(TTT, [4])
    moves = [make_player("mcts:20", TTT, seed=7).step(state) for _ in range(2)]
    assert moves[0] == moves[1] and moves[0] in state.legal_actions()
    # The fewest simulations it takes play a legal move.
    assert make_player("mcts:2", TTT, seed=7).step(state) in state.legal_actions()


def test_human_player_asks_again_after_malformed_and_illegal_moves():
    state = play(TTT, [4])  # centre taken by x; o to move
    out = io.StringIO()
    human = HumanPlayer("human", io.StringIO("hello\n4\n\no(1,1)\no(0,2)\n"), out)
    assert human.step(state) == 2
    text = out.getvalue()
    assert str(state).splitlines()[1] in text  # the board is shown
    assert "0=o(0,0)" in text and "4=" not in text  # legal moves listed by id and text
    assert "'hello' is not a legal move" in text
    assert "4 is not a legal move" in text
    assert "'o(1,1)' is not a legal move" in text
    assert HumanPlayer("human", io.StringIO("7\n"), io.StringIO()).step(state) == 7
    with pytest.raises(UsageError, match="input ended"):
        HumanPlayer("human", io.StringIO("9\n"), io.StringIO()).step(state)


def test_players_run_under_openspiel_evaluate_bots():
    bots = [make_player("minimax", TTT, seed=0), make_player("random", TTT, seed=1)]
    for _ in range(3):
        returns = evaluate_bots.evaluate_bots(
            TTT.new_initial_state(), bots, np.random.RandomState(0)
        )
        assert returns[0] >= 0  # minimax never loses


class FirstLegal(BatchedPlayer):
    def step_many(self, states):
        return [s.legal_actions()[0] for s in states]


def test_registered_batched_player_is_usable_one_state_at_a_time(monkeypatch):
    monkeypatch.setattr(players, "_REGISTRY", dict(players._REGISTRY))
    register_player("firstlegal", lambda spec, game, seed: FirstLegal(spec.text), "firstlegal")
    assert "firstlegal" in registered_players()
    player = make_player("firstlegal", TTT)
    assert is_batched(player) and not is_batched(make_player("random", TTT))
    assert player.step(play(TTT, [0])) == 1
    assert player.step_many([play(TTT, [0]), play(TTT, [1, 0])]) == [1, 2]
