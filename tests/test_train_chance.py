"""Training on games with chance: Stochastic MuZero on 2048 (runs, checkpoints, plays in the
arena), AlphaZero with chance outcomes on backgammon, both runtimes, and bad input."""

import json
import subprocess
import sys

import numpy as np
import pyspiel
import pytest

import arena
import configs
from podracer import cli
from selfplay import train as train_module

TINY = [
    "actors.envs_per_thread=4",
    "actors.unroll_length=4",
    "search.num_simulations=4",
    "network.channels=8",
    "network.head_hidden=8",
    "network.mlp_sizes=[16]",
    "network.latent_size=16",
    "network.representation_blocks=1",  # backgammon's presets have 2: less to compile
    "network.dynamics_blocks=1",
    "network.value_support=3",
    "network.reward_support=3",
    "learner.batch_size=8",
    "replay.min_size=16",
    "replay.capacity=256",
    "replay.samples_per_insert=1",
    "learner.log_every_s=0.1",
    "learner.checkpoint_every=2",
    "learner.max_seconds=0",
    "loss.unroll_steps=2",
    "loss.td_steps=3",
    "devices.cpu_devices=0",
]


@pytest.fixture(scope="module")
def game2048_run(tmp_path_factory):
    """A tiny game2048_stochastic_muzero run (Anakin) of 2 updates. (Resuming is the runtime's,
    whatever the model: tests/test_anakin.py and tests/test_reanalyse.py resume Anakin runs; the
    arena's game below restores this run's checkpoint.)"""
    run = tmp_path_factory.mktemp("chance") / "g2048"
    config = configs.load_config("game2048_stochastic_muzero", [*TINY, "learner.max_updates=2"])
    return run, train_module.train(config, run, progress=False)


def test_2048_stochastic_muzero_trains_and_checkpoints(game2048_run):
    run, first = game2048_run
    assert first.stopped_by == "max_updates" and first.updates >= 2
    assert (run / "checkpoints" / str(first.updates)).is_dir()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in records if "chance_loss" in r]
    assert learned and all(np.isfinite(r["loss"]) for r in learned)
    for name in ("commitment_loss", "afterstate_value_loss", "codes_used", "consistency_loss"):
        assert name in learned[-1], name


def test_the_2048_run_plays_in_the_arena(game2048_run):
    run, _ = game2048_run
    game = pyspiel.load_game("2048(max_tile=131072)")
    result = arena.evaluate_solo(game, f"ckpt:{run},sims=4", 1, seed=0)
    assert result.scores.shape == (1,) and result.scores[0] > 0 and result.lengths[0] > 10


def test_backgammon_alphazero_and_stochastic_muzero_train_on_both_runtimes(tmp_path):
    """AlphaZero with the dice at chance nodes (Anakin), Stochastic MuZero with its turn head
    (Sebulba's replay of whole windows)."""
    alphazero = configs.load_config("backgammon_alphazero", [*TINY, "learner.max_updates=1"])
    result = train_module.train(alphazero, tmp_path / "az", progress=False)
    assert result.updates >= 1
    stochastic = configs.load_config(
        "backgammon_stochastic_muzero",
        [
            *TINY,
            "runtime=sebulba",
            "actors.threads_per_device=1",
            "learner.max_updates=2",
            "learner.prefetch=0",
        ],
    )
    result = train_module.train(stochastic, tmp_path / "smz", progress=False)
    assert result.updates == 2
    records = [json.loads(line) for line in (tmp_path / "smz" / "metrics.jsonl").open()]
    assert any("turn_loss" in r for r in records)  # backgammon's mover moves again


def _train_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "podracer", "train", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--config", "backgammon_alphazero", "search.algorithm=muzero"],
            "search.algorithm=muzero searches deterministic moves, but pgx:backgammon has chance",
        ),
        (
            ["--config", "game2048_stochastic_muzero", "search.algorithm=gumbel_muzero"],
            "SearchConfig.algorithm must be 'stochastic_muzero' with mode=stochastic_muzero",
        ),
        (
            ["--config", "game2048_stochastic_muzero", "stochastic.num_chance_codes=0"],
            "StochasticConfig.num_chance_codes must be an integer >= 1",
        ),
    ],
)
def test_a_model_that_cannot_describe_the_game_gets_one_line_and_exit_2(
    overrides, message, tmp_path, capsys
):
    # In this process: the command's own path, without a second JAX start (tests/test_cli.py
    # runs `podracer` in a fresh interpreter).
    code = cli.main(["train", *overrides, "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


def test_muzero_is_refused_where_the_mover_moves_again_and_allowed_on_2048():
    from envs import env_spec
    from selfplay.agent import make_agent

    config = configs.load_config(
        "game2048_muzero", ["env.name=pgx:backgammon", "loss.two_player=true"]
    )
    with pytest.raises(configs.UsageError, match="mode=muzero: its learned model takes turns"):
        make_agent(config, env_spec("pgx:backgammon"))
    control = configs.load_config("game2048_muzero")
    agent = make_agent(control, env_spec("pgx:2048"))  # allowed
    assert agent.uses_replay and agent.window_length == control.loss.window_length


def test_help_says_why_muzero_is_the_wrong_model_for_chance():
    proc = _train_cli("--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "on a game with chance it learns one next state per move" in text
    assert "the wrong model" in text
    for preset in (
        "game2048_stochastic_muzero",
        "game2048_muzero",
        "backgammon_alphazero",
        "backgammon_stochastic_muzero",
    ):
        assert preset in text
