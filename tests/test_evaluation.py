"""selfplay.evaluation: the exhaustive tic-tac-toe walk, the board actor's padded batches, and the
report on a tiny trained run."""

import json

import jax
import numpy as np
import pyspiel
import pytest

import configs
import muzero
from configs import UsageError
from envs import make_env
from selfplay import evaluation
from selfplay.agent import make_agent
from selfplay.checkpoints import Checkpointer
from selfplay.run import MUST_MATCH, prepare_run_dir
from tests import fakes


def _lowest_cell(states):
    return [min(state.legal_actions()) for state in states]


def _minimax(states):
    return [min(fakes.optimal_moves(fakes.relative_board(state.history()))) for state in states]


def _games_by_recursion(policy, player):
    """(wins, draws, losses) of `policy` in seat `player`, walking every game one by one."""
    counts = np.zeros(3, int)

    def visit(state):
        if state.is_terminal():
            outcome = state.returns()[player]
            counts[0 if outcome > 0 else 2 if outcome < 0 else 1] += 1
            return
        if state.current_player() == player:
            visit(state.child(int(policy([state])[0])))
        else:
            for action in state.legal_actions():
                visit(state.child(action))

    visit(pyspiel.load_game("tic_tac_toe").new_initial_state())
    return tuple(counts)


@pytest.mark.parametrize("policy", [_lowest_cell, _minimax])
def test_merged_positions_count_every_game_once(policy):
    report = evaluation.exhaustive_play(policy)
    for player, seat in enumerate(("first", "second")):
        expected = _games_by_recursion(policy, player)
        got = tuple(report[f"{k}_as_{seat}"] for k in ("wins", "draws", "losses"))
        assert got == expected, seat


def test_opponent_branches_and_verdicts():
    calls = []

    def recording(states):
        calls.append(len(states))
        return _lowest_cell(states)

    report = evaluation.exhaustive_play(recording, players=(1,))
    # As second player the agent first answers each of the 9 opening moves. After its reply
    # (cell 1 to an X in 0, else cell 0) every second X move is explored, and move orders that
    # reach the same board merge: X in {0, b} with O in 1 (7 boards), X in two of 1..8 with O in
    # 0 (28 boards).
    assert calls[:2] == [9, 7 + 28]
    assert report["policy_calls"] == len(calls) == 4
    assert report["positions"] == sum(calls)
    # Always taking the lowest free cell loses to some opponent strategy in both seats ...
    weak = evaluation.exhaustive_play(_lowest_cell)
    assert weak["losses_as_first"] > 0 and weak["losses_as_second"] > 0
    # ... while minimax never loses, and wins some games against weak replies.
    perfect = evaluation.exhaustive_play(_minimax)
    assert perfect["losses_as_first"] == perfect["losses_as_second"] == 0
    assert perfect["wins_as_first"] > 0 and perfect["wins_as_second"] > 0


def test_an_illegal_move_is_an_error():
    with pytest.raises(ValueError, match="illegal move"):
        evaluation.exhaustive_play(lambda states: [0] * len(states), players=(1,))


def test_greedy_config_turns_off_noise_and_sampling():
    config = evaluation.greedy_config(configs.presets.get("tic_tac_toe_muzero"), 7)
    assert config.search.dirichlet_fraction == 0.0
    assert config.search.temperature == 0.0
    assert config.search.num_simulations == 7


def test_load_agent_names_a_missing_run(tmp_path):
    with pytest.raises(UsageError, match="no config.json"):
        evaluation.load_agent(tmp_path)


def _untrained_run(preset, run_dir):
    """A run directory as `train` leaves it, with the initial parameters saved as step 0.

    Training a few updates would cost the learner's compilation, which the smoke runs in
    test_train.py already pay; the report reads only config.json and the params.
    """
    config = configs.load_config(preset, fakes.TINY)
    run_dir = prepare_run_dir(run_dir, config)
    env = make_env(config.env.name, 1)
    agent = make_agent(config, env.spec)
    env.close()
    optimizer = muzero.make_optimizer(config.optimizer)
    key = jax.random.PRNGKey(0)
    state = muzero.init_train_state(jax.jit(agent.init)(key), optimizer, key)
    checkpointer = Checkpointer(run_dir / "checkpoints", must_match=MUST_MATCH)
    checkpointer.save(0, jax.device_get(state), configs.to_dict(config))
    checkpointer.close()
    return run_dir


