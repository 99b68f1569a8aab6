"""Gymnasium adapter: Atari as envpool gives it, a user's own gymnasium.Env or vector env, and a
one-line error for each input it cannot take."""

import numpy as np
import pytest

from configs.errors import UsageError
from envs import make_env

CORRIDOR = "py:tests.fakes:make_gym_corridor"


def _one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


def test_atari_spec_is_envpools():
    ours, theirs = make_env("gymnasium:ALE/Pong-v5", 1), make_env("envpool:Pong-v5", 1)
    try:
        for field in ("num_actions", "observation_shape", "observation_dtype", "max_episode_steps"):
            assert getattr(ours.spec, field) == getattr(theirs.spec, field), field
        assert ours.spec.observation_shape == (84, 84, 4) and ours.spec.family == "gymnasium"
    finally:
        ours.close()
        theirs.close()


def test_atari_frames_rewards_and_lives_are_envpools():
    # noop_max=1 leaves no random no-ops (FIRE alone starts a game): both run the same emulator
    # from the same state, so every field must agree; frames up to the area resize's rounding.
    options = {"noop_max": 1, "episodic_life": True, "reward_clip": True}
    ours = make_env("gymnasium:ALE/Breakout-v5", 2, **options)
    theirs = make_env("envpool:Breakout-v5", 2, **options)
    try:
        a, b = ours.reset(0), theirs.reset(0)
        rng = np.random.default_rng(1)
        lives_lost = 0
        for _ in range(150):
            diff = np.abs(a.observation.astype(int) - b.observation.astype(int))
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
            actions = rng.integers(0, ours.spec.num_actions, 2).astype(np.int32)
            a, b = ours.step(actions), theirs.step(actions)
            for field in a._fields[1:]:
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field), field)
            lives_lost += (a.done & ~a.episode_end).sum()
        assert lives_lost >= 2
    finally:
        ours.close()
        theirs.close()


def test_max_episode_steps_overrides_the_time_limit():
    env = make_env("gymnasium:CartPole-v1", 2, max_episode_steps=5)
    assert env.spec.max_episode_steps == 5
    env.reset(0)
    lengths = []
    for _ in range(12):
        ts = env.step(np.zeros(2, np.int32))
        lengths += ts.episode_length[ts.episode_end].tolist()
        assert (ts.truncated == (ts.done & (ts.episode_length == 5))).all()
    assert lengths and max(lengths) <= 5
    env.close()


def test_a_users_gymnasium_env_runs_as_a_batch():
    env = make_env(CORRIDOR, 4, time_limit=50)
    spec = env.spec
    assert (spec.name, spec.family, spec.num_actions) == (CORRIDOR, "gymnasium", 2)
    assert (spec.observation_shape, spec.observation_dtype) == ((1,), "float32")
    assert spec.max_episode_steps == 50  # its TimeLimit
    start = env.reset(3).observation[:, 0]  # cells 1 to 5 of 0 to 6
    episodes = 0
    for _ in range(12):  # always right: cell 6 after 6 - start steps, with +1
        ts = env.step(np.ones(4, np.int32))
        ended = ts.episode_end
        assert (ts.done == ended).all() and not ts.truncated.any()
        assert (ts.episode_return[ended] == 1.0).all()
        np.testing.assert_array_equal(ts.episode_length[ended], 6 - start[ended])
        start = np.where(ended, ts.observation[:, 0], start)
        episodes += ended.sum()
    assert episodes >= 8
    assert not np.array_equal(env.reset(4).observation, env.reset(3).observation)
    env.close()


def test_two_batches_of_one_users_env_never_share_an_env():
    # The user's env is built once a process: only the first batch may step that object.
    a, b = make_env(CORRIDOR, 2), make_env(CORRIDOR, 2)
    ta, tb = a.reset(7), b.reset(7)
    for _ in range(4):
        np.testing.assert_array_equal(ta.observation, tb.observation)
        ta, tb = a.step(np.ones(2, np.int32)), b.step(np.ones(2, np.int32))
    a.close()
    b.close()


