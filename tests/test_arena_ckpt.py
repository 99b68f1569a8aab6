"""The `ckpt:RUN_DIR` player: a trained run in the arena, batched search, AlphaZero, errors."""

import json
import shutil

import jax
import numpy as np
import pyspiel
import pytest

import arena
import configs
import muzero
from arena.matches import play_games
from configs import UsageError
from envs import make_env
from envs.pgx_env import pgx_replay
from podracer.cli import main
from selfplay.agent import make_agent
from selfplay.checkpoints import Checkpointer
from selfplay.run import MUST_MATCH, prepare_run_dir
from selfplay.train import train
from tests import fakes

# The suite's small run (tests/fakes.py), three updates long.
TINY = [*fakes.TINY, "learner.max_updates=3", "learner.checkpoint_every=3"]


@pytest.fixture(scope="module")
def muzero_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("ckpt") / "ttt_muzero"
    train(configs.load_config("tic_tac_toe_muzero", TINY), run, progress=False)
    return run


@pytest.fixture(scope="module")
def alphazero_run(tmp_path_factory):
    """A tic-tac-toe AlphaZero run dir holding its initial parameters, saved as `train` saves."""
    config = configs.load_config("tic_tac_toe_alphazero", [*TINY, "search.num_simulations=16"])
    run = prepare_run_dir(tmp_path_factory.mktemp("ckpt") / "ttt_alphazero", config)
    env = make_env(config.env.name, 1)
    agent = make_agent(config, env.spec)
    optimizer = muzero.make_optimizer(config.optimizer)
    state = muzero.init_train_state(
        jax.jit(agent.init)(jax.random.PRNGKey(0)), optimizer, jax.random.PRNGKey(1)
    )
    checkpointer = Checkpointer(run / "checkpoints", must_match=MUST_MATCH)
    checkpointer.save(2, state, configs.to_dict(config))
    checkpointer.close()
    return run


def test_tournament_against_random_is_reproducible(muzero_run, tmp_path):
    game = arena.load_game("tic_tac_toe")
    specs = [f"ckpt:{muzero_run}", "random"]
    records = arena.run_tournament(game, specs, 4, out_dir=tmp_path / "t")
    assert len(records) == 4
    assert {r.players for r in records} == {tuple(specs), tuple(reversed(specs))}
    assert all(len(r.actions) >= 5 for r in records)
    # Greedy, without root noise: the same seeds replay the same games.
    again = arena.run_tournament(game, specs, 4)
    assert [r.actions for r in again] == [r.actions for r in records]
    ratings = arena.fit_ratings(records)
    assert set(ratings.players) == set(specs)


def test_all_waiting_games_are_searched_in_one_call(muzero_run):
    game = pyspiel.load_game("tic_tac_toe")
    player = arena.make_player(f"ckpt:{muzero_run}", game, seed=0)
    assert isinstance(player, arena.BatchedPlayer)
    opponents = [arena.make_player("random", game, seed=k) for k in range(6)]
    tables = [[player, opponents[k]] if k % 2 else [opponents[k], player] for k in range(6)]
    moves = []
    play_games(
        game,
        tables,
        list(range(6)),
        lambda k, state, table: moves.append(table.movers.count(1 - k % 2)),
    )
    assert player.states_searched == sum(moves)
    # One act call per ply for every game still waiting, not one per game.
    assert player.act_calls == max(moves)
    assert player.act_calls < player.states_searched


def test_greedy_by_default_and_settings_from_the_spec(muzero_run):
    game = pyspiel.load_game("tic_tac_toe")
    states = [game.new_initial_state() for _ in range(3)]
    greedy = arena.make_player(f"ckpt:{muzero_run}", game, seed=0)
    assert len({tuple(greedy.step_many(states)) for _ in range(3)}) == 1
    assert greedy.config.search.num_simulations == 4  # the run's
    # Sampling itself is search.select_action's (tested there); here the spec reaches the search.
    hot = arena.make_player(f"ckpt:{muzero_run},temperature=0.5,sims=9,step=3", game, seed=0)
    assert hot.config.search.temperature == 0.5 and hot.config.search.num_simulations == 9
    assert greedy.config.search.dirichlet_fraction == hot.config.search.dirichlet_fraction == 0.0


