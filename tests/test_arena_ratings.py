"""Bradley-Terry ratings: recovery of known strengths, intervals, draws, anchors, outputs."""

import json

import numpy as np
import pytest

from arena.matches import GameRecord
from arena.ratings import (
    crosstable,
    fit_ratings,
    format_table,
    plot_rating_curve,
    results_dict,
    write_results,
)

TRUE_ELO = {"random": 0.0, "b": 100.0, "c": 300.0, "d": 600.0}


def simulate(true_elo, games_per_pair, rng, draws=0.0):
    """Bradley-Terry games. With `draws` > 0 some games are drawn, with probability
    draws * min(p, 1 - p), and the win probability drops by half that: each side's expected score
    stays p, so the Elo gaps are unchanged."""
    players = list(true_elo)
    games = []
    for a in range(len(players)):
        for b in range(a + 1, len(players)):
            pa, pb = players[a], players[b]
            p = 1.0 / (1.0 + 10 ** ((true_elo[pb] - true_elo[pa]) / 400))
            draw = draws * min(p, 1 - p)
            for _ in range(games_per_pair):
                u = rng.random()
                score = 1.0 if u < p - draw / 2 else (0.5 if u < p + draw / 2 else 0.0)
                first, second = (pa, pb) if rng.random() < 0.5 else (pb, pa)
                games.append((first, second, score if first == pa else 1 - score))
    return games


def test_recovers_known_elo_gaps():
    games = simulate(TRUE_ELO, 300, np.random.default_rng(0))
    ratings = fit_ratings(games)
    assert ratings.anchor == "random"
    for k, player in enumerate(ratings.players):
        low, high = ratings.ci95[k]
        sd = (high - low) / (2 * 1.96)
        # Within 3 standard errors (one 95% interval in 20 misses; the next test checks that rate).
        assert abs(ratings.elo[k] - TRUE_ELO[player]) <= 3 * sd, (player, ratings.elo[k], sd)
        if player != "random":
            assert high - low < 150  # 300 games a pair pin a rating to within about +-60
    assert list(np.argsort(ratings.elo)) == [ratings.players.index(p) for p in TRUE_ELO]


def test_intervals_cover_the_truth_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    covered, total = 0, 0
    for _ in range(40):
        ratings = fit_ratings(simulate(TRUE_ELO, 60, rng, draws=0.5), anchor="random")
        for k, player in enumerate(ratings.players):
            if player != "random":
                covered += ratings.ci95[k, 0] <= TRUE_ELO[player] <= ratings.ci95[k, 1]
                total += 1
    assert 0.85 <= covered / total <= 1.0


def test_a_draw_counts_as_half_a_win():
    drawn = fit_ratings([("a", "b", 0.5)] * 4)
    split = fit_ratings([("a", "b", 1.0), ("a", "b", 0.0)] * 2)
    np.testing.assert_allclose(drawn.elo, [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(drawn.elo, split.elo, atol=1e-6)
    # 3 points from 4 games against an equal-ish opponent is about +190 Elo (log10(3) * 400).
    three = fit_ratings([("a", "b", 1.0)] * 2 + [("a", "b", 0.5)] * 2, anchor="b")
    assert 150 < three.elo[0] < 191


def test_an_undefeated_player_gets_a_finite_rating_and_a_wide_interval():
    games = [("x", "random", 1.0)] * 10 + [("y", "random", 1.0), ("y", "random", 0.0)]
    ratings = fit_ratings(games)
    x = ratings.players.index("x")
    assert np.isfinite(ratings.elo).all() and np.isfinite(ratings.ci95).all()
    assert 500 < ratings.elo[x] < 1500
    assert ratings.ci95[x, 1] - ratings.ci95[x, 0] > 500
    assert ratings.elo[x] == ratings.elo.max()


def test_anchor_is_zero_with_no_interval_and_defaults_to_the_first_without_random():
    ratings = fit_ratings([("p", "q", 1.0), ("q", "p", 0.5)])
    assert ratings.anchor == "p"
    assert ratings.elo[0] == 0.0 and list(ratings.ci95[0]) == [0.0, 0.0]
    moved = fit_ratings([("p", "q", 1.0), ("q", "p", 0.5)], anchor="q")
    np.testing.assert_allclose(moved.elo[0], -ratings.elo[1], atol=1e-9)
    with pytest.raises(ValueError, match="anchor"):
        fit_ratings([("p", "q", 1.0)], anchor="nobody")


def test_crosstable_counts_both_colours_from_each_side():
    games = [("a", "b", 1.0), ("b", "a", 1.0), ("b", "a", 0.5), ("a", "c", 0.0)]
    table = crosstable(games)
    assert table["a"]["b"] == {"wins": 1, "draws": 1, "losses": 1}
    assert table["b"]["a"] == {"wins": 1, "draws": 1, "losses": 1}
    assert table["c"]["a"] == {"wins": 1, "draws": 0, "losses": 0}
    assert table["b"]["c"] == {"wins": 0, "draws": 0, "losses": 0}


def test_results_files_and_rating_curve(tmp_path):
    records = (
        [GameRecord(("ckpt:100", "random"), 0, (), (), (), (1.0, -1.0))] * 3
        + [GameRecord(("random", "ckpt:200"), 1, (), (), (), (-1.0, 1.0))] * 5
        + [GameRecord(("ckpt:200", "ckpt:100"), 2, (), (), (), (0.0, 0.0))] * 2
    )
    ratings = fit_ratings(records)
    results = results_dict(ratings, records, game="tic_tac_toe()")
    paths = write_results(tmp_path, results)
    saved = json.loads(paths["json"].read_text())
    assert saved["games"] == 10
    assert set(saved["ratings"]) == {"ckpt:100", "ckpt:200", "random"}
    assert saved["ratings"]["random"] == {
        "elo": 0.0,
        "ci95": [0.0, 0.0],
        "wins": 0,
        "draws": 0,
        "losses": 8,
        "games": 8,
    }
    assert saved["crosstable"]["ckpt:200"]["ckpt:100"] == {"wins": 0, "draws": 2, "losses": 0}
    assert paths["csv"].read_text().splitlines()[0].startswith("player,elo,ci95_low,ci95_high")
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    assert "ckpt:200" in format_table(results)
    curve = tmp_path / "curve.png"
    plot_rating_curve(saved, [(200, "ckpt:200"), (100, "ckpt:100")], curve)
    assert curve.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="ckpt:300"):
        plot_rating_curve(saved, [(300, "ckpt:300")])
