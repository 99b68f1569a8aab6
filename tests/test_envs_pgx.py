"""pgx adapter: the exact-model step, device-side stepping and the pure functions under jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import make_env, pgx_exact_step, pgx_functions

B = 8  # the conformance test's batch: the jitted env functions are shared per (game, batch)


def test_exact_step_agrees_with_the_env():
    env = make_env("pgx:tic_tac_toe", B, 0)
    exact = jax.jit(pgx_exact_step("tic_tac_toe"))
    rng = np.random.default_rng(0)
    ts = env.reset(1)
    checked_terminal = False
    for _ in range(20):
        action = np.where(ts.legal_mask, rng.random(ts.legal_mask.shape), -1).argmax(1)
        ply = exact(env.state, jnp.asarray(action, jnp.int32))
        ts = env.step(action)
        np.testing.assert_array_equal(ply.reward, ts.reward)
        np.testing.assert_array_equal(ply.terminal, ts.done)
        going = ~ts.done  # where the env auto-reset, the exact step shows the terminal state
        np.testing.assert_array_equal(np.asarray(ply.observation)[going], ts.observation[going])
        np.testing.assert_array_equal(np.asarray(ply.legal_mask)[going], ts.legal_mask[going])
        np.testing.assert_array_equal(np.asarray(ply.to_play)[going], ts.to_play[going])
        checked_terminal |= bool(ts.done.any())
    assert checked_terminal


def test_exact_step_completing_a_line_wins_and_terminal_is_absorbing():
    env = make_env("pgx:tic_tac_toe", B, 0)
    env.reset(0)
    exact = jax.jit(pgx_exact_step("tic_tac_toe"))
    state = env.state
    for cell in [0, 3, 1, 4]:  # first mover: 0, 1; second mover: 3, 4
        ply = exact(state, jnp.full(B, cell, jnp.int32))
        assert not ply.terminal.any() and (ply.reward == 0).all()
        state = ply.state
    mover = np.asarray(state.current_player)
    ply = exact(state, jnp.full(B, 2, jnp.int32))  # first mover completes the top row
    assert ply.terminal.all() and (ply.reward == 1).all()
    np.testing.assert_array_equal(np.asarray(ply.state.rewards)[np.arange(B), 1 - mover], -1)
    after = exact(ply.state, jnp.full(B, 5, jnp.int32))
    assert after.terminal.all() and (after.reward == 0).all()


def test_exact_step_refuses_games_with_chance():
    with pytest.raises(ValueError, match="not deterministic"):
        pgx_exact_step("2048")


def test_step_device_stays_on_device_and_illegal_moves_lose():
    env = make_env("pgx:tic_tac_toe", B, 0)
    env.reset(0)
    ts = env.step_device(jnp.zeros(B, jnp.int32))
    assert isinstance(ts.observation, jax.Array) and isinstance(ts.reward, jax.Array)
    ts = env.step_device(jnp.zeros(B, jnp.int32))  # cell 0 is taken: pgx ends the game
    assert bool(ts.done.all()) and bool((ts.reward == -1).all())
    assert bool((ts.episode_length == 2).all()) and bool(ts.legal_mask.all())
    env.step(np.zeros(B, np.int32))  # a new game: cell 0 is free again
    with pytest.raises(ValueError, match="illegal"):  # the numpy step checks instead
        env.step(np.zeros(B, np.int32))


def test_pure_functions_run_an_episode_loop_inside_jit():
    functions = pgx_functions("tic_tac_toe", B)

    @jax.jit
    def play(key):
        state, ts = functions.reset(key)

        def body(carry, key):
            state, ts = carry
            logits = jnp.where(ts.legal_mask, jax.random.uniform(key, ts.legal_mask.shape), -1)
            state, ts = functions.step(state, jnp.argmax(logits, axis=1).astype(jnp.int32))
            return (state, ts), ts

        _, history = jax.lax.scan(body, (state, ts), jax.random.split(key, 30))
        return history  # TimeStep of [30, B] arrays

    history = jax.device_get(play(jax.random.PRNGKey(0)))
    lengths = history.episode_length[history.episode_end]
    returns = history.episode_return[history.episode_end]
    assert lengths.size >= 2 * B and lengths.min() >= 5 and lengths.max() <= 9
    assert set(np.unique(returns)) <= {-1.0, 0.0, 1.0}
