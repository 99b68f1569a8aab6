"""A user's two-player game in pgx's API as an OpenSpiel game: what the arena referees with.

The arena's tournaments, its players (`random`, `mcts:N`, `minimax`, `human`, `ckpt:RUN_DIR`)
and a run's in-run evaluation all play OpenSpiel states. `openspiel_game("py:my_games:make",
options)` wraps the user's game (`envs.user`) as an OpenSpiel Python game: each state holds the
game's own (unbatched) pgx state, stepped by the game's `step` under `jit`, so an agent trained
on the game searches the very state the referee keeps (`PgxGameState.pgx_state`).

OpenSpiel's player 0 is the first mover (pgx draws a player id for each seat; the wrapper maps
them back). A state prints as the game's `render(state)` where the game has one (what the human
player sees), the observation otherwise; moves print as `action_to_string(state, action)` where
the game has one, their ids otherwise. The game's `max_game_length` attribute, where it has one,
bounds OpenSpiel's search depth (minimax's without a depth limit); 1000 otherwise.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import jax
import numpy as np
import pyspiel

from configs.caching import built_once
from configs.errors import UsageError
from envs.user import load_user_env

__all__ = ["PgxGameState", "openspiel_game", "parse_game_text"]

_DEFAULT_LENGTH = 1000


def parse_game_text(text: str) -> tuple[str, dict[str, Any]]:
    """`("py:m:f", {"stones": 15})` of the arena's `py:m:f(stones=15)` (values as JSON, else
    text); UsageError, one line, for a malformed one."""
    name, paren, rest = text.partition("(")
    if not paren:
        return text, {}
    if not rest.endswith(")"):
        raise UsageError(f"bad game {text!r}: expected py:<module>:<callable>(key=value,...)")
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest[:-1].split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"bad game {text!r}: {item!r} is not key=value")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value.strip()
    return name, options


def openspiel_game(name: str, options: dict[str, Any] | None = None) -> pyspiel.Game:
    """The user's pgx-API game `name` (made with `options`) as an OpenSpiel game; UsageError,
    one line, for an environment that is not a two-player game in pgx's API, or one whose
    `step` needs a key (chance: the arena referees deterministic games of yours)."""
    return _game(name, json.dumps(options or {}, sort_keys=True))


@built_once()  # OpenSpiel registers a game type once a process
def _game(name: str, options_key: str) -> pyspiel.Game:
    from envs.pgx_env import is_deterministic, pgx_spec

    options = json.loads(options_key)
    user = load_user_env(name, options)
    if user.api != "pgx":
        raise UsageError(
            f"{name} is a {user.api} environment: the arena plays two-player games in pgx's API"
        )
    spec = pgx_spec(user)
    if spec.num_players != 2:
        raise UsageError(f"{name} is a one-player game: the arena plays two-player games")
    if not is_deterministic(user):
        raise UsageError(f"{name} has chance (its step needs a key): the arena plays games without")
    env = user.env
    shown = f"{name}({','.join(f'{k}={json.dumps(v)}' for k, v in options.items())})"
    short_name = "podracer_" + "".join(c if c.isalnum() else "_" for c in shown)
    max_length = int(getattr(env, "max_game_length", _DEFAULT_LENGTH))
    game_type = pyspiel.GameType(
        short_name=short_name,
        long_name=shown if options else name,
        dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
        chance_mode=pyspiel.GameType.ChanceMode.DETERMINISTIC,
        information=pyspiel.GameType.Information.PERFECT_INFORMATION,
        utility=pyspiel.GameType.Utility.ZERO_SUM,
        reward_model=pyspiel.GameType.RewardModel.TERMINAL,
        max_num_players=2,
        min_num_players=2,
        provides_information_state_string=True,
        provides_information_state_tensor=False,
        provides_observation_string=True,
        provides_observation_tensor=False,
    )
    game_info = pyspiel.GameInfo(
        num_distinct_actions=spec.num_actions,
        max_chance_outcomes=0,
        num_players=2,
        min_utility=-1.0,
        max_utility=1.0,
        utility_sum=0.0,
        max_game_length=max_length,
    )

    def step(state: Any, action: Any) -> tuple[Any, Any]:
        nxt = env.step(state, action)
        return nxt, (nxt.legal_action_mask, nxt.terminated | nxt.truncated, nxt.rewards)

    step = jax.jit(step)
    first = jax.jit(env.init)(jax.random.PRNGKey(0))

    rules = _Rules(env, step)

    class Game(pyspiel.Game):
        def __init__(self, params: dict | None = None):
            super().__init__(game_type, game_info, params or {})
            self.podracer_name, self.podracer_options = name, options

        def new_initial_state(self) -> PgxGameState:
            return PgxGameState(self, rules, first)

    pyspiel.register_game(game_type, Game)
    return Game()


class _Rules(NamedTuple):
    env: Any  # the user's game
    step: Any  # jit((state, action) -> (state, (legal [A], done, rewards [2])))


class PgxGameState(pyspiel.State):
    """An OpenSpiel state holding the user's pgx state (`pgx_state`, unbatched)."""

    def __init__(self, game: pyspiel.Game, rules: _Rules, pgx_state: Any):
        super().__init__(game)
        self._rules = rules
        self.pgx_state = pgx_state
        self._first_player = int(pgx_state.current_player)  # pgx's id of OpenSpiel's player 0
        self._legal = np.flatnonzero(np.asarray(pgx_state.legal_action_mask)).tolist()
        self._done = bool(pgx_state.terminated | pgx_state.truncated)
        self._returns = np.zeros(2)  # by pgx player id

    def __deepcopy__(self, memo: dict) -> PgxGameState:
        # OpenSpiel clones a Python state by deep copy: the rules are shared, the pgx state is
        # immutable, and the history is OpenSpiel's own.
        copy = PgxGameState.__new__(PgxGameState)
        pyspiel.State.__init__(copy, self.get_game())
        copy.__dict__.update(self.__dict__)
        copy._legal = list(self._legal)
        copy._returns = self._returns.copy()
        return copy

    def _seat(self, pgx_player: int) -> int:
        return 0 if pgx_player == self._first_player else 1

    def current_player(self) -> int:
        if self._done:
            return pyspiel.PlayerId.TERMINAL
        return self._seat(int(self.pgx_state.current_player))

    def _legal_actions(self, player: int) -> list[int]:
        return [] if self._done else list(self._legal)

    def _apply_action(self, action: int) -> None:
        self.pgx_state, outcome = self._rules.step(self.pgx_state, np.int32(action))
        legal, done, rewards = jax.device_get(outcome)
        self._legal = np.flatnonzero(legal).tolist()
        self._done = bool(done)
        self._returns = self._returns + np.asarray(rewards, np.float64)

    def _action_to_string(self, player: int, action: int) -> str:
        describe = getattr(self._rules.env, "action_to_string", None)
        return str(describe(self.pgx_state, action)) if describe else str(action)

    def is_terminal(self) -> bool:
        return self._done

    def returns(self) -> list[float]:
        other = 1 - self._first_player
        return [float(self._returns[self._first_player]), float(self._returns[other])]

    def __str__(self) -> str:
        render = getattr(self._rules.env, "render", None)
        if render is not None:
            return str(render(self.pgx_state))
        return np.array2string(np.asarray(self.pgx_state.observation), precision=3)

    def information_state_string(self, player: int | None = None) -> str:
        return str(self.history())

    def observation_string(self, player: int | None = None) -> str:
        return str(self)
