"""jumanji adapter: the pure functions under jit against the host env, legal masks, MultiDiscrete
actions, observation layouts, a user's own jumanji-API env by import path, and one-line errors.
The conformance test covers the rest (Snake-v1)."""

import jax
import numpy as np
import pytest

from configs.errors import UsageError
from envs import JumanjiEnv, TimeStep, jax_env_functions, jumanji_functions, jumanji_spec, make_env

B = 4
CORRIDOR = "py:tests.fakes:make_jumanji_corridor"
LEFT, STAY, RIGHT = 0, 1, 2


def _legal_random(rng: np.random.Generator, legal_mask: np.ndarray) -> np.ndarray:
    return np.where(legal_mask, rng.random(legal_mask.shape), -1.0).argmax(axis=1).astype(np.int32)


def _rollout(functions, seed: int, actions: np.ndarray) -> tuple[TimeStep, TimeStep]:
    """The first TimeStep and those of `actions` [T, B] (each field [T, B, ...]), in one jit."""

    @jax.jit
    def rollout(key, actions):
        env_state, first = functions.reset(key)
        return first, jax.lax.scan(functions.step, env_state, actions)[1]

    return jax.device_get(rollout(jax.random.PRNGKey(seed), actions))


def test_pure_functions_under_jit_agree_with_the_host_env():
    steps, seed, limit = 16, 3, 7
    env = JumanjiEnv("Snake-v1", B, max_episode_steps=limit)
    functions = jumanji_functions("Snake-v1", B, limit)
    assert env.functions is functions
    rng = np.random.default_rng(0)
    host = [env.reset(seed)]
    actions = []
    for _ in range(steps):
        # The mask is jumanji's own: the directions that keep the snake on the board.
        np.testing.assert_array_equal(host[-1].legal_mask, env.env_state.env.action_mask)
        actions.append(_legal_random(rng, host[-1].legal_mask))
        host.append(env.step(actions[-1]))
    first, scanned = _rollout(functions, seed, np.stack(actions))
    jitted = [first] + [TimeStep(*(x[t] for x in scanned)) for t in range(steps)]
    for ts_host, ts_jit in zip(host, jitted, strict=True):
        for field, x_host, x_jit in zip(TimeStep._fields, ts_host, ts_jit, strict=True):
            assert x_host.dtype == x_jit.dtype and x_host.shape == x_jit.shape, field
            np.testing.assert_allclose(x_host, x_jit, rtol=1e-6, err_msg=field)
    # Our limit ends every episode at 7 steps, a truncation, and the same step starts a new one.
    assert (scanned.done == ((np.arange(1, steps + 1) % limit == 0)[:, None])).all()
    assert (scanned.truncated == scanned.done).all()
    assert (scanned.episode_length[scanned.done] == limit).all()
    assert (scanned.observation[scanned.done, ..., -1] == 0).all()  # the new episode's step count
    env.close()


def test_an_illegal_action_raises_in_step_and_not_on_device():
    env = make_env(CORRIDOR, B, 0)
    ts = env.reset(0)
    np.testing.assert_array_equal(ts.legal_mask, [[False, True, True]] * B)  # cell 0: no left
    with pytest.raises(ValueError, match=r"illegal actions \[0, 0\] in envs \[1, 3\] of py:tests"):
        env.step(np.array([RIGHT, LEFT, STAY, LEFT], np.int32))
    env.step_device(np.full(B, RIGHT, np.int32))  # no check; the host mask comes from the device
    ts = env.step(np.full(B, LEFT, np.int32))  # cell 1: left is legal
    assert ts.observation[:, 0].all() and not ts.legal_mask[:, LEFT].any()
    with pytest.raises(ValueError, match="illegal"):
        env.step(np.full(B, LEFT, np.int32))
    env.close()


def test_multidiscrete_actions_are_one_row_major_index():
    env = JumanjiEnv("Minesweeper-v0", B)  # actions (row, col) on a 10 x 10 board
    assert env.spec.num_actions == 100 and env.spec.observation_shape == (10, 10, 3)
    first = env.reset(1)
    board = first.observation[..., 0].reshape(B, 100)  # planes of the mine and step counts next
    assert (board == -1).all()  # nothing revealed yet
    np.testing.assert_array_equal(first.legal_mask, board == -1)  # jumanji's [10, 10] mask, flat
    actions = np.array([12, 37, 80, 9], np.int32)  # rows 1, 3, 8, 0; columns 2, 7, 0, 9
    ts = env.step(actions)
    alive = ~ts.done  # a mine under the first click ends the episode (and starts a new one)
    assert alive.sum() >= 2
    rows = np.arange(B)[alive]
    # Index row * 10 + col revealed that cell and no other: (row, col) was unflattened in order.
    revealed = ts.observation[..., 0].reshape(B, 100)
    assert (revealed[rows, actions[alive]] >= 0).all()
    assert ((revealed[rows] >= 0).sum(axis=1) == 1).all()
    assert not ts.legal_mask[rows, actions[alive]].any()
    assert (ts.observation[rows, ..., 2] == 1).all()  # the step count's plane
    env.close()


