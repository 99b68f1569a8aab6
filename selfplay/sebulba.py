"""The Sebulba runtime: actor threads search on the actor devices, a replicated learner learns.

Data flow (one process per host):

    actors   (selfplay.actors) threads on the actor devices push [T, B] trajectories to a store
    store    the agent's: prioritized windows (MuZero/AlphaZero: SequenceReplay + RateLimiter)
             or a bounded FIFO of trajectories (V-trace: FifoQueue)
    input    (selfplay.learner_input) a thread samples the store and puts the samples on the
             learner's device, `learner.prefetch` samples ahead
    learner  (main thread, `SebulbaRuntime.learn`) the batch and targets built on that device,
             then the replicated update over the learner devices, both dispatched without
             waiting -> priorities written back as each update finishes -> publish params

On an accelerator, MuZero and AlphaZero on a JAX environment keep their replay on the learner's
device instead (`selfplay.device_replay`, `replay.on_device`): the actors' segments
(`actors.scan_moves`) are written there, and each update draws its windows, builds their targets
and writes their priorities back in its own jit; no input thread, no sample on the host.

`selfplay.run.run` drives it: the stop limits, logging and checkpoints are the run loop's. One
`StopSignal` ends every loop: SIGINT/SIGTERM, the limits, or an exception in any thread (the
`ThreadGroup` records it, stops the others and re-raises it from `running`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

import muzero
from configs import ExperimentConfig, UsageError
from envs import env_seed, env_spec
from selfplay.actors import POLL_S, ActorStats, check_actor_envs, start_actors
from selfplay.agent import Agent, make_agent
from selfplay.device_replay import DeviceReplay, uses_device_replay
from selfplay.learner_input import InFlight, LearnerInput, Prefetched, Sampled
from selfplay.lifetime import StopSignal, ThreadGroup
from selfplay.metrics import StageTimer
from selfplay.params import ParameterServer
from selfplay.programs import built_once
from selfplay.replay import SequenceReplay
from selfplay.run import ReplicatedState

__all__ = ["SebulbaRuntime", "split_devices"]


def split_devices(config: ExperimentConfig) -> tuple[list[jax.Device], list[jax.Device]]:
    """Actor devices (this process's; the first device by default) and learner devices (the
    same local indices on every process of the job: the update's mesh spans them all)."""
    local = jax.local_devices()

    def pick(indices, field):
        for i in indices:
            if i >= len(local):
                raise UsageError(
                    f"devices.{field} names device {i} but this host has {len(local)} device(s)"
                )
        return [local[i] for i in indices]

    actors = pick(config.devices.actor_devices, "actor_devices") or [local[0]]
    learners = pick(config.devices.learner_devices, "learner_devices")
    if not learners:
        learners = [d for d in local if d not in actors] or list(local)
    if jax.process_count() > 1:
        learners = muzero.global_devices([local.index(d) for d in learners])
    if config.learner.batch_size % len(learners):
        where = f" of {jax.process_count()} processes" if jax.process_count() > 1 else ""
        raise UsageError(
            f"learner.batch_size {config.learner.batch_size} must divide evenly "
            f"over {len(learners)} learner devices{where}"
        )
    return actors, learners


# Compiled once a process for each agent, optimizer and devices (`selfplay.programs`): a resume
# or a second run of the config in the process reuses the learner's update.
@built_once(maxsize=4)
def _replicated_update(agent: Agent, optimizer, devices: tuple, donate: bool) -> Callable:
    return muzero.make_replicated_update(
        agent.loss_fn,
        optimizer,
        list(devices),
        batch_axis=agent.batch_axis,
        donate=donate,
        compiler_options=dict(agent.compiler_options),
        target=agent.target,
    )


class SebulbaRuntime(ReplicatedState):
    """Actor threads and a store feeding the learner's update in the main thread."""

    def __init__(self, config: ExperimentConfig, optimizer):
        check_actor_envs(config)
        self.config = config
        self.actor_devices, self.learner_devices = split_devices(config)
        self.spec = env_spec(config.env.name, seed=env_seed(config.seed), **config.env.options)
        self.agent = make_agent(config, self.spec)
        if config.mode == "alphazero" and config.reanalyse.searches:
            raise UsageError(
                "reanalyse with mode=alphazero searches again from the recorded game states, "
                "which runtime=anakin keeps and Sebulba's replay does not: use runtime=anakin"
            )
        self.num_actor_threads = len(self.actor_devices) * config.actors.threads_per_device
        # Donating the state's buffers would free the params the actors hold when both share a
        # device.
        self.donates_state = not set(self.actor_devices) & set(self.learner_devices)
        self.device_replay: DeviceReplay | None = None
        if uses_device_replay(config, self.agent, self.actor_devices, self.learner_devices):
            self.device_replay = DeviceReplay(
                config,
                self.agent,
                optimizer,
                self.learner_devices[0],
                self.num_actor_threads,
                donate_state=self.donates_state,
            )
        self.store = self.device_replay or self.agent.make_store(config, self.num_actor_threads)
        self.update = _replicated_update(
            self.agent, optimizer, tuple(self.learner_devices), self.donates_state
        )
        self.server = ParameterServer(self.actor_devices)
        self.stats = ActorStats(config.env.name)
        self.timer = StageTimer()
        self.prefetch = config.learner.prefetch
        # Reanalyse: each batch is built on the device its fresh searches run on, with copies of
        # the newest (and the target) parameters published there.
        self.build_device = None
        self.context_server = None
        if self.agent.reads_context:
            local = [d for d in self.learner_devices if d.process_index == jax.process_index()]
            self.build_device = (
                self.actor_devices[0] if config.reanalyse.device == "actors" else local[0]
            )
            self.context_server = ParameterServer([self.build_device])
        self._context_key: jax.Array | None = None
        self._contexts = 0
        self.input = LearnerInput(
            self.store,
            self.agent,
            # Each process samples its share of the global batch from its own store.
            config.learner.batch_size // jax.process_count(),
            self.learner_devices,
            self.prefetch,
            POLL_S,
            build_device=self.build_device,
            context=self._context if self.agent.reads_context else None,
        )
        self.in_flight = InFlight(self.store, limit=self.prefetch)
        self._step = 0
        self._state: Any = None  # replicated over the learner devices
        self._key: jax.Array | None = None
        self._metrics: dict[str, Any] = {}  # the newest update's, on the device
        # (update, mean policy version of its data): the version may be on the device
        self._policy_lag: list[tuple[int, Any]] = []
        # A sample taken by `ready`, for the next `learn` (with the device replay: True, a
        # batch reserved there)
        self._next: Sampled | bool | None = None

    counts_local = True  # frames and episodes are this process's actors'

    @property
    def replay(self) -> SequenceReplay | None:
        """The search agents' replay (V-trace's queue is not one)."""
        return self.store if isinstance(self.store, SequenceReplay) else None

    def start(self, state: muzero.TrainState, key: jax.Array) -> None:
        self._step = int(state.step)
        self._anneal_beta()
        self._key = jax.random.fold_in(key, jax.process_index())  # each process its own actors
        self.server.publish(state.params, version=self._step)
        if self.context_server is not None:
            self._context_key = jax.device_put(
                jax.random.fold_in(self._key, 1 << 20), self.build_device
            )
            self.context_server.publish((state.params, state.target_params), version=self._step)
        self._state = muzero.replicate(state, self.learner_devices)

    @contextlib.contextmanager
    def running(self, stop: StopSignal) -> Iterator[None]:
        with ThreadGroup(stop, join_timeout=30.0) as threads:
            start_actors(
                threads,
                self.actor_devices,
                self.config,
                self.agent,
                self.server,
                self.store,
                self.stats,
                stop,
                self._key,
                first_index=jax.process_index() * self.num_actor_threads,
            )
            if self.prefetch and self.device_replay is None:
                threads.start("learner-input", self.input.run, stop)
            try:
                yield
            finally:
                stop.set("the learner stopped")  # keeps the run loop's reason if it gave one
                self.store.close()  # wakes actors blocked on a full store
                self.in_flight.finish_all(self.timer)

    @property
    def step(self) -> int:
        return self._step

    @property
    def frames(self) -> int:
        return self.stats.frames

    def ready(self) -> bool:
        """Takes the next sample (waiting up to a poll interval) unless one is held."""
        if self._next is None:
            with self.timer.stage("wait"):
                if self.device_replay is not None:
                    batch = self.config.learner.batch_size
                    self._next = self.device_replay.reserve(batch, timeout=POLL_S) or None
                elif self.prefetch:
                    self._next = self.input.get(timeout=POLL_S)
                else:
                    self._next = self.input.sample(timeout=POLL_S)
        return self._next is not None

    def learn(self) -> bool:
        """Dispatches the next sample's batch build and an update on it; waits for the device
        only to keep at most `learner.prefetch` updates in flight (with prefetch 0: samples,
        updates and waits)."""
        if not self.ready():
            return False
        sampled, self._next = self._next, None
        if self.device_replay is not None:
            with self.timer.stage("dispatch"):  # the sample, the build and the update: one call
                self._state, self._metrics, version = self.device_replay.learn(self._state)
            item = Prefetched(None, None, None, version)
        else:
            assert isinstance(sampled, Sampled)
            with self.timer.stage("build"):
                item = self.input.build(sampled)
            with self.timer.stage("dispatch"):
                self._state, self._metrics = self.update(self._state, item.batch)
        self._step += 1
        self._anneal_beta()
        self.in_flight.add(self._metrics, item, self.timer)
        self._policy_lag.append((self._step - 1, item.mean_policy_version))
        if self._step % self.config.learner.publish_every == 0:
            with self.timer.stage("publish"):
                state = muzero.unreplicate(self._state)
                self.server.publish(state.params, version=self._step)
                if self.context_server is not None:
                    self.context_server.publish(
                        (state.params, state.target_params), version=self._step
                    )
        return True

    def _anneal_beta(self) -> None:
        """Sets the replay's importance exponent for the samples after update `_step`, while
        `replay.priority_beta_anneal_updates` raises it (the input thread reads it)."""
        anneal_updates = self.config.replay.priority_beta_anneal_updates
        if self.replay is not None and anneal_updates and self._step <= anneal_updates:
            self.replay.beta = muzero.annealed_beta(
                self.config.replay.priority_beta, anneal_updates, self._step
            )

    def _context(self) -> muzero.BatchContext:
        """What the next batch's reanalyse reads, on the build device."""
        assert self.context_server is not None and self._context_key is not None
        snapshot = self.context_server.latest(self.build_device)
        assert snapshot is not None  # published at start
        params, target_params = snapshot.params
        self._contexts += 1
        key = jax.random.fold_in(self._context_key, self._contexts)
        return muzero.BatchContext(params, target_params, key, np.int32(snapshot.version))

    def log_values(self) -> dict[str, Any]:
        returns, lengths = self.stats.drain_episodes()
        # The newest finished update's losses (up to `learner.prefetch` updates behind): the
        # updates in flight go on undisturbed. Before any has finished, the newest one's.
        finished = self.in_flight.finished_metrics
        metrics = finished if finished is not None else self._metrics
        values = {name: float(value) for name, value in jax.device_get(metrics).items()}
        if self._policy_lag:
            steps, versions = zip(*self._policy_lag, strict=True)
            values["policy_lag"] = float(np.mean(steps) - np.mean(jax.device_get(versions)))
        self._policy_lag = []
        if returns:
            values["episode_return"] = float(np.mean(returns))
            values["episode_length"] = float(np.mean(lengths))
            values["episodes"] = len(returns)
        values["replay_size"] = self.store.size
        learner_times = self.timer.summary("time/learner/", reset=True)
        values.update(learner_times)
        if "time/learner/wait_share" in learner_times:
            values["learner_wait_share"] = learner_times["time/learner/wait_share"]
        if self.device_replay is None:
            values.update(self.input.timer.summary("time/input/", reset=True))
        values.update(self.stats.timer.summary("time/actors/", reset=True))
        return values

    def fill_level(self) -> tuple[int, int]:
        return self.store.fill_level()
