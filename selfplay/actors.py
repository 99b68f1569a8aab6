"""Sebulba's actors: threads that search on their actor device and push trajectories to a store.

    actor thread (one per `actors.threads_per_device` x actor device), with its own environments
        params <- ParameterServer.latest(device)   (never waits for the learner)
        act(params, obs) -> search on the device -> actions, search policy, search value
        env.step(actions); append to a [T, B] Trajectory; push when T steps are collected

`start_actors` starts them in a `ThreadGroup`; each runs `actor_loop` or, in envpool's async mode
(`actors.envs_per_step` < `actors.envs_per_thread`), `async_actor_loop`, which acts on the first
envs_per_step envs to finish a step and keeps one column of steps per env (`EnvColumns`). On a
JAX environment (pgx, gymnax) on an accelerator `segment_actor_loop` plays a whole segment per
device call (`selfplay.rollout`, the moves Anakin plays: search, step, auto-reset in one jitted
scan; `actors.scan_moves`); move by move, on an accelerator, a pgx game's search and rules run in
one jitted call (`fused_pgx_act_step`). What the trajectories look like (their length and overlap)
and where they go (the `Store`) come from the agent; the actors never ask which mode they serve.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import muzero
from configs import ExperimentConfig, UsageError
from envs import JAX_FAMILIES, env_family, env_seed, jax_env_functions, make_env
from envs.base import check_rewards
from selfplay.agent import Agent, accelerator_paths
from selfplay.lifetime import StopSignal, ThreadGroup
from selfplay.metrics import StageTimer
from selfplay.params import ParameterServer
from selfplay.programs import built_once
from selfplay.replay import Store
from selfplay.rollout import jitted_rollout

__all__ = [
    "ACTOR_STAGES",
    "ActorStats",
    "EnvColumns",
    "act",
    "acting_fields",
    "actor_loop",
    "async_actor_loop",
    "check_actor_envs",
    "fused_pgx_act_step",
    "is_async",
    "outcome_fields",
    "push",
    "scans_moves",
    "segment_actor_loop",
    "start_actors",
]

POLL_S = 0.5  # every blocking call wakes at least this often to check the stop signal
# What an actor thread's time is spent on (`ActorStats.timer`): the search (the act, on its
# device), the environments' step, and waiting for the store to take a trajectory. Where the
# env steps on the device with the search (a pgx game's fused step, a segment's scan), its time
# counts as search.
ACTOR_STAGES = ("search", "env", "queue")


class ActorStats:
    """Counters the actor threads add to and the learner reads; one lock, cheap updates.
    `env_name` names the environment whose steps are counted (in the error a non-finite reward
    raises)."""

    def __init__(self, env_name: str):
        self.env_name = env_name
        self._lock = threading.Lock()
        self.frames = 0
        self.timer = StageTimer()
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def add(
        self, frames: int, returns: np.ndarray, lengths: np.ndarray, rewards: np.ndarray
    ) -> None:
        """Counts `frames` env steps whose `rewards` (any shape) are checked finite, and the
        episodes they ended (`returns` [E], `lengths` [E])."""
        check_rewards(self.env_name, rewards)
        with self._lock:
            self.frames += frames
            self._returns.extend(returns.tolist())
            self._lengths.extend(lengths.tolist())

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        with self._lock:
            returns, lengths = self._returns, self._lengths
            self._returns, self._lengths = [], []
        return returns, lengths


def is_async(config: ExperimentConfig) -> bool:
    """Whether the actors act on `envs_per_step` of their envs at a time (envpool's async mode)."""
    return 0 < config.actors.envs_per_step < config.actors.envs_per_thread


def scans_moves(config: ExperimentConfig, devices: list[jax.Device]) -> bool:
    """Whether the actor threads on `devices` play whole segments per device call
    (`segment_actor_loop`): on a JAX environment, with `actors.scan_moves=on`, or "auto" on an
    accelerator. On a CPU the moves cost XLA more CPU inside a scan than called one by one, more
    than the host's round trips save there (BENCHMARKS.md)."""
    family = env_family(config.env.name, config.env.options)
    choice = config.actors.scan_moves
    if family not in JAX_FAMILIES or choice == "off":
        return False
    return choice == "on" or accelerator_paths(config, devices)


def check_actor_envs(config: ExperimentConfig) -> None:
    """UsageError for actor settings the environment cannot serve, before anything starts."""
    if "batch_size" in config.env.options:
        raise UsageError(
            "env.options.batch_size is set by the runtime: remove it and set "
            "actors.envs_per_step (envs the actor acts on per step) instead"
        )
    family = env_family(config.env.name, config.env.options)
    if is_async(config) and family != "envpool":
        raise UsageError(
            f"actors.envs_per_step={config.actors.envs_per_step} (async stepping, "
            f"below actors.envs_per_thread={config.actors.envs_per_thread}) works "
            f"only with envpool: environments, not {config.env.name}; set "
            f"actors.envs_per_step=0"
        )


def start_actors(
    threads: ThreadGroup,
    devices: list[jax.Device],
    config: ExperimentConfig,
    agent: Agent,
    server: ParameterServer,
    store: Store,
    stats: ActorStats,
    stop: StopSignal,
    key: jax.Array,
    first_index: int = 0,
) -> int:
    """Starts `actors.threads_per_device` actor threads per device in `threads` (thread i gets
    `fold_in(key, i)` and the stream name `actor-i`); returns how many. Each process of a job
    numbers its threads from its own `first_index`, so its environments' seeds differ."""
    loop = async_actor_loop if is_async(config) else actor_loop
    if scans_moves(config, devices):
        loop = segment_actor_loop
    per_device = config.actors.threads_per_device
    for d, device in enumerate(devices):
        for i in range(per_device):
            index = first_index + d * per_device + i
            threads.start(
                f"actor-{index}",
                loop,
                index,
                device,
                config,
                agent,
                server,
                store,
                stats,
                stop,
                jax.random.fold_in(key, index),
            )
    return len(devices) * per_device


def actor_loop(
    index: int,
    device: jax.Device,
    config: ExperimentConfig,
    agent: Agent,
    server: ParameterServer,
    store: Store,
    stats: ActorStats,
    stop: StopSignal,
    key: jax.Array,
) -> None:
    """One actor thread: its own environments, search on `device`, segments into the store."""
    num_envs = config.actors.envs_per_thread
    env = make_env(
        config.env.name, num_envs, seed=env_seed(config.seed, index), **config.env.options
    )
    try:
        timestep = env.reset(env_seed(config.seed, index))
        # On an accelerator the fused call saves a host round trip per step; on the CPU it cost
        # ~3% more CPU per step than the host path (pgx tic-tac-toe, 128 games), so not there
        # unless `devices.accelerator_paths=on`.
        fused = fused_pgx_act_step(agent, env) if accelerator_paths(config, [device]) else None
        device_state = jax.device_put(env.env_state, device) if fused is not None else None
        key = jax.device_put(key, device)
        moves = np.zeros(num_envs, np.int64)
        greedy_after = config.actors.greedy_after_moves
        segment: list[dict[str, np.ndarray]] = []
        name = f"actor-{index}"
        while not stop.is_set():
            snapshot = server.latest(device)
            key, act_key = jax.random.split(key)
            greedy = (moves >= greedy_after) if greedy_after else np.zeros(num_envs, bool)
            started = time.perf_counter()
            if fused is not None:
                # Search and pgx step in one call: the game state stays on the device and the
                # host fetches the step's outputs once. The env's time counts as search.
                device_state, out, next_timestep = fused(
                    snapshot.params, act_key, device_state, jax.device_put(greedy, device)
                )
                out, next_timestep = jax.device_get((out, next_timestep))
                stepped = time.perf_counter()
                stats.timer.add("search", stepped - started)
            else:
                env_state = env.state if agent.uses_env_state else None
                out = act(agent, snapshot.params, act_key, timestep, greedy, device, env_state)
                searched = time.perf_counter()
                next_timestep = env.step(out.action)
                stepped = time.perf_counter()
                stats.timer.add("search", searched - started)
                stats.timer.add("env", stepped - searched)
            done = np.asarray(next_timestep.done)
            segment.append(
                {**acting_fields(timestep, out, snapshot.version), **outcome_fields(next_timestep)}
            )
            ended = np.asarray(getattr(next_timestep, "episode_end", done), bool)
            stats.add(
                num_envs,
                np.asarray(next_timestep.episode_return)[ended],
                np.asarray(next_timestep.episode_length)[ended],
                next_timestep.reward,
            )
            moves = np.where(done, 0, moves + 1)
            timestep = next_timestep
            if len(segment) == agent.segment_length:
                trajectory = muzero.Trajectory(
                    **{field: np.stack([s[field] for s in segment]) for field in segment[0]}
                )
                push(store, trajectory, name, stop)
                stats.timer.add("queue", time.perf_counter() - stepped)
                # The agent's overlap (V-trace's bootstrap step) starts the next trajectory.
                segment = segment[len(segment) - agent.segment_overlap :]
    finally:
        env.close()


def segment_actor_loop(
    index: int,
    device: jax.Device,
    config: ExperimentConfig,
    agent: Agent,
    server: ParameterServer,
    store: Store,
    stats: ActorStats,
    stop: StopSignal,
    key: jax.Array,
) -> None:
    """One actor thread on a JAX environment: each device call plays K moves of all its
    environments (search, step and auto-reset in one jitted scan) and returns the K steps at
    once, K = the agent's new steps per push (`actors.unroll_length`). The same environments,
    seeds and keys as `actor_loop`'s, so the same steps: only the device round trips differ
    (one per segment, not one per move). A store that keeps device arrays (the device replay)
    takes the segment as it is; other stores get it on the host, in pushes of the agent's
    length and overlap (V-trace's bootstrap step repeats, as `actor_loop` pushes)."""
    num_envs = config.actors.envs_per_thread
    seed = env_seed(config.seed, index)
    functions = jax_env_functions(config.env.name, num_envs, **config.env.options)
    length, overlap = agent.segment_length, agent.segment_overlap
    moves = length - overlap
    reset, rollout = jitted_rollout(
        agent, functions, num_envs, moves, config.actors.greedy_after_moves
    )
    env_state, timestep = reset(jax.device_put(jax.random.PRNGKey(seed), device))
    key = jax.device_put(key, device)
    # A store on the learner's device (`selfplay.device_replay`) takes the device's arrays.
    on_device = getattr(store, "keeps_device_arrays", False)
    if on_device and overlap:
        raise ValueError("a store of device arrays takes segments without overlap")
    pending: Any = None  # host steps not pushed yet: the next push's first `overlap` and more
    name = f"actor-{index}"
    while not stop.is_set():
        # The newest parameters published at the start of each segment act for all its K moves:
        # the policy may lag the learner by the updates of those K moves, the span a trajectory
        # has anyway (a per-move actor's segment holds K policies up to K moves old).
        snapshot = server.latest(device)
        started = time.perf_counter()
        env_state, timestep, key, trajectory, ends = rollout(
            snapshot.params, np.int32(snapshot.version), env_state, timestep, key
        )
        ends = jax.device_get(ends)  # [K, B]; waits for the segment
        if not on_device:
            trajectory = jax.device_get(trajectory)
        played = time.perf_counter()
        stats.timer.add("search", played - started)
        returns = ends.episode_return[ends.ended]
        # A device replay's segments stay on the device: their episodes' returns are checked.
        rewards = returns if on_device else trajectory.reward
        stats.add(moves * num_envs, returns, ends.episode_length[ends.ended], rewards)
        if overlap == 0:  # K = the agent's length: the segment is one push
            push(store, trajectory, name, stop)
        else:
            pending = trajectory if pending is None else _concatenate_steps(pending, trajectory)
            while len(pending.action) >= length:
                push(store, jax.tree.map(lambda x: x[:length], pending), name, stop)
                pending = jax.tree.map(lambda x: x[length - overlap :], pending)
        stats.timer.add("queue", time.perf_counter() - played)


def _concatenate_steps(first: muzero.Trajectory, second: muzero.Trajectory) -> muzero.Trajectory:
    """The host steps of `first` then `second` ([T1 + T2, B, ...])."""
    return jax.tree.map(lambda a, b: np.concatenate([a, b]), first, second)


def async_actor_loop(
    index: int,
    device: jax.Device,
    config: ExperimentConfig,
    agent: Agent,
    server: ParameterServer,
    store: Store,
    stats: ActorStats,
    stop: StopSignal,
    key: jax.Array,
) -> None:
    """One actor thread in envpool's async mode: it acts on the first `envs_per_step` envs to
    finish a step while the others keep stepping, so it never waits for the slowest env.

    Each env's steps go to its own column (`EnvColumns`), so column e of every pushed [T, B]
    trajectory is env e's consecutive steps, and consecutive pushes of this actor's stream
    continue each column: what the replay's stream and V-trace's one-step overlap rely on.
    """
    num_envs, per_step = config.actors.envs_per_thread, config.actors.envs_per_step
    env = make_env(
        config.env.name,
        num_envs,
        seed=env_seed(config.seed, index),
        batch_size=per_step,
        **config.env.options,
    )
    try:
        timestep = env.reset(env_seed(config.seed, index))
        key = jax.device_put(key, device)
        moves = np.zeros(num_envs, np.int64)  # per env id
        greedy_after = config.actors.greedy_after_moves
        columns = EnvColumns(num_envs, agent.segment_length, overlap=agent.segment_overlap)
        name = f"actor-{index}"
        while not stop.is_set():
            ids = np.asarray(timestep.env_id)  # [b] which envs this batch's rows are
            snapshot = server.latest(device)
            key, act_key = jax.random.split(key)
            greedy = (moves[ids] >= greedy_after) if greedy_after else np.zeros(ids.size, bool)
            started = time.perf_counter()
            out = act(agent, snapshot.params, act_key, timestep, greedy, device, None)
            searched = time.perf_counter()
            # The first half of each env's step; the columns copy it (envpool may reuse buffers).
            columns.begin(ids, acting_fields(timestep, out, snapshot.version))
            sent = time.perf_counter()
            env.send(out.action, ids)
            timestep = env.recv()
            stepped = time.perf_counter()
            stats.timer.add("search", searched - started)
            stats.timer.add("env", stepped - sent)
            ids = np.asarray(timestep.env_id)
            done = np.asarray(timestep.done)
            # A row completes the step its env began; an env's first row after reset begins one.
            completed = columns.complete(ids, outcome_fields(timestep))
            ended = np.asarray(timestep.episode_end, bool) & completed
            stats.add(
                int(completed.sum()),
                np.asarray(timestep.episode_return)[ended],
                np.asarray(timestep.episode_length)[ended],
                timestep.reward,
            )
            moves[ids] = np.where(done, 0, moves[ids] + completed)
            trajectory = columns.pop()
            if trajectory is not None:
                push(store, trajectory, name, stop)
                stats.timer.add("queue", time.perf_counter() - stepped)
    finally:
        env.close()


class EnvColumns:
    """The async actor's steps in one column per env: column e holds env e's steps in order.

    `begin(ids, fields)` writes the acting half of each env's next step (observation, action,
    search outputs, ...) to its column's next slot; `complete(ids, outcome)` finishes the
    steps those envs began. `pop()` returns a [T, num_envs] Trajectory of every env's oldest T
    completed steps once each env has T, and keeps the last `overlap` of them and any faster env's
    extra steps for the next one. Columns start a little longer than T and grow if an env runs
    far ahead of the slowest.
    """

    def __init__(self, num_envs: int, length: int, overlap: int):
        self.num_envs, self.length, self.overlap = num_envs, length, overlap
        self.count = np.zeros(num_envs, np.int64)  # [B] completed steps held per env
        self.pending = np.zeros(num_envs, bool)  # [B] a begun step waits for its reward
        self._columns: dict[str, np.ndarray] = {}  # field -> [capacity, B, ...]

    def begin(self, ids: np.ndarray, fields: dict[str, np.ndarray]) -> None:
        if self.pending[ids].any():
            raise RuntimeError(f"envs {ids[self.pending[ids]].tolist()} acted on twice")
        slots = self.count[ids]  # [b]
        if not self._columns:
            capacity = self.length + max(8, self.length // 4)
            first = {**fields, **{name: np.zeros(ids.size, np.float32) for name in OUTCOMES}}
            self._columns = {
                name: np.zeros((capacity, self.num_envs, *value.shape[1:]), value.dtype)
                for name, value in first.items()
            }
        capacity = next(iter(self._columns.values())).shape[0]
        if slots.max() >= capacity:
            grow = max(8, capacity // 2)
            self._columns = {
                name: np.concatenate([c, np.zeros_like(c[:grow])])
                for name, c in self._columns.items()
            }
        for name, value in fields.items():
            self._columns[name][slots, ids] = value
        self.pending[ids] = True

    def complete(self, ids: np.ndarray, outcome: dict[str, np.ndarray]) -> np.ndarray:
        """Finishes the steps `ids` [b] began with their `outcome_fields` (each [b]); returns
        [b] bool, the rows that finished one."""
        finished = self.pending[ids]  # [b]
        done_ids = ids[finished]
        slots = self.count[done_ids]
        for name in OUTCOMES:
            self._columns[name][slots, done_ids] = outcome[name][finished]
        self.count[done_ids] += 1
        self.pending[done_ids] = False
        return finished

    def pop(self) -> muzero.Trajectory | None:
        if self.count.min() < self.length:
            return None
        trajectory = muzero.Trajectory(
            **{name: column[: self.length].copy() for name, column in self._columns.items()}
        )
        used = self.length - self.overlap
        held = int((self.count + self.pending).max())  # slots in use, begun steps included
        for column in self._columns.values():
            column[: held - used] = column[used:held]  # numpy copies overlapping slices safely
        self.count -= used
        return trajectory


def act(
    agent: Agent, params, key, timestep, greedy: np.ndarray, device: jax.Device, env_state
) -> Any:
    """The agent's act on `device` for the rows of `timestep`, fetched back to the host."""
    out = agent.act(
        params,
        key,
        jax.device_put(timestep.observation, device),
        jax.device_put(timestep.legal_mask, device),
        jax.device_put(greedy, device),
        env_state,
    )
    return jax.device_get(out)  # the search ran on the device; this waits for it


# The fields of a trajectory step known only once the environment has stepped.
OUTCOMES = ("reward", "discount", "truncated")


def outcome_fields(timestep) -> dict[str, np.ndarray]:
    """The `OUTCOMES` of the step that produced `timestep` ([B] each, float32): its reward, the
    discount (0 where an episode ended, by the game or a time limit) and whether a time limit
    cut it (`Trajectory.truncated`)."""
    done = np.asarray(timestep.done)
    return {
        "reward": np.asarray(timestep.reward, np.float32),
        "discount": np.where(done, 0.0, 1.0).astype(np.float32),
        "truncated": np.asarray(timestep.truncated, np.float32),
    }


def acting_fields(timestep, out, version: int) -> dict[str, np.ndarray]:
    """The fields of a trajectory step known when the actor acts (all but the `OUTCOMES`),
    for the B rows of `timestep` and the act's output `out`."""
    action = np.asarray(out.action)
    batch = action.shape[0]
    sampled = {}
    if out.sampled_actions is not None:  # Sampled MuZero's draws, which search_policy weighs
        sampled = {"sampled_actions": np.asarray(out.sampled_actions)}
    return {
        **sampled,
        "observation": timestep.observation,
        # a box's [B, D] float32 vectors as they are, indices as int32
        "action": action.astype(
            np.float32 if np.issubdtype(action.dtype, np.floating) else np.int32
        ),
        "search_policy": np.asarray(out.search_policy, np.float32),
        "search_value": np.asarray(out.search_value, np.float32),
        "legal_mask": np.asarray(timestep.legal_mask, bool),
        "to_play": np.asarray(timestep.to_play, np.int32),
        "behaviour_logits": np.asarray(out.behaviour_logits, np.float32),
        "policy_version": np.full(batch, version, np.int32),
    }


def fused_pgx_act_step(agent: Agent, env) -> Callable | None:
    """For a pgx env: `(params, key, PgxEnvState, greedy) -> (state, ActOutput, next TimeStep)`,
    the agent's act and the env's step in one jitted call; None for any other env."""
    if env.spec.family != "pgx":
        return None
    from envs.pgx_env import PgxEnv  # imports pgx: only for pgx runs

    # A wrapped env (a test's fake) keeps the host-side step it wraps.
    return _fused_pgx_jit(agent, env.functions) if isinstance(env, PgxEnv) else None


@built_once(maxsize=8)  # one jitted function, so one compilation, for all actor threads
def _fused_pgx_jit(agent: Agent, functions) -> Callable:
    def act_step(params, key, env_state, greedy):
        game = env_state.game
        out = agent.act_inside_jit(
            params, key, game.observation.astype(jnp.float32), game.legal_action_mask, greedy, game
        )
        env_state, timestep = functions.step(env_state, out.action)
        return env_state, out, timestep

    return jax.jit(act_step, compiler_options=dict(agent.compiler_options))


def push(store: Store, trajectory: muzero.Trajectory, stream: str, stop: StopSignal) -> None:
    """Blocks (in short waits) until the store takes the trajectory or the run stops."""
    while not stop.is_set():
        if store.add(trajectory, stream=stream, timeout=POLL_S):
            return
