"""The one shared module of fakes for unit tests. Product code never imports it."""

# --- search: random models over a latent vector ------------------------------------------------

import functools  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mctx  # noqa: E402

# `jax.jit(..., compiler_options=OPTIMIZED)` for the few tests whose programs run far longer than
# they compile: the suite compiles at XLA's -O0 (tests/conftest.py), which halves their speed.
OPTIMIZED = {"xla_backend_optimization_level": "2"}

# The suite's one small run: the overrides that shrink a board-game preset (tic-tac-toe's) for a
# test. Tests take it whole and add only what they test: configs that differ build programs of
# their own (`selfplay.programs.program_key`), while a config another test in the process already
# ran takes its programs as compiled, and one another process ran has its XLA from the cache.
TINY = [
    "learner.batch_size=16",
    "replay.min_size=64",
    "replay.capacity=4000",
    "actors.threads_per_device=2",
    "actors.envs_per_thread=4",
    "actors.unroll_length=8",
    "search.num_simulations=4",
    "network.channels=8",
    "network.head_hidden=8",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=2",
    "loss.unroll_steps=2",  # a shorter unrolled update: less to trace and compile
]


def _predict(params, latent):
    return latent @ params["policy"], jnp.tanh(latent @ params["value"])


# The random models' arrays in one program each (eager jnp ops compile one program apiece).
@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _random_model_arrays(key, batch_size: int, num_actions: int, latent_size: int):
    keys = jax.random.split(key, 7)
    params = {
        "transition": jax.random.normal(keys[0], (num_actions, latent_size, latent_size)) * 0.5,
        "policy": jax.random.normal(keys[1], (latent_size, num_actions)),
        "value": jax.random.normal(keys[2], (latent_size,)),
        "reward": jax.random.normal(keys[3], (latent_size,)),
    }
    latent = jax.random.normal(keys[4], (batch_size, latent_size))
    prior_logits, value = _predict(params, latent)
    return params, mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=latent)


def random_model(key, batch_size: int, num_actions: int, latent_size: int = 8):
    """A random deterministic learned model: (params, root, recurrent_fn).

    The latent moves by an action-dependent linear map; prior logits, value, reward and discount
    are linear read-outs. Rows of the batch never interact.
    """

    def recurrent_fn(params, rng_key, action, latent):
        del rng_key
        next_latent = jnp.tanh(jnp.einsum("bi,bij->bj", latent, params["transition"][action]))
        prior_logits, value = _predict(params, next_latent)
        output = mctx.RecurrentFnOutput(
            reward=jnp.tanh(next_latent @ params["reward"]),
            discount=jnp.full((latent.shape[0],), 0.95),
            prior_logits=prior_logits,
            value=value,
        )
        return output, next_latent

    params, root = _random_model_arrays(key, batch_size, num_actions, latent_size)
    return params, root, recurrent_fn


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _random_stochastic_model_arrays(
    key, batch_size: int, num_actions: int, num_chance: int, latent_size: int
):
    keys = jax.random.split(key, 9)
    params = {
        "afterstate": jax.random.normal(keys[0], (num_actions, latent_size, latent_size)) * 0.5,
        "chance": jax.random.normal(keys[1], (num_chance, latent_size, latent_size)) * 0.5,
        "policy": jax.random.normal(keys[2], (latent_size, num_actions)),
        "value": jax.random.normal(keys[3], (latent_size,)),
        "reward": jax.random.normal(keys[4], (latent_size,)),
        "chance_logits": jax.random.normal(keys[5], (latent_size, num_chance)),
        "afterstate_value": jax.random.normal(keys[6], (latent_size,)),
    }
    latent = jax.random.normal(keys[7], (batch_size, latent_size))
    prior_logits, value = _predict(params, latent)
    return params, mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=latent)


