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
from typing import Any, NamedTuple

import jax
import numpy as np

import muzero
from selfplay.agent import Agent
from selfplay.lifetime import StopSignal
from selfplay.metrics import StageTimer
from selfplay.replay import HOST_ALIGNMENT, Store, aligned_empty

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
    ):
        self.store, self.agent, self.batch_size, self.devices = store, agent, batch_size, devices
        # Targets are built on this process's first learner device. `make_batch` over host arrays
        # would run on the default device, which is Sebulba's actor device: each batch then
        # waited behind the actors' search calls (hundreds of ms on a CPU).
        self.build_device = next(d for d in devices if d.process_index == jax.process_index())
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
            host = _aliasable((sample.batch, sample.weights))
            window, weights = jax.device_put(host, self.build_device)
            batch, priorities = self.agent.make_batch(window, weights, None)
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


def _aliasable(tree: Any) -> Any:
    """`tree` with each numpy leaf as an array a CPU device takes without copying it: aligned
    (`selfplay.replay.HOST_ALIGNMENT`), C-contiguous and already of the dtype JAX gives it. The
    stores' samples are so; other leaves (the weights, a dtype JAX narrows) are copied here, not
    left to a copy that would wait for a thread of XLA's CPU client behind the running searches
    and updates. The device array then shares the sample's memory, which nothing writes to after
    it is drawn. Other devices copy either way."""

    def aliasable(x: Any) -> Any:
        if not isinstance(x, np.ndarray):
            return x
        dtype = jax.dtypes.canonicalize_dtype(x.dtype)
        aligned = x.ctypes.data % HOST_ALIGNMENT == 0 and x.flags.c_contiguous
        if aligned and x.dtype == dtype:
            return x
        out = aligned_empty(x.shape, dtype)
        np.copyto(out, x, casting="unsafe")
        return out

    return jax.tree.map(aliasable, tree)


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