@pytest.mark.parametrize(
    "env_id, obs_shape, num_actions",
    [
        ("Snake-v1", (12, 12, 6), 4),  # the grid, and its step count as a plane
        ("RubiksCube-partly-scrambled-v0", (6 * 3 * 3 + 1,), 18),  # faces x depth x turns
        ("Game2048-v1", (4, 4, 1), 4),  # one board of tile exponents: one image plane
        ("Minesweeper-v0", (10, 10, 3), 100),  # board; mine count, step count as planes
    ],
)
def test_specs_of_registered_envs(env_id, obs_shape, num_actions):
    spec = jumanji_spec(env_id)
    assert spec.name == f"jumanji:{env_id}" and spec.family == "jumanji"
    assert spec.observation_shape == obs_shape and spec.observation_dtype == "float32"
    assert spec.num_actions == num_actions and spec.max_episode_steps is None
    assert spec.num_players == 1 and not spec.two_player_zero_sum
    assert spec.discount == 1.0 and not spec.deterministic
    assert jumanji_spec(env_id, max_episode_steps=9).max_episode_steps == 9


def test_a_users_jumanji_env_by_import_path():
    env = make_env(CORRIDOR, B, 0)
    spec = env.spec
    assert spec.name == CORRIDOR and spec.family == "jumanji"
    assert spec.observation_shape == (5,) and spec.num_actions == 3
    assert env.functions is jax_env_functions(CORRIDOR, B)  # one program for both runtimes
    ts = env.reset(0)
    for t in range(1, 5):  # the end of the corridor, four cells on: a termination
        ts = env.step(np.full(B, RIGHT, np.int32))
        assert (ts.done == (t == 4)).all() and not ts.truncated.any()
    assert (ts.reward == 1).all() and (ts.episode_return == 1).all()
    assert (ts.episode_length == 4).all()
    np.testing.assert_array_equal(ts.observation, [[1, 0, 0, 0, 0]] * B)  # a new episode
    # Standing still until the env's own time limit: jumanji's truncation, discount 1.
    stay = np.full((20, B), STAY, np.int32)
    _, scanned = _rollout(env.functions, 0, stay)
    assert not scanned.done[:-1].any() and scanned.done[-1].all() and scanned.truncated[-1].all()
    assert (scanned.episode_length[-1] == 20).all() and (scanned.episode_return[-1] == 0).all()
    # The callable's options, from the name's options.
    assert make_env(CORRIDOR, 2, 0, length=3).spec.observation_shape == (3,)
    env.close()


@pytest.mark.parametrize(
    "factory, fragment",
    [
        (
            "make_jumanji_untraceable",
            r"make_jumanji_untraceable: its step cannot be traced by JAX \(.+\): write it in JAX, "
            "or give it as a Gymnasium environment and use runtime=sebulba",
        ),
        (
            "make_jumanji_changing_observation",
            r"make_jumanji_changing_observation: its observation changes between steps: .*"
            r"cells=.float32\[5\].* after reset, .*cells=.int32\[5\].* after step",
        ),
        ("make_jumanji_continuous", "continuous actions are not taken yet"),
    ],
)
def test_bad_user_envs_give_one_line(factory, fragment):
    name = f"py:tests.fakes:{factory}"
    for call in (lambda: make_env(name, 2, 0), lambda: jax_env_functions(name, 2)):
        with pytest.raises(UsageError, match=fragment) as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "name, options, fragment",
    [
        ("jumanji:Snake-v2", {}, "unknown jumanji env 'Snake-v2': did you mean Snake-v1"),
        ("jumanji:snake", {}, "did you mean Snake-v1"),
        ("jumanji:Snake-v1", {"colour": "red"}, "unknown option.*colour.*max_episode_steps"),
        ("jumanji:Snake-v1", {"max_episode_steps": 0}, "max_episode_steps must be an integer"),
        ("jumanji:Snake-v1", {"max_episode_steps": 2.5}, "max_episode_steps must be an integer"),
    ],
)
def test_bad_names_and_options_give_one_line(name, options, fragment):
    calls = (lambda: make_env(name, 2, 0, **options), lambda: jax_env_functions(name, 2, **options))
    for call in calls:
        with pytest.raises(UsageError, match=fragment) as info:
            call()
        assert "\n" not in str(info.value)
