"""The Sebulba runtime: actor threads search on the actor devices, a replicated learner learns.

Data flow (one process per host):

    actor thread x (threads_per_device x actor devices), each with its own batch of environments
        params <- ParameterServer.latest(device)   (never waits for the learner)
        act(params, obs) -> search on the device -> actions, search policy, search value
        env.step(actions); append to a [T, B] Trajectory; push when T steps are collected
        (async, `actors.envs_per_step` < B, envpool only: act on the first envs_per_step envs
        to finish, env.send/recv, keep one column of steps per env; push [T, B] when every env
        has T: see `_async_actor_loop`)
    replay   MuZero/AlphaZero: prioritized windows (SequenceReplay + RateLimiter);
             V-trace: a bounded FIFO of trajectories (FifoQueue)
    learner (main thread) sample -> make_batch -> replicated update over the learner devices
             -> update priorities -> publish params -> log -> checkpoint

One `StopSignal` ends every loop: SIGINT/SIGTERM, the limits in `config.learner`, or an exception
in any thread (the `ThreadGroup` records it, stops the others and re-raises it here).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import muzero
from configs import ExperimentConfig, UsageError, to_dict
from selfplay.agent import Agent, concat_trajectories, make_agent
from selfplay.checkpoints import Checkpointer, config_differences
from selfplay.envs import env_spec, make_env
from selfplay.lifetime import StopSignal, ThreadGroup, handle_signals
from selfplay.metrics import MetricsLogger, StageTimer, plot_learning_curves
from selfplay.params import ParameterServer
from selfplay.replay import FifoQueue, RateLimiter, SequenceReplay

# Config keys a checkpoint must share with the run that resumes it: they fix the state's shapes.
MUST_MATCH = ("mode", "env.name", "network", "optimizer.optimizer")
_POLL_S = 0.5  # every blocking call wakes at least this often to check the stop signal


class RunResult(NamedTuple):
    """What `train` reports when it returns."""

    run_dir: pathlib.Path
    updates: int  # learner step at the end (counting a resumed run's earlier updates)
    frames: int  # environment steps taken by this process's actors in this invocation
    seconds: float
    stopped_by: str  # "max_updates", "max_seconds", "max_frames" or the stop signal's reason
    resumed_from: int | None  # the checkpoint step this invocation resumed from


class ActorStats:
    """Counters the actor threads add to and the learner reads; one lock, cheap updates."""

    def __init__(self):
        self._lock = threading.Lock()
        self.frames = 0
        self.timer = StageTimer()
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def add(self, frames: int, returns: np.ndarray, lengths: np.ndarray) -> None:
        with self._lock:
            self.frames += frames
            self._returns.extend(returns.tolist())
            self._lengths.extend(lengths.tolist())

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        with self._lock:
            returns, lengths = self._returns, self._lengths
            self._returns, self._lengths = [], []
        return returns, lengths


def split_cpu(count: int) -> None:
    """Asks JAX for `count` CPU devices (0: leave JAX's default). JAX reads it when it starts its
    backends; after that only a warning says it had no effect, if the count differs."""
    if not count:
        return
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        have = len(jax.devices("cpu"))
        if have != count:
            warnings.warn(f"devices.cpu_devices={count} has no effect: JAX already runs with "
                          f"{have} CPU device(s) in this process (set it before JAX starts, as "
                          f"`podracer train` does)", stacklevel=3)


def split_devices(config: ExperimentConfig) -> tuple[list[jax.Device], list[jax.Device]]:
    """Actor and learner devices among the local ones (Sebulba: actors on the first device)."""
    local = jax.local_devices()

    def pick(indices, field):
        for i in indices:
            if i >= len(local):
                raise UsageError(f"devices.{field} names device {i} but this host has "
                                 f"{len(local)} device(s)")
        return [local[i] for i in indices]

    actors = pick(config.devices.actor_devices, "actor_devices") or [local[0]]
    learners = pick(config.devices.learner_devices, "learner_devices")
    if not learners:
        learners = [d for d in local if d not in actors] or list(local)
    if config.learner.batch_size % len(learners):
        raise UsageError(f"learner.batch_size {config.learner.batch_size} must divide evenly "
                         f"over {len(learners)} learner devices")
    return actors, learners


def _is_async(config: ExperimentConfig) -> bool:
    """Whether the actors act on `envs_per_step` of their envs at a time (envpool's async mode)."""
    return 0 < config.actors.envs_per_step < config.actors.envs_per_thread


def _check_actor_envs(config: ExperimentConfig) -> None:
    """UsageError for actor settings the environment cannot serve, before anything starts."""
    if "batch_size" in config.env.options:
        raise UsageError("env.options.batch_size is set by the runtime: remove it and set "
                         "actors.envs_per_step (envs the actor acts on per step) instead")
    family = config.env.name.split(":", 1)[0]
    if _is_async(config) and family != "envpool":
        raise UsageError(f"actors.envs_per_step={config.actors.envs_per_step} (async stepping, "
                         f"below actors.envs_per_thread={config.actors.envs_per_thread}) works "
                         f"only with envpool: environments, not {config.env.name}; set "
                         f"actors.envs_per_step=0")


def prepare_run_dir(run_dir: str | os.PathLike, config: ExperimentConfig) -> pathlib.Path:
    """Creates (or reopens) the run directory and writes config.json atomically.

    A directory that already holds a run with a different game, mode or network is refused, so a
    mistyped --run-dir cannot overwrite someone's checkpoints.
    """
    run_dir = pathlib.Path(run_dir).absolute()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"cannot write to run directory {run_dir}: {error.strerror}") from None
    config_path = run_dir / "config.json"
    new = to_dict(config)
    if config_path.exists():
        try:
            old = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise UsageError(f"{config_path} exists but is not a readable config") from None
        differences = config_differences(old, new, MUST_MATCH)
        if differences:
            raise UsageError(f"{run_dir} holds a different run ({'; '.join(differences)}); "
                             f"use another --run-dir")
    tmp = config_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(new, indent=2))
    tmp.replace(config_path)
    return run_dir


