"""`podracer arena`: a run end to end, resuming, and one clear line for each bad input."""

import json

import pytest

from podracer.cli import main


def test_arena_command_prints_the_table_and_writes_results(tmp_path, capsys):
    out = tmp_path / "t"
    argv = [
        "arena",
        "--game",
        "tic_tac_toe",
        "--players",
        "minimax,mcts:20,uct_c=1.4,random",
        "--out",
        str(out),
        "--seed",
        "3",
    ]
    assert main([*argv, "--games", "2"]) == 0
    printed = capsys.readouterr().out
    assert "mcts:20,uct_c=1.4" in printed and str(out / "results.json") in printed
    results = json.loads((out / "results.json").read_text())
    assert results["games"] == 6
    assert set(results["ratings"]) == {"minimax", "mcts:20,uct_c=1.4", "random"}
    assert results["ratings"]["random"]["elo"] == 0.0
    assert len(results["ratings"]["minimax"]["ci95"]) == 2
    assert results["crosstable"]["minimax"]["random"]["losses"] == 0
    for name in ("ratings.csv", "crosstable.csv", "ratings.png", "games.jsonl"):
        assert (out / name).exists()
    # Run again with more games: the six saved games are kept and two per pairing added.
    assert main([*argv, "--games", "3"]) == 0
    assert json.loads((out / "results.json").read_text())["games"] == 9


def test_gauntlet_plays_only_the_first_player(tmp_path, capsys):
    out = tmp_path / "g"
    assert (
        main(
            [
                "arena",
                "--game",
                "tic_tac_toe",
                "--players",
                "mcts:5,random,minimax",
                "--games",
                "1",
                "--format",
                "gauntlet",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["games"] == 2
    assert results["crosstable"]["random"]["minimax"] == {"wins": 0, "draws": 0, "losses": 0}


@pytest.mark.parametrize(
    "players,game,message",
    [
        ("random,alphago", "tic_tac_toe", "unknown player 'alphago'"),
        ("random,mcts:lots", "tic_tac_toe", "must be an integer"),
        ("random,mcts:1", "tic_tac_toe", "simulations must be at least 2"),  # was a traceback
        ("random,,mcts:5", "tic_tac_toe", "malformed player list"),
        ("random", "tic_tac_toe", "at least two players"),
        ("random,mcts:5", "tic_tac_tow", "unknown game 'tic_tac_tow'"),
        ("random,minimax", "connect_four", "minimax:depth=4"),
        ("random,mcts:5", "kuhn_poker(players=3)", "two-player"),  # catch is one-player: evaluated
    ],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path, capsys, players, game, message):
    code = main(
        [
            "arena",
            "--game",
            game,
            "--players",
            players,
            "--games",
            "1",
            "--out",
            str(tmp_path / "bad"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("podracer arena: error:") and err.count("\n") == 1


def test_a_negative_seed_gets_one_line_and_exit_2(tmp_path, capsys):
    # numpy's generators refused it with a traceback at the first game
    args = ["arena", "--game", "tic_tac_toe", "--players", "random,mcts:2", "--seed", "-1"]
    assert main([*args, "--out", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err == "podracer arena: error: --seed must be at least 0, got -1\n"
    assert not (tmp_path / "t").exists()


def test_a_different_player_list_in_an_existing_folder_is_refused(tmp_path, capsys):
    out = str(tmp_path / "t")
    assert (
        main(
            [
                "arena",
                "--game",
                "tic_tac_toe",
                "--players",
                "random,mcts:5",
                "--games",
                "1",
                "--out",
                out,
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "arena",
                "--game",
                "tic_tac_toe",
                "--players",
                "random,mcts:6",
                "--games",
                "1",
                "--out",
                out,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "players" in err and "--out" in err and err.count("\n") == 1


def test_ctrl_c_exits_130_and_says_how_to_continue(tmp_path, capsys, monkeypatch):
    from arena import players
    from arena.players import register_player
    from tests.fakes import CountdownInterrupt, InterruptingPlayer

    monkeypatch.setattr(players, "_REGISTRY", dict(players._REGISTRY))
    countdown = CountdownInterrupt(after=12)
    register_player(
        "flaky", lambda spec, game, seed: InterruptingPlayer(spec.text, countdown), "flaky: test"
    )
    argv = [
        "arena",
        "--game",
        "tic_tac_toe",
        "--players",
        "flaky,random",
        "--games",
        "6",
        "--out",
        str(tmp_path / "t"),
    ]
    assert main(argv) == 130
    assert "run the same command again to continue" in capsys.readouterr().err
    assert main(argv) == 0
    assert json.loads((tmp_path / "t" / "results.json").read_text())["games"] == 6