def test_discrete_observations_are_one_hot_and_action_masks_are_kept():
    env = make_env(CORRIDOR, 3, discrete_observation=True, action_mask=True)
    assert env.spec.observation_shape == (7,) and env.spec.observation_dtype == "float32"
    ts = env.reset(0)
    assert (ts.observation.sum(axis=1) == 1).all()
    cells = ts.observation.argmax(axis=1)
    np.testing.assert_array_equal(ts.legal_mask[:, 0], cells > 1)
    while (cells > 1).all():  # walk left until an env stands in cell 1, where left is illegal
        ts = env.step(np.zeros(3, np.int32))
        cells = ts.observation.argmax(axis=1)
    with pytest.raises(ValueError, match="illegal action 0 in env"):
        env.step(np.zeros(3, np.int32))
    env.close()


def test_a_users_vector_env_is_stepped_as_it_is():
    env = make_env("py:tests.fakes:make_gym_corridor_vector", 3)
    ts = env.reset(0)
    for _ in range(6):
        ts = env.step(np.ones(3, np.int32))
        assert (ts.episode_return[ts.episode_end] == 1.0).all()
    assert ts.observation.dtype == np.float32
    env.close()


def test_mujocos_boxes_step_with_vectors_within_their_bounds():
    env = make_env("gymnasium:Hopper-v5", 2, 0)
    assert env.spec.is_box and env.spec.action_bounds == ((-1.0,) * 3, (1.0,) * 3)
    env.reset(0)
    ts = env.step(np.full((2, 3), 0.5, np.float32))
    assert ts.observation.shape == (2, 11) and ts.legal_mask.shape == (2, 3)
    with pytest.raises(ValueError, match=r"actions of rows \[1\] are NaN or outside the box"):
        env.step(np.array([[0.0, 0.0, 0.0], [0.0, np.nan, 0.0]], np.float32))
    with pytest.raises(ValueError, match=r"floats of shape \[2, 3\], got int64 \(2,\)"):
        env.step(np.zeros(2, np.int64))
    env.close()


@pytest.mark.parametrize(
    "name, options, fragment",
    [
        (CORRIDOR, {"box_actions": True}, "Box action space of shape .1,. with bounds .-inf"),
        (CORRIDOR, {"dict_observation": True}, "Dict observation space: only Box and Discrete"),
        (
            "py:tests.fakes:make_gym_corridor_vector",
            {},
            "num_envs=3, but a batch of 4 was asked for",
        ),
        (
            "py:tests.fakes:make_gym_corridor_vector",
            {"size": 4, "same_step": False},
            "autoreset_mode NEXT_STEP: build it with autoreset_mode=.*SAME_STEP",
        ),
        ("gymnasium:CartPole-v1", {"colour": 1}, "colour.*accepted: max_episode_steps$"),
        ("gymnasium:CartPole-v1", {"max_episode_steps": 0}, "max_episode_steps must be"),
        ("gymnasium:ALE/Pong-v5", {"colour": 1}, "accepted: episodic_life, frame_skip, "),
        ("gymnasium:ALE/Pong-v5", {"episodic_life": 1}, "episodic_life .* true or false"),
    ],
)
def test_inputs_it_cannot_take_give_one_usage_line(name, options, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        make_env(name, 4, **options)
    _one_line(info)


def test_ale_ids_without_ale_py_name_the_extra(monkeypatch):
    import envs.gymnasium_env as adapter

    real = adapter.importlib.util.find_spec
    monkeypatch.setattr(
        adapter.importlib.util, "find_spec", lambda n, *a: None if n == "ale_py" else real(n, *a)
    )
    with pytest.raises(UsageError, match=r"pip install 'podracer\[atari\]'") as info:
        make_env("gymnasium:ALE/Pong-v5", 1)
    _one_line(info)


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"grow_at": 3}, r"observation of shape \[2\] and dtype float64, expected shape \[1\]"),
        ({"nan_at": 3}, r"gave a non-finite reward \(nan\)"),
    ],
)
def test_a_step_that_breaks_the_spec_raises_one_line(options, fragment):
    env = make_env(CORRIDOR, 2, length=50, **options)  # no episode ends in 3 steps
    env.reset(0)
    env.step(np.ones(2, np.int32))
    env.step(np.ones(2, np.int32))
    with pytest.raises(UsageError, match=fragment) as info:
        env.step(np.ones(2, np.int32))
    _one_line(info)
    env.close()
