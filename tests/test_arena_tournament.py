"""Tournaments: schedules, the strength order of known bots, batched lock step, resuming."""

import json

import pyspiel
import pytest

from arena import players
from arena.matches import (
    GAMES_FILE,
    GameRecord,
    play_game,
    player_seed,
    run_tournament,
    schedule,
)
from arena.players import make_player, register_player
from arena.ratings import fit_ratings
from configs import UsageError
from tests.fakes import CountdownInterrupt, InterruptingPlayer, RecordingBatchedPlayer

TTT = pyspiel.load_game("tic_tac_toe")


@pytest.fixture
def registry(monkeypatch):
    """Registrations made in a test vanish after it."""
    monkeypatch.setattr(players, "_REGISTRY", dict(players._REGISTRY))


def test_schedule_plays_both_colours_and_the_gauntlet_only_the_challenger():
    games = schedule(3, 4, seed=0)
    assert len(games) == 3 * 4
    for pairing in ((0, 1), (0, 2), (1, 2)):
        seats = [g.seats for g in games if g.pairing == pairing]
        assert seats.count(pairing) == 2 and seats.count(pairing[::-1]) == 2
    assert len({g.seed for g in games}) == len(games)
    assert {g.pairing for g in schedule(4, 2, 0, "gauntlet")} == {(0, 1), (0, 2), (0, 3)}
    with pytest.raises(UsageError, match="format"):
        schedule(3, 2, 0, "swiss")


def test_minimax_beats_mcts_beats_random_on_tic_tac_toe(tmp_path):
    specs = ["random", "mcts:50", "minimax"]
    records = run_tournament(TTT, specs, 10, tmp_path, seed=0)
    assert len(records) == 30
    ratings = fit_ratings(records)
    elo = dict(zip(ratings.players, ratings.elo, strict=True))
    assert elo["minimax"] > elo["mcts:50"] > elo["random"] == 0.0
    assert all(r.score >= 0.5 for r in records if r.players[0] == "minimax")
    assert all(r.score <= 0.5 for r in records if r.players[1] == "minimax")
    # Every game is saved with its seed, moves as ids and text, and result.
    lines = (tmp_path / GAMES_FILE).read_text().splitlines()
    assert len(lines) == 30
    row = json.loads(lines[0])
    assert {"players", "seed", "actions", "moves", "returns", "result"} <= set(row)
    state = TTT.new_initial_state()
    for action, text in zip(row["actions"], row["moves"], strict=True):
        assert state.action_to_string(state.current_player(), action) == text
        state.apply_action(action)
    assert state.returns() == row["returns"]


def test_a_game_is_reproduced_from_its_recorded_seed():
    records = run_tournament(TTT, ["mcts:10", "random"], 2, None, seed=5)
    for record in records:
        again = play_game(TTT, record.players, record.seed)
        assert again.actions == record.actions and again.returns == record.returns


def test_a_batched_player_searches_all_waiting_games_in_one_call(registry):
    made = []

    def factory(spec, game, seed):
        made.append(RecordingBatchedPlayer(spec.text, seed))
        return made[-1]

    register_player("batch", factory, "batch: test")
    records = run_tournament(TTT, ["batch", "random"], 6, None)
    assert len(records) == 6 and len(made) == 1  # one instance serves every game
    assert max(made[0].batch_sizes) == 6  # all games of the pairing wait for it together
    for record in records:
        state = TTT.new_initial_state()
        for action in record.actions:
            state.apply_action(action)
        assert state.is_terminal()


def test_a_stopped_tournament_continues_without_replaying_games(tmp_path, registry):
    countdown = CountdownInterrupt(after=20)  # Ctrl-C partway through the games
    register_player(
        "flaky", lambda spec, game, seed: InterruptingPlayer(spec.text, countdown), "flaky: test"
    )
    specs = ["flaky", "random", "mcts:5"]
    with pytest.raises(KeyboardInterrupt):
        run_tournament(TTT, specs, 4, tmp_path, seed=1)
    before = (tmp_path / GAMES_FILE).read_text().splitlines()
    assert 0 < len(before) < 12

    records = run_tournament(TTT, specs, 4, tmp_path, seed=1)
    after = (tmp_path / GAMES_FILE).read_text().splitlines()
    assert after[: len(before)] == before  # saved games are kept as they were
    keys = [(r.pairing, r.round) for r in records]
    assert len(records) == len(after) == 12 and len(set(keys)) == 12
    assert countdown.left < 0  # the second run played on past the interruption

    # A run with more games per pairing adds only the new ones.
    more = run_tournament(TTT, specs, 5, tmp_path, seed=1)
    assert len(more) == 15 and [r.to_json() for r in more if r.round < 4] == [
        r.to_json() for r in records
    ]


def test_a_game_cut_off_mid_line_is_dropped_and_replayed(tmp_path):
    run_tournament(TTT, ["random", "mcts:5"], 2, tmp_path)
    path = tmp_path / GAMES_FILE
    text = path.read_text()
    path.write_text(text[: len(text) - 20])  # a crash while writing the last game
    records = run_tournament(TTT, ["random", "mcts:5"], 2, tmp_path)
    assert len(records) == 2
    assert all(GameRecord.from_json(line) for line in path.read_text().splitlines())


def test_a_different_player_list_in_the_same_folder_is_refused(tmp_path):
    run_tournament(TTT, ["random", "mcts:5"], 1, tmp_path)
    with pytest.raises(UsageError, match="players"):
        run_tournament(TTT, ["random", "mcts:6"], 1, tmp_path)
    with pytest.raises(UsageError, match="seed"):
        run_tournament(TTT, ["random", "mcts:5"], 1, tmp_path, seed=9)


def test_bad_tournaments_are_refused():
    with pytest.raises(UsageError, match="two-player"):
        run_tournament("catch", ["random", "random"], 1)
    with pytest.raises(UsageError, match="at least two"):
        run_tournament(TTT, ["random"], 1)
    with pytest.raises(UsageError, match="once"):
        run_tournament(TTT, ["random", "random"], 1)
    with pytest.raises(UsageError, match="unknown game"):
        run_tournament("tic_tac_tow", ["random", "mcts:5"], 1)


def test_player_seeds_differ_by_seat():
    assert player_seed(3, 0) != player_seed(3, 1)
    first = make_player("random", TTT, player_seed(3, 0)).step(TTT.new_initial_state())
    assert first == make_player("random", TTT, player_seed(3, 0)).step(TTT.new_initial_state())
