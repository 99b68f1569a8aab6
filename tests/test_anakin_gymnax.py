"""Anakin on one-player JAX environments (gymnax): MuZero and V-trace in one jitted iteration,
V-trace's update against the plain V-trace loss, and what is refused."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import configs
import muzero
from envs import env_spec
from podracer import cli
from selfplay import anakin
from selfplay.agent import make_agent
from selfplay.train import train

CARTPOLE = [
    "runtime=anakin",
    "env.name=gymnax:CartPole-v1",
    "actors.envs_per_thread=8",
    "actors.unroll_length=8",
    "network.mlp_sizes=[16,16]",
    "learner.log_every_s=0.05",
    "learner.checkpoint_every=10",
    "evaluation.every_s=0",
]
MUZERO = [
    *CARTPOLE,
    "mode=muzero",
    "loss.two_player=false",
    "loss.discount=0.99",
    "loss.unroll_steps=3",
    "loss.td_steps=5",
    "network.latent_size=16",
    "network.head_hidden=16",
    "network.value_support=5",
    "network.reward_support=2",
    "search.num_simulations=4",
    "learner.batch_size=32",
    "replay.capacity=4096",
    "replay.min_size=64",
    "replay.samples_per_insert=1",
    # Uniform windows: prioritised ones weight the logged loss towards the worst-fitted
    # windows, so its fall would say little about fitting (test_anakin covers priorities).
    "replay.priority_alpha=0",
]
VTRACE = [*CARTPOLE, "learner.batch_size=4"]


def _muzero(*extra):
    return configs.load_config("cartpole_vtrace", [*MUZERO, *extra])


def _vtrace(*extra):
    return configs.load_config("cartpole_vtrace", [*VTRACE, *extra])


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _smoke_run(config, tmp_path, updates):
    """Trains to `updates`, checks the frames, the checkpoint and a resume; the records."""
    run = tmp_path / "run"
    result = train(config, run, progress=False)
    assert result.stopped_by == "max_updates" and result.updates >= updates
    plan = anakin.plan_anakin(config, make_agent(config, env_spec(config.env.name)), 1)
    iterations = plan.min_iterations + -(-updates // plan.updates)
    assert result.frames == iterations * plan.moves * plan.games
    assert (run / "checkpoints" / str(result.updates)).is_dir()
    records = _records(run)
    more = config.replace(learner=dataclasses.replace(config.learner, max_updates=updates + 20))
    again = train(more, run, progress=False)
    assert again.resumed_from == result.updates and again.updates >= updates + 20
    return records


def test_muzero_smoke_run_fits_the_rewards_saves_and_resumes(tmp_path):
    records = _smoke_run(_muzero("learner.max_updates=40"), tmp_path, 40)
    losses = [r["value_loss"] for r in records if "value_loss" in r]
    assert len(losses) >= 4 and all(np.isfinite(losses))
    assert np.mean(losses[-2:]) < np.mean(losses[:2])  # fits the returns it sees
    assert any(r.get("episodes", 0) > 0 for r in records)


def test_vtrace_smoke_run_balances_longer_saves_and_resumes(tmp_path):
    # A line each iteration: as many returns logged on a fast machine as on a slow one.
    config = _vtrace(
        "learner.max_updates=600", "learner.log_every_s=1e-6", "learner.checkpoint_every=200"
    )
    records = _smoke_run(config, tmp_path, 600)
    returns = [r["episode_return"] for r in records if "episode_return" in r]
    assert len(returns) >= 8 and all(np.isfinite([r["loss"] for r in records if "loss" in r]))
    # CartPole pays 1 a step: random play lasts ~20 steps, 600 updates of V-trace several times
    # that (about 60-130 in the runs measured).
    assert np.mean(returns[-5:]) > np.mean(returns[:3]) + 10, returns


def test_vtrace_updates_on_the_iterations_trajectories_with_the_vtrace_loss():
    # One device, batch = all 8 trajectories: one update per iteration, on exactly the [T + 1, B]
    # trajectory the iteration played (its first step the previous iteration's last).
    config = _vtrace("learner.batch_size=8", "learner.max_updates=10")
    optimizer = muzero.make_optimizer(config.optimizer)
    program = anakin.make_anakin_program(config, optimizer, anakin.anakin_devices(config))
    plan, mesh = program.plan, program.mesh
    assert (plan.tail, plan.updates, plan.min_iterations) == (1, 1, 1)
    params = jax.jit(program.agent.init)(jax.random.key(0))
    # The optimizer's state in one program (eager jnp ops compile one program apiece).
    state = jax.jit(lambda p, k: muzero.init_train_state(p, optimizer, k))(
        params, jax.random.key(1)
    )
    replicated = muzero.replicate(state, mesh)
    carry = anakin.initial_carries(program.init_carry, params, mesh, jax.random.key(2))
    iterate = jax.jit(program.iterate, static_argnums=3)
    replicated, carry, _ = iterate(replicated, np.int32(0), carry, False)
    tail = jax.tree.map(lambda x: np.asarray(x)[0], carry.tail)  # [1, B] iteration 0's last step
    replicated, carry, _ = iterate(replicated, np.int32(1), carry, False)
    batch = jax.tree.map(lambda x: np.asarray(x)[0], carry.batch)  # [T + 1, B]
    assert batch.action.shape == (plan.moves + 1, plan.games)
    np.testing.assert_array_equal(batch.observation[0], tail.observation[0])
    np.testing.assert_array_equal(batch.action[0], tail.action[0])
    updated, _, metrics = jax.jit(program.learn)(replicated, np.int32(1), np.int32(0), carry)
    expected_state, expected = jax.jit(muzero.make_update(program.agent.loss_fn, optimizer))(
        muzero.unreplicate(replicated), batch
    )
    np.testing.assert_allclose(metrics["loss"], expected["loss"], rtol=1e-5)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
        muzero.unreplicate(updated).params,
        expected_state.params,
    )


def test_vtrace_batch_must_divide_the_trajectories():
    config = _vtrace("learner.batch_size=3", "learner.max_updates=1")
    with pytest.raises(configs.UsageError, match="must divide one iteration's trajectories"):
        train(config, "/nonexistent/never-written", progress=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--config", "cartpole_vtrace", "runtime=anakin", "env.name=pgx:tic_tac_toe"],
            "V-trace is a one-player agent and pgx:tic_tac_toe is a two-player game",
        ),
        (
            [
                "--config",
                "tic_tac_toe_alphazero",
                "runtime=anakin",
                "env.name=gymnax:CartPole-v1",
                "loss.two_player=false",
            ],
            "alphazero searches with the rules as its model",
        ),
        (
            ["--config", "cartpole_vtrace", "runtime=anakin", "env.name=gymnax:NoSuchEnv-v0"],
            "NoSuchEnv-v0",
        ),
        (["--config", "cartpole_vtrace", "runtime=anakin"], "'sebulba' for a non-JAX environment"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(args, message, tmp_path, capsys):
    code = cli.main(["train", "--run-dir", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_muzero_on_gymnax_learns_from_rewards_inside_the_jit():
    # The rollout records CartPole's rewards (1 per step), and the episodes end by falling.
    config = _muzero("learner.max_updates=1")
    optimizer = muzero.make_optimizer(config.optimizer)
    program = anakin.make_anakin_program(config, optimizer, anakin.anakin_devices(config))
    params = jax.jit(program.agent.init)(jax.random.key(0))
    carry = anakin.initial_carries(program.init_carry, params, program.mesh, jax.random.key(2))
    state = muzero.replicate(
        muzero.init_train_state(params, optimizer, jax.random.key(1)), program.mesh
    )
    iterate = jax.jit(program.iterate, static_argnums=3)
    for index in range(3):
        state, carry, metrics = iterate(state, np.int32(index), carry, False)
    tail = jax.tree.map(lambda x: x[0], carry.tail)  # [L - 1, B]
    np.testing.assert_array_equal(tail.reward, jnp.ones_like(tail.reward))
    assert tail.observation.shape[-1] == 4 and not tail.to_play.any()
