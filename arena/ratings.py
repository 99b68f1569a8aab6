"""Bradley-Terry ratings on the Elo scale, cross-tables, and a tournament's result files and plots.

Model: player i scores against player j with probability 1 / (1 + 10^((R_j - R_i) / 400)). A draw
counts as half a win for each side. The ratings maximise the posterior: the likelihood of all games
times an independent Gaussian prior N(0, 1000^2) on each rating (in Elo). The prior is tiny beside
the data (a few games move a rating more than it does) and keeps a player who never lost, or never
won, at a finite rating: about 850 Elo above an opponent it beat 10 times out of 10 (with a
wide interval: the Laplace interval is symmetric, the truth is not).

Confidence intervals: the Laplace approximation. The covariance of the ratings is the inverse of
the negative Hessian of the log posterior at its maximum (the observed Fisher information plus the
prior's); a player's interval is its rating minus the anchor's, +- 1.96 standard deviations of
that difference. The anchor (random by default) is 0 with an interval of [0, 0].
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from arena.matches import GameRecord

__all__ = [
    "Outcome",
    "Ratings",
    "crosstable",
    "default_anchor",
    "fit_ratings",
    "format_scores",
    "format_table",
    "outcomes",
    "pairing_scores",
    "wilson_interval",
    "plot_rating_curve",
    "plot_ratings",
    "results_dict",
    "write_results",
]

ELO_PER_NAT = 400.0 / math.log(10.0)  # Elo points per unit of log-odds
PRIOR_SD_ELO = 1000.0
_Z95 = 1.959963984540054


class Outcome(NamedTuple):
    """One game: `first` scored `score` (1 win, 0.5 draw, 0 loss) against `second`."""

    first: str
    second: str
    score: float


class Ratings(NamedTuple):
    """Fitted ratings; arrays are in the order of `players`."""

    players: tuple[str, ...]  # [P]
    elo: np.ndarray  # [P] rating minus the anchor's
    ci95: np.ndarray  # [P, 2] 95% interval of each rating (relative to the anchor)
    covariance: np.ndarray  # [P, P] of the anchored ratings, in Elo^2
    anchor: str
    games: int

    def as_dict(self) -> dict[str, dict]:
        return {
            p: {"elo": float(self.elo[k]), "ci95": [float(x) for x in self.ci95[k]]}
            for k, p in enumerate(self.players)
        }


def outcomes(records: Iterable[GameRecord]) -> list[Outcome]:
    """Seat 0's score in each game."""
    return [Outcome(r.players[0], r.players[1], r.score) for r in records]


def _as_outcomes(games: Iterable) -> list[Outcome]:
    return [
        Outcome(g.players[0], g.players[1], g.score) if isinstance(g, GameRecord) else Outcome(*g)
        for g in games
    ]


def default_anchor(players: Sequence[str]) -> str:
    """`random` when it plays, else the first player."""
    return "random" if "random" in players else players[0]


def fit_ratings(
    games: Iterable[Outcome | GameRecord | tuple],
    players: Sequence[str] | None = None,
    anchor: str | None = None,
    prior_sd: float = PRIOR_SD_ELO,
) -> Ratings:
    """Fits Bradley-Terry ratings (Elo scale) by maximum a posteriori to all games.

    Args:
      games: GameRecords or (first, second, score) triples.
      players: the order of the result (default: order of first appearance); a listed player with
        no games gets the prior (0 relative to the prior mean) and a wide interval.
      anchor: the player rated 0 (default: `random`, else the first player).
      prior_sd: standard deviation of the Gaussian prior on each rating, in Elo.
    """
    games = _as_outcomes(games)
    if players is None:
        players = list(dict.fromkeys(p for g in games for p in (g.first, g.second)))
    players = tuple(players)
    index = {p: k for k, p in enumerate(players)}
    anchor = default_anchor(players) if anchor is None else anchor
    if anchor not in index:
        raise ValueError(f"anchor {anchor!r} is not one of the players {', '.join(players)}")
    num = len(players)
    wins = np.zeros((num, num))  # [P, P] score of row against column
    count = np.zeros((num, num))  # [P, P] games between row and column
    for g in games:
        if not 0.0 <= g.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {g.score}")
        i, j = index[g.first], index[g.second]
        wins[i, j] += g.score
        wins[j, i] += 1.0 - g.score
        count[i, j] += 1
        count[j, i] += 1
    precision = (ELO_PER_NAT / prior_sd) ** 2  # prior precision in log-odds units

    def log_posterior(x):
        diff = x[:, None] - x[None, :]
        return float(np.sum(wins * -np.logaddexp(0.0, -diff)) - 0.5 * precision * x @ x)

    # Newton's method on a concave objective, halving steps that would not improve it.
    x = np.zeros(num)
    value = log_posterior(x)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x[:, None] - x[None, :])))  # [P, P] P(row beats column)
        grad = np.sum(wins - count * p, axis=1) - precision * x
        weight = count * p * (1.0 - p)
        hess = weight - np.diag(weight.sum(axis=1) + precision)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6:
            candidate = x - scale * step
            new_value = log_posterior(candidate)
            if new_value >= value - 1e-12:
                break
            scale /= 2
        x, value = candidate, new_value
        if np.max(np.abs(grad)) < 1e-9:
            break
    p = 1.0 / (1.0 + np.exp(-(x[:, None] - x[None, :])))
    weight = count * p * (1.0 - p)
    cov = np.linalg.inv(np.diag(weight.sum(axis=1) + precision) - weight) * ELO_PER_NAT**2
    a = index[anchor]
    elo = (x - x[a]) * ELO_PER_NAT
    # The covariance of R_i - R_a, from that of the unanchored ratings.
    anchored = cov - cov[:, [a]] - cov[[a], :] + cov[a, a]
    sd = np.sqrt(np.maximum(np.diag(anchored), 0.0))
    ci95 = np.stack([elo - _Z95 * sd, elo + _Z95 * sd], axis=1)
    return Ratings(players, elo, ci95, anchored, anchor, len(games))


