"""Sebulba's replay on the learner's device, for MuZero and AlphaZero on JAX environments.

    actor thread r   segment [T, B] (on its device, `selfplay.actors.segment_actor_loop`)
                     -> rate limiter (inserts) -> written over the oldest T rows of its own B
                     columns of the ring (`selfplay.anakin.write_ring`), on the learner's device
    learner          rate limiter (samples) -> one jitted call: windows drawn from the ring
                     (`AnakinPlan.sample_prioritised_from`), their targets built
                     (`agent.make_batch`), the update, the windows' new priorities written back
                     (`selfplay.anakin.learn_from_ring`)

The ring is Anakin's (a `Trajectory` with leaves [S, R * B, ...]: step t of actor r's game b at
row t mod S of column r * B + b) and is sampled by Anakin's functions, with one difference: the R
actor threads write at their own pace, so each column has its own count of steps written. The
host keeps only counts (steps per actor, and the rate limiter's inserts and samples, the same
`samples_per_insert` limits as the host replay's, `selfplay.replay.make_rate_limiter`); no step
comes back to the host, and no sample is drawn there.

With `replay.priority_alpha` 0 every whole window is as likely; otherwise a window is drawn with
probability priority ** alpha, new steps start with the largest priority yet, and the update writes
back |search value - value target| of its windows, as `SequenceReplay` does (there, late: once
the update finishes; here, in the update itself). A window never spans two actors' games, nor
steps the ring has overwritten.

`replay.on_device=auto` takes it on accelerators (GPUs, TPUs, `devices.accelerator_paths=on`), as
the actors' segments (`actors.scan_moves`); `on` takes it on a CPU too. Where the host replay
stays (`device_replay_refusal`): several processes (each samples its share
from its own replay, and the rate limiter's ratio is the job's), several learner devices (the
batch is sharded from the host), `replay.checkpoint` (the saved replay is the host's), reanalyse
on the actor device when that is not the learner's. `replay.on_device=auto` falls back there with
one line saying why; `on` refuses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import muzero
from configs import ExperimentConfig, UsageError
from envs import JAX_FAMILIES, env_family
from selfplay.agent import Agent, accelerator_paths
from selfplay.anakin import AnakinPlan, RingPriorities, learn_from_ring, write_ring
from selfplay.programs import ProgramCache, program_key
from selfplay.replay import RateLimiter, ReplaySample, make_rate_limiter

__all__ = ["DeviceReplay", "device_replay_refusal", "uses_device_replay"]


def device_replay_refusal(
    config: ExperimentConfig,
    agent: Agent,
    actor_devices: list[jax.Device],
    learner_devices: list[jax.Device],
) -> str | None:
    """Why this Sebulba run keeps its replay on the host (None: it can keep it on the learner's
    device). Only MuZero and AlphaZero on a JAX environment are asked (`uses_device_replay`)."""
    if jax.process_count() > 1:
        return f"{jax.process_count()} processes each sample their share of the job's batch"
    if len(learner_devices) > 1:
        return f"{len(learner_devices)} learner devices take a batch sharded from the host"
    if config.replay.checkpoint:
        return "replay.checkpoint=true saves the host's replay"
    if (
        agent.reads_context
        and config.reanalyse.device == "actors"
        and actor_devices[0] != learner_devices[0]
    ):
        return "reanalyse.device=actors searches on the actor device, not the learner's"
    return None


def uses_device_replay(
    config: ExperimentConfig,
    agent: Agent,
    actor_devices: list[jax.Device],
    learner_devices: list[jax.Device],
) -> bool:
    """Whether this Sebulba run's replay lives on the learner's device (`replay.on_device`):
    "auto" on an accelerator where it can (else one line says why not), "on" (UsageError where
    it cannot). "auto" keeps a CPU's on the host, as its actors play move by move there
    (`selfplay.actors.scans_moves`)."""
    family = env_family(config.env.name, config.env.options)
    choice = config.replay.on_device
    if choice == "off" or family not in JAX_FAMILIES or not agent.uses_replay:
        return False  # the config refuses "on" for the others
    if choice == "auto" and not accelerator_paths(config, learner_devices):
        return False
    reason = device_replay_refusal(config, agent, actor_devices, learner_devices)
    if reason is None:
        return True
    if choice == "on":
        raise UsageError(f"replay.on_device=on: {reason}; set replay.on_device=auto or off")
    print(f"podracer: the replay stays on the host: {reason}", flush=True)
    return False


class DeviceReplay:
    """The ring of `num_streams` actor threads' segments on `device`, and the learner's update
    that samples it (`learn`). Actors `add` as to any `Store`; the learner calls `reserve`, then
    `learn`."""

    keeps_device_arrays = True  # actors push their segments as the device made them

    def __init__(
        self,
        config: ExperimentConfig,
        agent: Agent,
        optimizer,
        device: jax.Device,
        num_streams: int,
        *,
        donate_state: bool,
    ):
        self.device, self.num_streams = device, num_streams
        self.games = config.actors.envs_per_thread  # B per stream
        moves, window = config.actors.unroll_length, agent.window_length
        columns = num_streams * self.games
        ring = config.replay.capacity // columns // moves * moves
        if ring < window + moves:
            least = (-(-(window + moves) // moves) * moves) * columns
            raise UsageError(
                f"replay.capacity {config.replay.capacity} must hold a window of {window} steps "
                f"and a segment's {moves} for each of the {columns} games of {num_streams} "
                f"actor thread(s) (the replay on the device): >= {least}"
            )
        # Anakin's sizes for one device whose games are every actor's; what only Anakin's
        # iteration reads (its updates per iteration, its fill) stays 0.
        self.plan = AnakinPlan(
            devices=1,
            games=columns,
            moves=moves,
            window=window,
            tail=0,
            examples=moves * columns,
            ring=ring,
            minibatch=config.learner.batch_size,
            updates=0,
            fill_iterations=0,
            min_iterations=0,
        )
        self.rate_limiter: RateLimiter = make_rate_limiter(config, window, num_streams)
        # Everything here as the learner's state is placed (replicated over a mesh of the one
        # device): the update's outputs keep that placement, and inputs placed otherwise would
        # compile the update (and the write) a second time.
        self._placement = NamedSharding(muzero.make_mesh([device]), P())
        self._cond = threading.Condition()
        self._closed = False
        self._streams: dict[Hashable, int] = {}  # actor stream -> its block of columns
        self._recorded = np.zeros(num_streams, np.int64)  # steps written per stream
        self._ring: Any = None  # allocated by the first segment (its leaves' shapes)
        self._priorities = jax.device_put(
            RingPriorities(np.zeros((ring, columns), np.float32), np.ones((), np.float32)),
            self._placement,
        )
        # The draws' own stream, folded with each update's step: a resumed run draws on.
        key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 53)
        self._key = jax.device_put(key, self._placement)
        self._write, self._draw_windows, self._learn = _PROGRAMS.get(
            (program_key(config), agent, optimizer, self.plan, self.games, donate_state),
            lambda: _jitted(config, agent, optimizer, self.plan, self.games, donate_state),
        )

    @property
    def size(self) -> int:
        """Transitions held."""
        with self._cond:
            return int(np.minimum(self._recorded, self.plan.ring).sum()) * self.games

    @property
    def num_windows(self) -> int:
        """Whole windows that can be drawn now."""
        with self._cond:
            return self._windows()

    def _windows(self) -> int:
        held = np.minimum(self._recorded, self.plan.ring)
        return int(np.maximum(held - self.plan.window + 1, 0).sum()) * self.games

    def fill_level(self) -> tuple[int, int]:
        """`(have, need)` in transitions, as `SequenceReplay.fill_level`."""
        need = self.rate_limiter.min_size_to_sample
        return min(self.rate_limiter.inserts, need), need

    def close(self) -> None:
        """Wakes every thread waiting to add or to learn; later calls return False at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.rate_limiter.close()

    def add(
        self, trajectory: Any, stream: Hashable | None = None, timeout: float | None = None
    ) -> bool:
        """Writes a [T, B] segment of actor `stream` over the oldest T rows of its columns, once
        the rate limiter lets it in; False if it did not within `timeout` s or the replay closed."""
        steps, games = np.shape(trajectory.action)
        if (steps, games) != (self.plan.moves, self.games):
            raise ValueError(
                f"segments of {self.plan.moves} steps of {self.games} games go to the device "
                f"replay, not [{steps}, {games}]"
            )
        segment = jax.device_put(trajectory, self._placement)  # from the actor's device
        if not self.rate_limiter.acquire_insert(steps * games, timeout):
            return False
        with self._cond:
            if self._closed:
                return False
            index = self._streams.setdefault(stream, len(self._streams))
            if index >= self.num_streams:
                raise ValueError(f"more than {self.num_streams} actor streams: {stream!r}")
            if self._ring is None:
                shape = (self.plan.ring, self.plan.games)
                self._ring = jax.tree.map(
                    lambda x: jnp.zeros(shape + x.shape[2:], x.dtype, device=self._placement),
                    segment,
                )
            row = self._recorded[index] % self.plan.ring
            # Dispatched in the order of the learner's updates (both hold the lock): the device
            # runs the writes and the samples in that order.
            self._ring, self._priorities = self._write(
                self._ring, self._priorities, segment, np.int32(row), np.int32(index * self.games)
            )
            self._recorded[index] += steps
            self._cond.notify_all()
        return True

    def reserve(self, batch_size: int, timeout: float) -> bool:
        """Waits up to `timeout` s until the ring holds a whole window and the rate limiter lets
        `batch_size` windows be drawn (and counts them); False otherwise. `learn` draws them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            ready = self._cond.wait_for(lambda: self._closed or self._windows() > 0, timeout)
            if not ready or self._closed:
                return False
        return self.rate_limiter.acquire_sample(batch_size, max(0.0, deadline - time.monotonic()))

    def learn(self, state: muzero.TrainState) -> tuple[muzero.TrainState, dict, jax.Array]:
        """Dispatches one update on windows drawn from the ring (not waited for): the new state,
        its metrics and the mean policy version of the windows (all on the device)."""
        with self._cond:
            state, self._priorities, metrics, version = self._learn(
                state, self._ring, self._priorities, self._recorded_int32(), self._key
            )
        return state, metrics, version

    def draw_windows(self, key: jax.Array, step: int = 0) -> tuple[Any, jax.Array]:
        """The windows ([L, N] leaves) and importance weights [N] an update at learner step
        `step` draws with `key`, as `learn` draws them (to inspect the replay)."""
        with self._cond:
            return self._draw_windows(
                self._ring, self._priorities, self._recorded_int32(), np.int32(step), key
            )

    def _recorded_int32(self) -> np.ndarray:
        """Steps written per stream, as the ring's row arithmetic needs them (their remainder
        mod S, and whether the ring is full): within int32 however long the run."""
        ring = self.plan.ring
        recorded = np.where(self._recorded < ring, self._recorded, ring + self._recorded % ring)
        return recorded.astype(np.int32)

    # The Store methods the learner's host input would call: this replay is sampled on the
    # device, by `learn`.
    def sample(self, batch_size: int, timeout: float | None = None) -> ReplaySample | None:
        raise TypeError("the device replay is sampled inside the update: use reserve and learn")

    def update_priorities(self, indices: np.ndarray | None, priorities: Any) -> None:
        del indices, priorities  # `learn` writes them back itself


def _window_drawer(config: ExperimentConfig, plan: AnakinPlan, games: int) -> Callable:
    """`drawer(priorities, recorded [R], step) -> draw(key) -> (rows [L, N], columns [N],
    weights [N])`: the windows an update at learner step `step` draws from a ring whose R actors
    each wrote `recorded` steps of their `games` columns."""
    alpha, beta = config.replay.priority_alpha, config.replay.priority_beta
    anneal_updates = config.replay.priority_beta_anneal_updates

    def drawer(priorities: RingPriorities, recorded: jax.Array, step: jax.Array) -> Callable:
        per_column = jnp.repeat(recorded, games, total_repeat_length=plan.games)  # [R * B]
        beta_now = muzero.annealed_beta(beta, anneal_updates, step)
        return lambda key: plan.sample_prioritised_from(
            key, per_column, priorities.window, alpha, beta_now
        )

    return drawer


# The replay's programs, built once a process for each config, agent, optimizer and sizes
# (`selfplay.programs`): a resume or a second run of the config in the process reuses them.
_PROGRAMS = ProgramCache()


def _jitted(
    config: ExperimentConfig, agent: Agent, optimizer, plan: AnakinPlan, games: int, donate_state
) -> tuple[Callable, Callable, Callable]:
    """The replay's jitted `(write, draw_windows, learn)`."""
    prioritised = config.replay.priority_alpha > 0
    write = jax.jit(
        lambda ring, priorities, segment, row, column: write_ring(
            ring, priorities, segment, row, column, prioritised
        ),
        donate_argnums=(0, 1),
    )
    drawer = _window_drawer(config, plan, games)

    def draw_windows(ring, priorities, recorded, step, key):
        rows, columns, weights = drawer(priorities, recorded, step)(key)
        return jax.tree.map(lambda x: x[rows, columns[None, :]], ring), weights

    learn = jax.jit(
        _make_learn(config, agent, optimizer, plan, games, prioritised),
        donate_argnums=(0, 2) if donate_state else (2,),
        compiler_options=dict(agent.compiler_options),
    )
    return write, jax.jit(draw_windows), learn


def _make_learn(
    config: ExperimentConfig, agent: Agent, optimizer, plan: AnakinPlan, games: int, prioritised
):
    """`learn(state, ring, priorities, recorded [R], key) -> (state, priorities, metrics, mean
    policy version)`: one update on a minibatch of the ring's windows, pure."""
    update = muzero.make_update(agent.loss_fn, optimizer, target=agent.target)
    drawer = _window_drawer(config, plan, games)

    def learn(state, ring, priorities, recorded, key):
        draw_windows = drawer(priorities, recorded, state.step)
        versions = []  # the drawn windows' mean policy version, for the learner's policy lag

        def draw(sample_key):
            rows, columns, weights = draw_windows(sample_key)
            drawn = ring.policy_version[rows, columns[None, :]]  # [L, N]
            versions.append(jnp.mean(drawn.astype(jnp.float32)))
            return rows, columns, weights

        key = jax.random.fold_in(key, state.step)
        state, priorities, metrics = learn_from_ring(
            agent, update, state, ring, priorities, key, draw, prioritised
        )
        return state, priorities, metrics, versions[0]

    return learn
