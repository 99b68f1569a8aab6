"""Players for two-player OpenSpiel games, made from short text specs.

Every player follows OpenSpiel's bot protocol (it is a `pyspiel.Bot`): `step(state) -> action`,
`restart()`, `restart_at(state)`, `inform_action(state, player_id, action)`, so OpenSpiel's own
tools (`open_spiel.python.algorithms.evaluate_bots`) can run them. A player that can search many
games in one call also has `step_many(states) -> actions` (see `BatchedPlayer`); the tournament
runner then advances all the games waiting for it together.

Spec grammar (documented for users in `describe_players()`):

    SPEC     := NAME [":" SETTINGS]
    SETTINGS := SETTING ("," SETTING)*
    SETTING  := VALUE | KEY "=" VALUE      a bare VALUE is allowed only as the first setting

Examples: `random`, `human`, `mcts:1000`, `mcts:1000,uct_c=1.4`, `mcts:sims=200,rollouts=3`,
`minimax`, `minimax:depth=4`. In a comma-separated list of specs (`--players`), an item of the form
`KEY=VALUE` belongs to the spec before it, so `mcts:1000,uct_c=1.4,random` is two players.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import IO, NamedTuple

import numpy as np
import pyspiel
from open_spiel.python.algorithms import mcts, minimax

from configs import UsageError

__all__ = [
    "BatchedPlayer",
    "HumanPlayer",
    "MCTSPlayer",
    "MinimaxPlayer",
    "Player",
    "PlayerSpec",
    "RandomPlayer",
    "check_distinct",
    "describe_players",
    "is_batched",
    "make_player",
    "parse_spec",
    "register_player",
    "registered_players",
    "split_specs",
]

# A game whose longest game has at most this many plies is small enough to solve exactly with
# alpha-beta on every move (tic-tac-toe: 9). Anything longer needs `minimax:depth=D`.
MAX_FULL_MINIMAX_LENGTH = 12

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class PlayerSpec(NamedTuple):
    """A parsed player spec: `mcts:1000,uct_c=1.4` -> ("mcts", "1000", {"uct_c": "1.4"})."""

    name: str  # the registry key, e.g. "mcts"
    arg: str | None  # the bare first setting, e.g. "1000", or None
    options: dict[str, str]  # the KEY=VALUE settings
    text: str  # the spec as written, used as the player's name in results


class Player(pyspiel.Bot):
    """Base of our players: an OpenSpiel bot that remembers the spec it was made from."""

    def __init__(self, spec: str):
        pyspiel.Bot.__init__(self)
        self.spec = spec

    def restart(self) -> None:
        pass

    def restart_at(self, state: pyspiel.State) -> None:
        pass

    def inform_action(self, state: pyspiel.State, player_id: int, action: int) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class BatchedPlayer(Player):
    """A player that chooses moves for many games in one call (e.g. one batched MCTS on a device).

    Subclasses implement `step_many`. One instance serves all the games of a pairing at once, so it
    must not keep per-game state between calls (`inform_action` is not called on it).
    """

    def step_many(self, states: Sequence[pyspiel.State]) -> list[int]:
        """Returns one legal action for each state, in order; each state has a player to move."""
        raise NotImplementedError

    def step(self, state: pyspiel.State) -> int:
        return self.step_many([state])[0]


def is_batched(player: pyspiel.Bot) -> bool:
    """True when the tournament runner may pass this player many states at once."""
    return callable(getattr(player, "step_many", None))


class RandomPlayer(Player):
    """Uniformly random legal moves."""

    def __init__(self, spec: str, seed: int):
        super().__init__(spec)
        self._rng = np.random.default_rng(seed)

    def step(self, state: pyspiel.State) -> int:
        legal = state.legal_actions()
        return int(legal[self._rng.integers(len(legal))])


class MCTSPlayer(Player):
    """OpenSpiel's MCTSBot (UCT with random rollouts), seeded."""

    def __init__(
        self,
        spec: str,
        game: pyspiel.Game,
        seed: int,
        simulations: int,
        uct_c: float = 2.0,
        rollouts: int = 1,
    ):
        super().__init__(spec)
        rng = np.random.RandomState(seed % 2**32)
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=rollouts, random_state=rng)
        self._bot = mcts.MCTSBot(game, uct_c, simulations, evaluator, random_state=rng)

    def step(self, state: pyspiel.State) -> int:
        return int(self._bot.step(state))


