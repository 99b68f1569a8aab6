"""Games, matches and resumable tournaments between players of a two-player OpenSpiel game.

A tournament is a fixed schedule of games (round-robin or gauntlet; every pairing plays both
colours). Every finished game is appended at once to `games.jsonl` in the output folder, so a
tournament stopped midway (Ctrl-C, crash) continues where it stopped when run again with the same
folder: the games already there are not replayed.

Seeds: game (i, j, round) of a tournament with seed S has seed `game_seed(S, i, j, round)`; the
player in seat k of that game is made with seed `player_seed(game_seed, k)` and chance outcomes are
drawn from `numpy.random.default_rng(game_seed)`, so a game played with unbatched players is
reproduced exactly by `play_game(game, players, seed)`. A batched player is made once (seed S) and
serves every game, so its games are not individually reproducible.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyspiel

from arena.players import check_distinct, is_batched, make_player, parse_spec
from configs import UsageError

__all__ = [
    "GameRecord",
    "ScheduledGame",
    "check_two_player",
    "game_seed",
    "load_game",
    "play_game",
    "play_games",
    "player_seed",
    "run_tournament",
    "schedule",
]

FORMATS = ("round-robin", "gauntlet")
GAMES_FILE = "games.jsonl"
MANIFEST_FILE = "tournament.json"

# A game longer than this many moves (chance outcomes included) is stopped as a bug in a player
# or the game rather than looping forever.
_MOVE_LIMIT_FACTOR = 4


class GameRecord(NamedTuple):
    """One finished game, as saved (one JSON object per line of games.jsonl)."""

    players: tuple[str, ...]  # the spec in each seat; seat 0 moves first
    seed: int  # the game's seed (see the module docstring)
    actions: tuple[int, ...]  # [M] every move in order, chance outcomes included
    moves: tuple[str, ...]  # [M] the same moves as OpenSpiel writes them
    movers: tuple[int, ...]  # [M] who made each move (-1: chance)
    returns: tuple[float, ...]  # [P] the final return of each seat
    pairing: tuple[int, int] = (-1, -1)  # indices into the tournament's player list; -1 outside
    round: int = -1  # the game's number within its pairing; -1 outside a tournament

    @property
    def score(self) -> float:
        """Seat 0's score: 1 win, 0.5 draw, 0 loss."""
        return (
            1.0
            if self.returns[0] > self.returns[1]
            else (0.5 if self.returns[0] == self.returns[1] else 0.0)
        )

    @property
    def result(self) -> str:
        return {1.0: "1-0", 0.5: "1/2-1/2", 0.0: "0-1"}[self.score]

    def to_json(self) -> str:
        row = self._asdict()
        row["result"] = self.result
        return json.dumps(row)

    @classmethod
    def from_json(cls, line: str) -> GameRecord:
        row = json.loads(line)
        row.pop("result", None)
        for key in ("players", "actions", "moves", "movers", "returns", "pairing"):
            row[key] = tuple(row[key])
        return cls(**row)


class ScheduledGame(NamedTuple):
    """One game of a tournament's schedule."""

    pairing: tuple[int, int]  # (i, j): indices into the player list, i < j
    round: int  # 0, 1, ...: even rounds seat player i first, odd rounds player j
    seats: tuple[int, int]  # player indices in seat order
    seed: int


def game_seed(seed: int, i: int, j: int, round_: int) -> int:
    """The seed of game `round_` between players i and j of a tournament seeded with `seed`."""
    return int(np.random.SeedSequence([seed, i, j, round_]).generate_state(1, np.uint32)[0])


def player_seed(seed: int, seat: int) -> int:
    """The seed for the player in `seat` of a game with seed `seed`."""
    return int(np.random.SeedSequence([seed, 1 + seat]).generate_state(1, np.uint32)[0])


def load_game(name: str) -> pyspiel.Game:
    """Loads a game by name (`tic_tac_toe`, `go(board_size=9)`), or a two-player game of yours
    in pgx's API by import path (`py:my_games:make`, `py:my_games:make(size=5)`: its options);
    UsageError if unknown."""
    if name.startswith("py:"):
        from envs.user_openspiel import openspiel_game, parse_game_text

        return openspiel_game(*parse_game_text(name))
    short = name.partition("(")[0].strip()
    if short not in pyspiel.registered_names():
        raise UsageError(
            f"unknown game {name!r}; see pyspiel.registered_names() for the list "
            "(e.g. tic_tac_toe, connect_four, go(board_size=9))"
        )
    try:
        return pyspiel.load_game(name)
    except pyspiel.SpielError as error:
        raise UsageError(f"cannot load game {name!r}: {str(error).splitlines()[0]}") from None


