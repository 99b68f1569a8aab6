"""The actor loop in envpool's async mode (`actors.envs_per_step`): a smoke run, the layout of
what it pushes (each trajectory column is one env's consecutive steps), and bad input."""

import json

import jax
import numpy as np
import pytest

import configs
from envs import env_spec
from podracer import cli
from selfplay import actors
from selfplay.agent import make_agent
from selfplay.lifetime import StopSignal
from selfplay.params import ParameterServer
from selfplay.train import train
from tests import fakes

_SMALL = [
    "learner.batch_size=2",
    "actors.threads_per_device=1",
    "actors.envs_per_thread=8",
    "actors.envs_per_step=4",
    "actors.unroll_length=8",
    "network.mlp_sizes=[16,16]",
    "network.latent_size=16",
    "network.head_hidden=8",
    "search.num_simulations=4",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=2",
]


def _config(*extra: str) -> configs.ExperimentConfig:
    return configs.load_config("cartpole_vtrace", [*_SMALL, *extra])


def test_async_smoke_run_on_envpool_cartpole(tmp_path):
    config = _config("actors.threads_per_device=2", "learner.max_updates=4")
    result = train(config, tmp_path / "run", progress=False)
    assert result.stopped_by == "max_updates"
    assert result.updates == 4
    assert result.frames > 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["actors"]["envs_per_step"] == 4
    assert (tmp_path / "run" / "checkpoints" / "4").is_dir()


def _run_actor(config, spec, num_pushes: int, monkeypatch):
    """Runs one async actor thread's loop in this thread until it pushed `num_pushes`
    trajectories; returns them, their stream names and the actor's stats."""
    agent = make_agent(config, spec)
    device = jax.local_devices()[0]
    server = ParameterServer([device])
    server.publish(jax.jit(agent.init)(jax.random.PRNGKey(0)), version=7)
    stop, stats, pushed = StopSignal(), actors.ActorStats("test"), []

    def record(store, trajectory, stream, stop):
        pushed.append((trajectory, stream))
        if len(pushed) == num_pushes:
            stop.set("enough pushes")

    monkeypatch.setattr(actors, "push", record)
    actors.async_actor_loop(
        0, device, config, agent, server, None, stats, stop, jax.random.PRNGKey(1)
    )
    return pushed, stats


@pytest.mark.parametrize("mode", ["vtrace", "muzero"])
def test_each_column_is_one_envs_consecutive_steps(mode, monkeypatch):
    config = _config(f"mode={mode}", "loss.unroll_steps=2", "loss.td_steps=3")
    made = []

    def make_fake(name, num_envs, seed=0, batch_size=None, **options):
        assert (num_envs, batch_size) == (8, 4)
        made.append(fakes.FakeAsyncEnv(num_envs, batch_size, seed))
        return made[-1]

    monkeypatch.setattr(actors, "make_env", make_fake)
    pushed, stats = _run_actor(config, fakes.FakeAsyncEnv(8, 4).spec, 4, monkeypatch)
    env = made[0]
    assert env.closed
    # The fake favours high env ids: the fastest env ran well ahead of the slowest, so columns
    # had to hold a faster env's extra steps across pushes.
    assert env._steps.max() > env._steps.min() + 8
    length = 9 if mode == "vtrace" else 8  # V-trace: unroll_length + 1
    advance = length - 1 if mode == "vtrace" else length  # V-trace overlaps pushes by one step
    for k, (trajectory, stream) in enumerate(pushed):
        assert stream == "actor-0"
        assert trajectory.observation.shape == (length, 8, 4)
        assert trajectory.search_policy.shape == (length, 8, 2)
        assert (trajectory.policy_version == 7).all()
        for e in range(8):
            obs = trajectory.observation[:, e]  # [T, 4]
            steps = np.arange(k * advance, k * advance + length)  # env e's steps, in order
            np.testing.assert_array_equal(obs[:, 0], e)
            np.testing.assert_array_equal(obs[:, 1], steps)
            np.testing.assert_array_equal(trajectory.reward[:, e], 1000.0 * e + steps + 1)
            ends = obs[:, 2] + 1 == env.episode_length(e)
            np.testing.assert_array_equal(trajectory.discount[:, e], np.where(ends, 0.0, 1.0))
            np.testing.assert_array_equal(
                trajectory.action[:, e], env.actions[e][steps[0] : steps[-1] + 1]
            )
    # Every step the fake took was counted once, and every episode it ended.
    assert stats.frames == env._steps.sum()
    returns, lengths = stats.drain_episodes()
    assert len(returns) == env._episodes.sum()
    assert sorted(lengths) == sorted(
        env.episode_length(e) for e in range(8) for _ in range(env._episodes[e])
    )


def test_columns_follow_cartpole_physics_with_a_real_async_envpool(monkeypatch):
    config = _config()
    pushed, stats = _run_actor(config, env_spec(config.env.name), 3, monkeypatch)
    tau = 0.02  # CartPole's Euler step: x' = x + tau x_dot, theta' = theta + tau theta_dot
    for trajectory, _ in pushed:
        obs, discount = trajectory.observation, trajectory.discount  # [T, B, 4], [T, B]
        predicted = obs[:-1, :, [0, 2]] + tau * obs[:-1, :, [1, 3]]  # [T - 1, B, 2]
        follows = discount[:-1] == 1.0
        assert follows.sum() > 0.8 * follows.size
        np.testing.assert_allclose(obs[1:, :, [0, 2]][follows], predicted[follows], atol=1e-5)
        # After an episode's end a column goes on with the same env's next episode.
        assert (np.abs(obs[1:][~follows]) <= 0.05).all()
    for (first, _), (second, _) in zip(pushed, pushed[1:], strict=False):
        np.testing.assert_array_equal(first.observation[-1], second.observation[0])  # overlap
    assert stats.frames > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["actors.envs_per_thread=8", "actors.envs_per_step=9"],
            "ActorConfig.envs_per_step must be <= envs_per_thread (8)",
        ),
        (["actors.envs_per_thread=8", "actors.envs_per_step=5"], "2 * envs_per_step - 1"),
        (["actors.envs_per_step=-1"], "ActorConfig.envs_per_step must be an integer >= 0"),
        (
            [
                "--config",
                "tic_tac_toe_alphazero",
                "actors.envs_per_thread=8",
                "actors.envs_per_step=4",
            ],
            "actors.envs_per_step=4 (async stepping, below actors.envs_per_thread=8) works only",
        ),
        (
            [
                "--config",
                "tic_tac_toe_muzero",
                "actors.envs_per_thread=8",
                "actors.envs_per_step=4",
            ],
            "not openspiel:tic_tac_toe",
        ),
        (['env.options={"batch_size": 4}'], "set actors.envs_per_step"),
    ],
)
def test_bad_async_settings_get_one_line_and_exit_code_2(args, message, tmp_path, capsys):
    if "--config" not in args:
        args = ["--config", "cartpole_vtrace", *args]
    code = cli.main(["train", "--run-dir", str(tmp_path / "run"), *args])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err
    assert not (tmp_path / "run").exists()  # refused before anything was written
