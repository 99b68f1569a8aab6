"""envpool adapter: async batches, Atari episodic life, seeds and option checks."""

import numpy as np
import pytest

import configs
from configs.errors import UsageError
from envs import env_seed, make_env


def test_async_recv_serves_every_env_and_never_repeats_one_in_a_batch():
    env = make_env("envpool:CartPole-v1", 7, 0, batch_size=3)
    assert env.num_envs == 7 and env.batch_size == 3
    ts = env.reset(0)
    served = np.zeros(7, int)
    for _ in range(60):
        assert len(set(ts.env_id.tolist())) == 3
        served[ts.env_id] += 1
        env.send(np.ones(3, np.int32), ts.env_id)
        ts = env.recv()
    assert (served > 0).all()
    with pytest.raises(ValueError, match="send/recv"):
        env.step(np.zeros(7, np.int32))
    env.close()


def test_async_needs_enough_envs_to_fill_a_batch():
    with pytest.raises(UsageError, match="num_envs >= 2 \\* batch_size - 1"):
        make_env("envpool:CartPole-v1", 5, 0, batch_size=4)
    with pytest.raises(UsageError, match="batch_size must be in"):
        make_env("envpool:CartPole-v1", 4, 0, batch_size=5)


def test_seed_changes_the_episodes_and_reset_restarts_them():
    env = make_env("envpool:CartPole-v1", 4, 0)
    first = env.reset(0).observation
    env.step(np.zeros(4, np.int32))
    np.testing.assert_array_equal(env.reset(0).observation, first)  # same seed after use
    assert not np.array_equal(env.reset(1).observation, first)
    env.close()


def test_every_run_seed_gives_actor_seeds_envpool_takes():
    # envpool asserts a seed below 2**31 - 1; a run's seed goes up to configs.MAX_SEED and each
    # actor thread's is derived from it (`seed * 1000 + index` overflowed for seeds from 2.1M).
    for seed, index in [(configs.MAX_SEED, 0), (configs.MAX_SEED, 999), (2_147_483, 7)]:
        env = make_env("envpool:CartPole-v1", 2, seed=env_seed(seed, index))
        env.reset(env_seed(seed, index))
        env.close()
    assert env_seed(12, 3) == 12_003  # the seeds of every run with seed <= 2,147,482 unchanged
    with pytest.raises(UsageError, match=r"seed must be an integer from 0 to 2147483647"):
        configs.load_config("cartpole_vtrace", [f"seed={configs.MAX_SEED + 1}"])


def test_atari_frames_are_channels_last_and_episodic_life_keeps_the_game_score():
    env = make_env("envpool:Breakout-v5", 2, 0, episodic_life=True, reward_clip=True)
    assert env.spec.observation_shape == (84, 84, 4) and env.spec.observation_dtype == "uint8"
    rng = np.random.default_rng(0)
    ts = env.reset(0)
    steps = np.zeros(2, int)
    lives_lost = games = 0
    for _ in range(300):
        ts = env.step(rng.integers(0, env.spec.num_actions, size=2).astype(np.int32))
        steps += 1
        lives_lost += (ts.done & ~ts.episode_end).sum()
        games += ts.episode_end.sum()
        # One game lasts over all its lives: its length counts every step since the last game.
        np.testing.assert_array_equal(ts.episode_length[ts.episode_end], steps[ts.episode_end])
        steps[ts.episode_end] = 0
        assert np.isin(ts.reward, [0.0, 1.0]).all()  # clipped
    assert games >= 1 and lives_lost >= 4 * games  # Breakout has five lives
    env.close()