def check_two_player(game: pyspiel.Game) -> None:
    """Refuses games the tournament cannot referee (not two-player or not turn-based)."""
    kind = game.get_type()
    if game.num_players() != 2 or kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise UsageError(
            f"tournaments need a turn-based two-player game; {game} has "
            f"{game.num_players()} player(s) (one-player tasks: evaluate_policy)"
        )


def schedule(
    num_players: int, games_per_pairing: int, seed: int, format: str = "round-robin"
) -> list[ScheduledGame]:
    """All the games of a tournament, in the order they are played."""
    if format not in FORMATS:
        raise UsageError(f"unknown tournament format {format!r}; use one of {', '.join(FORMATS)}")
    if games_per_pairing < 1:
        raise UsageError(f"games per pairing must be at least 1, got {games_per_pairing}")
    if format == "round-robin":
        pairings = [(i, j) for i in range(num_players) for j in range(i + 1, num_players)]
    else:
        pairings = [(0, j) for j in range(1, num_players)]
    return [
        ScheduledGame((i, j), r, (i, j) if r % 2 == 0 else (j, i), game_seed(seed, i, j, r))
        for i, j in pairings
        for r in range(games_per_pairing)
    ]


class _Table:
    """One game in progress."""

    def __init__(self, game: pyspiel.Game, players: Sequence[pyspiel.Bot], seed: int):
        self.state = game.new_initial_state()
        self.players = players
        self.rng = np.random.default_rng(seed)
        self.actions: list[int] = []
        self.moves: list[str] = []
        self.movers: list[int] = []
        self.limit = _MOVE_LIMIT_FACTOR * max(game.max_game_length(), 1)
        for player in players:
            if not is_batched(player):
                player.restart()

    def apply(self, action: int) -> None:
        state = self.state
        mover = state.current_player()
        if mover >= 0 and action not in state.legal_actions():
            raise RuntimeError(
                f"player {getattr(self.players[mover], 'spec', mover)!r} chose "
                f"illegal action {action} in:\n{state}"
            )
        self.actions.append(int(action))
        self.moves.append(state.action_to_string(mover, action))
        self.movers.append(int(mover))
        for seat, player in enumerate(self.players):
            if seat != mover and not is_batched(player):
                player.inform_action(state, mover, action)
        state.apply_action(action)
        if len(self.actions) > self.limit:
            raise RuntimeError(f"game passed {self.limit} moves without ending: {self.actions}")

    def resolve_chance(self) -> None:
        while self.state.is_chance_node():
            outcomes, probs = zip(*self.state.chance_outcomes(), strict=True)
            self.apply(int(self.rng.choice(outcomes, p=np.asarray(probs))))


def play_games(
    game: pyspiel.Game,
    tables_players: Sequence[Sequence[pyspiel.Bot]],
    seeds: Sequence[int],
    on_finish: Callable[[int, pyspiel.State, _Table], None],
    should_stop: Callable[[], bool] | None = None,
) -> bool:
    """Plays several games in lock step, calling `on_finish(k, final_state, table)` as each ends.

    Unbatched players move at once; each round then gives every batched player all the games
    waiting for it in one `step_many` call, so games against an unbatched opponent stay in phase.
    `should_stop()`, asked before every round, abandons the unfinished games; returns whether
    every game finished.
    """
    tables = [
        _Table(game, players, seed) for players, seed in zip(tables_players, seeds, strict=True)
    ]
    live = list(range(len(tables)))
    while live:
        if should_stop is not None and should_stop():
            return False
        waiting: dict[int, list[int]] = {}  # id(batched player) -> games waiting for it
        batched: dict[int, pyspiel.Bot] = {}
        for k in live:
            table = tables[k]
            while True:
                table.resolve_chance()
                if table.state.is_terminal():
                    break
                player = table.players[table.state.current_player()]
                if is_batched(player):
                    waiting.setdefault(id(player), []).append(k)
                    batched[id(player)] = player
                    break
                table.apply(int(player.step(table.state)))
        for key, ks in waiting.items():
            actions = batched[key].step_many([tables[k].state for k in ks])
            if len(actions) != len(ks):
                raise RuntimeError(
                    f"{batched[key]!r}.step_many returned {len(actions)} actions "
                    f"for {len(ks)} states"
                )
            for k, action in zip(ks, actions, strict=True):
                tables[k].apply(int(action))
        still = []
        for k in live:
            tables[k].resolve_chance()
            if tables[k].state.is_terminal():
                on_finish(k, tables[k].state, tables[k])
            else:
                still.append(k)
        live = still
    return True


def _record(
    table: _Table, specs: Sequence[str], seed: int, pairing=(-1, -1), round_: int = -1
) -> GameRecord:
    return GameRecord(
        players=tuple(specs),
        seed=int(seed),
        actions=tuple(table.actions),
        moves=tuple(table.moves),
        movers=tuple(table.movers),
        returns=tuple(float(r) for r in table.state.returns()),
        pairing=tuple(pairing),
        round=round_,
    )


