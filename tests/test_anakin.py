"""The Anakin runtime: windows across iterations, its plan, runs, resume, devices, bad input."""

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import configs
import muzero
from configs import UsageError
from envs import env_spec
from podracer import cli
from selfplay import anakin
from selfplay import train as train_module
from selfplay.agent import make_agent
from tests import fakes
from tests.test_train import checkpoint_steps, interrupt_this_process_once

TINY = [
    "runtime=anakin",
    "actors.envs_per_thread=4",
    "actors.unroll_length=4",
    "search.num_simulations=4",
    "network.channels=8",
    "network.head_hidden=8",
    "learner.batch_size=8",
    "replay.min_size=16",
    "replay.capacity=256",
    "replay.samples_per_insert=1",
    "learner.log_every_s=0.1",
    "learner.checkpoint_every=4",
    "loss.unroll_steps=2",  # a shorter unrolled update: less to trace and compile
]


def _tiny(preset="tic_tac_toe_alphazero", *extra):
    return configs.load_config(preset, [*TINY, *extra])


def test_sampled_windows_are_whole_consecutive_steps_of_one_game_in_the_ring():
    # A ring of S = 8 steps per game, iterations of T = 4 steps, windows of L = 3 steps: every
    # window is L consecutive recorded steps of one game, never one that is overwritten or
    # not yet written, and every complete window can be drawn.
    plan = anakin.AnakinPlan(
        devices=1,
        games=2,
        moves=4,
        window=3,
        tail=0,
        examples=8,
        ring=8,
        minibatch=512,
        updates=1,
        fill_iterations=0,
        min_iterations=0,
    )

    @jax.jit  # one program: eager jnp ops compile one program apiece
    def draw(index):
        # Prioritised, all priorities equal (the unwritten rows' too): the same windows.
        priorities = jnp.ones((plan.ring, plan.games))
        prioritised = plan.sample_prioritised(jax.random.key(index), index, priorities, 0.6, 0.4)
        return plan.written(index), plan.sample_windows(jax.random.key(index), index), prioritised

    for index in range(4):
        written = (index + 1) * plan.moves  # steps recorded per game
        oldest = max(0, written - plan.ring)  # the run's oldest step still in the ring
        count, (rows, games), prioritised = jax.device_get(draw(np.int32(index)))
        assert int(count) == (written - oldest - plan.window + 1) * plan.games
        _assert_every_whole_window_and_only_those(plan, index, rows, games)
        rows, games, weights = prioritised
        _assert_every_whole_window_and_only_those(plan, index, rows, games)
        np.testing.assert_allclose(weights, 1.0, rtol=1e-5)


def _assert_every_whole_window_and_only_those(plan, index, rows, games):
    written = (index + 1) * plan.moves
    oldest = max(0, written - plan.ring)
    assert rows.shape == (plan.window, plan.minibatch) and games.shape == (plan.minibatch,)
    # The run's step at each row: the newest S steps map to their rows mod S.
    step = np.asarray(rows) + (written - 1 - np.asarray(rows)) // plan.ring * plan.ring
    step = np.where(step > written - 1, step - plan.ring, step)
    np.testing.assert_array_equal(np.diff(step, axis=0), 1)  # consecutive steps
    assert step.min() >= oldest and step.max() <= written - 1
    starts = set(step[0].tolist())
    assert starts == set(range(oldest, written - plan.window + 1))  # every window drawn
    assert set(np.asarray(games).tolist()) == {0, 1}


