"""One-player evaluation: statistics on synthetic returns, episode collection, normalised scores."""

import functools

import numpy as np
import pytest

from arena.atari_scores import ATARI_SCORES, atari_key, human_normalized_score
from arena.evaluate import (
    STICKY_ACTIONS,
    EvalProtocol,
    EvaluationStopped,
    evaluate_policy,
    iqm,
    summarize,
)
from tests.fakes import FakeEpisodeEnv


def test_iqm_averages_the_middle_half_and_ignores_outliers():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([1, 2, 3, 4, 5, 6, 7, 1e9]) == pytest.approx(4.5)
    np.testing.assert_allclose(iqm(np.array([[1, 2, 3, 4], [4, 3, 2, 1]]), axis=1), [2.5, 2.5])


def test_summary_values_and_intervals():
    x = np.array([0.0] * 10 + [10.0] * 10)
    s = summarize(x, seed=0)
    assert s.count == 20
    assert s.mean.value == 5.0 and s.median.value == 5.0 and s.iqm.value == 5.0
    for estimate in s[:3]:
        assert estimate.low <= estimate.value <= estimate.high
    constant = summarize(np.full(7, 3.0))
    assert constant.mean == (3.0, 3.0, 3.0)


def test_bootstrap_intervals_cover_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    covered = [
        summarize(rng.normal(2.0, 1.0, 50), num_bootstrap=500, seed=k).mean for k in range(200)
    ]
    rate = np.mean([e.low <= 2.0 <= e.high for e in covered])
    assert 0.88 <= rate <= 0.99
    widths = np.mean([e.high - e.low for e in covered])
    assert widths == pytest.approx(2 * 1.96 / np.sqrt(50), rel=0.15)


def test_human_normalised_scores():
    assert len(ATARI_SCORES) == 57
    random, human = ATARI_SCORES["pong"]
    assert human_normalized_score("Pong-v5", random) == 0.0
    assert human_normalized_score("pong", human) == pytest.approx(1.0)
    assert [
        atari_key(n) for n in ("MsPacman-v5", "UpNDown-v5", "ALE/Breakout-v5", "ms_pacman")
    ] == ["ms_pacman", "up_n_down", "breakout", "ms_pacman"]
    with pytest.raises(ValueError, match="CartPole"):
        human_normalized_score("CartPole-v1", 100.0)


def test_evaluate_policy_plays_each_envs_share_of_whole_episodes():
    made = []

    def make_env(**kwargs):
        made.append(FakeEpisodeEnv(**kwargs))
        return made[-1]

    calls = []

    def policy(step):
        calls.append(step.observation.shape)
        return np.zeros(step.observation.shape[0], np.int32)

    result = evaluate_policy(
        policy, make_env, num_episodes=10, num_envs=4, seed=1, protocol=STICKY_ACTIONS
    )
    # Env e's episodes last e + 1 steps and return 10 e + k; each env plays 3, 3, 2, 2 of them,
    # so the long episodes of env 3 count as much as they should.
    expected = [0, 1, 2, 10, 11, 12, 20, 21, 30, 31]
    assert sorted(result.returns.tolist()) == expected
    assert sorted(result.lengths.tolist()) == [1, 1, 1, 2, 2, 2, 3, 3, 4, 4]
    assert result.summary.mean.value == pytest.approx(np.mean(expected))
    assert result.summary.median.value == pytest.approx(np.median(expected))
    assert result.normalized is None and result.protocol == "sticky_actions"
    env = made[0]
    assert env.closed and env.num_envs == 4 and env.seed == 1
    assert env.options == {
        "repeat_action_probability": 0.25,
        "noop_max": 0,
        "max_episode_steps": 27_000,
    }
    assert set(calls) == {(4,)}
    assert set(result.as_dict()) >= {"episodes", "protocol", "returns"}


def test_evaluate_policy_normalises_atari_scores_and_stops_a_policy_that_never_ends():
    make_env = functools.partial(FakeEpisodeEnv)
    result = evaluate_policy(
        lambda s: np.zeros(2, np.int32), make_env, 4, num_envs=2, game="Pong-v5"
    )
    random, human = ATARI_SCORES["pong"]
    np.testing.assert_allclose(
        result.normalized.mean.value, (np.mean(result.returns) - random) / (human - random)
    )

    class Endless(FakeEpisodeEnv):
        def step(self, actions):
            step = super().step(actions)
            return step._replace(episode_end=np.zeros_like(step.episode_end))

    with pytest.raises(RuntimeError, match="0 of 3 episodes"):
        evaluate_policy(lambda s: np.zeros(3, np.int32), Endless, 3, max_steps=50)

    # A run that stops mid-evaluation: the episodes are abandoned at the next step.
    asked, made = [], []

    def make_endless(**kwargs):
        made.append(Endless(**kwargs))
        return made[-1]

    with pytest.raises(EvaluationStopped, match="0 of 3 episodes"):
        evaluate_policy(
            lambda s: np.zeros(3, np.int32),
            make_endless,
            3,
            should_stop=lambda: asked.append(1) or len(asked) > 4,
        )
    assert len(asked) == 5 and made[0].closed


def test_protocols_are_validated():
    with pytest.raises(ValueError, match="sticky"):
        EvalProtocol("bad", 1.5, 0, 108_000)


def test_evaluate_policy_on_envpool_cartpole():
    from envs import make_env

    result = evaluate_policy(
        lambda s: np.zeros(s.observation.shape[0], np.int32),
        functools.partial(make_env, "envpool:CartPole-v1"),
        6,
        num_envs=3,
    )
    # Always pushing left drops the pole within a few steps; CartPole pays 1 per step.
    assert result.returns.shape == (6,)
    np.testing.assert_array_equal(result.returns, result.lengths)
    assert 5 <= result.returns.min() and result.returns.max() < 30
