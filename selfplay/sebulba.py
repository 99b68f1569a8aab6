"""The Sebulba runtime: actor threads search on the actor devices, a replicated learner learns.

Data flow (one process per host):

    actors   (selfplay.actors) threads on the actor devices push [T, B] trajectories to a store
    store    the agent's: prioritized windows (MuZero/AlphaZero: SequenceReplay + RateLimiter)
             or a bounded FIFO of trajectories (V-trace: FifoQueue)
    learner  (main thread, `SebulbaRuntime.learn`) sample -> make_batch -> replicated update over
             the learner devices -> update priorities -> publish params

`selfplay.run.run` drives it: the stop limits, logging and checkpoints are the run loop's. One
`StopSignal` ends every loop: SIGINT/SIGTERM, the limits, or an exception in any thread (the
`ThreadGroup` records it, stops the others and re-raises it from `running`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

import muzero
from configs import ExperimentConfig, UsageError
from selfplay.actors import POLL_S, ActorStats, check_actor_envs, start_actors
from selfplay.agent import make_agent
from selfplay.envs import env_spec
from selfplay.lifetime import StopSignal, ThreadGroup
from selfplay.metrics import StageTimer
from selfplay.params import ParameterServer
from selfplay.run import ReplicatedState

__all__ = ["SebulbaRuntime", "split_devices"]


def split_devices(config: ExperimentConfig) -> tuple[list[jax.Device], list[jax.Device]]:
    """Actor and learner devices among the local ones (Sebulba: actors on the first device)."""
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
    if config.learner.batch_size % len(learners):
        raise UsageError(
            f"learner.batch_size {config.learner.batch_size} must divide evenly "
            f"over {len(learners)} learner devices"
        )
    return actors, learners


class SebulbaRuntime(ReplicatedState):
    """Actor threads and a store feeding the learner's update in the main thread."""

    def __init__(self, config: ExperimentConfig, optimizer):
        check_actor_envs(config)
        self.config = config
        self.actor_devices, self.learner_devices = split_devices(config)
        self.spec = env_spec(config.env.name, seed=config.seed, **config.env.options)
        self.agent = make_agent(config, self.spec)
        self.num_actor_threads = len(self.actor_devices) * config.actors.threads_per_device
        self.store = self.agent.make_store(self.num_actor_threads)
        # Donating the state's buffers would free the params the actors hold when both share a
        # device.
        donate = not set(self.actor_devices) & set(self.learner_devices)
        self.update = muzero.make_replicated_update(
            self.agent.loss_fn,
            optimizer,
            self.learner_devices,
            batch_axis=self.agent.batch_axis,
            donate=donate,
            compiler_options=dict(self.agent.compiler_options),
        )
        self.server = ParameterServer(self.actor_devices)
        self.stats = ActorStats()
        self.timer = StageTimer()
        self._step = 0
        self._state: Any = None  # replicated over the learner devices
        self._key: jax.Array | None = None
        self._metrics: dict[str, Any] = {}  # the newest update's, on the device
        self._policy_lag: list[float] = []

    def start(self, state: muzero.TrainState, key: jax.Array) -> None:
        self._step = int(state.step)
        self._key = key
        self.server.publish(state.params, version=self._step)
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
            )
            try:
                yield
            finally:
                stop.set("the learner stopped")  # keeps the run loop's reason if it gave one
                self.store.close()  # wakes actors blocked on a full store

    @property
    def step(self) -> int:
        return self._step

    @property
    def frames(self) -> int:
        return self.stats.frames

    def learn(self) -> bool:
        with self.timer.stage("queue"):
            sample = self.store.sample(self.config.learner.batch_size, timeout=POLL_S)
        if sample is None:
            return False
        with self.timer.stage("transfer"):
            batch, priorities = self.agent.make_batch(sample.batch, sample.weights)
            batch = muzero.shard_batch(batch, self.learner_devices, self.agent.batch_axis)
        with self.timer.stage("update"):
            self._state, self._metrics = self.update(self._state, batch)
            # Waits for the device, so the update's time is its own and not the next stage's.
            jax.block_until_ready(self._metrics)
            self._step += 1
            self.store.update_priorities(sample.indices, priorities)
        versions = np.asarray(sample.batch.policy_version)
        self._policy_lag.append(float(self._step - 1 - versions.mean()))
        if self._step % self.config.learner.publish_every == 0:
            with self.timer.stage("publish"):
                self.server.publish(muzero.unreplicate(self._state).params, version=self._step)
        return True

    def log_values(self) -> dict[str, Any]:
        returns, lengths = self.stats.drain_episodes()
        values = {name: float(value) for name, value in jax.device_get(self._metrics).items()}
        if self._policy_lag:
            values["policy_lag"] = float(np.mean(self._policy_lag))
        self._policy_lag = []
        if returns:
            values["episode_return"] = float(np.mean(returns))
            values["episode_length"] = float(np.mean(lengths))
            values["episodes"] = len(returns)
        values["replay_size"] = self.store.size
        values.update(self.timer.summary("time/learner/", reset=True))
        values.update(self.stats.timer.summary("time/actors/", reset=True))
        return values

    def fill_level(self) -> tuple[int, int]:
        return self.store.fill_level()
