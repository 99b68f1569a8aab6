"""Sebulba's learner input pipeline: batches sampled, built and put on the learner devices ahead
of the update, and updates left in flight, so that neither the devices nor the host wait for each
other while the store has data.

    thread "learner-input"    store.sample -> to this process's first learner device ->
                              agent.make_batch there -> shard_batch (dispatched; the next
                              batch is sampled and dispatched before waiting for this one) ->
                              ready on the learner devices -> a queue of `learner.prefetch`
                              batches
    main thread (learn)       takes a batch -> dispatches the update (no wait) -> once more than
                              `prefetch` updates are in flight, waits for the oldest and writes
                              its priorities back to the replay

Where the learner's wall time goes (`time/learner/*`): `wait` for a batch (the store or the
input thread is behind), `dispatch` of the update, `device` blocked on the oldest update in
flight (the devices are behind: per update, `dispatch` + `device` is then the update's device
time), `publish` of parameters to the actors (an asynchronous copy: it does not wait for the
update that produced them), and over several processes `agree` (the run loop's agreement of
each round). `learner_wait_share` is `wait`'s share of the learner's wall time.
A log line reads the metrics of the newest finished update (`InFlight.finished_metrics`), never
waiting for those in flight.
The input thread's own stages are `time/input/{sample,build,transfer}`.

Priorities: the priority a batch writes back is computed when the batch is built, from the
values the actors' search stored and the targets; it reaches the replay when the batch's update
finishes, up to `2 * prefetch + 3` updates after it was sampled (the build dispatched before it,
the queue, the batch the learner holds, its own update and the `prefetch` dispatched after it).
Until then the replay samples those windows at their old priority; windows evicted meanwhile are
skipped (`SequenceReplay.update_priorities`).
"""

from __future__ import annotations

import collections
import queue
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

import muzero
from selfplay.agent import Agent
from selfplay.lifetime import StopSignal
from selfplay.metrics import StageTimer
from selfplay.replay import Store

__all__ = ["InFlight", "LearnerInput", "Prefetched"]

BUILDS_IN_FLIGHT = 2  # batches the input thread dispatches before waiting for the oldest


class Prefetched(NamedTuple):
    """One batch, ready on the learner devices."""

    batch: Any  # the loss's batch, sharded over the learner devices
    indices: np.ndarray | None  # the store's ids of the sampled items (None: a FIFO queue)
    priorities: Any  # [N] their new priorities (on a device), or None
    mean_policy_version: float  # of the parameters that acted in the sample


class LearnerInput:
    """The input thread's loop (`run`) and the learner's end of its queue (`get`)."""

    def __init__(
        self,
        store: Store,
        agent: Agent,
        batch_size: int,
        devices: list[jax.Device],
        prefetch: int,
        poll_s: float,
        *,
        build_device: jax.Device | None = None,
        context: Callable[[], muzero.BatchContext] | None = None,
    ):
        """`context` gives each batch what reanalyse reads (the newest parameters on
        `build_device`, a fresh key, the learner's step); None where the agent reads none."""
        self.store, self.agent, self.batch_size, self.devices = store, agent, batch_size, devices
        # Targets are built on this process's first learner device unless reanalyse's searches
        # go elsewhere. `make_batch` over host arrays would run on the default device, which is
        # Sebulba's actor device: each batch then waited behind the actors' search calls
        # (hundreds of ms on a CPU).
        self.build_device = build_device or next(
            d for d in devices if d.process_index == jax.process_index()
        )
        self.context = context
        self.poll_s = poll_s
        self.timer = StageTimer()
        self._ready: queue.Queue[Prefetched] = queue.Queue(maxsize=max(prefetch, 1))

    def next_batch(self, timeout: float) -> Prefetched | None:
        """Samples and builds one batch in the calling thread, ready on the learner devices; None
        if the store had none in `timeout` seconds."""
        item = self.dispatch_batch(timeout)
        return None if item is None else self.wait_ready(item)

    def dispatch_batch(self, timeout: float) -> Prefetched | None:
        """Samples one batch and dispatches its build and transfer without waiting for them; None
        if the store had none in `timeout` seconds."""
        with self.timer.stage("sample"):
            sample = self.store.sample(self.batch_size, timeout=timeout)
        if sample is None:
            return None
        with self.timer.stage("build"):
            window, weights = jax.device_put((sample.batch, sample.weights), self.build_device)
            context = self.context() if self.context is not None else None
            batch, priorities = self.agent.make_batch(window, weights, context)
            batch = muzero.shard_batch(batch, self.devices, self.agent.batch_axis)
            versions = float(np.mean(sample.batch.policy_version))
        return Prefetched(batch, sample.indices, priorities, versions)

    def wait_ready(self, item: Prefetched) -> Prefetched:
        """Waits until a dispatched batch is on the learner devices."""
        with self.timer.stage("transfer"):
            # Here, not in the learner: the update finds its batch on its devices.
            jax.block_until_ready(item.batch)
        return item

    def run(self, stop: StopSignal) -> None:
        """The input thread: fills the queue until `stop`.

        Up to `BUILDS_IN_FLIGHT` batches are dispatched before the oldest is waited for: the
        next batch is sampled and its build queued on the device while the previous one's runs,
        so the thread's pace is not one batch per build's latency (sampling does not wait for the
        store while a build is pending)."""
        pending: collections.deque[Prefetched] = collections.deque()
        while not stop.is_set():
            if len(pending) < BUILDS_IN_FLIGHT:
                item = self.dispatch_batch(0.0 if pending else self.poll_s)
                if item is not None:
                    pending.append(item)
                    continue
                if not pending:
                    continue
            ready: Prefetched | None = self.wait_ready(pending.popleft())
            while ready is not None and not stop.is_set():
                try:
                    self._ready.put(ready, timeout=self.poll_s)
                    ready = None
                except queue.Full:
                    continue

    def get(self, timeout: float) -> Prefetched | None:
        """The next batch, or None if none was ready within `timeout` seconds."""
        try:
            return self._ready.get(timeout=timeout)
        except queue.Empty:
            return None


class InFlight:
    """Updates dispatched and not yet waited for, oldest first: their metrics and their batch's
    priorities, written back to the store when the update is done."""

    def __init__(self, store: Store, limit: int):
        self.store, self.limit = store, limit
        self._updates: collections.deque[tuple[Any, Prefetched]] = collections.deque()
        # The metrics of the newest update waited for: what a log line reads, as fetching the
        # newest dispatched update's would wait for every update in flight (a bubble in the
        # device's stream of updates at each line).
        self.finished_metrics: Any = None

    def __len__(self) -> int:
        return len(self._updates)

    def add(self, metrics: Any, item: Prefetched, timer: StageTimer) -> None:
        """Records a dispatched update; waits for the oldest while more than `limit` are out."""
        self._updates.append((metrics, item))
        while len(self._updates) > self.limit:
            self._finish_oldest(timer)

    def finish_all(self, timer: StageTimer) -> None:
        while self._updates:
            self._finish_oldest(timer)

    def _finish_oldest(self, timer: StageTimer) -> None:
        metrics, item = self._updates.popleft()
        started = time.perf_counter()
        jax.block_until_ready(metrics)
        timer.add("device", time.perf_counter() - started)
        self.finished_metrics = metrics
        if item.priorities is not None:
            self.store.update_priorities(item.indices, np.asarray(item.priorities))
