"""pgx adapter: JAX-native games batched with vmap, stepped and auto-reset inside jit.

A user's own game in pgx's API (`py:<module>:<callable>`, `envs.user`: `init`, `step`,
`num_players`, and a State with pgx's fields) goes through the same functions, AlphaZero's exact
model included. Three ways in, from the most to the least pure:

- `pgx_functions(env_id, num_envs)`: a pure `reset(key)` / `step(env_state, actions)` pair over a
  `PgxEnvState` pytree, for a fully jitted (Anakin) loop.
- `pgx_exact_step(env_id)`: the batched rules without auto-reset, `(state, action) -> ExactStep`,
  for a search that steps the real game inside jit (AlphaZero's exact model).
- `pgx_chance_rules(env_id)`: the same for the games with chance (`2048`, `backgammon`), split
  at the chance event: `afterstate(state, action)` (the move, and the probabilities of the
  chance outcomes that follow it) and `chance_step(afterstate, outcome)`, for AlphaZero's exact
  model of a game with chance (`search.make_exact_stochastic_model`).
- `PgxEnv`: the host-side `BatchedEnv` (numpy `step`) plus `step_device` (JAX arrays, no transfer)
  and `.state` (the batched pgx State on device).

Observations are pgx's own, already channels-last and from the view of the player to move, cast
to float32. pgx assigns player ids at random to the first and second mover, so `to_play` is the
pgx player id and `episode_return` is the return of player id 0. pgx ends the game with -1 for the
mover on an illegal action: `PgxEnv.step` raises ValueError instead, `step_device` and the pure
functions keep pgx's rule.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import pgx

from configs.caching import built_once
from configs.errors import UsageError
from envs.base import EnvSpec, TimeStep
from envs.jax_env import JaxEnv, end_episodes, where_rows
from envs.user import UserEnv, same_observations, traced

__all__ = [
    "ChanceRules",
    "ChanceStep",
    "PgxAfterstate",
    "ExactStep",
    "PgxEnv",
    "PgxEnvState",
    "PgxFunctions",
    "make_pgx_game",
    "pgx_chance_rules",
    "pgx_exact_step",
    "pgx_functions",
    "pgx_spec",
    "is_deterministic",
]

# Games whose next state is a function of (state, action): the exact-model search may step them.
_DETERMINISTIC = frozenset({
    "animal_shogi", "chess", "connect_four", "gardner_chess", "go_9x9", "go_19x19", "hex",
    "othello", "shogi", "tic_tac_toe",
})  # fmt: skip
_IMPERFECT = frozenset({"kuhn_poker", "leduc_holdem", "sparrow_mahjong", "bridge_bidding"})
# Games with chance whose rules `pgx_chance_rules` splits at the chance event.
_CHANCE = frozenset({"2048", "backgammon"})
# Two-player games whose mover may move again (backgammon: each die is a move of its own).
_NOT_ALTERNATING = frozenset({"backgammon"})


def make_pgx_game(env_id: str | UserEnv) -> pgx.Env:
    """`pgx.make(env_id)`, or UsageError naming the bad id and the accepted ones; a user's game in
    pgx's API (`envs.user.UserEnv`) as it is."""
    if isinstance(env_id, UserEnv):
        return env_id.env
    available = [e for e in pgx.available_envs() if e not in _IMPERFECT]
    if env_id in _IMPERFECT:
        raise UsageError(
            f"pgx game {env_id!r} is not supported: it has imperfect information; "
            f"supported: {', '.join(available)}"
        )
    if env_id not in available:
        close = difflib.get_close_matches(env_id, available, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(f"unknown pgx game {env_id!r}: {hint}accepted: {', '.join(available)}")
    try:
        return pgx.make(env_id)
    except Exception as e:  # e.g. minatar needs the extra pgx-minatar package
        raise UsageError(f"pgx cannot make {env_id!r}: {e}") from None


class PgxEnvState(NamedTuple):
    """The device-side state of a batch of pgx games and their running episode statistics."""

    game: Any  # batched pgx State, leading axis [B]
    key: jax.Array  # PRNG key for chance (stochastic games) and new games
    episode_return: jax.Array  # [B] float32, player 0's return so far in the current episode
    episode_length: jax.Array  # [B] int32, steps so far in the current episode


class PgxFunctions(NamedTuple):
    """Pure, jittable batched env functions (same-step auto-reset), for a jitted loop."""

    reset: Callable[[jax.Array], tuple[PgxEnvState, TimeStep]]  # key -> (state, first TimeStep)
    step: Callable[[PgxEnvState, jax.Array], tuple[PgxEnvState, TimeStep]]  # actions [B] int32


class ExactStep(NamedTuple):
    """The result of `pgx_exact_step`: one ply of the real rules, batched, no auto-reset."""

    state: Any  # batched pgx State after the action
    observation: jax.Array  # [B, *obs_shape] float32, the new state from its mover's view
    reward: jax.Array  # [B] float32, reward of the player who acted
    terminal: jax.Array  # [B] bool, the new state is terminal or truncated (stepping: no-op)
    legal_mask: jax.Array  # [B, A] bool, legal actions in the new state (all True when terminal)
    to_play: jax.Array  # [B] int32, pgx player id to move in the new state


def _rows(x: jax.Array, index: jax.Array) -> jax.Array:
    """x[b, index[b]] for x [B, N] and index [B]."""
    return jnp.take_along_axis(x, index[:, None], axis=1)[:, 0]


@built_once()  # one jitted replay per game, so every caller shares its compiles
def pgx_replay(env_id: str) -> Callable[[jax.Array, jax.Array], Any]:
    """jit(moves [N, L] int32, lengths [N] int32) -> batched pgx State after each row's moves.

    Row i is the game after its first `lengths[i]` moves (OpenSpiel's `state.history()` action
    ids coincide with pgx's for tic_tac_toe and connect_four). The loop always runs L steps, so
    one shape compiles once whatever the lengths. pgx draws which player id moves first; the
    observation is the mover's view, so the draw does not change what an agent sees.
    """
    game = make_pgx_game(env_id)

    def replay(moves, lengths):
        state = jax.vmap(game.init)(jax.random.split(jax.random.PRNGKey(0), moves.shape[0]))

        def play(t, state):
            stepped = jax.vmap(game.step)(state, moves[:, t])
            keep = t < lengths  # [N]
            return jax.tree.map(
                lambda new, old: jnp.where(keep.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
                stepped,
                state,
            )

        return jax.lax.fori_loop(0, moves.shape[1], play, state)

    return jax.jit(replay)


def is_deterministic(source: str | UserEnv) -> bool:
    """Whether `source`'s next state is a function of (state, action), so that an exact model
    may step it: pgx's games by name; a user's game unless it says `deterministic = False` or its
    `step` needs a key (pgx's own take one only for chance)."""
    if not isinstance(source, UserEnv):
        return source in _DETERMINISTIC
    declared = getattr(source.env, "deterministic", None)
    if declared is not None:
        return bool(declared)
    try:
        parameters = list(inspect.signature(source.env.step).parameters.values())
    except (TypeError, ValueError):
        return True
    return not (len(parameters) > 2 and parameters[2].default is inspect.Parameter.empty)


@built_once()  # one function per game, so that jit compiles it once
def pgx_exact_step(env_id: str | UserEnv) -> Callable[[Any, jax.Array], ExactStep]:
    """Returns `step(state, action) -> ExactStep` over batched pgx States, pure and jittable.

    For a search with the real rules as its model: `state` is e.g. `PgxEnv.state`, `action` [B]
    int32; `env_id` a pgx game's name or a user's game in pgx's API. Raises ValueError for a
    game with chance or hidden information (no exact model).
    """
    if not is_deterministic(env_id):
        raise ValueError(
            f"{_name(env_id)} is not deterministic: no exact model; "
            f"deterministic pgx games: {', '.join(sorted(_DETERMINISTIC))}, or your own game in "
            "pgx's API whose step needs no key"
        )
    game = make_pgx_game(env_id)
    vstep = jax.vmap(game.step)

    def step(state: Any, action: jax.Array) -> ExactStep:
        chex.assert_rank(action, 1)
        chex.assert_equal_shape_prefix([state.current_player, action], 1)
        mover = state.current_player
        nxt = vstep(state, action)
        return ExactStep(
            state=nxt,
            observation=nxt.observation.astype(jnp.float32),
            reward=_rows(nxt.rewards, mover).astype(jnp.float32),
            terminal=nxt.terminated | nxt.truncated,
            legal_mask=nxt.legal_action_mask,
            to_play=nxt.current_player.astype(jnp.int32),
        )

    return step


class PgxAfterstate(NamedTuple):
    """A batch of moves applied, chance not yet (`ChanceRules.afterstate`)."""

    state: Any  # batched pgx State after the move (2048: slid, no new tile; backgammon: the
    #             checkers moved, the next roll not made)
    reward: jax.Array  # [B] float32, the mover's reward for the move
    chance: jax.Array  # [B] bool, chance acts before the next move (backgammon: the turn ended)


class ChanceStep(NamedTuple):
    """The result of `ChanceRules.chance_step`: the chance outcome applied, as `ExactStep`."""

    state: Any  # batched pgx State, as `env.step` would have made it with that outcome
    observation: jax.Array  # [B, *obs_shape] float32, the new state from its mover's view
    reward: jax.Array  # [B] float32, the mover's reward for the move
    terminal: jax.Array  # [B] bool, the new state is terminal
    legal_mask: jax.Array  # [B, A] bool, legal actions in the new state (all True when terminal)
    to_play: jax.Array  # [B] int32, pgx player id to move in the new state
    same_player: jax.Array  # [B] bool, the mover moves again (backgammon within a turn)

    def for_search(self) -> tuple[Any, jax.Array, jax.Array, jax.Array, jax.Array]:
        """As `search.ChanceStepFn` returns it: (state, reward, terminal, legal, same_player)."""
        return self.state, self.reward, self.terminal, self.legal_mask, self.same_player


class ChanceRules(NamedTuple):
    """A pgx game with chance split at the chance event: pure, batched, jittable, no auto-reset.

    `afterstate(state, action [B]) -> (PgxAfterstate, chance_probs [B, C])` and
    `chance_step(afterstate, outcome [B]) -> ChanceStep`; `afterstate` then `chance_step` with
    an outcome drawn from `chance_probs` is `env.step` (tested outcome by outcome).
    """

    afterstate: Callable[[Any, jax.Array], tuple[PgxAfterstate, jax.Array]]
    chance_step: Callable[[PgxAfterstate, jax.Array], ChanceStep]
    num_outcomes: int  # C
    outcome_names: tuple[str, ...]  # [C] what each outcome is ("2 at cell 5", "roll 3-5")


@built_once()  # one function per game, so that jit compiles it once
def pgx_chance_rules(env_id: str) -> ChanceRules:
    """The rules of a pgx game with chance (`2048`, `backgammon`), split at the chance event.

    2048: the move slides and merges (its reward is the merged tiles' sum); chance then puts a 2
    (probability 0.9) or a 4 (0.1) on an empty cell, uniformly: C = 32 outcomes, cell * 2 +
    (0 for a 2, 1 for a 4). Backgammon: a move is one checker's move by one die (pgx's micro
    actions); when it ends the turn, the opponent rolls: C = 21 outcomes, the rolls (i, j) with
    i <= j, probability 1/36 for doubles and 2/36 otherwise; a move within the turn involves no
    chance (all probability on outcome 0). Raises ValueError for other games.
    """
    if env_id == "2048":
        return _rules_2048(make_pgx_game(env_id))
    if env_id == "backgammon":
        return _rules_backgammon(make_pgx_game(env_id))
    raise ValueError(
        f"pgx game {env_id!r} has no chance rules here; games with chance: "
        f"{', '.join(sorted(_CHANCE))}"
    )


def _finish(game: pgx.Env, state: Any) -> Any:
    """What pgx's `Env.step` does after the game's own step: all moves legal at a terminal
    state, and the observation of the player to move."""
    state = state.replace(
        legal_action_mask=jnp.where(
            state.terminated, jnp.ones_like(state.legal_action_mask), state.legal_action_mask
        )
    )
    return state.replace(observation=game.observe(state))


def _chance_step(game: pgx.Env, one_step) -> Callable[[PgxAfterstate, jax.Array], ChanceStep]:
    """`one_step(afterstate row, outcome) -> (state, same_player)`, batched into a ChanceStep."""

    def chance_step(after: PgxAfterstate, outcome: jax.Array) -> ChanceStep:
        chex.assert_rank(outcome, 1)
        state, same_player = jax.vmap(one_step)(after, outcome)
        state = jax.vmap(functools.partial(_finish, game))(state)
        return ChanceStep(
            state=state,
            observation=state.observation.astype(jnp.float32),
            reward=after.reward,
            terminal=state.terminated | state.truncated,
            legal_mask=state.legal_action_mask,
            to_play=state.current_player.astype(jnp.int32),
            same_player=same_player,
        )

    return chance_step


def _rules_2048(game: pgx.Env) -> ChanceRules:
    from pgx import play2048  # the game's own slide, merge and legal-move rules

    def rotate(board, action, sign):
        return jax.lax.switch(
            action, [lambda b, k=k: jnp.rot90(b, sign * k) for k in range(4)], board
        )

    def afterstate_one(state, action):
        board = rotate(state._board.reshape((4, 4)), action, 1)
        board, reward = jax.vmap(play2048._slide_and_merge)(board)
        board = rotate(board, action, -1).ravel()
        done = state.terminated | state.truncated  # pgx's step leaves a finished game as it is
        board = jnp.where(done, state._board, board)
        reward = jnp.where(done, 0, reward.sum()).astype(jnp.float32)
        empty = board == 0  # [16]
        count = jnp.maximum(empty.sum(), 1)
        probs = (empty[:, None] * jnp.array([0.9, 0.1]) / count).reshape(32)  # [C]
        # A finished game (no empty cell): a placeholder outcome that changes nothing.
        probs = jnp.where(done | ~empty.any(), jax.nn.one_hot(0, 32), probs)
        stepped = state.replace(_board=board, _step_count=state._step_count + jnp.where(done, 0, 1))
        return PgxAfterstate(stepped, reward, ~done), probs

    def chance_one(after, outcome):
        state = after.state
        cell, tile = outcome // 2, 1 + outcome % 2
        board = state._board
        board = jnp.where(after.chance & (board[cell] == 0), board.at[cell].set(tile), board)
        legal = play2048._legal_action_mask(board.reshape((4, 4)))
        finished = state.terminated | state.truncated
        state = state.replace(
            _board=board,
            rewards=jnp.where(finished, 0.0, after.reward)[None].astype(jnp.float32),
            legal_action_mask=jnp.where(finished, state.legal_action_mask, legal),
            terminated=finished | ~legal.any(),
        )
        return state, jnp.bool_(True)

    def afterstate(state, action):
        chex.assert_rank(action, 1)
        return jax.vmap(afterstate_one)(state, action)

    names = tuple(f"{2 * (1 + o % 2)} at cell {o // 2}" for o in range(32))
    return ChanceRules(afterstate, _chance_step(game, chance_one), 32, names)


# Backgammon's rolls as pgx writes dice (0..5 for 1..6), i <= j: 6 doubles and 15 others.
_ROLLS = tuple((i, j) for i in range(6) for j in range(i, 6))


def _rules_backgammon(game: pgx.Env) -> ChanceRules:
    from pgx import backgammon  # the game's own move, win and turn rules

    rolls = jnp.array(_ROLLS, jnp.int32)  # [21, 2]
    roll_probs = jnp.array([1 / 36 if i == j else 2 / 36 for i, j in _ROLLS], jnp.float32)

    def afterstate_one(state, action):
        done = state.terminated | state.truncated
        mover = state.current_player
        moved = backgammon._update_by_action(
            state.replace(_step_count=state._step_count + 1), action
        )
        won = backgammon._is_all_off(moved._board)
        moved = jax.tree.map(
            lambda a, b: jnp.where(won, a, b), backgammon._winning_step(moved), moved
        )
        turn_over = backgammon._is_turn_end(moved) | (action // 6 == 0)
        after = jax.tree.map(lambda a, b: jnp.where(done, a, b), state, moved)
        roll = ~done & ~won & turn_over
        reward = jnp.where(done, 0.0, moved.rewards[mover]).astype(jnp.float32)
        probs = jnp.where(roll, roll_probs, jax.nn.one_hot(0, len(_ROLLS)))
        return PgxAfterstate(after, reward, roll), probs

    def chance_one(after, outcome):
        state = after.state
        dice = rolls[outcome]
        # pgx's _change_turn, with the roll given instead of drawn from a key.
        turned = state.replace(
            current_player=(state.current_player + 1) % 2,
            _board=backgammon._flip_board(state._board),
            _turn=(state._turn + 1) % 2,
            _dice=dice,
            _playable_dice=backgammon._set_playable_dice(dice),
            _played_dice_num=jnp.int32(0),
            legal_action_mask=backgammon._legal_action_mask(
                backgammon._flip_board(state._board), dice
            ),
        )
        state = jax.tree.map(lambda a, b: jnp.where(after.chance, a, b), turned, state)
        return state, ~after.chance

    def afterstate(state, action):
        chex.assert_rank(action, 1)
        return jax.vmap(afterstate_one)(state, action)

    names = tuple(f"roll {i + 1}-{j + 1}" for i, j in _ROLLS)
    return ChanceRules(afterstate, _chance_step(game, chance_one), len(_ROLLS), names)


def _name(source: str | UserEnv) -> str:
    return source.name if isinstance(source, UserEnv) else f"pgx:{source}"


@built_once()
def pgx_functions(env_id: str | UserEnv, num_envs: int) -> PgxFunctions:
    """Pure `reset(key)` and `step(env_state, actions)` for `num_envs` copies of a pgx game (by
    name, or a user's game in pgx's API)."""
    game = make_pgx_game(env_id)
    return _functions(game, num_envs)


def _functions(game: pgx.Env, num_envs: int) -> PgxFunctions:
    vinit = jax.vmap(game.init)
    vstep = jax.vmap(game.step)
    env_ids = jnp.arange(num_envs, dtype=jnp.int32)

    def timestep(state, reward, done, truncated, ep_return, ep_length) -> TimeStep:
        return TimeStep(
            observation=state.observation.astype(jnp.float32),
            reward=reward,
            done=done,
            truncated=truncated,
            legal_mask=state.legal_action_mask,
            to_play=state.current_player.astype(jnp.int32),
            episode_return=ep_return,
            episode_length=ep_length,
            episode_end=done,
            env_id=env_ids,
        )

    def reset(key: jax.Array) -> tuple[PgxEnvState, TimeStep]:
        key, init_key = jax.random.split(key)
        state = vinit(jax.random.split(init_key, num_envs))
        zeros_f = jnp.zeros(num_envs, jnp.float32)
        zeros_i = jnp.zeros(num_envs, jnp.int32)
        no = jnp.zeros(num_envs, bool)
        env_state = PgxEnvState(state, key, zeros_f, zeros_i)
        return env_state, timestep(state, zeros_f, no, no, zeros_f, zeros_i)

    def step(env_state: PgxEnvState, actions: jax.Array) -> tuple[PgxEnvState, TimeStep]:
        chex.assert_shape(actions, (num_envs,))
        key, step_key, init_key = jax.random.split(env_state.key, 3)
        state = env_state.game
        mover = state.current_player
        nxt = vstep(state, actions, jax.random.split(step_key, num_envs))
        reward = _rows(nxt.rewards, mover).astype(jnp.float32)  # [B]
        done = nxt.terminated | nxt.truncated  # [B]
        truncated = nxt.truncated & ~nxt.terminated
        ep_return = env_state.episode_return + nxt.rewards[:, 0].astype(jnp.float32)
        ep_length = env_state.episode_length + 1

        def auto_reset(nxt):
            return where_rows(done, vinit(jax.random.split(init_key, num_envs)), nxt)

        # Skip building fresh games (not cheap for chess or go) on the many steps where none ended.
        new_state = jax.lax.cond(done.any(), auto_reset, lambda s: s, nxt)
        ended_return, ended_length, ep_return, ep_length = end_episodes(ep_return, ep_length, done)
        ts = timestep(
            new_state,
            reward,
            done,
            truncated,
            ended_return,
            ended_length,
        )
        next_env_state = PgxEnvState(new_state, key, ep_return, ep_length)
        return next_env_state, ts

    return PgxFunctions(reset=reset, step=step)


# What a pgx State carries that the adapter reads.
_STATE_FIELDS = (
    "current_player", "legal_action_mask", "rewards", "terminated", "truncated", "observation"
)  # fmt: skip


@built_once()
def pgx_spec(source: str | UserEnv) -> EnvSpec:
    """The spec of `game` from its abstract initial state (pgx's own `num_actions` plays `init`
    op by op, each op a program XLA compiles: dozens for backgammon or go, in every process that
    makes one). A user's game is traced through a step too: UsageError, one line, for a state
    that lacks pgx's fields, a step JAX cannot trace or observations that change shape."""
    name, game = _name(source), make_pgx_game(source)
    key = jax.random.PRNGKey(0)
    state = traced(name, lambda: jax.eval_shape(game.init, key), "init")  # shapes only
    if isinstance(source, UserEnv):
        missing = [field for field in _STATE_FIELDS if not hasattr(state, field)]
        if missing:
            raise UsageError(
                f"{name}: its init's state lacks {', '.join(missing)}, which pgx's State has"
            )
        action = jnp.zeros((), jnp.int32)
        stepped = traced(name, lambda: jax.eval_shape(game.step, state, action))
        same_observations(name, state.observation, stepped.observation)
    num_players = int(game.num_players)
    if num_players not in (1, 2):
        raise UsageError(f"{name} has {num_players} players: 1 or 2 are supported")
    env_id = source if isinstance(source, str) else ""
    return EnvSpec(
        name=name,
        family="pgx",
        num_actions=int(state.legal_action_mask.shape[-1]),
        observation_shape=tuple(int(d) for d in state.observation.shape),
        observation_dtype="float32",
        num_players=num_players,
        two_player_zero_sum=num_players == 2,
        discount=1.0,
        deterministic=is_deterministic(source),
        max_episode_steps=None,
        alternating=env_id not in _NOT_ALTERNATING,
        chance=env_id in _CHANCE,
    )


class PgxEnv(JaxEnv):
    """`num_envs` copies of a pgx game as a `BatchedEnv`; the state stays on device. `step`
    refuses an illegal action; `step_device` keeps pgx's rule (the mover loses)."""

    def __init__(self, env_id: str | UserEnv, num_envs: int, seed: int = 0):
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        self.game = make_pgx_game(env_id)
        super().__init__(pgx_spec(env_id), num_envs, pgx_functions(env_id, num_envs), seed)

    @property
    def state(self) -> Any:
        """The batched pgx State on device (the new games' where the last step auto-reset)."""
        return self.env_state.game
