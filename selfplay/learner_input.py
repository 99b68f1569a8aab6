"""Sebulba's learner input pipeline: batches sampled and put on the learner's device ahead of
the update, their targets built there in the order of the updates, and updates left in flight, so
that neither the devices nor the host wait for each other while the store has data.

    thread "learner-input"    store.sample (gathered into aligned host memory) -> to this
                              process's first learner device (dispatched; no copy on a CPU) ->
                              a queue of `learner.prefetch` samples
    main thread (learn)       takes a sample -> dispatches its build (agent.make_batch on that
                              device, shard_batch over the learner devices) and then the update,
                              neither waited for -> once more than `prefetch` updates are in
                              flight, waits for the oldest and writes its priorities back

The build is dispatched by the thread that dispatches the updates, just before its own update. A
device runs the work queued on it in the order it was dispatched (XLA's CPU client as a GPU
stream): a build dispatched by the input thread landed behind the updates in flight, so its batch
was ready only when they were done, and then reached the learner through two threads woken in
turn (the input thread to queue it, the learner to take it). On a loaded 2-core machine the
learner waited for it 20-37% of its time while its device never ran short of updates
(BENCHMARKS.md). Built here, the batch needs no host wait at all, and its build sees the
learner's newest state.

Where the learner's wall time goes (`time/learner/*`): `wait` for a sample (the store or the
input thread is behind), `build` and `dispatch` (of the batch's build and of the update), `device`
blocked on the oldest update in flight (the devices are behind: per update, `build` + `dispatch`
+ `device` is then a build's and an update's device time), `publish` of parameters to the actors
(an asynchronous copy: it does not wait for the update that produced them), and over several
processes `agree` (the run loop's agreement of each round). `learner_wait_share` is `wait`'s
share of the learner's wall time.
A log line reads the metrics of the newest finished update (`InFlight.finished_metrics`), never
waiting for those in flight.
The input thread's own stages are `time/input/{sample,transfer}` (the copy's dispatch).

Priorities: the priority a batch writes back is computed when the batch is built, from the
values the actors' search stored and the targets; it reaches the replay when the batch's update
finishes, up to `2 * prefetch + 2` updates after it was sampled (the queue, the sample the
learner holds, its own update and the `prefetch` dispatched after it). Until then the replay
samples those windows at their old priority; windows evicted meanwhile are skipped
(`SequenceReplay.update_priorities`).
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
from selfplay.lifetime import StopSignal, check_finite
from selfplay.metrics import StageTimer
from selfplay.replay import HOST_ALIGNMENT, Store, aligned_empty

__all__ = ["InFlight", "LearnerInput", "Prefetched", "Sampled"]


class Sampled(NamedTuple):
    """One sample of the store, on its way to (or on) the device that builds its batch."""

    window: Any  # the sampled pytree, leaves [L, N, ...] (V-trace: [T + 1, N, ...])
    weights: Any  # [N] importance weights, or None
    indices: np.ndarray | None  # the store's ids of the sampled items (None: a FIFO queue)
    mean_policy_version: float  # of the parameters that acted in the sample


class Prefetched(NamedTuple):
    """One batch, built (or being built) on the learner devices."""

    batch: Any  # the loss's batch, sharded over the learner devices
    indices: np.ndarray | None  # the store's ids of the sampled items (None: a FIFO queue)
    priorities: Any  # [N] their new priorities (on a device), or None
    mean_policy_version: float  # of the parameters that acted in the sample


class LearnerInput:
    """The input thread's loop (`run`), the learner's end of its queue (`get`) and the batch's
    build (`build`, in the learner's thread)."""

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
        self._ready: queue.Queue[Sampled] = queue.Queue(maxsize=max(prefetch, 1))

    def sample(self, timeout: float) -> Sampled | None:
        """Samples one batch and dispatches its copy to the build device (not waited for); None
        if the store had none in `timeout` seconds."""
        with self.timer.stage("sample"):
            sample = self.store.sample(self.batch_size, timeout=timeout)
        if sample is None:
            return None
        with self.timer.stage("transfer"):
            host = _aliasable((sample.batch, sample.weights))
            window, weights = jax.device_put(host, self.build_device)
            versions = float(np.mean(sample.batch.policy_version))
        return Sampled(window, weights, sample.indices, versions)

    def build(self, sampled: Sampled) -> Prefetched:
        """Dispatches the batch's build on the build device and its spread over the learner
        devices, without waiting: called by the thread that dispatches the updates, just before
        the update that reads it, so that the device runs the two in that order."""
        context = self.context() if self.context is not None else None
        batch, priorities = self.agent.make_batch(sampled.window, sampled.weights, context)
        batch = muzero.shard_batch(batch, self.devices, self.agent.batch_axis)
        return Prefetched(batch, sampled.indices, priorities, sampled.mean_policy_version)

    def run(self, stop: StopSignal) -> None:
        """The input thread: fills the queue with samples until `stop`. It never waits for a
        device: the build that reads a sample waits there for its copy (on a CPU there is none,
        the device aliases the sample)."""
        while not stop.is_set():
            item = self.sample(self.poll_s)
            while item is not None and not stop.is_set():
                try:
                    self._ready.put(item, timeout=self.poll_s)
                    item = None
                except queue.Full:
                    continue

    def get(self, timeout: float) -> Sampled | None:
        """The next sample, or None if none was ready within `timeout` seconds."""
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
            priorities = np.asarray(item.priorities)
            check_finite("an update's priorities", [priorities])  # its loss, its parameters
            self.store.update_priorities(item.indices, priorities)