@pytest.mark.parametrize("preset", ["tic_tac_toe_muzero", "tic_tac_toe_alphazero"])
def test_report_on_a_run(preset, tmp_path):
    run = _untrained_run(preset, tmp_path / "run")
    report = evaluation.perfect_play_report(run)
    assert report["mode"] == preset.rsplit("_", 1)[1]
    assert report["step"] == 0 and report["num_simulations"] == 4
    assert report["perfect"] == (report["losses_as_first"] == report["losses_as_second"] == 0)
    json.dumps(report)  # the benchmark prints it
    for seat, least in (("first", 8), ("second", 9)):
        games = sum(report[f"{k}_as_{seat}"] for k in ("wins", "draws", "losses"))
        assert games >= least  # at least one game per opponent reply to the first move
    # 9 + 35 + ... positions as second player alone; each ply's positions searched in one call.
    assert report["positions"] > 44 and report["policy_calls"] == 9


def test_the_search_policy_depends_on_the_position_only(tmp_path):
    # The walk merges positions, so the policy must not depend on the batch a position is
    # searched in: the same states, shuffled and split differently, get the same moves.
    config, agent, params = evaluation.load_agent(
        _untrained_run("tic_tac_toe_muzero", tmp_path / "run")
    )
    policy = evaluation.search_policy(config, agent, params, batch_size=16)
    game = pyspiel.load_game("tic_tac_toe")
    states = [
        game.new_initial_state().child(a).child(b) for a in range(9) for b in range(9) if a != b
    ]
    order = np.random.default_rng(0).permutation(len(states))
    moves = np.asarray(policy(states))
    shuffled = np.asarray(policy([states[i] for i in order]))
    np.testing.assert_array_equal(moves[order], shuffled)
    assert all(m in s.legal_actions() for m, s in zip(moves, states, strict=True))


def _agent_and_params(preset):
    """A greedy agent of `preset` with the tiny network of `_untrained_run`, and its init params."""
    config = evaluation.greedy_config(configs.load_config(preset, fakes.TINY))
    env = make_env(config.env.name, 1)
    agent = make_agent(config, env.spec)
    env.close()
    return config, agent, jax.jit(agent.init)(jax.random.PRNGKey(0))


@pytest.mark.parametrize("preset", ["tic_tac_toe_muzero", "tic_tac_toe_alphazero"])
def test_board_actor_pads_without_changing_the_real_rows(preset):
    config, agent, params = _agent_and_params(preset)
    actor = evaluation.BoardActor(config, agent)
    game = pyspiel.load_game("tic_tac_toe")
    states = [game.new_initial_state().child(a) for a in range(8)]  # X in cell a, O to move
    key = jax.random.PRNGKey(1)
    padded, legal = actor.act(params, key, states[:3], 8, greedy=True)
    assert padded.action.shape == (3,) and padded.search_policy.shape == (3, 9)
    np.testing.assert_array_equal(legal, [[b != a for b in range(9)] for a in range(3)])
    # The padding rows (copies of the first state) are dropped: the real rows get what they get
    # in a batch of the same size filled with other positions.
    filled, _ = actor.act(params, key, states, 8, greedy=True)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(x, y[:3], rtol=1e-5, atol=1e-6), padded, filled
    )
    # And an unpadded batch gives the real rows the same moves, as search_policy chooses them.
    unpadded, _ = actor.act(params, key, states[:3], 3, greedy=True)
    np.testing.assert_array_equal(
        evaluation._most_visited(padded.search_policy, padded.behaviour_logits, legal),
        evaluation._most_visited(unpadded.search_policy, unpadded.behaviour_logits, legal),
    )
    with pytest.raises(ValueError, match="1 to rows=2 states, got 3"):
        actor.act(params, key, states[:3], 2, greedy=True)


def test_board_actor_and_report_errors_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="board game .* not one on envpool:CartPole"):
        evaluation.BoardActor(configs.presets.get("cartpole_vtrace"), agent=None)
    run = _untrained_run("tic_tac_toe_muzero", tmp_path / "run")
    with pytest.raises(UsageError, match=r"no checkpoint for step 5 .* saved steps: \[0\]$"):
        evaluation.perfect_play_report(run, step=5)
    (run / "config.json").unlink()
    with pytest.raises(UsageError, match="no config.json"):  # named before the checkpoints
        evaluation.perfect_play_report(run)