def train(config: ExperimentConfig, run_dir: str | os.PathLike, *, progress: bool = True,
          stop: StopSignal | None = None) -> RunResult:
    """Trains `config` in `run_dir`, resuming from its newest checkpoint if there is one."""
    split_cpu(config.devices.cpu_devices)
    if config.runtime == "anakin":
        from selfplay.anakin import train_anakin

        return train_anakin(config, run_dir, progress=progress, stop=stop)
    _check_actor_envs(config)
    run_dir = prepare_run_dir(run_dir, config)
    actor_devices, learner_devices = split_devices(config)
    spec = env_spec(config.env.name, seed=config.seed, **config.env.options)
    agent = make_agent(config, spec)

    optimizer = muzero.make_optimizer(config.optimizer)
    begun = start_run(config, agent, optimizer, run_dir)
    state, checkpointer, config_dict = begun.state, begun.checkpointer, begun.config_dict
    actor_key, resumed_from = begun.key, begun.resumed_from
    step = int(state.step)

    server = ParameterServer(actor_devices)
    server.publish(state.params, version=step)
    stop = stop if stop is not None else StopSignal()  # an unset StopSignal is falsy
    stats = ActorStats()
    num_actor_threads = len(actor_devices) * config.actors.threads_per_device
    if config.mode == "vtrace":
        store = FifoQueue(config.replay.queue_size)
    else:
        store = _make_replay(config, agent, num_actor_threads)

    # Donating the state's buffers would free the params the actors hold when both share a device.
    donate = not set(actor_devices) & set(learner_devices)
    update = muzero.make_replicated_update(agent.loss_fn, optimizer, learner_devices,
                                           batch_axis=agent.batch_axis, donate=donate,
                                           compiler_options=dict(agent.compiler_options))
    replicated = muzero.replicate(state, learner_devices)
    logger = MetricsLogger(run_dir, progress=progress,
                           total_steps=config.learner.max_updates or None)
    learner = _Learner(config, agent, update, replicated, step, server, store, stats, stop,
                       checkpointer, logger, learner_devices, config_dict)
    stopped_by = "error"
    try:
        actor_loop = _async_actor_loop if _is_async(config) else _actor_loop
        with handle_signals(stop), ThreadGroup(stop, join_timeout=30.0) as threads:
            for d, device in enumerate(actor_devices):
                for i in range(config.actors.threads_per_device):
                    index = d * config.actors.threads_per_device + i
                    threads.start(f"actor-{index}", actor_loop, index, device, config, agent,
                                  server, store, stats, stop,
                                  jax.random.fold_in(actor_key, index))
            stopped_by = learner.run(threads)
            if stopped_by not in ("max_updates", "max_seconds", "max_frames"):
                stopped_by = stop.reason or stopped_by
            stop.set(stopped_by)
            if isinstance(store, FifoQueue):
                store.close()  # wake actors blocked on a full queue
            elif store.rate_limiter is not None:
                store.rate_limiter.close()
        learner.save_checkpoint(final=True)
    finally:
        checkpointer.close()
        logger.close()
    plot_run(run_dir)
    return RunResult(run_dir, learner.step, stats.frames, time.monotonic() - learner.start,
                     stopped_by, resumed_from)