def test_prioritised_windows_are_drawn_in_proportion_and_weighted_back():
    # S = 8, T = 4, L = 3, after iteration 3: rows 0..7 hold steps 8..15, windows start at rows
    # 0..5 (12 windows over 2 games). Mass 1 on (row 1, game 0), 3 on (row 4, game 1), 1000 on
    # row 6 (a window that would run past the newest step): stratified over 4 equal slices of
    # the mass, one draw falls in the first window's and three in the second's.
    plan = anakin.AnakinPlan(1, 2, 4, 3, 0, 8, 8, 4, 1, 0, 0)
    priorities = np.zeros((8, 2), np.float32)
    priorities[1, 0], priorities[4, 1], priorities[6, :] = 1.0, 3.0, 1000.0

    @jax.jit
    def draw(priorities):
        return [
            plan.sample_prioritised(jax.random.key(0), jnp.int32(3), priorities, alpha, beta)
            for alpha, beta in ((1.0, 1.0), (0.5, 0.5))
        ]

    first, second = jax.device_get(draw(priorities))
    rows, games, weights = first
    np.testing.assert_array_equal(rows[0], [1, 4, 4, 4])
    np.testing.assert_array_equal(rows[:, 0], [1, 2, 3])
    np.testing.assert_array_equal(games, [0, 1, 1, 1])
    # (12 * P) ** -1 over the largest: P = 1/4 and 3/4
    np.testing.assert_allclose(weights, [1.0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-4)
    # alpha = 0.5: masses 1 and sqrt(3); the weights (12 * P) ** -beta, beta = 0.5
    rows, games, weights = second
    share = 1 / (1 + 3**0.5)
    assert set(np.asarray(rows[0]).tolist()) <= {1, 4}
    expected = {1: (12 * share) ** -0.5, 4: (12 * (1 - share)) ** -0.5}
    largest = max(expected[r] for r in np.asarray(rows[0]).tolist())
    np.testing.assert_allclose(
        weights, [expected[r] / largest for r in np.asarray(rows[0]).tolist()], rtol=1e-4
    )


class _Step(NamedTuple):  # what an update reads of the train state, for a spy update
    params: Any
    target_params: Any
    step: jax.Array


def test_updates_weight_their_windows_with_the_annealed_beta():
    # The hand ring above (masses 1 and 3 on two windows), beta 0 rising to 1 over 10 updates:
    # each update's importance weights use the beta of the learner's step. A spy batch is the
    # weights themselves; a spy update returns them.
    config = _tiny(
        "tic_tac_toe_alphazero",
        "replay.priority_alpha=1",
        "replay.priority_beta=0",
        "replay.priority_beta_anneal_updates=10",
    )
    agent = make_agent(config, env_spec(config.env.name))._replace(
        make_batch=lambda window, weights, context: (weights, jnp.ones_like(weights))
    )
    plan = anakin.AnakinPlan(1, 2, 4, 3, 0, 8, 8, 4, 1, 0, 0)
    _, _, learn_step = anakin.make_anakin_iteration(
        config, agent, plan, None, lambda state, weights: (state, {"weights": weights})
    )
    priorities = np.zeros((8, 2), np.float32)
    priorities[1, 0], priorities[4, 1] = 1.0, 3.0
    key = jax.random.key(0)
    carry = anakin.AnakinCarry(
        env=None,
        timestep=None,
        tail=None,
        ring={"x": np.zeros((8, 2), np.float32)},
        batch=None,
        key=key,
        sample_key=key,
        priorities=anakin.RingPriorities(priorities, np.ones((), np.float32)),
    )
    learn = jax.jit(learn_step)
    weights = {
        step: learn(_Step(None, None, jnp.int32(step)), jnp.int32(3), jnp.int32(0), carry)[2]
        for step in (0, 5, 10, 40)
    }
    # P = 1/4 and 3/4 over 12 windows: (12 P) ** -beta over the largest.
    np.testing.assert_allclose(weights[0]["weights"], [1, 1, 1, 1], rtol=1e-5)
    np.testing.assert_allclose(weights[5]["weights"], [1, 3**-0.5, 3**-0.5, 3**-0.5], rtol=1e-4)
    for step in (10, 40):
        np.testing.assert_allclose(weights[step]["weights"], [1, 1 / 3, 1 / 3, 1 / 3], rtol=1e-4)


def test_plan_sizes_updates_and_refuses_what_cannot_work():
    config = _tiny()
    agent = make_agent(config, env_spec(config.env.name))
    plan = anakin.plan_anakin(config, agent, devices=2)
    assert (plan.games, plan.moves, plan.examples) == (4, 4, 16)
    # 256 steps over 2 devices of 4 games: rings of 32 steps, whole iterations of 4.
    assert plan.ring == 32 and plan.minibatch == 4
    assert plan.updates == round(1 * 16 * 2 / 8)
    # Windows of L = 10 moves: 3 iterations of 4 moves hold 3 windows a game (12 of a device,
    # 24 of both: replay.min_size is 16), the first learning iteration.
    assert plan.window == 10 and plan.fill_iterations == 2 and plan.min_iterations == 2
    assert [int(plan.written(i)) for i in range(1, 9)] == [0, 12, 28, 44, 60, 76, 92, 92]
    with pytest.raises(UsageError, match="batch_size 8 must divide evenly over 3"):
        anakin.plan_anakin(config, agent, devices=3)
    small = _tiny("tic_tac_toe_alphazero", "replay.capacity=40", "replay.min_size=8")
    with pytest.raises(UsageError, match="replay.capacity 40 must hold"):
        anakin.plan_anakin(small, agent, devices=2)
    free = _tiny("tic_tac_toe_alphazero", "replay.samples_per_insert=0")
    with pytest.raises(UsageError, match="samples_per_insert must be > 0"):
        anakin.plan_anakin(free, agent, devices=1)


@pytest.mark.plots
@pytest.mark.parametrize(
    "preset, extra, ctrl_c",
    [
        ("tic_tac_toe_alphazero", [], False),
        (
            "tic_tac_toe_muzero",
            ["env.name=pgx:tic_tac_toe", "learner.augment_symmetries=false"],
            True,
        ),
    ],
    ids=["alphazero", "muzero"],
)
def test_smoke_run_learns_logs_saves_and_resumes(preset, extra, ctrl_c, tmp_path, capsys):
    config = _tiny(preset, "learner.max_updates=8", *extra)
    run = tmp_path / "run"
    result = train_module.train(config, run, progress=False)
    assert result.stopped_by == "max_updates" and result.updates == 8
    # The first iterations fill the window tail (and the replay), then each takes 2 updates
    # (16 examples x samples_per_insert 1 / batch 8).
    plan = anakin.plan_anakin(config, make_agent(config, env_spec(config.env.name)), 1)
    assert result.frames == (plan.min_iterations + 8 // plan.updates) * 16
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in records if "loss" in r]
    assert learned and all(np.isfinite(r["loss"]) for r in learned)
    assert any(r.get("episodes", 0) > 0 for r in records)
    # Where the time goes (on a CPU the updates are their own stage).
    assert any(
        r.get("time/anakin/play_s", 0) > 0 and r.get("time/anakin/learn_s", 0) > 0 for r in records
    )
    assert (run / "checkpoints" / "8").is_dir() and (run / "learning_curves.png").is_file()

    if not ctrl_c:
        more = config.replace(learner=dataclasses.replace(config.learner, max_updates=12))
        with fakes.traced_programs() as traced:
            again = train_module.train(more, run, progress=False)
        assert again.resumed_from == 8 and again.updates == 12
        # The config differs in its limit alone: the resume runs the programs the first run
        # compiled (selfplay.programs), tracing none of them again.
        assert not {"iterate", "learn_per_device", "init_carry", "act"} & set(traced), traced
        # The run's frames, episodes and time count on from where it stopped.
        # (Anakin's ring is not saved: it fills again before the 4 updates.)
        assert again.frames == result.frames + (plan.min_iterations + 4 // plan.updates) * 16
        assert again.seconds > result.seconds
        _assert_counts_go_on(run)
        # The frame budget is the run's: resumed at its budget, the run stops at once.
        budget = dataclasses.replace(more.learner, max_updates=0, max_frames=again.frames)
        spent = more.replace(learner=budget)
        done = train_module.train(spent, run, progress=False)
        assert done.stopped_by == "max_frames" and done.updates == 12, done
        return
    # The README's resume: `podracer train --run-dir R`, no --config, no overrides but the new
    # limit, goes on with R's own config.json (a preset that is not the default, with overrides
    # of its own). A Ctrl-C stops it once it has saved past update 8: a final checkpoint there.
    # (The command in this process, running the programs the run above built; a fresh
    # interpreter's Ctrl-C: tests/test_train.py.)
    capsys.readouterr()
    with interrupt_this_process_once(saved_past=(run, 8)):
        code = cli.main(["train", "--run-dir", str(run), "--quiet", "learner.max_updates=100000"])
    stdout = capsys.readouterr().out
    assert code == 130, stdout
    assert "resumed from update 8" in stdout and "stopped (received SIGINT)" in stdout, stdout
    stopped_at = int(stdout.split("stopped (received SIGINT) at update ")[1].split(",")[0])
    assert checkpoint_steps(run)[-1] == stopped_at > 8  # the final checkpoint at the stopped step
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"]["name"] == "pgx:tic_tac_toe" and saved["learner"]["max_updates"] == 100000
    _assert_counts_go_on(run)


def _assert_counts_go_on(run):
    """Over the invocations of a run stopped cleanly each time, the frames, episodes and time of
    metrics.jsonl never go back, and each checkpoint records the run's counts."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    starts = [i for i, r in enumerate(records) if r.get("status") == "compiling"]
    assert len(starts) >= 2, "expected a resumed invocation"
    for key in ("frames", "episodes_total", "time"):
        seen = [r[key] for r in records if key in r]
        assert seen == sorted(seen), (key, seen)
    assert records[starts[-1]]["frames"] > 0 and records[starts[-1]]["time"] > 0
    from selfplay.checkpoints import Checkpointer

    checkpoints = Checkpointer(run / "checkpoints", None)
    try:
        meta = checkpoints.restore_metadata()
    finally:
        checkpoints.close()
    assert meta["frames"] >= records[-1]["frames"] and meta["seconds"] >= records[-1]["time"]
    assert meta["episodes"] == records[-1]["episodes_total"]


def test_a_sebulba_run_resumes_under_anakin(tmp_path):
    sebulba = configs.load_config(
        "tic_tac_toe_alphazero",
        [
            "learner.batch_size=8",
            "replay.min_size=16",
            "replay.capacity=256",
            "actors.threads_per_device=1",
            "actors.envs_per_thread=4",
            "actors.unroll_length=4",
            "search.num_simulations=4",
            "network.channels=8",
            "network.head_hidden=8",
            "learner.max_updates=2",
            "learner.log_every_s=0.1",
        ],
    )
    train_module.train(sebulba, tmp_path / "run", progress=False)
    result = train_module.train(
        _tiny("tic_tac_toe_alphazero", "learner.max_updates=4"), tmp_path / "run", progress=False
    )
    assert result.resumed_from == 2 and result.updates == 4


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["runtime=anakin", "env.name=openspiel:tic_tac_toe"],
            "runtime must be 'sebulba' for a non-JAX environment",
        ),
        (["runtime=jitted"], "runtime must be 'sebulba' or 'anakin'"),
    ],
)
def test_bad_runtime_gets_one_line_and_exit_2(overrides, message, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "podracer",
            "train",
            "--config",
            "tic_tac_toe_muzero",
            "--run-dir",
            str(tmp_path / "run"),
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_updates_inside_the_jit_equal_updates_called_one_by_one():
    # Accelerators take the U updates inside the iteration's jit, CPUs call them one by one
    # (`learn_in_jit`): from the same state, one learning iteration must give the same params.
    config = _tiny()
    optimizer = muzero.make_optimizer(config.optimizer)
    program = anakin.make_anakin_program(config, optimizer, anakin.anakin_devices(config))
    plan, mesh, iterate, learn = program.plan, program.mesh, program.iterate, program.learn
    params = jax.jit(program.agent.init)(jax.random.key(0))
    init_state = jax.jit(lambda params, key: muzero.init_train_state(params, optimizer, key))
    state = muzero.replicate(init_state(params, jax.random.key(1)), mesh)
    carry = anakin.initial_carries(program.init_carry, params, mesh, jax.random.key(2))
    for index in range(plan.min_iterations):  # fill the ring, no updates yet
        state, carry, metrics = jax.jit(iterate, static_argnums=3)(
            state, np.int32(index), carry, False
        )
    index = np.int32(plan.min_iterations)
    inside, inside_carry, inside_metrics = jax.jit(iterate, static_argnums=3)(
        state, index, carry, True
    )
    outside, after, _ = jax.jit(iterate, static_argnums=3)(state, index, carry, False)
    # The preset's replay is prioritised: new windows start at the largest priority yet (1).
    assert config.replay.priority_alpha > 0
    window_priorities = np.asarray(after.priorities.window)[0]  # [S, B]
    np.testing.assert_array_equal(window_priorities[: (int(index) + 1) * plan.moves], 1.0)
    # The ring holds the recorded steps, each a real position: a search policy summing to 1.
    recorded = (int(index) + 1) * plan.moves
    policy_sums = np.asarray(after.ring.search_policy)[0].sum(axis=-1)  # [S, B]
    np.testing.assert_allclose(policy_sums[:recorded], 1.0, rtol=1e-5)
    assert not policy_sums[recorded:].any()
    for u in range(plan.updates):
        outside, priorities, outside_metrics = jax.jit(learn)(outside, index, np.int32(u), after)
        after = after._replace(priorities=priorities)
    # Each update wrote its windows' |search value - value target| back, the same either way.
    written_back = np.asarray(after.priorities.window)[0]
    assert (written_back != window_priorities).any()
    np.testing.assert_allclose(
        written_back, np.asarray(inside_carry.priorities.window)[0], rtol=1e-4, atol=1e-6
    )
    assert int(inside.step) == int(outside.step) == int(state.step) + plan.updates
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
        inside.params,
        outside.params,
    )
    np.testing.assert_allclose(inside_metrics["loss"], outside_metrics["loss"], rtol=1e-4)
    assert not all(
        np.allclose(a, b)
        for a, b in zip(jax.tree.leaves(inside.params), jax.tree.leaves(params), strict=True)
    )


def test_several_cpu_devices_wait_longer_at_a_collective_before_xla_aborts(monkeypatch):
    # Two devices on two busy cores can fall 40 s behind each other (XLA's default abort) and
    # go on; split_cpu raises the limit unless the user's XLA_FLAGS set it.
    from selfplay import run

    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    with warnings.catch_warnings():  # JAX already runs in this process: no effect on it
        warnings.simplefilter("ignore")
        run.split_cpu(2)
    flags = os.environ["XLA_FLAGS"]
    assert flags.startswith("--xla_backend_optimization_level=0 ")
    assert f"{run.COLLECTIVE_TIMEOUT_FLAG}={run.COLLECTIVE_TIMEOUT_S}" in flags
    mine = f"{run.COLLECTIVE_TIMEOUT_FLAG}=5"
    monkeypatch.setenv("XLA_FLAGS", mine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run.split_cpu(2)
    assert os.environ["XLA_FLAGS"] == mine


def test_several_cpu_devices_take_gspmd_on_the_jax_whose_shardy_crashes(monkeypatch):
    # jax 0.11.2's Shardy partitioner segfaults compiling a search agent's iteration over two
    # CPU devices; the runtime switches to GSPMD there and only there.
    cpu = jax.devices("cpu")[0]
    monkeypatch.setattr(jax, "__version__", "0.11.2")
    assert anakin.shardy_crashes([cpu, cpu])
    assert not anakin.shardy_crashes([cpu])
    monkeypatch.setattr(jax, "__version__", "0.10.2")
    assert not anakin.shardy_crashes([cpu, cpu])