def random_stochastic_model(
    key, batch_size: int, num_actions: int, num_chance: int, latent_size: int = 8
):
    """A random learned model with chance: (params, root, search.StochasticModel).

    States and afterstates are latent vectors moved by action- and outcome-dependent linear
    maps; chance logits, values, rewards and priors are linear read-outs. Rows never interact.
    """
    import search  # the fakes module serves tests of every package; search only here

    def decision_fn(params, rng_key, action, latent):
        del rng_key
        afterstate = jnp.tanh(jnp.einsum("bi,bij->bj", latent, params["afterstate"][action]))
        output = mctx.DecisionRecurrentFnOutput(
            chance_logits=afterstate @ params["chance_logits"],
            afterstate_value=jnp.tanh(afterstate @ params["afterstate_value"]),
        )
        return output, afterstate

    def chance_fn(params, rng_key, outcome, afterstate):
        del rng_key
        next_latent = jnp.tanh(jnp.einsum("bi,bij->bj", afterstate, params["chance"][outcome]))
        prior_logits, value = _predict(params, next_latent)
        output = mctx.ChanceRecurrentFnOutput(
            action_logits=prior_logits,
            value=value,
            reward=jnp.tanh(next_latent @ params["reward"]),
            discount=jnp.full((afterstate.shape[0],), -1.0),
        )
        return output, next_latent

    params, root = _random_stochastic_model_arrays(
        key, batch_size, num_actions, num_chance, latent_size
    )
    return params, root, search.StochasticModel(decision_fn, chance_fn)


# --- tic-tac-toe: the real rules (pgx) as an exact model, and an exact minimax solver ----------

import numpy as np  # noqa: E402

_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def pgx_step_fn(env):
    """search.StepFn over a pgx env: (state, action) -> (next, mover's reward, terminal, legal)."""
    step = jax.vmap(env.step)

    def step_fn(state, action):
        mover = state.current_player
        next_state = step(state, action)
        reward = jnp.take_along_axis(next_state.rewards, mover[:, None], axis=1)[:, 0]
        return next_state, reward, next_state.terminated, next_state.legal_action_mask

    return step_fn


def relative_board_index(observation):
    """[B, 3, 3, 2] pgx tic-tac-toe observation -> [B] base-3 index (1 mine, 2 theirs)."""
    cells = observation.reshape(observation.shape[0], 9, 2).astype(jnp.int32)
    codes = cells[..., 0] + 2 * cells[..., 1]  # [B, 9]
    return jnp.sum(codes * (3 ** jnp.arange(9)), axis=-1)


def _winner(board):
    for a, b, c in _LINES:
        if board[a] != 0 and board[a] == board[b] == board[c]:
            return board[a]
    return 0


@functools.cache
def negamax(board: tuple) -> int:
    """Value for the player to move on a relative board (1 mine, 2 theirs, 0 empty)."""
    if _winner(board) == 2:
        return -1
    if all(board):
        return 0
    values = []
    for move in range(9):
        if board[move] == 0:
            child = list(board)
            child[move] = 1
            # The opponent moves next: swap to their view.
            values.append(-negamax(tuple({1: 2, 2: 1, 0: 0}[c] for c in child)))
    return max(values)


def optimal_moves(board: tuple) -> set:
    """The moves that keep the negamax value of a relative board."""
    best, moves = None, set()
    for move in range(9):
        if board[move] == 0:
            child = list(board)
            child[move] = 1
            value = -negamax(tuple({1: 2, 2: 1, 0: 0}[c] for c in child))
            if best is None or value > best:
                best, moves = value, {move}
            elif value == best:
                moves.add(move)
    return moves