class RunStart(NamedTuple):
    """A run's starting point, shared by both runtimes."""

    state: muzero.TrainState  # fresh, or the newest checkpoint's
    checkpointer: Checkpointer
    config_dict: dict
    resumed_from: int | None  # the checkpoint's step, or None
    key: jax.Array  # for the runtime's own randomness (actors, games)


def start_run(config: ExperimentConfig, agent: Agent, optimizer,
              run_dir: pathlib.Path) -> RunStart:
    """The train state for `optimizer` (from the newest checkpoint in `run_dir` if there is
    one) and the checkpointer that keeps saving there."""
    init_key, state_key, key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    state = muzero.init_train_state(jax.jit(agent.init)(init_key), optimizer, state_key)
    checkpointer = Checkpointer(run_dir / "checkpoints", config.learner.keep_checkpoints,
                                must_match=MUST_MATCH)
    config_dict = to_dict(config)
    resumed_from = checkpointer.latest_step()
    if resumed_from is not None:
        state = checkpointer.restore(target=state, config=config_dict)
    return RunStart(state, checkpointer, config_dict, resumed_from, key)


def plot_run(run_dir: pathlib.Path) -> None:
    """The run's learning curves; a failed plot is reported, never raised."""
    try:
        plot_learning_curves(run_dir)
    except Exception as error:  # noqa: BLE001 - a plot must never fail a finished run
        print(f"podracer: could not plot learning curves: {error}")