@pytest.mark.parametrize("name", ["tic_tac_toe", "connect_four"])
def test_pgx_replay_reaches_the_openspiel_position(name):
    game = pyspiel.load_game(name)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(8):
        state = game.new_initial_state()
        for _ in range(rng.integers(0, game.max_game_length())):
            if state.is_terminal():
                break
            state.apply_action(int(rng.choice(state.legal_actions())))
        states.append(state)
    moves = np.zeros((8, game.max_game_length()), np.int32)
    lengths = np.array([len(s.history()) for s in states], np.int32)
    for i, state in enumerate(states):
        moves[i, : lengths[i]] = state.history()
    replayed = jax.device_get(pgx_replay(name)(moves, lengths))
    for i, state in enumerate(states):
        assert bool(replayed.terminated[i]) == state.is_terminal()
        if state.is_terminal():  # pgx's player ids are drawn at random: compare the outcomes
            assert sorted(replayed.rewards[i].tolist()) == sorted(state.returns())
        else:
            expected = np.zeros(game.num_distinct_actions(), bool)
            expected[state.legal_actions()] = True
            np.testing.assert_array_equal(replayed.legal_action_mask[i], expected)


def test_alphazero_checkpoint_plays_from_openspiel_states(alphazero_run):
    records = arena.run_tournament("tic_tac_toe", [f"ckpt:{alphazero_run}", "random"], 2)
    assert len(records) == 2
    game = pyspiel.load_game("tic_tac_toe")
    player = arena.make_player(f"ckpt:{alphazero_run}", game)
    assert player.agent.uses_env_state and player.run.step == 2
    # The untrained network still searches the real rules: it takes a win in one, in either seat.
    states = [game.new_initial_state() for _ in range(2)]
    for state, moves in zip(states, [(0, 3, 1, 4), (0, 3, 1, 4, 8)], strict=True):
        for action in moves:  # x x . / o o . / . . x: x wins at 2; o to move wins at 5
            state.apply_action(action)
    assert player.step_many(states) == [2, 5]


def _one_error_line(capsys, argv):
    code = main(["arena", "--quiet", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    return err[0]


def test_bad_runs_exit_2_with_one_line(muzero_run, tmp_path, capsys):
    out = ["--games", "1", "--out", str(tmp_path / "t")]
    line = _one_error_line(
        capsys, ["--game", "tic_tac_toe", "--players", f"ckpt:{tmp_path / 'missing'},random", *out]
    )
    assert "no run directory" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(muzero_run / "config.json", empty / "config.json")
    line = _one_error_line(
        capsys, ["--game", "tic_tac_toe", "--players", f"ckpt:{empty},random", *out]
    )
    assert "no checkpoints" in line
    line = _one_error_line(
        capsys, ["--game", "connect_four", "--players", f"ckpt:{muzero_run},random", *out]
    )
    assert "trained on openspiel:tic_tac_toe" in line and "connect_four" in line
    line = _one_error_line(
        capsys, ["--game", "tic_tac_toe", "--players", f"ckpt:{muzero_run},sims=0,random", *out]
    )
    assert "sims must be at least 1" in line


def test_corrupt_or_missing_step_is_a_usage_error(muzero_run, tmp_path):
    game = pyspiel.load_game("tic_tac_toe")
    with pytest.raises(UsageError, match=r"no checkpoint for step 7 .* saved steps: \[3\]"):
        arena.make_player(f"ckpt:{muzero_run},step=7", game)
    broken = tmp_path / "broken"
    shutil.copytree(muzero_run, broken)
    for path in (broken / "checkpoints" / "3" / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="checkpoint"):
        arena.make_player(f"ckpt:{broken}", game)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(UsageError, match="config.json is not a readable config"):
        arena.make_player(f"ckpt:{broken}", game)
    assert json.loads((muzero_run / "config.json").read_text())["mode"] == "muzero"
