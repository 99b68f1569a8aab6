"""OpenSpiel adapter: any perfect-information game by its name, batched on the host.

Observations are the game's `observation_tensor` for the player to move, written through
OpenSpiel's numpy observer (no Python list per step). A game whose tensor is `[C, H, W]` board
planes is returned channels-last `[H, W, C]`; any other shape is flattened to a vector. In
two-player games one more plane (or element) holding the player to move (0.0 or 1.0) is appended,
because many OpenSpiel games (tic_tac_toe, connect_four) encode the board the same way for both
players and a value network must know whose turn it is; pass `to_play_plane=False` to omit it.

Games with chance (backgammon's dice, 2048's tiles, pig's die) are accepted: the adapter draws each
chance outcome from the game's own distribution with its seeded generator, right after the move
that leads to it, so every returned state has a player to move; the mover's reward is read before
chance acts. In two-player games with chance the mover may move again (backgammon's doubles,
pig), so `spec.alternating` is False there.

An illegal action raises ValueError before any env is touched. The live `pyspiel.State` of each
env is `OpenSpielEnv.states` (read it, clone it; do not apply actions to it).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence

import numpy as np
import pyspiel
from open_spiel.python.observation import make_observation

from configs.errors import UsageError
from envs.base import EnvSpec, SyncSendRecv, TimeStep, check_actions

__all__ = ["OpenSpielEnv", "load_openspiel_game"]


def load_openspiel_game(game_string: str) -> pyspiel.Game:
    """Loads `game_string` (e.g. "go(board_size=9)") or raises UsageError saying why it is refused.

    Accepted: sequential, perfect-information games (with chance or without) with one player, or
    two players and zero-sum utility, that provide an observation tensor.
    """
    short = game_string.split("(", 1)[0].strip()
    names = pyspiel.registered_names()
    if short not in names:
        close = difflib.get_close_matches(short, names, n=5, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "see pyspiel.registered_names()"
        raise UsageError(
            f"unknown OpenSpiel game {short!r} in 'openspiel:{game_string}': {hint} "
            "(e.g. openspiel:tic_tac_toe, openspiel:connect_four, openspiel:go(board_size=9))"
        )
    try:
        game = pyspiel.load_game(game_string)
    except pyspiel.SpielError as e:
        first = str(e).strip().splitlines()[0]
        raise UsageError(f"OpenSpiel cannot load {game_string!r}: {first}") from None
    gtype = game.get_type()
    why = []
    if gtype.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        why.append("simultaneous moves")
    if gtype.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        why.append("sampled chance (no outcome distribution to draw from)")
    if gtype.information != pyspiel.GameType.Information.PERFECT_INFORMATION:
        why.append("imperfect information")
    if game.num_players() > 2:
        why.append(f"{game.num_players()} players")
    elif game.num_players() == 2 and gtype.utility != pyspiel.GameType.Utility.ZERO_SUM:
        why.append(f"{gtype.utility.name.lower()} utility, not zero-sum")
    if not gtype.provides_observation_tensor:
        why.append("no observation tensor")
    if why:
        raise UsageError(
            f"OpenSpiel game {game_string!r} is not supported: it has {' and '.join(why)}; "
            "supported are sequential, perfect-information games (chance allowed) with one "
            "player or two zero-sum players"
        )
    return game


class OpenSpielEnv(SyncSendRecv):
    """`num_envs` copies of one OpenSpiel game stepped together on the host. See the module doc."""

    def __init__(
        self,
        game_string: str,
        num_envs: int,
        seed: int = 0,
        *,
        to_play_plane: bool = True,
        max_episode_steps: int | None = None,
    ):
        """`max_episode_steps` truncates longer games (`truncated`, no terminal reward)."""
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise UsageError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.game = load_openspiel_game(game_string)
        self.num_envs = num_envs
        self.batch_size = num_envs
        self._seed = seed
        self._rng = np.random.default_rng(seed)  # draws the chance outcomes
        self._num_players = self.game.num_players()
        chance = self.game.get_type().chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC
        self._add_plane = to_play_plane and self._num_players == 2
        self._max_steps = max_episode_steps
        self._num_actions = self.game.num_distinct_actions()
        self._observer = make_observation(self.game)
        raw_shape = tuple(self.game.observation_tensor_shape())
        self._planes = len(raw_shape) == 3  # [C, H, W] board planes
        self._raw_shape = raw_shape
        extra = 1 if self._add_plane else 0
        if self._planes:
            c, h, w = raw_shape
            obs_shape: tuple[int, ...] = (h, w, c + extra)
        else:
            obs_shape = (int(np.prod(raw_shape)) + extra,)
        self.spec = EnvSpec(
            name=f"openspiel:{game_string}",
            family="openspiel",
            num_actions=self._num_actions,
            observation_shape=obs_shape,
            observation_dtype="float32",
            num_players=self._num_players,
            two_player_zero_sum=self._num_players == 2,
            discount=1.0,
            deterministic=not chance,
            max_episode_steps=max_episode_steps,
            alternating=not (chance and self._num_players == 2),
            chance=chance,
        )
        self._states: list[pyspiel.State] = []
        self._reset_stats()

    @property
    def states(self) -> list[pyspiel.State]:
        """The live state of each env, index = env id (after auto-reset: the new game's)."""
        return self._states

    def _reset_stats(self):
        self._returns0 = np.zeros(self.num_envs, np.float32)  # running return of player 0
        self._lengths = np.zeros(self.num_envs, np.int32)

    def observe(self, states: Sequence[pyspiel.State]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Observation [N, *obs_shape], legal mask [N, A] and to_play [N] of non-terminal states.

        The same encoding `step` returns, for any states of this game (the arena, exact search).
        """
        # Python lists and one numpy call per field: this loop is the env cost of self-play.
        n = len(states)
        players = [state.current_player() for state in states]
        if n and min(players) < 0:
            i = int(np.argmin(players))
            raise ValueError(f"state {i} has no player to move (terminal or chance): {states[i]}")
        flat = np.empty((n, int(np.prod(self._raw_shape))), np.float32)
        observer = self._observer
        for i, (state, player) in enumerate(zip(states, players, strict=True)):
            observer.set_from(state, player)
            flat[i] = observer.tensor
        legal = [state.legal_actions() for state in states]
        counts = [len(actions) for actions in legal]
        mask = np.zeros((n, self._num_actions), bool)
        cols = np.fromiter(itertools.chain.from_iterable(legal), np.int64, sum(counts))
        mask[np.repeat(np.arange(n), counts), cols] = True
        to_play = np.array(players, np.int32)
        return self._encode(flat, to_play), mask, to_play

    def _encode(self, flat: np.ndarray, to_play: np.ndarray) -> np.ndarray:
        """[N, prod(raw_shape)] observation tensors -> [N, *obs_shape], with the to-play plane."""
        n = flat.shape[0]
        obs = np.empty((n, *self.spec.observation_shape), np.float32)
        if self._planes:
            c, h, w = self._raw_shape
            obs[..., :c] = flat.reshape(n, c, h, w).transpose(0, 2, 3, 1)
        else:
            obs[:, : flat.shape[1]] = flat
        if self._add_plane:
            obs[..., -1] = to_play.reshape((n,) + (1,) * (obs.ndim - 2)).astype(np.float32)
        return obs

    def _resolve_chance(self, state: pyspiel.State) -> pyspiel.State:
        """Applies chance outcomes, drawn from their distribution, until a player is to move."""
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes(), strict=True)
            state.apply_action(int(self._rng.choice(outcomes, p=np.asarray(probs))))
        return state

    def _new_game(self) -> pyspiel.State:
        return self._resolve_chance(self.game.new_initial_state())

    def reset(self, seed: int = 0) -> TimeStep:
        """Starts a new game in every env; `seed` seeds the chance outcomes (if any)."""
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._states = [self._new_game() for _ in range(self.num_envs)]
        self._reset_stats()
        self._pending = None
        obs, mask, to_play = self.observe(self._states)
        self._mask, self._to_play = mask, to_play.tolist()
        b = self.num_envs
        return TimeStep(
            observation=obs,
            reward=np.zeros(b, np.float32),
            done=np.zeros(b, bool),
            truncated=np.zeros(b, bool),
            legal_mask=mask,
            to_play=to_play,
            episode_return=np.zeros(b, np.float32),
            episode_length=np.zeros(b, np.int32),
            episode_end=np.zeros(b, bool),
            env_id=np.arange(b, dtype=np.int32),
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        """Applies `actions` [B] (legal ones; ValueError otherwise) and auto-resets ended games."""
        if not self._states:
            raise ValueError("step called before reset")
        b = self.num_envs
        actions = check_actions(actions, b, self._num_actions)
        legal = self._mask[np.arange(b), actions]
        if not legal.all():
            bad = np.flatnonzero(~legal)
            raise ValueError(
                f"illegal actions {actions[bad].tolist()} in envs {bad.tolist()} "
                f"of {self.spec.name}"
            )
        states = self._states
        mover_rewards, player0_rewards, terminal = [], [], []
        for state, action, mover in zip(states, actions.tolist(), self._to_play, strict=True):
            state.apply_action(action)
            rewards = state.rewards()  # before chance acts (2048 repeats it after its tile)
            mover_rewards.append(rewards[mover])
            player0_rewards.append(rewards[0])
            self._resolve_chance(state)
            terminal.append(state.is_terminal())
        reward = np.array(mover_rewards, np.float32)
        self._returns0 += np.array(player0_rewards, np.float32)
        self._lengths += 1
        terminal = np.array(terminal, bool)
        truncated = np.zeros(b, bool)
        if self._max_steps is not None:
            truncated = ~terminal & (self._lengths >= self._max_steps)
        done = terminal | truncated
        ep_return = np.where(done, self._returns0, 0.0).astype(np.float32)
        ep_length = np.where(done, self._lengths, 0).astype(np.int32)
        self._returns0[done] = 0.0
        self._lengths[done] = 0
        for i in np.flatnonzero(done).tolist():
            states[i] = self._new_game()
        obs, mask, to_play = self.observe(states)
        self._mask, self._to_play = mask, to_play.tolist()
        return TimeStep(
            observation=obs,
            reward=reward,
            done=done,
            truncated=truncated,
            legal_mask=mask,
            to_play=to_play,
            episode_return=ep_return,
            episode_length=ep_length,
            episode_end=done.copy(),
            env_id=np.arange(b, dtype=np.int32),
        )

    def close(self) -> None:
        self._states = []