def _make_replay(config: ExperimentConfig, agent: Agent, num_actor_threads: int):
    per_push = config.actors.unroll_length * config.actors.envs_per_thread
    spi = config.replay.samples_per_insert or None
    error_buffer = None
    if spi:
        # Room for every actor's push and a learner batch, so neither side can starve the other.
        error_buffer = max(per_push * spi, config.learner.batch_size) * (num_actor_threads + 1)
    # A window spans several pushes of one actor's stream. The learner starts once the actors
    # together pushed that many each, so some stream holds a window: a smaller start could let
    # the limiter stop the actors before any window exists while the learner waits for one.
    pushes_per_window = -(-agent.window_length // config.actors.unroll_length)  # ceil
    min_size = max(config.replay.min_size, pushes_per_window * per_push * num_actor_threads)
    limiter = RateLimiter(min_size, spi, error_buffer)
    return SequenceReplay(config.replay.capacity, agent.window_length,
                          alpha=config.replay.priority_alpha, beta=config.replay.priority_beta,
                          rate_limiter=limiter, seed=config.seed)


def _actor_loop(index: int, device: jax.Device, config: ExperimentConfig, agent: Agent,
                server: ParameterServer, store, stats: ActorStats, stop: StopSignal,
                key: jax.Array) -> None:
    """One actor thread: its own environments, search on `device`, segments into the store."""
    num_envs = config.actors.envs_per_thread
    env = make_env(config.env.name, num_envs, seed=config.seed * 1000 + index,
                   **config.env.options)
    try:
        timestep = env.reset(config.seed * 1000 + index)
        # On an accelerator the fused call saves a host round trip per step; on the CPU it cost
        # ~3% more CPU per step than the host path (pgx tic-tac-toe, 128 games), so not there.
        fused = _fused_pgx_act_step(agent, env) if device.platform != "cpu" else None
        device_state = jax.device_put(env.env_state, device) if fused is not None else None
        key = jax.device_put(key, device)
        moves = np.zeros(num_envs, np.int64)
        greedy_after = config.actors.greedy_after_moves
        segment: list[dict[str, np.ndarray]] = []
        length = agent.window_length if config.mode == "vtrace" else config.actors.unroll_length
        name = f"actor-{index}"
        while not stop.is_set():
            snapshot = server.latest(device)
            key, act_key = jax.random.split(key)
            greedy = (moves >= greedy_after) if greedy_after else np.zeros(num_envs, bool)
            started = time.perf_counter()
            if fused is not None:
                # Search and pgx step in one call: the game state stays on the device and the
                # host fetches the step's outputs once. The env's time counts as search.
                device_state, out, next_timestep = fused(snapshot.params, act_key, device_state,
                                                         jax.device_put(greedy, device))
                out, next_timestep = jax.device_get((out, next_timestep))
                stepped = time.perf_counter()
                stats.timer.add("search", stepped - started)
            else:
                env_state = env.state if agent.uses_env_state else None
                out = _act(agent, snapshot.params, act_key, timestep, greedy, device, env_state)
                searched = time.perf_counter()
                next_timestep = env.step(out.action)
                stepped = time.perf_counter()
                stats.timer.add("search", searched - started)
                stats.timer.add("env", stepped - searched)
            done = np.asarray(next_timestep.done)
            segment.append({
                **_acting_fields(timestep, out, snapshot.version),
                "reward": np.asarray(next_timestep.reward, np.float32),
                "discount": np.where(done, 0.0, 1.0).astype(np.float32),
            })
            ended = np.asarray(getattr(next_timestep, "episode_end", done), bool)
            stats.add(num_envs, np.asarray(next_timestep.episode_return)[ended],
                      np.asarray(next_timestep.episode_length)[ended])
            moves = np.where(done, 0, moves + 1)
            timestep = next_timestep
            if len(segment) == length:
                trajectory = muzero.Trajectory(**{
                    field: np.stack([s[field] for s in segment]) for field in segment[0]})
                _push(store, trajectory, name, stop)
                stats.timer.add("queue", time.perf_counter() - stepped)
                # V-trace trajectories overlap by one step: the last one bootstraps the previous.
                segment = segment[-1:] if config.mode == "vtrace" else []
    finally:
        env.close()


def _async_actor_loop(index: int, device: jax.Device, config: ExperimentConfig, agent: Agent,
                      server: ParameterServer, store, stats: ActorStats, stop: StopSignal,
                      key: jax.Array) -> None:
    """One actor thread in envpool's async mode: it acts on the first `envs_per_step` envs to
    finish a step while the others keep stepping, so it never waits for the slowest env.

    Each env's steps go to its own column (`_EnvColumns`), so column e of every pushed [T, B]
    trajectory is env e's consecutive steps, and consecutive pushes of this actor's stream
    continue each column: what the replay's stream and V-trace's one-step overlap rely on.
    """
    num_envs, per_step = config.actors.envs_per_thread, config.actors.envs_per_step
    env = make_env(config.env.name, num_envs, seed=config.seed * 1000 + index,
                   batch_size=per_step, **config.env.options)
    try:
        timestep = env.reset(config.seed * 1000 + index)
        key = jax.device_put(key, device)
        moves = np.zeros(num_envs, np.int64)  # per env id
        greedy_after = config.actors.greedy_after_moves
        length = agent.window_length if config.mode == "vtrace" else config.actors.unroll_length
        # V-trace trajectories overlap by one step: the last one bootstraps the previous.
        columns = _EnvColumns(num_envs, length, overlap=1 if config.mode == "vtrace" else 0)
        name = f"actor-{index}"
        while not stop.is_set():
            ids = np.asarray(timestep.env_id)  # [b] which envs this batch's rows are
            snapshot = server.latest(device)
            key, act_key = jax.random.split(key)
            greedy = (moves[ids] >= greedy_after) if greedy_after else np.zeros(ids.size, bool)
            started = time.perf_counter()
            out = _act(agent, snapshot.params, act_key, timestep, greedy, device, None)
            searched = time.perf_counter()
            # The first half of each env's step; the columns copy it (envpool may reuse buffers).
            columns.begin(ids, _acting_fields(timestep, out, snapshot.version))
            sent = time.perf_counter()
            env.send(out.action, ids)
            timestep = env.recv()
            stepped = time.perf_counter()
            stats.timer.add("search", searched - started)
            stats.timer.add("env", stepped - sent)
            ids = np.asarray(timestep.env_id)
            done = np.asarray(timestep.done)
            # A row completes the step its env began; an env's first row after reset begins one.
            completed = columns.complete(ids, np.asarray(timestep.reward, np.float32),
                                         np.where(done, 0.0, 1.0).astype(np.float32))
            ended = np.asarray(timestep.episode_end, bool) & completed
            stats.add(int(completed.sum()), np.asarray(timestep.episode_return)[ended],
                      np.asarray(timestep.episode_length)[ended])
            moves[ids] = np.where(done, 0, moves[ids] + completed)
            trajectory = columns.pop()
            if trajectory is not None:
                _push(store, trajectory, name, stop)
                stats.timer.add("queue", time.perf_counter() - stepped)
    finally:
        env.close()


class _EnvColumns:
    """The async actor's steps in one column per env: column e holds env e's steps in order.

    `begin(ids, fields)` writes the acting half of each env's next step (observation, action,
    search outputs, ...) to its column's next slot; `complete(ids, reward, discount)` finishes the
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
            first = dict(fields, reward=np.zeros(ids.size, np.float32),
                         discount=np.zeros(ids.size, np.float32))
            self._columns = {name: np.zeros((capacity, self.num_envs, *value.shape[1:]),
                                            value.dtype) for name, value in first.items()}
        capacity = next(iter(self._columns.values())).shape[0]
        if slots.max() >= capacity:
            grow = max(8, capacity // 2)
            self._columns = {name: np.concatenate([c, np.zeros_like(c[:grow])])
                             for name, c in self._columns.items()}
        for name, value in fields.items():
            self._columns[name][slots, ids] = value
        self.pending[ids] = True

    def complete(self, ids: np.ndarray, reward: np.ndarray, discount: np.ndarray) -> np.ndarray:
        """Finishes the steps `ids` [b] began; returns [b] bool, the rows that finished one."""
        finished = self.pending[ids]  # [b]
        done_ids = ids[finished]
        slots = self.count[done_ids]
        self._columns["reward"][slots, done_ids] = reward[finished]
        self._columns["discount"][slots, done_ids] = discount[finished]
        self.count[done_ids] += 1
        self.pending[done_ids] = False
        return finished

    def pop(self) -> muzero.Trajectory | None:
        if self.count.min() < self.length:
            return None
        trajectory = muzero.Trajectory(**{
            name: column[: self.length].copy() for name, column in self._columns.items()})
        used = self.length - self.overlap
        held = int((self.count + self.pending).max())  # slots in use, begun steps included
        for column in self._columns.values():
            column[: held - used] = column[used:held]  # numpy copies overlapping slices safely
        self.count -= used
        return trajectory


def _act(agent: Agent, params, key, timestep, greedy: np.ndarray, device: jax.Device,
         env_state) -> Any:
    """The agent's act on `device` for the rows of `timestep`, fetched back to the host."""
    out = agent.act(params, key, jax.device_put(timestep.observation, device),
                    jax.device_put(timestep.legal_mask, device), jax.device_put(greedy, device),
                    env_state)
    return jax.device_get(out)  # the search ran on the device; this waits for it


def _acting_fields(timestep, out, version: int) -> dict[str, np.ndarray]:
    """The fields of a trajectory step known when the actor acts (all but reward and discount),
    for the B rows of `timestep` and the act's output `out`."""
    batch = np.asarray(out.action).shape[0]
    return {
        "observation": timestep.observation,
        "action": out.action.astype(np.int32),
        "search_policy": np.asarray(out.search_policy, np.float32),
        "search_value": np.asarray(out.search_value, np.float32),
        "legal_mask": np.asarray(timestep.legal_mask, bool),
        "to_play": np.asarray(timestep.to_play, np.int32),
        "behaviour_logits": np.asarray(out.behaviour_logits, np.float32),
        "policy_version": np.full(batch, version, np.int32),
    }


def _fused_pgx_act_step(agent: Agent, env) -> Callable | None:
    """For a pgx env: `(params, key, PgxEnvState, greedy) -> (state, ActOutput, next TimeStep)`,
    the agent's act and the env's step in one jitted call; None for any other env."""
    if env.spec.family != "pgx":
        return None
    from selfplay.envs.pgx_env import PgxEnv  # imports pgx: only for pgx runs

    # A wrapped env (a test's fake) keeps the host-side step it wraps.
    return _fused_pgx_jit(agent, env.functions) if isinstance(env, PgxEnv) else None


@functools.lru_cache(maxsize=8)  # one jitted function, so one compilation, for all actor threads
def _fused_pgx_jit(agent: Agent, functions) -> Callable:
    def act_step(params, key, env_state, greedy):
        game = env_state.game
        out = agent.act(params, key, game.observation.astype(jnp.float32),
                        game.legal_action_mask, greedy, game)
        env_state, timestep = functions.step(env_state, out.action)
        return env_state, out, timestep

    return jax.jit(act_step, compiler_options=dict(agent.compiler_options))


def _push(store, trajectory: muzero.Trajectory, stream: str, stop: StopSignal) -> None:
    """Blocks (in short waits) until the store takes the trajectory or the run stops."""
    while not stop.is_set():
        if isinstance(store, FifoQueue):
            if store.put(trajectory, timeout=_POLL_S) or store.closed:
                return
        elif store.add(trajectory, stream=stream, timeout=_POLL_S):
            return


class _Learner:
    """The learner loop in the main thread, with its logging and checkpoints."""

    def __init__(self, config, agent, update, state, step, server, store, stats, stop,
                 checkpointer, logger, devices, config_dict):
        self.config, self.agent, self.update, self.state = config, agent, update, state
        self.step, self.server, self.store, self.stats = step, server, store, stats
        self.stop, self.checkpointer, self.logger = stop, checkpointer, logger
        self.devices, self.config_dict = devices, config_dict
        self.timer = StageTimer()
        self.start = time.monotonic()
        self.first_step = step
        self.last_saved = step
        self.metrics: dict[str, Any] = {}
        self.policy_lag: list[float] = []

    def limit_reached(self) -> str | None:
        learner = self.config.learner
        if learner.max_updates and self.step >= learner.max_updates:
            return "max_updates"
        if learner.max_seconds and time.monotonic() - self.start >= learner.max_seconds:
            return "max_seconds"
        if learner.max_frames and self.stats.frames >= learner.max_frames:
            return "max_frames"
        return None

    def run(self, threads: ThreadGroup) -> str:
        last_log = time.monotonic()
        frames_at_log, step_at_log = 0, self.step
        while not self.stop.is_set():
            reason = self.limit_reached()
            if reason:
                return reason
            if not self.learn_once():
                continue
            now = time.monotonic()
            if now - last_log >= self.config.learner.log_every_s:
                self.log(now - last_log, self.stats.frames - frames_at_log,
                         self.step - step_at_log)
                last_log, frames_at_log, step_at_log = now, self.stats.frames, self.step
            if self.step - self.last_saved >= self.config.learner.checkpoint_every:
                self.save_checkpoint()
        return self.stop.reason or "stopped"

    def sample(self):
        """A batch from the store, or None if none came within the poll interval."""
        batch_size = self.config.learner.batch_size
        if isinstance(self.store, FifoQueue):
            items = []
            while len(items) < batch_size and not self.stop.is_set():
                item = self.store.get(timeout=_POLL_S)
                if item is not None:
                    items.append(item)
            if len(items) < batch_size:
                return None
            return concat_trajectories(items), None, None
        sample = self.store.sample(batch_size, timeout=_POLL_S)
        if sample is None:
            return None
        return sample.batch, sample.weights, sample.indices

    def learn_once(self) -> bool:
        with self.timer.stage("queue"):
            sampled = self.sample()
        if sampled is None:
            return False
        window, weights, indices = sampled
        with self.timer.stage("transfer"):
            batch, priorities = self.agent.make_batch(window, weights)
            batch = muzero.shard_batch(batch, self.devices, self.agent.batch_axis)
        with self.timer.stage("update"):
            self.state, metrics = self.update(self.state, batch)
            # Waits for the device, so the update's time is its own and not the next stage's.
            jax.block_until_ready(metrics)
            self.step += 1
            if indices is not None:
                self.store.update_priorities(indices, np.asarray(priorities))
            self.metrics = metrics
        versions = np.asarray(window.policy_version)
        self.policy_lag.append(float(self.step - 1 - versions.mean()))
        if self.step % self.config.learner.publish_every == 0:
            with self.timer.stage("publish"):
                self.server.publish(muzero.unreplicate(self.state).params, version=self.step)
        return True

    def log(self, seconds: float, frames: int, updates: int) -> None:
        returns, lengths = self.stats.drain_episodes()
        values = {name: float(value) for name, value in jax.device_get(self.metrics).items()}
        values.update({
            "frames": self.stats.frames,
            "frames_per_s": frames / seconds,
            "updates_per_s": updates / seconds,
            "policy_lag": float(np.mean(self.policy_lag)) if self.policy_lag else 0.0,
        })
        self.policy_lag = []
        if returns:
            values["episode_return"] = float(np.mean(returns))
            values["episode_length"] = float(np.mean(lengths))
            values["episodes"] = len(returns)
        if not isinstance(self.store, FifoQueue):
            values["replay_size"] = self.store.size
        values.update(self.timer.summary("time/learner/", reset=True))
        values.update(self.stats.timer.summary("time/actors/", reset=True))
        self.logger.log(self.step, values)

    def save_checkpoint(self, final: bool = False) -> None:
        if self.step == self.last_saved and not final:
            return
        state = jax.device_get(muzero.unreplicate(self.state))
        self.checkpointer.save(self.step, state, self.config_dict,
                               metadata={"frames": self.stats.frames, "final": final})
        self.last_saved = self.step
