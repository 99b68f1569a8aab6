"""OpenSpiel adapter: observation layout, exposed states, truncation, one-player games."""

import numpy as np
import pytest

from envs import make_env

# OpenSpiel's tic-tac-toe planes, in order: empty cells, o (player 1), x (player 0).
EMPTY, NOUGHT, CROSS = 0, 1, 2


def test_tic_tac_toe_planes_are_channels_last_with_a_to_play_plane():
    env = make_env("openspiel:tic_tac_toe", 2, 0)
    assert env.spec.observation_shape == (3, 3, 4)
    ts = env.reset(0)
    assert (ts.observation[..., EMPTY] == 1).all() and (ts.observation[..., 3] == 0).all()
    ts = env.step(np.array([4, 2]))  # x takes the centre in env 0, the top-right in env 1
    obs = ts.observation
    assert obs[0, 1, 1, CROSS] == 1 and obs[0, 1, 1, EMPTY] == 0 and obs[0, :, :, CROSS].sum() == 1
    assert obs[1, 0, 2, CROSS] == 1 and obs[1, :, :, CROSS].sum() == 1
    assert (obs[..., 3] == 1).all() and (ts.to_play == 1).all()  # o (player 1) to move
    assert not ts.legal_mask[0, 4] and not ts.legal_mask[1, 2] and ts.legal_mask.sum() == 16
    ts = env.step(np.array([0, 0]))
    # A new array each step: the one returned before is not overwritten.
    assert obs[0, 0, 0, NOUGHT] == 0 and ts.observation[0, 0, 0, NOUGHT] == 1
    assert (ts.observation[..., 3] == 0).all()


def test_states_are_exposed_and_observe_matches_step():
    env = make_env("openspiel:connect_four", 3, 0)
    env.reset(0)
    ts = env.step(np.array([3, 0, 6]))
    ts = env.step(np.array([3, 1, 6]))
    assert [s.history() for s in env.states] == [[3, 3], [0, 1], [6, 6]]
    obs, mask, to_play = env.observe(env.states)
    np.testing.assert_array_equal(obs, ts.observation)
    np.testing.assert_array_equal(mask, ts.legal_mask)
    np.testing.assert_array_equal(to_play, ts.to_play)
    clone = env.states[0].clone()
    clone.apply_action(3)
    assert env.observe([clone])[0][0, :, :, -1].max() == 1  # player 1 to move in the clone


def test_to_play_plane_can_be_left_out():
    env = make_env("openspiel:tic_tac_toe", 1, 0, to_play_plane=False)
    assert env.spec.observation_shape == (3, 3, 3)
    assert env.reset(0).observation.shape == (1, 3, 3, 3)


def test_go_loads_with_parameters():
    env = make_env("openspiel:go(board_size=9)", 2, 0)
    assert env.spec.num_actions == 82 and env.spec.observation_shape[:2] == (9, 9)
    ts = env.reset(0)
    assert ts.legal_mask.all()  # 81 points and pass on the empty board


def test_max_episode_steps_truncates_without_a_terminal_reward():
    env = make_env("openspiel:tic_tac_toe", 2, 0, max_episode_steps=3)
    ts = env.reset(0)
    for t in range(6):
        ts = env.step(ts.legal_mask.argmax(axis=1))
        ends = t % 3 == 2
        assert (ts.done == ends).all() and (ts.truncated == ends).all()
        assert (ts.reward == 0).all()
    assert (ts.episode_length == 3).all() and ts.legal_mask.all()


def test_one_player_game_rewards_and_returns():
    env = make_env("openspiel:cliff_walking", 2, 0)
    assert env.spec.num_players == 1 and not env.spec.two_player_zero_sum
    rng = np.random.default_rng(0)
    ts = env.reset(0)
    totals, ended = np.zeros(2), []
    for _ in range(200):
        ts = env.step(rng.integers(0, 4, size=2))
        assert (ts.to_play == 0).all()
        totals += ts.reward
        ended += ts.episode_return[ts.done].tolist()
        np.testing.assert_allclose(ts.episode_return[ts.done], totals[ts.done])
        totals[ts.done] = 0
    assert ended and all(g <= -1 for g in ended)  # -1 a step, -100 off the cliff


def test_send_recv_steps_all_envs_and_refuses_a_subset():
    env = make_env("openspiel:tic_tac_toe", 2, 0)
    ts = env.reset(0)
    env.send(np.array([0, 1]), ts.env_id)
    assert env.recv().legal_mask.sum() == 16  # one cell taken in each of two boards
    with pytest.raises(ValueError, match="all 2 envs"):
        env.send(np.array([0]), np.array([1]))
