"""gymnax adapter: time limits and same-step auto-reset, the pure functions under jit and scan,
observation layouts, and one-line errors. The conformance test covers the rest."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from configs.errors import UsageError
from envs import GymnaxEnv, TimeStep, gymnax_functions, gymnax_spec, make_env

B = 4
PUSH_RIGHT = np.ones(B, np.int32)  # CartPole: the cart speeds up, the pole falls in ~10 steps


def test_time_limit_truncates_and_the_same_step_starts_a_new_episode():
    env = make_env("gymnax:CartPole-v1", B, 0, max_episode_steps=5)
    assert env.spec.max_episode_steps == 5
    env.reset(1)
    for t in range(1, 13):
        ts = env.step(PUSH_RIGHT)
        at_limit = t % 5 == 0
        assert (ts.done == at_limit).all() and (ts.truncated == at_limit).all()
        assert (ts.episode_end == at_limit).all() and (ts.reward == 1).all()
        if at_limit:
            assert (ts.episode_length == 5).all() and (ts.episode_return == 5).all()
            # A fresh episode's first state (uniform in +-0.05), not the pushed cart's.
            assert (np.abs(ts.observation) <= 0.05).all()
        else:
            assert (ts.episode_length == 0).all() and (ts.episode_return == 0).all()
            assert (ts.observation[:, 1] > 0.1).all()  # x_dot: the cart was pushed t times
    env.close()


def test_termination_on_the_last_allowed_step_is_not_a_truncation():
    env = make_env("gymnax:CartPole-v1", B, 0)
    env.reset(2)
    first_length = np.zeros(B, np.int32)  # each env's first episode, all ended by the pole falling
    while not first_length.all():
        ts = env.step(PUSH_RIGHT)
        assert not ts.truncated.any()
        first_length = np.where(first_length == 0, ts.episode_length, first_length)
    limit = int(first_length.min())
    limited = make_env("gymnax:CartPole-v1", B, 0, max_episode_steps=limit)
    limited.reset(2)  # same seed: the same first states, so the same falls
    for _ in range(limit):
        ts = limited.step(PUSH_RIGHT)
    assert ts.done.all() and (ts.episode_length == limit).all()
    np.testing.assert_array_equal(ts.truncated, first_length > limit)
    assert not ts.truncated[first_length == limit].any()


@pytest.mark.parametrize("env_id, limit", [("CartPole-v1", 7), ("Breakout-MinAtar", None)])
def test_pure_functions_under_scan_agree_with_the_host_env(env_id, limit):
    steps, seed = 25, 3
    functions = gymnax_functions(env_id, B, limit)
    num_actions = gymnax_spec(env_id).num_actions
    actions = np.random.default_rng(0).integers(0, num_actions, (steps, B)).astype(np.int32)

    @jax.jit
    def rollout(key, actions):  # actions [T, B]
        env_state, first = functions.reset(key)
        _, timesteps = jax.lax.scan(functions.step, env_state, actions)  # each field [T, B, ...]
        return first, timesteps

    first, scanned = jax.device_get(rollout(jax.random.PRNGKey(seed), actions))
    env = GymnaxEnv(env_id, B, max_episode_steps=limit)
    assert env.functions is functions
    host = [env.reset(seed)] + [env.step(a) for a in actions]
    jitted = [first] + [TimeStep(*(x[t] for x in scanned)) for t in range(steps)]
    for ts_host, ts_jit in zip(host, jitted, strict=True):
        for field, x_host, x_jit in zip(TimeStep._fields, ts_host, ts_jit, strict=True):
            assert x_host.dtype == x_jit.dtype and x_host.shape == x_jit.shape, field
            # XLA may fuse the float arithmetic differently inside scan: equal up to rounding.
            np.testing.assert_allclose(x_host, x_jit, rtol=1e-5, atol=1e-6, err_msg=field)
    assert scanned.done.any(), "the rollout should end some episodes"
    env.close()


def test_a_second_env_shares_the_compiled_functions_and_steps_on_device():
    env1, env2 = GymnaxEnv("CartPole-v1", B, 0), GymnaxEnv("CartPole-v1", B, 1)
    assert env1.functions is env2.functions and env1._step is env2._step
    env1.reset(0)
    ts = env1.step_device(jax.numpy.zeros(B, jax.numpy.int32))
    assert isinstance(ts.observation, jax.Array) and ts.observation.shape == (B, 4)
    assert env1.env_state.episode_length.tolist() == [1] * B


@pytest.mark.parametrize(
    "env_id, obs_shape, num_actions, limit",
    [
        ("CartPole-v1", (4,), 2, 500),
        ("Acrobot-v1", (6,), 3, 500),
        ("Breakout-MinAtar", (10, 10, 4), 3, 1000),
        ("SpaceInvaders-MinAtar", (10, 10, 6), 4, 1000),
        ("Asterix-MinAtar", (10, 10, 4), 5, 1000),
        ("Freeway-MinAtar", (10, 10, 7), 3, 2500),
        ("Seaquest-MinAtar", (10, 10, 10), 6, 1000),
        ("Catch-bsuite", (10, 5, 1), 3, 1000),  # a 2-d grid becomes one image plane
    ],
)
def test_specs_give_network_ready_layouts_and_gymnax_time_limits(
    env_id, obs_shape, num_actions, limit
):
    spec = gymnax_spec(env_id)
    assert spec.name == f"gymnax:{env_id}" and spec.family == "gymnax"
    assert spec.observation_shape == obs_shape and spec.observation_dtype == "float32"
    assert spec.num_actions == num_actions and spec.max_episode_steps == limit
    assert spec.num_players == 1 and not spec.two_player_zero_sum
    assert spec.discount == 1.0 and not spec.deterministic
    assert gymnax_spec(env_id, max_episode_steps=9).max_episode_steps == 9


def test_minatar_observations_are_channels_last_float_planes():
    env = make_env("gymnax:SpaceInvaders-MinAtar", 2, 0)
    ts = env.reset(0)
    assert ts.observation.shape == (2, 10, 10, 6) and ts.observation.dtype == np.float32
    assert set(np.unique(ts.observation).tolist()) <= {0.0, 1.0}
    cannon = ts.observation[..., 0]  # channel 0: the player's cannon, one cell in the bottom row
    assert (cannon.sum(axis=(1, 2)) == 1).all() and (cannon[:, 9].sum(axis=1) == 1).all()
    env.close()


@pytest.mark.parametrize(
    "name, options, fragment",
    [
        ("gymnax:CartPol-v1", {}, "unknown gymnax env 'CartPol-v1': did you mean CartPole-v1"),
        ("gymnax:SpaceInvaders", {}, "did you mean SpaceInvaders-MinAtar"),
        ("gymnax:CartPole-v1", {"colour": "red"}, "unknown option.*colour.*max_episode_steps"),
        ("gymnax:CartPole-v1", {"max_episode_steps": 0}, "max_episode_steps must be an integer"),
        ("gymnax:CartPole-v1", {"max_episode_steps": 2.5}, "max_episode_steps must be an integer"),
        ("gymnax:CartPole-v1", {"max_episode_steps": "9"}, "max_episode_steps must be an integer"),
        ("gymnax:CartPole-v1", {"max_episode_steps": [9]}, "max_episode_steps must be an integer"),
    ],
)
def test_bad_names_and_options_give_one_line(name, options, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        make_env(name, 2, 0, **options)
    assert "\n" not in str(info.value)


def test_bad_arguments_to_the_pure_functions_give_one_line():
    for call, fragment in [
        (lambda: gymnax_functions("CartPole-v1", 0), "num_envs"),
        (lambda: gymnax_functions("CartPole-v1", 2, -3), "max_episode_steps"),
        (lambda: gymnax_spec("Breakout"), "did you mean Breakout-MinAtar"),
    ]:
        with pytest.raises(UsageError, match=fragment) as info:
            call()
        assert "\n" not in str(info.value)


def test_other_families_never_load_gymnax():
    code = (
        "import sys; import envs as e; e.parse_env_name('gymnax:CartPole-v1'); "
        "assert 'gymnax' not in sys.modules, 'gymnax was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
