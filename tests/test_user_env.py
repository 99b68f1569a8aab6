"""A user's own environment by import path (`env.name=py:<module>:<callable>`) through
`podracer train` and `podracer arena`: each API trains under each runtime it allows and resumes
from its run directory alone, as do the gymnasium: and jumanji: families; a two-player game in
pgx's API trains AlphaZero with its own step as the model and plays in the arena; every bad
input gets one line and exit 2."""

import json

import pytest

from podracer import cli

CARTPOLE = "py:examples.cartpole_gymnax:make"
NIM = "py:examples.nim_pgx:make"
JUMANJI = "py:examples.catch_jumanji:make"
GYMNASIUM = "py:examples.gridworld_gymnasium:make"

ONE_PLAYER = [
    "network.mlp_sizes=[8]",
    "actors.threads_per_device=1",
    "actors.envs_per_thread=4",
    "actors.unroll_length=4",
    "learner.log_every_s=0.05",
    "learner.checkpoint_every=2",
    "evaluation.every_s=0",
]
VTRACE = [*ONE_PLAYER, "learner.batch_size=2"]
MUZERO = [
    *ONE_PLAYER,
    "mode=muzero",
    "loss.two_player=false",
    "loss.unroll_steps=2",
    "loss.td_steps=3",
    "network.latent_size=8",
    "network.head_hidden=8",
    "network.value_support=3",
    "network.reward_support=2",
    "search.num_simulations=2",
    "learner.batch_size=4",
    "replay.min_size=16",
    "replay.capacity=512",
]
NIM_ALPHAZERO = [
    "network.channels=8",
    "network.head_hidden=8",
    "search.num_simulations=4",
    "actors.threads_per_device=1",
    "actors.envs_per_thread=4",
    "actors.unroll_length=4",
    "learner.batch_size=8",
    "replay.min_size=16",
    "learner.max_seconds=0",
    "learner.log_every_s=0.05",
    "learner.checkpoint_every=2",
    "evaluation.every_s=0",
]


def _train(run, *args) -> int:
    return cli.main(["train", "--run-dir", str(run), "--quiet", "--no-plot", *args])


def _trains_and_resumes(run, name, preset, *overrides) -> None:
    assert _train(run, "--config", preset, f"env.name={name}", *overrides) == 0
    assert json.loads((run / "config.json").read_text())["env"]["name"] == name
    first = max(int(step.name) for step in (run / "checkpoints").iterdir())
    # The run directory alone names the environment: resumed without --config or env.name.
    assert _train(run, f"learner.max_updates={first + 1}") == 0
    assert max(int(step.name) for step in (run / "checkpoints").iterdir()) > first


@pytest.mark.parametrize(
    "name, runtime, overrides",
    [
        (CARTPOLE, "anakin", VTRACE),
        (CARTPOLE, "sebulba", MUZERO),
        (JUMANJI, "anakin", MUZERO),
        (JUMANJI, "sebulba", VTRACE),
        (GYMNASIUM, "sebulba", VTRACE),
        # The two families by name.
        ("gymnasium:CartPole-v1", "sebulba", VTRACE),
        ("jumanji:Snake-v1", "anakin", VTRACE),
    ],
    ids=[
        "gymnax-anakin",
        "gymnax-sebulba",
        "jumanji-anakin",
        "jumanji-sebulba",
        "gymnasium",
        "gymnasium-cartpole",
        "jumanji-snake",
    ],
)
def test_a_users_environment_trains_by_import_path_and_resumes(name, runtime, overrides, tmp_path):
    run = tmp_path / "run"
    _trains_and_resumes(
        run, name, "cartpole_vtrace", f"runtime={runtime}", *overrides, "learner.max_updates=2"
    )


@pytest.mark.parametrize("runtime", ["sebulba", "anakin"])
def test_a_users_two_player_game_trains_alphazero_on_its_own_rules_and_plays_in_the_arena(
    runtime, tmp_path
):
    run = tmp_path / "nim"
    _trains_and_resumes(
        run, NIM, "tic_tac_toe_alphazero", f"runtime={runtime}", *NIM_ALPHAZERO,
        "learner.max_updates=2",
    )  # fmt: skip
    out = tmp_path / "arena"
    players = f"ckpt:{run},mcts:8,random"
    args = ["arena", "--game", NIM, "--players", players, "--games", "2", "--out", str(out)]
    assert cli.main([*args, "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert len(results["ratings"]) == 3
    assert sum(1 for _ in (out / "games.jsonl").open()) == 6  # 3 pairings of 2 games


def test_the_arena_refuses_a_checkpoint_of_the_game_with_other_options(tmp_path, capsys):
    run = tmp_path / "nim"
    assert _train(run, "--config", "tic_tac_toe_alphazero", f"env.name={NIM}",
                  *NIM_ALPHAZERO, "learner.max_updates=2")  == 0  # fmt: skip
    args = ["--game", f"{NIM}(stones=12)", "--players", f"ckpt:{run},random"]
    assert cli.main(["arena", *args, "--out", str(tmp_path / "arena")]) == 2
    err = capsys.readouterr().err.strip()
    assert "trained on py:examples.nim_pgx:make" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env.name=py:no_such_module:make"], "no module named 'no_such_module'"),
        ([f"env.name={NIM.rpartition(':')[0]}:nope"], "has no attribute 'nope'"),
        (
            ["env.name=py:tests.fakes:make_raising_env", 'env.options={"level": "moon"}'],
            "raised ValueError: no level named 'moon'",
        ),
        (["env.name=py:tests.fakes:make_not_an_env"], "pgx lacks init, step, num_players;"),
        (["env.name=py:tests.fakes:make_untraceable_cartpole"], "cannot be traced by JAX"),
        (
            ["env.name=py:tests.fakes:make_changing_cartpole"],
            "observation changes between steps: float32[4] after reset, float32[5] after step",
        ),
        (
            ["env.name=py:tests.fakes:make_unbounded_box_cartpole"],
            "a box of one axis with finite bounds",
        ),
        ([f"env.name={GYMNASIUM}", "runtime=anakin"], "use runtime=sebulba"),
        ([f"env.name={CARTPOLE}", "mode=alphazero"], "no exact model"),
    ],
    ids=[
        "no-module",
        "no-callable",
        "callable-raises",
        "no-api",
        "untraceable",
        "changing-observation",
        "continuous",
        "host-env-on-anakin",
        "alphazero-without-rules",
    ],
)
def test_bad_user_environments_get_one_line_and_exit_2(overrides, message, tmp_path, capsys):
    run = tmp_path / "run"
    code = _train(run, "--config", "cartpole_vtrace", "runtime=anakin", *VTRACE, *overrides)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1, err
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())


def test_non_finite_rewards_stop_the_run_in_one_line(tmp_path, capsys):
    # A reward made inside the jit is checked where its episode's return reaches the host.
    name = "py:tests.fakes:make_nan_reward_cartpole"
    code = _train(tmp_path / "run", "--config", "cartpole_vtrace", "runtime=anakin", *VTRACE,
                  f"env.name={name}", "learner.max_updates=400")  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert f"{name} gave a non-finite reward" in err and len(err.splitlines()) == 1, err