def crosstable(
    games: Iterable[Outcome | GameRecord | tuple], players: Sequence[str] | None = None
) -> dict[str, dict[str, dict[str, int]]]:
    """`table[a][b] = {"wins", "draws", "losses"}` of a against b, both colours together."""
    games = _as_outcomes(games)
    if players is None:
        players = list(dict.fromkeys(p for g in games for p in (g.first, g.second)))
    table = {
        a: {b: {"wins": 0, "draws": 0, "losses": 0} for b in players if b != a} for a in players
    }
    for g in games:
        for me, other, score in ((g.first, g.second, g.score), (g.second, g.first, 1 - g.score)):
            key = "wins" if score > 0.5 else ("draws" if score == 0.5 else "losses")
            table[me][other][key] += 1
    return table


def wilson_interval(score: float, games: int) -> tuple[float, float]:
    """The 95% Wilson interval of a score (a share of points, a draw counting half) over `games`
    games: for a few dozen games, or scores near 0 or 1, far better than the normal one."""
    if games == 0:
        return (0.0, 1.0)
    z2 = _Z95**2
    centre = (score + z2 / (2 * games)) / (1 + z2 / games)
    half = _Z95 * math.sqrt(score * (1 - score) / games + z2 / (4 * games**2)) / (1 + z2 / games)
    return (max(0.0, centre - half), min(1.0, centre + half))


def pairing_scores(
    games: Iterable[Outcome | GameRecord | tuple], players: Sequence[str] | None = None
) -> dict[str, dict[str, dict]]:
    """`scores[a][b] = {"score", "ci95", "games"}`: a's expected score against b (wins + draws /
    2, both colours together) with its 95% Wilson interval; where dice decide part of every
    game, the figure to read beside the ratings."""
    table = crosstable(games, players)
    scores: dict[str, dict[str, dict]] = {}
    for a, row in table.items():
        scores[a] = {}
        for b, c in row.items():
            n = c["wins"] + c["draws"] + c["losses"]
            score = (c["wins"] + 0.5 * c["draws"]) / n if n else 0.0
            scores[a][b] = {"score": score, "ci95": list(wilson_interval(score, n)), "games": n}
    return scores


def format_scores(results: dict) -> str:
    """Each pairing's expected score with its interval, one line per pair (its first player's)."""
    lines, seen = [], set()
    for a, row in results.get("scores", {}).items():
        for b, s in row.items():
            if (b, a) in seen or s["games"] == 0:
                continue
            seen.add((a, b))
            lo, hi = s["ci95"]
            score = f"{s['score']:.3f} [{lo:.3f}, {hi:.3f}]"
            lines.append(f"{a} against {b}: score {score} in {s['games']} games")
    return "\n".join(lines)


def results_dict(ratings: Ratings, games: Sequence[GameRecord | Outcome | tuple], **extra) -> dict:
    """The content of results.json: ratings, number of games, cross-table, and `extra` fields."""
    table = crosstable(games, ratings.players)
    rows = ratings.as_dict()
    for player, row in rows.items():
        totals = {k: sum(v[k] for v in table[player].values()) for k in ("wins", "draws", "losses")}
        row.update(totals, games=sum(totals.values()))
    return {
        **extra,
        "ratings": rows,
        "anchor": ratings.anchor,
        "games": len(games),
        "crosstable": table,
        "scores": pairing_scores(games, ratings.players),
        "model": f"Bradley-Terry (Elo scale), MAP with N(0, {PRIOR_SD_ELO:g}^2) prior per rating; "
        "95% CI from the Hessian (Laplace); draws count half",
    }


