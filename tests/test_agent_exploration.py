"""actors.random_move_prob: uniformly random legal moves in self-play, never where greedy."""

import jax
import numpy as np
import pytest

import configs
from envs import make_env
from selfplay.agent import make_agent
from selfplay.evaluation import greedy_config
from tests.fakes import TINY

BATCH = 512


def _act(overrides, greedy: bool, seed: int = 1):
    config = configs.load_config("tic_tac_toe_muzero", TINY + overrides)
    env = make_env(config.env.name, BATCH)
    timestep = env.reset(0)
    timestep = env.step(np.full(BATCH, 4))  # X in the centre: 8 legal moves for O
    agent = make_agent(config, env.spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    out = jax.device_get(
        agent.act(
            params,
            jax.random.PRNGKey(seed),
            timestep.observation,
            timestep.legal_mask,
            np.full(BATCH, greedy),
            None,
        )
    )
    return config, out, timestep.legal_mask


def test_random_moves_cover_every_legal_move_and_only_legal_ones():
    _, out, legal = _act(["actors.random_move_prob=1.0"], greedy=False)
    assert legal[np.arange(BATCH), out.action].all()
    counts = np.bincount(out.action, minlength=9)
    assert counts[4] == 0  # the occupied centre
    # 512 uniform draws over 8 moves: each expected 64; 30 is more than 4 standard deviations off.
    assert (counts[legal[0]] > 30).all(), counts


def test_no_random_moves_where_greedy_or_when_off():
    _, explored, _ = _act(["actors.random_move_prob=1.0"], greedy=True)
    _, plain, _ = _act(["actors.random_move_prob=0.0"], greedy=True)
    np.testing.assert_array_equal(explored.action, plain.action)  # greedy: the search's move
    # The same search and key: a random move that never fires leaves the search's sampled moves
    # row for row (the exploration draws its own randomness).
    _, sampled, _ = _act(["actors.random_move_prob=0.0"], greedy=False, seed=5)
    _, rare, _ = _act(["actors.random_move_prob=1e-12"], greedy=False, seed=5)
    np.testing.assert_array_equal(sampled.action, rare.action)
    assert len(np.unique(sampled.action)) > 1  # temperature 1: the search's moves vary by row


def test_evaluation_turns_random_moves_off_and_vtrace_refuses_them():
    config = configs.load_config("tic_tac_toe_muzero", ["actors.random_move_prob=0.3"])
    assert greedy_config(config).actors.random_move_prob == 0.0
    with pytest.raises(configs.UsageError, match="random_move_prob"):
        vtrace = configs.load_config("cartpole_vtrace", ["actors.random_move_prob=0.1"])
        make_agent(vtrace, make_env(vtrace.env.name, 2).spec)
    with pytest.raises(configs.UsageError, match="random_move_prob"):
        configs.load_config("tic_tac_toe_muzero", ["actors.random_move_prob=1.5"])