class MinimaxPlayer(Player):
    """Alpha-beta (OpenSpiel's `minimax.alpha_beta_search`), random among equally good moves.

    With `depth` set, positions at the horizon are valued 0 (a draw): the player then plays
    perfectly within its horizon and otherwise knows nothing.
    """

    def __init__(self, spec: str, game: pyspiel.Game, seed: int, depth: int | None):
        super().__init__(spec)
        self._game = game
        self._depth = depth
        self._rng = np.random.default_rng(seed)

    def step(self, state: pyspiel.State) -> int:
        me = state.current_player()
        legal = state.legal_actions()
        # Each child is searched on its own (rather than one search from the root) because
        # alpha-beta prunes the alternatives it does not need, so it cannot say which moves tie.
        depth = self._game.max_game_length() + 1 if self._depth is None else self._depth - 1
        values, ends = [], []
        for action in legal:
            child = state.child(action)
            ends.append(child.is_terminal())
            if child.is_terminal():
                values.append(child.returns()[me])
            elif depth <= 0:
                values.append(0.0)
            else:
                value, _ = minimax.alpha_beta_search(
                    self._game,
                    state=child,
                    value_function=lambda s: 0.0,
                    maximum_depth=depth,
                    maximizing_player_id=me,
                )
                values.append(value)
        values = np.asarray(values)
        best = np.flatnonzero(values >= values.max() - 1e-9)
        # Values do not say how soon a win comes; taking one at once keeps won games short.
        ending = [k for k in best if ends[k]]
        if ending and values.max() > 0:
            best = np.asarray(ending)
        return int(legal[best[self._rng.integers(len(best))]])


class HumanPlayer(Player):
    """Reads moves from a terminal: the move's text as OpenSpiel prints it, or its integer id.

    Shows the board and the legal moves, and asks again after a malformed or illegal move.
    `stdin` and `stdout` default to the process's streams and can be replaced (tests).
    """

    def __init__(self, spec: str, stdin: IO[str] | None = None, stdout: IO[str] | None = None):
        super().__init__(spec)
        self._in = stdin
        self._out = stdout

    def step(self, state: pyspiel.State) -> int:
        stdin = self._in if self._in is not None else sys.stdin
        stdout = self._out if self._out is not None else sys.stdout
        player = state.current_player()
        legal = state.legal_actions()
        names = {state.action_to_string(player, a): a for a in legal}
        lowered = {name.lower(): a for name, a in names.items()}
        print(f"\n{state}\n", file=stdout)
        print("legal moves: " + ", ".join(f"{a}={n}" for n, a in names.items()), file=stdout)
        while True:
            print(f"player {player}, your move: ", end="", file=stdout, flush=True)
            line = stdin.readline()
            if not line:
                raise UsageError("human player: the input ended before the game did")
            text = line.strip()
            if not text:
                continue
            if re.fullmatch(r"[+-]?\d+", text):
                action = int(text)
                if action in legal:
                    return action
                print(
                    f"{action} is not a legal move here; legal ids: "
                    f"{', '.join(str(a) for a in legal)}",
                    file=stdout,
                )
                continue
            if text.lower() in lowered:
                return lowered[text.lower()]
            print(
                f"{text!r} is not a legal move here: type a legal move's text "
                f"({', '.join(names)}) or its id",
                file=stdout,
            )


PlayerFactory = Callable[[PlayerSpec, pyspiel.Game, int], pyspiel.Bot]


class _Entry(NamedTuple):
    factory: PlayerFactory
    usage: str  # one line: the spec's form and what it makes


_REGISTRY: dict[str, _Entry] = {}


def register_player(name: str, factory: PlayerFactory, usage: str) -> None:
    """Makes specs starting with `name` build players with `factory(spec, game, seed)`.

    The factory raises `configs.UsageError` for settings it does not accept. The tournament calls it
    once per game with that game's seed (so each game can be replayed from its record) unless the
    player it returns is batched, which is made once and serves every game: a factory that loads
    something costly (a checkpoint) should cache it.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"player name {name!r} must be lower-case letters, digits and _")
    _REGISTRY[name] = _Entry(factory, usage)


def registered_players() -> dict[str, str]:
    """Registered spec names and their one-line usage."""
    return {name: entry.usage for name, entry in sorted(_REGISTRY.items())}


def describe_players() -> str:
    """The spec grammar and the registered players, for `--help` and error messages."""
    lines = [f"  {entry.usage}" for _, entry in sorted(_REGISTRY.items())]
    return (
        "player spec: NAME[:SETTING[,KEY=VALUE...]] (only the first setting may be a bare "
        "value); players:\n" + "\n".join(lines)
    )


def parse_spec(text: str) -> PlayerSpec:
    """Parses one spec (see the module docstring); raises UsageError when malformed."""
    spec = text.strip()
    name, sep, rest = spec.partition(":")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UsageError(
            f"malformed player spec {text!r}: it must start with a player name "
            f"such as {', '.join(sorted(_REGISTRY)) or 'random'}"
        )
    if sep and not rest:
        raise UsageError(f"malformed player spec {text!r}: nothing after ':'")
    arg = None
    options: dict[str, str] = {}
    for i, item in enumerate(rest.split(",") if rest else []):
        if _KEY.match(item):
            key, _, value = item.partition("=")
            if key in options:
                raise UsageError(f"malformed player spec {text!r}: {key} given twice")
            options[key] = value
        elif i == 0 and item:
            arg = item
        else:
            raise UsageError(
                f"malformed player spec {text!r}: setting {item!r} must be KEY=VALUE "
                "(only the first setting may be a bare value)"
            )
    return PlayerSpec(name, arg, options, spec)


def split_specs(text: str) -> list[str]:
    """Splits a comma-separated list of specs; a `KEY=VALUE` item joins the spec before it."""
    specs: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise UsageError(f"malformed player list {text!r}: empty item (two commas in a row?)")
        if _KEY.match(item) and ":" not in item.partition("=")[0]:
            if not specs:
                raise UsageError(f"malformed player list {text!r}: {item!r} has no spec before it")
            joiner = "," if ":" in specs[-1] else ":"
            specs[-1] = f"{specs[-1]}{joiner}{item}"
        else:
            specs.append(item)
    return specs


def check_distinct(specs: list[str], what: str = "each player spec") -> None:
    """One line where a spec is named twice: its results would share the other's name."""
    if len(set(specs)) != len(specs):
        raise UsageError(f"{what} may appear once; got {', '.join(specs)}")


