"""Sebulba on JAX environments: a whole segment per device call (`segment_actor_loop`) and the
replay on the learner's device (`selfplay.device_replay`)."""

import collections

import jax
import numpy as np
import pytest

import configs
import muzero
from envs import env_spec
from podracer import cli
from selfplay import actors
from selfplay import train as train_module
from selfplay.agent import make_agent
from selfplay.anakin import AnakinPlan
from selfplay.device_replay import DeviceReplay
from selfplay.lifetime import StopSignal
from selfplay.params import ParameterServer
from selfplay.replay import make_sequence_replay
from selfplay.sebulba import SebulbaRuntime
from tests.fakes import TINY
from tests.test_train import checkpoint_steps, interrupt_this_process_once

# Both of Sebulba's paths for JAX environments forced on: "auto" takes them on accelerators only.
DEVICE_PATHS = ["actors.scan_moves=on", "replay.on_device=on"]


def _pushes(loop, config, params, count: int) -> list:
    """The first `count` trajectories one actor thread running `loop` pushes, on the host."""
    agent = make_agent(config, env_spec(config.env.name, **config.env.options))
    device = jax.local_devices()[0]
    server = ParameterServer([device])
    server.publish(params, version=3)
    stop, pushed = StopSignal(), []

    class Recording:
        def add(self, trajectory, stream=None, timeout=None):
            pushed.append(jax.device_get(trajectory))
            if len(pushed) == count:
                stop.set("enough")
            return True

    stats = actors.ActorStats("test")
    loop(0, device, config, agent, server, Recording(), stats, stop, jax.random.PRNGKey(5))
    return pushed, stats


@pytest.mark.parametrize(
    "preset, extra",
    [
        (
            "tic_tac_toe_alphazero",
            [
                "actors.greedy_after_moves=3",  # greedy from the 4th move of each game
                "actors.random_move_prob=0.25",
                "search.num_simulations=4",
                "network.channels=8",
                "network.head_hidden=8",
                "network.representation_blocks=1",
            ],
        ),
        # V-trace: pushes of T + 1 steps that repeat the last one (its bootstrap step).
        ("gymnax_cartpole_vtrace", ["network.mlp_sizes=[8]"]),
    ],
    ids=["alphazero-pgx", "vtrace-gymnax"],
)
def test_a_segment_per_device_call_records_the_steps_of_the_per_move_actor(preset, extra):
    config = configs.load_config(
        preset, ["actors.envs_per_thread=4", "actors.unroll_length=6", *extra]
    )
    agent = make_agent(config, env_spec(config.env.name))
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    per_move, per_move_stats = _pushes(actors.actor_loop, config, params, 3)
    segments, segment_stats = _pushes(actors.segment_actor_loop, config, params, 3)
    ended = 0
    for one, other in zip(per_move, segments, strict=True):
        assert one.action.shape == (agent.segment_length, 4)
        for field in muzero.Trajectory._fields:
            a, b = getattr(one, field), getattr(other, field)
            assert (a is None) == (b is None), field
            # Floats within rounding (XLA fuses a scan's body its own way); actions, legal
            # moves, players and versions equal.
            if a is not None and a.dtype.kind == "f":
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=field)
            elif a is not None:
                np.testing.assert_array_equal(a, b, err_msg=field)
        ended += int((one.discount == 0).sum())
    assert ended > 0  # the segments cross episode ends: the resets happen inside the scan
    assert (per_move[0].policy_version == 3).all()
    # Frames and episodes as the learner logs them: 6 moves of 4 envs per device call (V-trace's
    # third push of 6 + 1 steps needs a fourth call), and the same episodes where both played.
    calls = 4 if agent.segment_overlap else 3
    assert segment_stats.frames == calls * 6 * 4
    ended_per_move = collections.Counter(zip(*per_move_stats.drain_episodes(), strict=True))
    ended_segments = collections.Counter(zip(*segment_stats.drain_episodes(), strict=True))
    assert ended_per_move and not ended_per_move - ended_segments


