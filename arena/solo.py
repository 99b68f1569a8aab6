"""One-player games in the arena (2048): each player's episodes, scores and highest tiles.

`evaluate_solo(game, spec, episodes)` plays `episodes` games of a one-player OpenSpiel game with
the player a spec names (`random`, `ckpt:RUN`, `human`, ...), chance drawn by the referee as in
the tournaments (`arena.matches.play_games`: episode e has seed `game_seed(seed, 0, 0, e)`, so every
player meets the same tiles as long as it makes the same moves), and summarises the scores as
`arena.evaluate` does Atari's: mean, median and interquartile mean with 95% bootstrap intervals.
For 2048 it also keeps each episode's highest tile.

With an output folder every finished episode is appended to `episodes.jsonl` at once, and a
stopped evaluation continues where it stopped when run again with the same folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyspiel

from arena.evaluate import Summary, summarize
from arena.matches import game_seed, play_games, player_seed
from arena.players import is_batched, make_player, parse_spec
from configs import UsageError

__all__ = ["EPISODES_FILE", "SoloResult", "evaluate_solo", "format_solo_table", "highest_tile"]

EPISODES_FILE = "episodes.jsonl"


class SoloResult(NamedTuple):
    """A player's episodes of a one-player game."""

    player: str  # the spec
    scores: np.ndarray  # [N] each episode's return (2048: its score)
    lengths: np.ndarray  # [N] moves per episode (chance outcomes not counted)
    highest_tiles: np.ndarray | None  # [N] 2048's highest tile of each episode; None elsewhere
    summary: Summary  # mean, median and IQM of the scores, 95% bootstrap intervals

    def as_dict(self) -> dict:
        out: dict = {
            "episodes": int(self.scores.size),
            **{
                name: {"value": e.value, "ci95": [e.low, e.high]}
                for name, e in self.summary._asdict().items()
                if name != "count"
            },
            "mean_length": float(self.lengths.mean()),
        }
        if self.highest_tiles is not None:
            tiles = self.highest_tiles
            out["highest_tile"] = {
                "median": float(np.median(tiles)),
                "max": int(tiles.max()),
                "share_at_least": {str(t): float(np.mean(tiles >= t)) for t in (512, 1024, 2048)},
            }
        return out


def highest_tile(state: pyspiel.State) -> int | None:
    """2048's highest tile on the board of `state`; None for another game."""
    if state.get_game().get_type().short_name != "2048":
        return None
    return int(max(state.observation_tensor(0)))


def evaluate_solo(
    game: pyspiel.Game,
    spec: str,
    episodes: int,
    *,
    seed: int = 0,
    out_dir: str | os.PathLike | None = None,
    on_episode: Callable[[dict], None] | None = None,
) -> SoloResult:
    """Plays (or finishes) `episodes` episodes of a one-player game with the player `spec`.

    A batched player (`ckpt:`) plays all of them in lock step, one search per move for every
    episode still going; other players one episode at a time. With `out_dir`, the episodes
    already in its `episodes.jsonl` for this spec and seed are not played again.
    """
    if game.num_players() != 1:
        raise UsageError(f"{game} has {game.num_players()} players; one-player games only")
    if episodes < 1:
        raise UsageError(f"episodes must be at least 1, got {episodes}")
    spec = parse_spec(spec).text
    prototype = make_player(spec, game, seed)
    path = None if out_dir is None else Path(out_dir) / EPISODES_FILE
    done = [r for r in _read(path) if r["player"] == spec and r["seed"] == seed]
    todo = sorted(set(range(episodes)) - {r["episode"] for r in done})
    sink = None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        sink = open(path, "a")
    try:
        width = len(todo) if is_batched(prototype) else 1
        for start in range(0, len(todo), max(width, 1)):
            chunk = todo[start : start + width]
            seeds = [game_seed(seed, 0, 0, e) for e in chunk]
            tables = [
                [prototype if is_batched(prototype) else make_player(spec, game, player_seed(s, 0))]
                for s in seeds
            ]

            def finish(k, state, table, chunk=chunk, seeds=seeds):
                record = {
                    "player": spec,
                    "seed": seed,
                    "episode": chunk[k],
                    "game_seed": seeds[k],
                    "score": float(state.returns()[0]),
                    "length": sum(1 for m in table.movers if m >= 0),
                    "highest_tile": highest_tile(state),
                }
                done.append(record)
                if sink is not None:
                    sink.write(json.dumps(record) + "\n")
                    sink.flush()
                if on_episode is not None:
                    on_episode(record)

            play_games(game, tables, seeds, finish)
    finally:
        if sink is not None:
            sink.close()
    done = sorted((r for r in done if r["episode"] < episodes), key=lambda r: r["episode"])
    scores = np.array([r["score"] for r in done])
    tiles = [r["highest_tile"] for r in done]
    return SoloResult(
        spec,
        scores,
        np.array([r["length"] for r in done]),
        None if tiles[0] is None else np.array(tiles),
        summarize(scores, seed=seed),
    )


def _read(path: Path | None) -> list[dict]:
    if path is None or not path.exists():
        return []
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # a line cut short by a crash is dropped
    if keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    return [json.loads(line) for line in data[:keep].decode().splitlines() if line]


def format_solo_table(results: Sequence[SoloResult]) -> str:
    """The players' scores as text for a terminal, best mean first."""
    rows = sorted(results, key=lambda r: -r.summary.mean.value)
    width = max(len("player"), *(len(r.player) for r in rows))
    tiles = any(r.highest_tiles is not None for r in rows)
    header = f"{'player':<{width}}  {'episodes':>8}  {'mean':>8}  {'95% CI':>19}  {'IQM':>8}"
    header += f"  {'95% CI':>19}" + ("  tile: median  max  >=2048" if tiles else "")
    lines = [header, "-" * len(header)]
    for r in rows:
        m, q = r.summary.mean, r.summary.iqm
        line = f"{r.player:<{width}}  {r.scores.size:>8}  {m.value:>8.1f}  "
        line += f"[{m.low:>8.1f}, {m.high:>8.1f}]  {q.value:>8.1f}  [{q.low:>8.1f}, {q.high:>8.1f}]"
        if r.highest_tiles is not None:
            t = r.highest_tiles
            line += f"  {np.median(t):>12.0f}  {t.max():>4}  {np.mean(t >= 2048):>6.0%}"
        lines.append(line)
    return "\n".join(lines)
