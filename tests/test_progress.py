"""Watching a run: progress before the first update, strength against fixed opponents while it
trains, presets that say what hardware they need."""

import json

import jax
import numpy as np
import pytest

import configs
from arena import progress
from envs import env_spec
from podracer import cli, train_command
from selfplay.lifetime import StopSignal
from selfplay.train import train
from tests import fakes
from tests.fakes import TINY


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.plots
def test_a_run_stopped_while_the_replay_fills_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli.main(
        [
            "train",
            # AlphaZero: the acting program other runs of the suite compile, so that the
            # seconds go to playing, not compiling, however loaded the machine.
            "--config",
            "tic_tac_toe_alphazero",
            "--run-dir",
            str(run),
            "--quiet",
            *TINY,
            "replay.capacity=100000",
            "replay.min_size=50000",
            "learner.max_updates=0",
            "learner.max_seconds=5",
            "learner.log_every_s=0.25",
            "evaluation.every_s=0",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    records = _records(run)
    assert records[0]["status"] == "compiling" and records[0]["frames"] == 0
    filling = [r for r in records if r.get("status") == "filling replay"]
    assert len(filling) >= 2, records
    fills = [r["replay_fill"] for r in filling]
    assert fills == sorted(fills) and 0 < fills[-1] < 1  # rising, never reached
    assert all(r["frames"] > 0 for r in filling)
    assert any(r.get("learning_starts_in_s", 0) > 0 for r in filling)
    assert not any("loss" in r for r in records)
    last = out.strip().splitlines()[-1]
    assert "no update was made" in last and "of the 50,000 the learner waits for" in last
    assert not (run / "learning_curves.png").exists()  # nothing to plot: no empty picture


def test_once_learning_starts_the_status_says_so(tmp_path):
    config = configs.load_config(
        "tic_tac_toe_alphazero", [*TINY, "learner.max_updates=6", "learner.log_every_s=0.01"]
    )
    result = train(config, tmp_path / "run", progress=False)
    assert result.updates == 6
    statuses = [r.get("status") for r in _records(tmp_path / "run")]
    assert statuses[0] == "compiling" and statuses[-1] == "learning"
    learning = [r for r in _records(tmp_path / "run") if r.get("status") == "learning"]
    assert all("replay_fill" not in r for r in learning)


def test_elo_difference_of_a_score():
    assert progress.elo_difference(5, 0, 10) == pytest.approx(0.0)
    assert progress.elo_difference(10, 0, 10) == pytest.approx(-progress.elo_difference(0, 0, 10))
    # Finite for a sweep (the prior draw): 400 log10(10.5 / 0.5).
    assert progress.elo_difference(10, 0, 10) == pytest.approx(400 * np.log10(21))
    assert progress.elo_difference(3, 4, 10) == pytest.approx(progress.elo_difference(5, 0, 10))


def _tic_tac_toe(*extra):
    return configs.load_config("tic_tac_toe_alphazero", [*TINY, *extra])


def test_the_evaluator_refuses_what_it_cannot_play():
    config = _tic_tac_toe("evaluation.opponents=[random,no_such_player]")
    with pytest.raises(configs.UsageError, match="no_such_player"):
        progress.RunEvaluator(config, env_spec(config.env.name))
    cartpole = configs.load_config("cartpole_vtrace", ["evaluation.opponents=[random]"])
    with pytest.raises(configs.UsageError, match="one-player environment"):
        progress.RunEvaluator(cartpole, env_spec(cartpole.env.name))
    # A human would be asked for moves in the middle of training (it was, once the first
    # evaluation began); a repeated opponent's figures would share its names.
    refusals = {
        "[human,random]": "a human cannot be one",
        "[random,mcts:2,random]": "each opponent may appear once",
    }
    for opponents, message in refusals.items():
        config = _tic_tac_toe(f"evaluation.opponents={opponents}")
        with pytest.raises(configs.UsageError, match=message):
            progress.RunEvaluator(config, env_spec(config.env.name))


@pytest.mark.plots
def test_the_evaluators_figures_appear_in_a_short_runs_metrics(tmp_path):
    config = _tic_tac_toe(
        "learner.max_updates=0",
        "learner.max_seconds=120",
        "evaluation.every_s=1",
        "evaluation.games=4",
        "evaluation.opponents=[random,mcts:5]",
    )
    stop = StopSignal()
    with fakes.stop_once_logged(tmp_path / "run", '"eval/random/score"', stop):
        result = train(
            config,
            tmp_path / "run",
            progress=False,
            make_evaluator=progress.RunEvaluator,
            stop=stop,
        )
    assert result.stopped_by == "stopped by the caller", "no evaluation in 120 s"
    evaluated = [r for r in _records(tmp_path / "run") if "eval/random/score" in r]
    assert evaluated
    for record in evaluated:
        for opponent in ("random", "mcts:5"):
            rates = [record[f"eval/{opponent}/{k}"] for k in ("win", "draw", "loss")]
            assert sum(rates) == pytest.approx(1.0) and all(
                r in (0, 0.25, 0.5, 0.75, 1) for r in rates
            )
            assert record[f"eval/{opponent}/score"] == pytest.approx(rates[0] + rates[1] / 2)
        assert record["eval"].startswith("random ")
    assert (tmp_path / "run" / "learning_curves.png").is_file()


def test_one_player_evaluation_plays_greedy_episodes():
    config = configs.load_config("cartpole_vtrace", ["network.mlp_sizes=[8]", "evaluation.games=3"])
    evaluator = progress.RunEvaluator(config, env_spec(config.env.name))
    params = jax.jit(evaluator.agent.init)(jax.random.PRNGKey(0))
    values = evaluator.evaluate(params, 0, StopSignal())
    assert 1 <= values["eval/return"] <= 500 and values["eval/return_iqm"] >= 1
    # The run stopping while it evaluates (its thread must end within the run's join timeout):
    # the episodes are abandoned, and nothing is logged.
    stopped = StopSignal()
    stopped.set("max_seconds")
    assert evaluator.evaluate(params, 0, stopped) == {}


def test_the_one_player_protocol_says_how_the_agent_acts_which_episodes_and_frames():
    def protocol(name, *overrides):
        config = configs.load_config(name, list(overrides))
        return progress.one_player_protocol(config, env_spec(config.env.name, **config.env.options))

    muzero = protocol("cartpole_muzero", "evaluation.games=3", "search.num_simulations=7")
    assert muzero.startswith("greedy: the most visited action of a search without root noise, 7")
    assert "3 whole episodes of envpool:CartPole-v1, cut at the time limit of 500 steps" in muzero
    assert "every 60 s" in muzero and "Frames: environment steps" in muzero
    capped = protocol(
        "cartpole_muzero", 'env.options={"max_episode_steps": 200}', "evaluation.every_s=0"
    )
    assert "time limit of 200 steps" in capped and "never" in capped
    gumbel = protocol("minatar_efficientzero", "evaluation.at_frames=[100000]")
    assert gumbel.startswith("greedy: the search's choice without Gumbel noise, 16 simulations")
    assert "at frames 100,000 (the parameters of the first update at or past each)" in gumbel
    atari = protocol("atari_vtrace")
    assert "the game score, unclipped, of whole games; up to 30 no-ops" in atari
    assert "each 4 emulator frames" in atari


def test_each_frame_mark_is_evaluated_once_even_the_one_the_run_stops_at(tmp_path):
    # evaluation.at_frames: the greedy return by frames, as the sample-efficiency benchmark
    # reads it; the last mark is the run's end, evaluated before the run returns. Through the
    # command: with evaluation.every_s=0 it once built no evaluator, and the marks went unplayed.
    overrides = [
        "network.mlp_sizes=[8]",
        "evaluation.games=2",
        "evaluation.every_s=0",
        "evaluation.at_frames=[2048,6144]",
        "learner.max_frames=6144",
        "learner.max_updates=0",
        "learner.max_seconds=0",
        "devices.cpu_devices=0",
    ]
    run = tmp_path / "run"
    args = ["train", "--config", "gymnax_cartpole_vtrace", "--run-dir", str(run), "--quiet"]
    assert cli.main([*args, "--no-plot", *overrides]) == 0
    marks = [r for r in _records(run) if "eval/frames" in r]
    assert len(marks) == 2 and all(r["eval/return"] >= 1 for r in marks)
    assert marks[0]["eval/frames"] >= 2048 and marks[1]["eval/frames"] >= 6144
    assert marks[1]["eval/frames"] - marks[0]["eval/frames"] >= 6144 - 2048 - 1
    protocol = (run / "evaluation.txt").read_text()  # what the returns measure, beside them
    assert protocol.startswith("greedy: the policy's most probable action")
    assert "2 whole episodes of gymnax:CartPole-v1" in protocol and "2,048, 6,144" in protocol


def test_a_mark_the_actors_pass_in_the_round_that_stops_the_run_is_evaluated():
    """Sebulba's actors count frames while the loop runs: the round that stops the run (its
    frame budget on the last mark, as a PBT member's interval ends) is offered nothing, and its
    mark is evaluated as the run finishes, once, with the final parameters."""
    from selfplay.run import _EvaluationThread

    class Runtime:
        step, params = 7, staticmethod(lambda: "final params")

    class Evaluator:
        every_s = 0.0

        def evaluate(self, params, step, stop):
            return {"eval/params": params}

    logged = []
    logger = type("Logger", (), {"log": lambda self, step, values: logged.append((step, values))})
    frames = [300]
    evaluation = _EvaluationThread(
        Evaluator(), Runtime(), logger(), StopSignal(), lambda: frames[0], (400, 800)
    )
    evaluation.offer()  # below the first mark: nothing queued
    frames[0] = 816  # the actors passed both marks; the loop stops before offering again
    evaluation.finish()
    assert logged == [(7, {"eval/params": "final params", "eval/frames": 816})]
    evaluation.finish()  # each mark once
    assert len(logged) == 1


def test_an_accelerator_preset_on_a_cpu_says_so_and_how_to_scale_it(capsys):
    train_command.warn_if_sized_for_an_accelerator(configs.load_config("atari_muzero"))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sized for an accelerator" in err[0] and "pong_muzero_small" in err[0]
    train_command.warn_if_sized_for_an_accelerator(configs.load_config("tic_tac_toe_muzero"))
    assert capsys.readouterr().err == ""


def test_every_preset_says_what_it_needs(capsys):
    assert set(configs.presets.INFO) == set(configs.presets.names())
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    for name, info in configs.presets.INFO.items():
        assert f"{name}" in out and f"[{info.hardware}]" in out
        assert info.hardware == "cpu" or info.on_cpu


def test_a_profile_of_a_few_updates_is_written_for_tensorboard(tmp_path, capsys):
    config = _tic_tac_toe("learner.max_updates=16", "learner.profile_updates=3")
    train(config, tmp_path / "run", progress=False)
    traces = list((tmp_path / "run" / "profile").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0
    assert "profile of 3 updates" in capsys.readouterr().out