def _segment(stream: int, first_step: int, steps: int, games: int) -> muzero.Trajectory:
    """A made-up [steps, games] segment whose steps say who they are: `observation` is the
    step's number in its game, `action` its game's id (stream * games + game)."""
    step = np.arange(first_step, first_step + steps, dtype=np.float32)[:, None, None]
    zeros = np.zeros((steps, games), np.float32)
    return muzero.Trajectory(
        observation=np.broadcast_to(step, (steps, games, 1)).copy(),
        action=np.broadcast_to(stream * games + np.arange(games, dtype=np.int32), (steps, games)),
        reward=zeros,
        discount=zeros + 1,
        search_policy=np.zeros((steps, games, 3), np.float32),
        search_value=zeros,
        legal_mask=np.ones((steps, games, 3), bool),
        to_play=zeros.astype(np.int32),
        behaviour_logits=np.zeros((steps, games, 3), np.float32),
        policy_version=zeros.astype(np.int32),
    )


def _window_ids(window) -> list[tuple[int, int]]:
    """(game, first step) of each window of [L, N] leaves; each must be consecutive steps of one
    game."""
    games, steps = np.asarray(window.action), np.asarray(window.observation)[..., 0]
    assert (games == games[:1]).all()  # one game
    np.testing.assert_array_equal(np.diff(steps, axis=0), 1)  # consecutive steps
    return list(zip(games[0].tolist(), steps[0].astype(int).tolist(), strict=True))


def test_the_device_replay_draws_the_windows_the_host_replay_draws_as_often():
    # Two actor threads at different paces, nothing evicted: both replays hold the same windows
    # and draw each as often (uniform: priority_alpha 0).
    config = configs.load_config(
        "tic_tac_toe_alphazero",
        [
            "actors.envs_per_thread=2",
            "actors.unroll_length=4",
            "loss.td_steps=2",  # windows of L = 3 steps
            "learner.batch_size=32",
            "replay.capacity=200",
            "replay.min_size=8",
            "replay.samples_per_insert=0",
            "replay.priority_alpha=0",
        ],
    )
    agent = make_agent(config, env_spec(config.env.name))
    device = DeviceReplay(config, agent, None, jax.local_devices()[0], 2, donate_state=False)
    host = make_sequence_replay(config, agent.window_length, 2)
    for stream, pushes in ((0, 3), (1, 2)):
        for i in range(pushes):
            segment = _segment(stream, 4 * i, 4, 2)
            assert device.add(segment, stream=f"actor-{stream}", timeout=1)
            assert host.add(segment, stream=f"actor-{stream}", timeout=1)
    # Stream 0 holds 12 steps (10 windows per game), stream 1 8 steps (6 per game).
    expected = {(g, t) for g, steps in ((0, 12), (1, 12), (2, 8), (3, 8)) for t in range(steps - 2)}
    assert device.num_windows == host.num_windows == len(expected) == 32
    assert device.size == 40
    drawn = {"device": collections.Counter(), "host": collections.Counter()}
    for i in range(30):
        window, weights = device.draw_windows(jax.random.PRNGKey(i))
        np.testing.assert_allclose(weights, 1.0)
        drawn["device"].update(_window_ids(window))
        drawn["host"].update(_window_ids(host.sample(32, timeout=1).batch))
    for counts in drawn.values():
        assert set(counts) == expected
        # Stratified: each of the 32 windows about once per batch of 32.
        assert 15 <= min(counts.values()) <= max(counts.values()) <= 45, counts