def minimax_value_table() -> np.ndarray:
    """[3**9] float32: negamax value of every relative board, for the player to move."""
    table = np.zeros(3**9, dtype=np.float32)
    for index in range(3**9):
        board = tuple((index // 3**i) % 3 for i in range(9))
        if abs(sum(c == 1 for c in board) - sum(c == 2 for c in board)) <= 1:
            table[index] = negamax(board)
    return table


def reachable_positions() -> list:
    """Every non-terminal tic-tac-toe position as (relative board, moves played from empty)."""
    seen, out = set(), []

    def visit(board, moves):
        relative_key = board
        if _winner(board) or all(board) or relative_key in seen:
            return
        seen.add(relative_key)
        out.append((board, moves))
        for move in range(9):
            if board[move] == 0:
                child = list(board)
                child[move] = 1
                visit(tuple({1: 2, 2: 1, 0: 0}[c] for c in child), moves + (move,))

    visit((0,) * 9, ())
    return out


def immediate_wins(board: tuple, player: int = 1) -> list:
    """Moves that complete a line for `player` (1: to move, 2: the opponent) on a relative board."""
    return [
        m
        for m in range(9)
        if board[m] == 0
        and _winner(tuple(player if i == m else c for i, c in enumerate(board))) == player
    ]


def relative_board(moves) -> tuple:
    """The relative board (1 mine, 2 theirs) after playing `moves` from the empty board."""
    board = [0] * 9
    for ply, move in enumerate(moves):
        board[move] = 1 if ply % 2 == 0 else 2
    to_move = 1 if len(moves) % 2 == 0 else 2
    return tuple(0 if c == 0 else (1 if c == to_move else 2) for c in board)


# --- arena: players that interrupt or batch, and a one-player env with known episodes ----------

from typing import NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

from arena.players import BatchedPlayer, Player  # noqa: E402


class CountdownInterrupt:
    """Shared by players made from one registration: raises KeyboardInterrupt (as Ctrl-C would) on
    the `after`-th move made by any of them, once; later moves are normal."""

    def __init__(self, after: int):
        self.left = after

    def tick(self):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


class InterruptingPlayer(Player):
    """Plays the first legal move; ticks a CountdownInterrupt before each move."""

    def __init__(self, spec: str, countdown: CountdownInterrupt):
        super().__init__(spec)
        self.countdown = countdown

    def step(self, state):
        self.countdown.tick()
        return state.legal_actions()[0]


class RecordingBatchedPlayer(BatchedPlayer):
    """Uniformly random legal moves for many games at once; records each call's batch size."""

    def __init__(self, spec: str, seed: int):
        super().__init__(spec)
        self.rng = np.random.default_rng(seed)
        self.batch_sizes: list[int] = []

    def step_many(self, states):
        self.batch_sizes.append(len(states))
        return [int(self.rng.choice(s.legal_actions())) for s in states]


class EpisodeStep(NamedTuple):
    """The fields of selfplay's TimeStep that evaluation reads."""

    observation: np.ndarray  # [B] steps taken in the current episode
    done: np.ndarray  # [B]
    episode_end: np.ndarray  # [B]
    episode_return: np.ndarray  # [B]
    episode_length: np.ndarray  # [B]
    env_id: np.ndarray  # [B]


class FakeEpisodeEnv:
    """One-player batched env: env e's episodes last e + 1 steps and return 10 * e + k for its k-th
    episode (k = 0, 1, ...), auto-resetting on the step that ends one. Records its options."""

    def __init__(self, num_envs: int, seed: int = 0, **options):
        self.num_envs = num_envs
        self.options = options
        self.seed = seed
        self.closed = False
        self._t = np.zeros(num_envs, np.int64)
        self._k = np.zeros(num_envs, np.int64)

    def _step(self, ended, returns, lengths):
        return EpisodeStep(self._t.copy(), ended, ended, returns, lengths, np.arange(self.num_envs))

    def reset(self, seed):
        self._t[:] = 0
        self._k[:] = 0
        zeros = np.zeros(self.num_envs)
        return self._step(np.zeros(self.num_envs, bool), zeros, zeros.astype(np.int64))

    def step(self, actions):
        assert np.asarray(actions).shape == (self.num_envs,)
        self._t += 1
        ended = self._t == np.arange(self.num_envs) + 1
        returns = np.where(ended, 10.0 * np.arange(self.num_envs) + self._k, 0.0)
        lengths = np.where(ended, self._t, 0)
        self._k += ended
        self._t[ended] = 0
        return self._step(ended, returns, lengths)

    def close(self):
        self.closed = True


# --- self-play runtime: an environment that fails -----------------------------------------------


class FailingEnv:
    """Wraps a real BatchedEnv and raises from `step` after `fail_after` steps."""

    def __init__(self, env, fail_after: int, message: str = "environment exploded"):
        self._env, self._left, self._message = env, fail_after, message
        self.spec, self.num_envs = env.spec, env.num_envs

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, seed):
        return self._env.reset(seed)

    def step(self, actions):
        self._left -= 1
        if self._left < 0:
            raise RuntimeError(self._message)
        return self._env.step(actions)

    def close(self):
        self._env.close()


# --- self-play runtime: an async env whose rows say which env and which step they are ----------


class FakeAsyncEnv:
    """An envpool-like async env (`batch_size < num_envs`, send/recv) whose steps are known.

    Env e's episodes last `3 + e % 4` steps. Its observation [4] float32 is (e, steps env e has
    taken since reset, step within the episode, episodes ended); the reward of its k-th step
    (k = 1, 2, ...) is `1000 * e + k`. `recv` returns `batch_size` of the envs in flight, drawn by
    a seeded RNG that favours higher env ids, in shuffled order: envs run at different speeds and
    an env's first observation after `reset` comes in some later `recv`, as with envpool. Episodes
    auto-reset on the step that ends them. `actions[e]` lists the actions env e was stepped with.
    """

    def __init__(self, num_envs: int, batch_size: int, seed: int = 0):
        from envs.base import EnvSpec

        self.num_envs, self.batch_size = num_envs, batch_size
        self.spec = EnvSpec(
            name="envpool:FakeAsync-v0",
            family="envpool",
            num_actions=2,
            observation_shape=(4,),
            observation_dtype="float32",
            num_players=1,
            two_player_zero_sum=False,
            discount=1.0,
            deterministic=False,
            max_episode_steps=None,
        )
        self._seed = seed
        self.closed = False
        self.reset(seed)

    def episode_length(self, env: int) -> int:
        return 3 + env % 4

    def reset(self, seed: int | None = None):
        self._rng = np.random.default_rng(self._seed if seed is None else seed)
        self._steps = np.zeros(self.num_envs, np.int64)  # steps since reset
        self._t = np.zeros(self.num_envs, np.int64)  # steps in the current episode
        self._episodes = np.zeros(self.num_envs, np.int64)
        self._returns = np.zeros(self.num_envs, np.float64)
        self.actions: list[list[int]] = [[] for _ in range(self.num_envs)]
        self._in_flight: dict[int, int | None] = dict.fromkeys(range(self.num_envs))  # None: reset
        self._awaiting: set[int] = set()  # envs of the last recv, waiting for their actions
        return self.recv()

    def send(self, actions, env_id) -> None:
        env_id = [int(e) for e in np.asarray(env_id)]
        if sorted(env_id) != sorted(self._awaiting):
            raise ValueError(
                f"send for envs {env_id}, expected those of the last recv {sorted(self._awaiting)}"
            )
        for env, action in zip(env_id, np.asarray(actions).tolist(), strict=True):
            self._in_flight[env] = int(action)
        self._awaiting = set()

    def recv(self):
        from envs.base import TimeStep

        if self._awaiting:
            raise ValueError(f"recv before actions were sent for envs {sorted(self._awaiting)}")
        ready = np.array(sorted(self._in_flight))
        weights = (ready + 1.0) / (ready + 1.0).sum()
        chosen = self._rng.choice(ready, self.batch_size, replace=False, p=weights)
        rows = [self._finish(int(env), self._in_flight.pop(int(env))) for env in chosen]
        self._awaiting = {int(env) for env in chosen}
        return TimeStep(*(np.stack(column) for column in zip(*rows, strict=True)))

    def _finish(self, env: int, action: int | None) -> tuple:
        reward, done, ep_return, ep_length = 0.0, False, 0.0, 0
        if action is not None:  # None: the env's first observation after reset
            self.actions[env].append(action)
            self._steps[env] += 1
            self._t[env] += 1
            reward = 1000.0 * env + self._steps[env]
            self._returns[env] += reward
            done = bool(self._t[env] == self.episode_length(env))
            if done:
                ep_return, ep_length = self._returns[env], int(self._t[env])
                self._returns[env], self._t[env] = 0.0, 0
                self._episodes[env] += 1
        observation = np.array(
            [env, self._steps[env], self._t[env], self._episodes[env]], np.float32
        )
        return (
            observation,
            np.float32(reward),
            done,
            False,
            np.ones(2, bool),
            np.int32(0),
            np.float32(ep_return),
            np.int32(ep_length),
            done,
            np.int32(env),
        )

    def step(self, actions):
        raise ValueError("FakeAsyncEnv is async: use send/recv")

    def close(self) -> None:
        self.closed = True


# --- runs: a caller that stops a run ------------------------------------------------------------

import contextlib  # noqa: E402
import pathlib  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402


@contextlib.contextmanager
def stop_once_logged(run_dir, text: str, stop) -> Iterator[None]:
    """While inside, a thread sets `stop` (a StopSignal) once the run's metrics.jsonl holds
    `text` (e.g. '"loss"'): a caller's stop, as soon as what a test checks has happened, not
    after a fixed wait."""
    metrics, done = pathlib.Path(run_dir) / "metrics.jsonl", threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if metrics.is_file() and text in metrics.read_text():
                stop.set("stopped by the caller")
                return

    watcher = threading.Thread(target=watch, name="stop-once-logged")
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


# --- compilation: which programs a stretch of a test traced, lowered or compiled -------------

import jax.monitoring  # noqa: E402

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # once for each new executable
# Timed around XLA's compilation or the persistent cache's read that replaces it (JAX 0.10):
# `_COMPILED` is recorded only where the cache's answer, in the same thread just before, was not
# a hit.
_BACKEND = "/jax/core/compile/backend_compile_duration"
_COMPILED = "compiled"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_RECORDING: list[tuple[str, list[str]]] = []  # (event, names) for each recorder open now
_THREAD = threading.local()  # the compiling thread's last answer from the persistent cache


def _record_compile_event(event: str, duration: float, **kwargs) -> None:
    del duration
    served = False
    if event == _BACKEND:
        served, _THREAD.served = getattr(_THREAD, "served", False), False
    for wanted, names in _RECORDING:
        if event == wanted or (wanted == _COMPILED and event == _BACKEND and not served):
            names.append(kwargs.get("fun_name", "?"))


def _record_cache_event(event: str, **kwargs) -> None:
    del kwargs
    if event == _CACHE_HIT:
        _THREAD.served = True


jax.monitoring.register_event_duration_secs_listener(_record_compile_event)
jax.monitoring.register_event_listener(_record_cache_event)


@contextlib.contextmanager
def _recording(event: str) -> Iterator[list[str]]:
    entry: tuple[str, list[str]] = (event, [])
    _RECORDING.append(entry)
    try:
        yield entry[1]
    finally:
        # By identity: `remove` compares by value, and two recorders of one event open at once
        # hold equal lists whenever they saw the same programs.
        del _RECORDING[next(i for i, other in enumerate(_RECORDING) if other is entry)]


def traced_programs() -> contextlib.AbstractContextManager[list[str]]:
    """The names of the functions `jax.jit` traced while inside (in any thread), in order: a
    program taken from a jitted function's own cache is not traced again."""
    return _recording(_TRACE)


def lowered_programs() -> contextlib.AbstractContextManager[list[str]]:
    """The names (`jit(f)`) of the programs lowered while inside (in any thread), in order: one
    for each executable a jitted function built, whether XLA then compiled it or read it from
    the persistent compilation cache; a call that reuses an executable lowers nothing."""
    return _recording(_LOWER)


def compiled_programs() -> contextlib.AbstractContextManager[list[str]]:
    """The names (`jit(f)`) of the programs XLA compiled while inside (in any thread): those
    lowered but read back from the persistent compilation cache are not among them."""
    return _recording(_COMPILED)


# --- envs: a user's own environment in jumanji's API (`py:tests.fakes:make_jumanji_...`) --------
# jumanji is imported inside the methods: most tests that import this module never load it.


class CorridorObservation(NamedTuple):
    cells: jax.Array  # [length] float32, one-hot of the walker's cell
    action_mask: jax.Array  # [3] bool: left (not in cell 0), stay, right


class CorridorState(NamedTuple):
    cell: jax.Array  # [] int32
    step_count: jax.Array  # [] int32


class JumanjiCorridor:
    """A walk along `length` cells in jumanji's API, not a subclass of jumanji's `Environment`:
    actions 0 left, 1 stay, 2 right; left is illegal in cell 0, where every episode starts.
    Reaching the last cell ends the episode with reward 1 (a termination: discount 0); else
    after `time_limit` steps it ends with jumanji's truncation (discount 1)."""

    def __init__(self, length: int = 5, time_limit: int = 20):
        self.length = length
        self.time_limit = time_limit

    @property
    def action_spec(self):
        from jumanji import specs

        return specs.DiscreteArray(3, name="action")

    @property
    def observation_spec(self):
        from jumanji import specs

        return specs.Spec(
            CorridorObservation,
            "CorridorObservation",
            cells=specs.BoundedArray((self.length,), jnp.float32, 0.0, 1.0, "cells"),
            action_mask=specs.BoundedArray((3,), bool, False, True, "action_mask"),
        )

    def _observe(self, state: CorridorState) -> CorridorObservation:
        cells = jax.nn.one_hot(state.cell, self.length, dtype=jnp.float32)
        return CorridorObservation(cells, jnp.array([True, True, True]).at[0].set(state.cell > 0))

    def reset(self, key):
        from jumanji import types

        state = CorridorState(jnp.int32(0), jnp.int32(0))
        return state, types.restart(self._observe(state))

    def _move(self, state: CorridorState, action) -> CorridorState:
        cell = jnp.clip(state.cell + action - 1, 0, self.length - 1).astype(jnp.int32)
        return CorridorState(cell, state.step_count + 1)

    def step(self, state: CorridorState, action):
        from jumanji import types

        state = self._move(state, action)
        at_end = state.cell == self.length - 1
        last = at_end | (state.step_count >= self.time_limit)
        timestep = types.TimeStep(
            step_type=jnp.where(last, types.StepType.LAST, types.StepType.MID),
            reward=at_end.astype(jnp.float32),
            discount=jnp.where(at_end, 0.0, 1.0).astype(jnp.float32),
            observation=self._observe(state),
            extras={},
        )
        return state, timestep


class _UntraceableCorridor(JumanjiCorridor):
    def _move(self, state, action):
        if action == 2:  # Python control flow on a traced value: not JAX
            return CorridorState(state.cell + 1, state.step_count + 1)
        return CorridorState(state.cell, state.step_count + 1)


class _ChangingCorridor(JumanjiCorridor):
    def step(self, state, action):
        state, timestep = super().step(state, action)
        cells = timestep.observation.cells.astype(jnp.int32)  # float32 at reset, int32 here
        return state, timestep.replace(observation=timestep.observation._replace(cells=cells))


class _ContinuousCorridor(JumanjiCorridor):
    @property
    def action_spec(self):
        from jumanji import specs

        return specs.BoundedArray((), jnp.float32, -1.0, 1.0, "action")


def make_jumanji_corridor(**options) -> JumanjiCorridor:
    """`py:tests.fakes:make_jumanji_corridor`: options `length`, `time_limit`."""
    return JumanjiCorridor(**options)


def make_jumanji_untraceable() -> JumanjiCorridor:
    """Its step branches in Python on the action: JAX cannot trace it."""
    return _UntraceableCorridor()


def make_jumanji_changing_observation() -> JumanjiCorridor:
    """Its step's observation is int32 where its reset's is float32."""
    return _ChangingCorridor()


def make_jumanji_continuous() -> JumanjiCorridor:
    """A float action in [-1, 1]: continuous."""
    return _ContinuousCorridor()


# A user's own environments by import path (`py:tests.fakes:...`): what a module returns that is
# not an environment, a callable that raises, and gymnax-API environments that break a rule.
# gymnax is imported in the factories: importing it makes JAX arrays, which would start JAX's
# backend in every process that imports this module (a job's processes must not before they join).


def make_raising_env(**options):
    raise ValueError(f"no level named {options.get('level', 'castle')!r}")


def make_not_an_env():
    return {"reset": None}


def _broken_cartpole(rule: str):
    from examples.cartpole_gymnax import CartPole

    class BrokenCartPole(CartPole):
        def step_env(self, key, state, action, params):
            if rule == "untraceable" and state.position[0] > 0:  # Python `if` on a traced value
                action = 1 - action
            obs, state, reward, done, info = super().step_env(key, state, action, params)
            if rule == "changing":  # [5] after reset's [4]
                obs = jnp.concatenate([obs, obs[:1]])
            if rule == "nan":
                reward = jnp.where(state.time >= 3, jnp.nan, reward)
            return obs, state, reward, done, info

    return BrokenCartPole()


def make_unbounded_box_cartpole():
    """CartPole whose action space is a Box without finite bounds: no policy can cover it."""
    from gymnax.environments import spaces

    from examples.cartpole_gymnax import CartPole

    class UnboundedBoxCartPole(CartPole):
        def action_space(self, params=None):
            return spaces.Box(-jnp.inf, jnp.inf, (1,), jnp.float32)

    return UnboundedBoxCartPole()


def make_untraceable_cartpole():
    return _broken_cartpole("untraceable")


def make_changing_cartpole():
    return _broken_cartpole("changing")


def make_nan_reward_cartpole():
    return _broken_cartpole("nan")


# --- envs: a user's own Gymnasium environments (`py:tests.fakes:make_gym_corridor`, ...) -------

import gymnasium  # noqa: E402


class GymCorridor(gymnasium.Env):
    """A walk along `length` cells, a `gymnasium.Env` (not a class of ours): actions 0 left,
    1 right; each episode starts in a cell from 1 to length - 2 drawn from the reset's seed and
    ends at either end, with reward +1 on the right, -1 on the left. The observation is the cell
    as a float64 [1] (or, `discrete_observation`, the cell itself: Discrete(length)).

    Options that break a rule, one each: `box_actions` (an unbounded Box), `dict_observation`
    (a Dict observation space), `grow_at=k` (an observation of shape [2] at the episode's k-th
    step), `nan_at=k` (a NaN reward at its k-th step). `action_mask` gives
    `info["action_mask"]`, which forbids left in cell 1.
    """

    def __init__(
        self,
        length: int = 7,
        discrete_observation: bool = False,
        action_mask: bool = False,
        box_actions: bool = False,
        dict_observation: bool = False,
        grow_at: int | None = None,
        nan_at: int | None = None,
    ):
        self.length, self.grow_at, self.nan_at = length, grow_at, nan_at
        self.masked = action_mask
        box = gymnasium.spaces.Box(0.0, length - 1.0, (1,), np.float64)
        self.observation_space = gymnasium.spaces.Discrete(length) if discrete_observation else box
        if dict_observation:
            self.observation_space = gymnasium.spaces.Dict({"cell": box})
        self.action_space = (
            gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)  # no policy covers it
            if box_actions
            else gymnasium.spaces.Discrete(2)
        )

    def _observe(self):
        if isinstance(self.observation_space, gymnasium.spaces.Discrete):
            return self.cell
        shape = 2 if self.steps == self.grow_at else 1
        return np.full(shape, float(self.cell))

    def _info(self) -> dict:
        return {"action_mask": np.array([self.cell > 1, True])} if self.masked else {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.steps = int(self.np_random.integers(1, self.length - 1)), 0
        return self._observe(), self._info()

    def step(self, action):
        self.cell += 1 if int(action) == 1 else -1
        self.steps += 1
        right, left = self.cell == self.length - 1, self.cell == 0
        reward = float("nan") if self.steps == self.nan_at else float(right) - float(left)
        return self._observe(), reward, bool(right or left), False, self._info()


def make_gym_corridor(time_limit: int | None = None, **options) -> gymnasium.Env:
    """`py:tests.fakes:make_gym_corridor`: a GymCorridor (its options), under a TimeLimit of
    `time_limit` steps if given."""
    env = GymCorridor(**options)
    return gymnasium.wrappers.TimeLimit(env, time_limit) if time_limit else env


def make_gym_corridor_vector(size: int = 3, same_step: bool = True):
    """`py:tests.fakes:make_gym_corridor_vector`: `size` GymCorridors in a user's own
    SyncVectorEnv, auto-resetting on the same step (or, `same_step=False`, Gymnasium's default:
    on the next)."""
    mode = gymnasium.vector.AutoresetMode
    return gymnasium.vector.SyncVectorEnv(
        [GymCorridor] * size, autoreset_mode=mode.SAME_STEP if same_step else mode.NEXT_STEP
    )