def make_player(spec: str, game: pyspiel.Game, seed: int = 0) -> pyspiel.Bot:
    """Builds the player a spec names, e.g. `make_player("mcts:200", game, seed=1)`.

    Raises UsageError for an unknown or malformed spec or settings the player does not accept.
    """
    parsed = parse_spec(spec)
    entry = _REGISTRY.get(parsed.name)
    if entry is None:
        raise UsageError(
            f"unknown player {spec!r}; known players: "
            + "; ".join(u for u in registered_players().values())
        )
    return entry.factory(parsed, game, seed)


def _int(spec: PlayerSpec, key: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"player {spec.text!r}: {key} must be an integer, got {value!r}") from None
    if number < low:
        raise UsageError(f"player {spec.text!r}: {key} must be at least {low}, got {number}")
    return number


def _float(spec: PlayerSpec, key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"player {spec.text!r}: {key} must be a number, got {value!r}") from None
    if not np.isfinite(number) or number < 0:
        raise UsageError(f"player {spec.text!r}: {key} must be a finite number >= 0")
    return number


def _no_settings(spec: PlayerSpec, allowed: Sequence[str] = (), arg: bool = False) -> None:
    if spec.arg is not None and not arg:
        raise UsageError(f"player {spec.text!r}: {spec.name} takes no bare setting")
    unknown = sorted(set(spec.options) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) or "none"
        raise UsageError(
            f"player {spec.text!r}: unknown setting(s) {', '.join(unknown)} (accepted: {accepted})"
        )


def _two_player_sequential(spec: PlayerSpec, game: pyspiel.Game) -> None:
    kind = game.get_type()
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise UsageError(f"player {spec.text!r} needs a turn-based game; {game} is not")


def _make_random(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> Player:
    _no_settings(spec)
    return RandomPlayer(spec.text, seed)


def _make_mcts(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> Player:
    _no_settings(spec, ("sims", "uct_c", "rollouts"), arg=True)
    if spec.arg is not None and "sims" in spec.options:
        raise UsageError(f"player {spec.text!r}: simulations given twice")
    sims = spec.arg if spec.arg is not None else spec.options.get("sims", "100")
    _two_player_sequential(spec, game)
    if game.get_type().reward_model != pyspiel.GameType.RewardModel.TERMINAL:
        raise UsageError(f"player {spec.text!r} needs a game with terminal rewards only")
    return MCTSPlayer(
        spec.text,
        game,
        seed,
        # OpenSpiel's UCT expands the root on its second simulation: with one it has no move.
        simulations=_int(spec, "simulations", sims, 2),
        uct_c=_float(spec, "uct_c", spec.options.get("uct_c", "2")),
        rollouts=_int(spec, "rollouts", spec.options.get("rollouts", "1"), 1),
    )


def _make_minimax(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> Player:
    _no_settings(spec, ("depth",))
    kind = game.get_type()
    if (
        game.num_players() != 2
        or kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC
        or kind.information != pyspiel.GameType.Information.PERFECT_INFORMATION
        or kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL
        or kind.utility != pyspiel.GameType.Utility.ZERO_SUM
    ):
        raise UsageError(
            f"player {spec.text!r} needs a deterministic, perfect-information, "
            f"turn-based, two-player zero-sum game; {game} is not"
        )
    depth = spec.options.get("depth")
    if depth is None and game.max_game_length() > MAX_FULL_MINIMAX_LENGTH:
        raise UsageError(
            f"player {spec.text!r}: {game} is too big to solve on every move (games up to "
            f"{game.max_game_length()} plies); give a depth limit, e.g. minimax:depth=4"
        )
    return MinimaxPlayer(
        spec.text, game, seed, depth=None if depth is None else _int(spec, "depth", depth, 1)
    )


def _make_human(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> Player:
    _no_settings(spec)
    _two_player_sequential(spec, game)
    return HumanPlayer(spec.text)


register_player("random", _make_random, "random: uniformly random legal moves")
register_player(
    "mcts",
    _make_mcts,
    "mcts[:SIMS][,uct_c=2][,rollouts=1]: OpenSpiel UCT with random rollouts "
    "(default 100 simulations, at least 2)",
)
register_player(
    "minimax",
    _make_minimax,
    f"minimax[:depth=D]: alpha-beta; without depth only for games of at most "
    f"{MAX_FULL_MINIMAX_LENGTH} plies (horizon positions count as draws)",
)
register_player("human", _make_human, "human: you, typing moves at the terminal")