def test_prioritised_windows_of_games_written_at_their_own_pace_are_drawn_in_proportion():
    # Four games of one ring of 8 rows, written 20, 11, 6 and 2 steps: the first has wrapped
    # twice, the last holds no whole window of 3.
    plan = AnakinPlan(1, 4, 4, 3, 0, 16, 8, 4096, 0, 0, 0)
    recorded = np.array([20, 11, 6, 2], np.int32)
    priorities = jax.random.uniform(jax.random.PRNGKey(0), (8, 4), minval=0.1, maxval=2.0)
    whole = np.zeros((8, 4), bool)  # by brute force: a window's L steps all still in the ring
    for game, count in enumerate(recorded):
        for step in range(max(0, count - 8), count - 2):
            whole[step % 8, game] = True
    rows, games, weights = jax.jit(plan.sample_prioritised_from, static_argnums=(3,))(
        jax.random.PRNGKey(1), recorded, priorities, 0.7, 0.5
    )
    firsts = np.asarray(rows[0])
    assert whole[firsts, np.asarray(games)].all()  # only whole windows
    np.testing.assert_array_equal(np.asarray(rows), (firsts + np.arange(3)[:, None]) % 8)
    mass = np.where(whole, np.asarray(priorities) ** 0.7, 0)
    expected = mass / mass.sum()
    counts = np.zeros((8, 4))
    np.add.at(counts, (firsts, np.asarray(games)), 1)
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)  # stratified
    probability = expected[firsts, np.asarray(games)]
    raw = (whole.sum() * probability) ** -0.5
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-4)


def _tiny_run(*extra):
    return configs.load_config("tic_tac_toe_alphazero", [*TINY, *DEVICE_PATHS, *extra])


def test_the_runtime_takes_the_device_replay_or_says_why_not(capsys):
    optimizer = muzero.make_optimizer(_tiny_run().optimizer)
    assert SebulbaRuntime(_tiny_run(), optimizer).device_replay is not None
    for choice in ("off", "auto"):  # "auto": on accelerators only
        runtime = SebulbaRuntime(_tiny_run(f"replay.on_device={choice}"), optimizer)
        assert runtime.device_replay is None
    # As on a GPU, "auto" takes it, but where the replay is saved with the checkpoints it keeps
    # the host's, and one line says so.
    auto = ["replay.on_device=auto", "devices.accelerator_paths=on"]
    assert SebulbaRuntime(_tiny_run(*auto), optimizer).device_replay is not None
    assert not capsys.readouterr().out
    kept = SebulbaRuntime(_tiny_run(*auto, "replay.checkpoint=true"), optimizer)
    assert kept.device_replay is None
    assert "the replay stays on the host: replay.checkpoint=true" in capsys.readouterr().out
    with pytest.raises(
        configs.UsageError, match="on_device must be 'auto' or 'off' with replay.checkpoint"
    ):
        _tiny_run("replay.checkpoint=true")
    with pytest.raises(configs.UsageError, match="ActorConfig.scan_moves must be 'auto' or 'off'"):
        _tiny_run("env.name=openspiel:tic_tac_toe", "mode=muzero")
    with pytest.raises(configs.UsageError, match="ReplayConfig.on_device must be"):
        _tiny_run("replay.on_device=always")


def test_a_run_on_the_device_paths_learns_saves_resumes_and_stops_on_ctrl_c(tmp_path, capsys):
    run = tmp_path / "run"
    result = train_module.train(_tiny_run("learner.max_updates=4"), run, progress=False)
    assert result.stopped_by == "max_updates" and result.updates == 4 and result.frames > 0
    assert checkpoint_steps(run)[-1] == 4
    # `podracer train` resumes it, stopped by a Ctrl-C once it has saved past update 4 (the
    # command in this process: the run above built its programs).
    capsys.readouterr()
    args = ["--run-dir", str(run), "--quiet", *TINY, *DEVICE_PATHS, "learner.max_updates=100000"]
    with interrupt_this_process_once(saved_past=(run, 4)):
        code = cli.main(["train", *args])
    stdout = capsys.readouterr().out
    assert code == 130, stdout
    assert "resumed from update 4" in stdout and "stopped (received SIGINT)" in stdout, stdout
    stopped_at = int(stdout.split("stopped (received SIGINT) at update ")[1].split(",")[0])
    assert checkpoint_steps(run)[-1] == stopped_at > 4  # the final checkpoint