def play_game(game: pyspiel.Game, specs: Sequence[str], seed: int) -> GameRecord:
    """Plays one game between players made from `specs` (seat order) with the given game seed."""
    check_two_player(game)
    players = [make_player(spec, game, player_seed(seed, seat)) for seat, spec in enumerate(specs)]
    records: list[GameRecord] = []
    play_games(
        game, [players], [seed], lambda k, state, table: records.append(_record(table, specs, seed))
    )
    return records[0]


def _read_games(path: Path) -> list[GameRecord]:
    """Reads saved games; a last line cut short by a crash is dropped from the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    return [GameRecord.from_json(line) for line in data[:keep].decode().splitlines() if line]


def _check_manifest(out: Path, manifest: dict) -> None:
    path = out / MANIFEST_FILE
    if path.exists():
        saved = json.loads(path.read_text())
        for key in ("game", "players", "format", "seed"):
            if saved.get(key) != manifest[key]:
                raise UsageError(
                    f"{out} holds a tournament with {key} {saved.get(key)!r}, not "
                    f"{manifest[key]!r}; use another --out or the same {key} to continue it"
                )
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, path)


def run_tournament(
    game: pyspiel.Game | str,
    specs: Sequence[str],
    games_per_pairing: int,
    out_dir: str | os.PathLike | None = None,
    format: str = "round-robin",
    seed: int = 0,
    max_concurrent: int | None = None,
    on_game: Callable[[GameRecord], None] | None = None,
) -> list[GameRecord]:
    """Plays (or finishes) a tournament and returns all its games, the earlier saved ones included.

    Args:
      game: an OpenSpiel game or its name.
      specs: the players' specs (`arena.make_player`); the first is the gauntlet's challenger.
      games_per_pairing: games per pairing, colours alternating (seat 0 moves first).
      out_dir: where `games.jsonl` and `tournament.json` go; None keeps nothing on disk. A folder
        holding a tournament with another game, player list, format or seed is refused; raising
        `games_per_pairing` there adds games.
      format: "round-robin" (every pair) or "gauntlet" (the first player against each other).
      seed: the tournament's seed (see the module docstring).
      max_concurrent: games of a pairing played at once in lock step; default all of them when a
        player is batched, else one.
      on_game: called with each newly finished game (progress display).
    """
    if isinstance(game, str):
        game = load_game(game)
    check_two_player(game)
    specs = [parse_spec(s).text for s in specs]
    if len(specs) < 2:
        raise UsageError(f"a tournament needs at least two players, got {len(specs)}")
    check_distinct(specs)
    plan = schedule(len(specs), games_per_pairing, seed, format)
    # Made once: to check every spec before the first game, and to serve as the batched players.
    prototypes = [make_player(spec, game, seed) for spec in specs]

    done: list[GameRecord] = []
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        _check_manifest(
            out,
            {
                "game": str(game),
                "players": specs,
                "format": format,
                "seed": seed,
                "games_per_pairing": games_per_pairing,
            },
        )
        done = _read_games(out / GAMES_FILE)
    finished = {(r.pairing[0], r.pairing[1], r.round) for r in done}
    todo = [g for g in plan if (*g.pairing, g.round) not in finished]

    sink = None if out is None else open(out / GAMES_FILE, "a")
    try:
        by_pairing: dict[tuple[int, int], list[ScheduledGame]] = {}
        for g in todo:
            by_pairing.setdefault(g.pairing, []).append(g)
        for pairing, games in by_pairing.items():
            any_batched = any(is_batched(prototypes[i]) for i in pairing)
            width = max_concurrent or (len(games) if any_batched else 1)
            for start in range(0, len(games), width):
                chunk = games[start : start + width]
                tables = [
                    [
                        prototypes[i]
                        if is_batched(prototypes[i])
                        else make_player(specs[i], game, player_seed(g.seed, seat))
                        for seat, i in enumerate(g.seats)
                    ]
                    for g in chunk
                ]

                def finish(k, state, table, chunk=chunk):
                    g = chunk[k]
                    record = _record(table, [specs[i] for i in g.seats], g.seed, g.pairing, g.round)
                    done.append(record)
                    if sink is not None:
                        # One line per game, flushed at once: a crash loses no finished game.
                        sink.write(record.to_json() + "\n")
                        sink.flush()
                        os.fsync(sink.fileno())
                    if on_game is not None:
                        on_game(record)

                play_games(game, tables, [g.seed for g in chunk], finish)
    finally:
        if sink is not None:
            sink.close()
    return sorted(done, key=lambda r: (r.pairing, r.round))
