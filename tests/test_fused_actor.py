"""The pgx actor's fused act+step is the same as acting on the host and stepping the env."""

import jax
import numpy as np
import pytest

import configs
from envs import make_env
from selfplay.actors import fused_pgx_act_step
from selfplay.agent import make_agent
from tests.fakes import TINY


def test_fused_pgx_step_equals_act_then_env_step():
    config = configs.load_config("tic_tac_toe_alphazero", TINY)
    host_env = make_env(config.env.name, 4, seed=3)
    device_env = make_env(config.env.name, 4, seed=3)
    agent = make_agent(config, host_env.spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    fused = fused_pgx_act_step(agent, device_env)
    assert fused is not None
    timestep = host_env.reset(7)
    device_env.reset(7)
    state = device_env.env_state
    key = jax.random.PRNGKey(1)
    ended = 0
    for step in range(12):  # tic-tac-toe ends within 9 plies: covers the auto-reset
        key, act_key = jax.random.split(key)
        greedy = np.full(4, step % 2 == 1)
        out = jax.device_get(
            agent.act(
                params, act_key, timestep.observation, timestep.legal_mask, greedy, host_env.state
            )
        )
        timestep = host_env.step(out.action)
        state, fused_out, fused_timestep = jax.device_get(fused(params, act_key, state, greedy))
        np.testing.assert_array_equal(fused_out.action, out.action)
        np.testing.assert_allclose(fused_out.search_policy, out.search_policy, atol=1e-6)
        np.testing.assert_allclose(fused_out.search_value, out.search_value, atol=1e-5)
        for field in (
            "observation",
            "reward",
            "done",
            "legal_mask",
            "to_play",
            "episode_return",
            "episode_length",
        ):
            np.testing.assert_array_equal(
                getattr(fused_timestep, field), getattr(timestep, field), err_msg=field
            )
        ended += int(timestep.done.sum())
    assert ended > 0


def test_other_envs_keep_the_host_step():
    config = configs.load_config("tic_tac_toe_muzero", TINY)
    env = make_env(config.env.name, 2, seed=0)
    assert fused_pgx_act_step(make_agent(config, env.spec), env) is None


def test_programs_that_trace_act_inside_their_jit_take_the_cpu_compile_options():
    # `devices.cpu_convolutions=eigen` jits `agent.act` with XLA:CPU options; jax refuses
    # options on a nested jit, so the fused act+step (and Anakin's iteration) trace
    # `act_inside_jit` and pass the options to their own jit.
    config = configs.load_config("tic_tac_toe_alphazero", [*TINY, "devices.cpu_convolutions=eigen"])
    env = make_env(config.env.name, 2, seed=0)
    agent = make_agent(config, env.spec)
    if not agent.compiler_options:
        pytest.skip("this jaxlib lacks the option: no compile options to pass")
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    env.reset(0)
    fused = fused_pgx_act_step(agent, env)
    lowered = fused.lower(params, jax.random.PRNGKey(1), env.env_state, np.zeros(2, bool))
    jaxpr = jax.make_jaxpr(agent.act_inside_jit)(
        params,
        jax.random.PRNGKey(1),
        np.zeros((2, *env.spec.observation_shape), np.float32),
        np.ones((2, env.spec.num_actions), bool),
        np.zeros(2, bool),
        env.env_state.game,
    )
    nested = [
        e.params["compiler_options_kvs"] for e in jaxpr.eqns if "compiler_options_kvs" in e.params
    ]
    assert not any(nested), nested
    assert lowered.as_text()