def format_table(results: dict) -> str:
    """The rating table as text for a terminal, best first."""
    rows = sorted(results["ratings"].items(), key=lambda kv: -kv[1]["elo"])
    width = max(len("player"), *(len(p) for p, _ in rows))
    lines = [
        f"{'#':>2}  {'player':<{width}}  {'elo':>7}  {'95% CI':>17}  {'W-D-L':>11}",
        "-" * (width + 45),
    ]
    for rank, (player, r) in enumerate(rows, 1):
        lo, hi = r["ci95"]
        wdl = f"{r.get('wins', 0)}-{r.get('draws', 0)}-{r.get('losses', 0)}"
        lines.append(
            f"{rank:>2}  {player:<{width}}  {r['elo']:>7.0f}  [{lo:>7.0f}, {hi:>7.0f}]  {wdl:>11}"
        )
    lines.append(f"{results['games']} games; anchor {results['anchor']} = 0")
    return "\n".join(lines)


def write_results(out_dir: str | Path, results: dict) -> dict[str, Path]:
    """Writes results.json, ratings.csv, crosstable.csv and ratings.png; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "results.json",
        "csv": out / "ratings.csv",
        "crosstable": out / "crosstable.csv",
        "png": out / "ratings.png",
    }
    paths["json"].write_text(json.dumps(results, indent=2) + "\n")
    rows = sorted(results["ratings"].items(), key=lambda kv: -kv[1]["elo"])
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["player", "elo", "ci95_low", "ci95_high", "games", "wins", "draws", "losses"]
        )
        for player, r in rows:
            writer.writerow(
                [
                    player,
                    f"{r['elo']:.1f}",
                    f"{r['ci95'][0]:.1f}",
                    f"{r['ci95'][1]:.1f}",
                    r.get("games", 0),
                    r.get("wins", 0),
                    r.get("draws", 0),
                    r.get("losses", 0),
                ]
            )
    players = [p for p, _ in rows]
    with open(paths["crosstable"], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["player (W-D-L against)", *players])
        for a in players:
            cells = []
            for b in players:
                c = results["crosstable"][a].get(b)
                cells.append("" if c is None else f"{c['wins']}-{c['draws']}-{c['losses']}")
            writer.writerow([a, *cells])
    plot_ratings(results, paths["png"])
    return paths


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ratings(results: dict, path: str | Path | None = None):
    """Each rating with its 95% interval, best at the top; returns the figure."""
    plt = _pyplot()
    rows = sorted(results["ratings"].items(), key=lambda kv: kv[1]["elo"])
    names = [p for p, _ in rows]
    elo = np.array([r["elo"] for _, r in rows])
    ci = np.array([r["ci95"] for _, r in rows]).reshape(-1, 2)
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.4 * len(rows)))
    ax.errorbar(
        elo, np.arange(len(rows)), xerr=[elo - ci[:, 0], ci[:, 1] - elo], fmt="o", capsize=4
    )
    ax.set_yticks(np.arange(len(rows)), names)
    ax.axvline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(f"Elo (anchor {results.get('anchor', '?')} = 0), 95% CI")
    ax.set_title(f"{results.get('game', 'ratings')}: {results.get('games', '?')} games")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def plot_rating_curve(
    results: dict | Ratings,
    steps: Iterable[tuple[int, str]],
    path: str | Path | None = None,
    label: str = "agent",
):
    """Rating against training step, e.g. of a run's checkpoints rated in one tournament.

    Args:
      results: `results_dict(...)` (or results.json loaded) or a Ratings.
      steps: (training step, player spec) pairs; players not in the results are an error.
      path: where to save the PNG; None returns the figure open.
    Returns the figure.
    """
    rows = results.as_dict() if isinstance(results, Ratings) else results["ratings"]
    anchor = results.anchor if isinstance(results, Ratings) else results.get("anchor", "?")
    pairs = sorted(steps)
    missing = [p for _, p in pairs if p not in rows]
    if missing:
        raise ValueError(f"players not in the results: {', '.join(missing)}")
    step = np.array([s for s, _ in pairs], dtype=float)
    elo = np.array([rows[p]["elo"] for _, p in pairs])
    ci = np.array([rows[p]["ci95"] for _, p in pairs]).reshape(-1, 2)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(step, elo, "o-", label=label)
    ax.fill_between(step, ci[:, 0], ci[:, 1], alpha=0.25, label="95% CI")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"Elo (anchor {anchor} = 0)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig
