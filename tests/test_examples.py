"""The examples in examples/ run as written, and do what they say."""

import pathlib
import runpy

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def custom_environment():
    return runpy.run_path(str(EXAMPLES / "custom_environment.py"))


def test_the_search_example_walks_towards_the_goal_from_either_side():
    moves = runpy.run_path(str(EXAMPLES / "search_your_model.py"))["main"]()
    assert moves == [1, 1, 1, 0, 0]  # right from cells 0-2, left from 5 and 6 (the goal: 3)


def test_the_custom_environment_resets_in_the_step_that_ends_an_episode(custom_environment):
    env = custom_environment["WalkEnv"](num_envs=4, seed=1)
    size = custom_environment["SIZE"]
    position = env.reset().observation.argmax(axis=1)  # [4]
    for _ in range(2 * size):
        timestep = env.step(np.ones(4, np.int32))  # always right
        ended = position + 1 == size - 1
        np.testing.assert_array_equal(timestep.episode_end, ended)
        np.testing.assert_array_equal(timestep.reward, ended.astype(np.float32))
        seen = timestep.observation.argmax(axis=1)
        # Where an episode ended, the observation is already the next one's start.
        assert (seen[ended] < size - 1).all() and (seen[~ended] == position[~ended] + 1).all()
        position = seen
    with pytest.raises(ValueError, match="actions must be in"):
        env.step(np.full(4, 2))


def test_the_custom_environment_example_trains_an_agent_towards_the_goal(custom_environment):
    result = custom_environment["main"]()
    assert result["right_before"] < 0.7 and result["right_after"] > 0.95
    assert np.isfinite(result["loss"])
