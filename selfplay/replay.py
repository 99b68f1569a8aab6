"""Replay for the Sebulba runtime: prioritised sequences (MuZero), a FIFO queue (V-trace), and a
rate limiter between what actors produce and what the learner consumes.

Both stores implement one interface, `Store`: actors `add` time-major trajectories, the learner
`sample`s batches and writes back `update_priorities`, and `close` wakes every waiting thread at
shutdown. The runtime never asks which store it holds: the agent picks it (`Agent.make_store`).

Every blocking call takes a timeout and, when it passes (or the structure is closed), returns a
value that says so (`None` or `False`) instead of raising: a thread's loop then checks its stop
signal and tries again. Errors in the caller's input raise `ValueError`; a configuration that
cannot work (a capacity too small for one push, a tolerance that would deadlock) raises
`configs.UsageError`.

Window layout: a window of length L = unroll K + n-step + 1 must not cross the end of what has
been stored for its environment, or its n-step targets would be truncated. Instead of padding
with absorbing steps behind a mask (which biases those targets), `SequenceReplay` stores segments
with overlap: when an actor pushes with a `stream` id, the last L - 1 steps of that stream's
previous push are stored again in front of the new steps, so every transition is the start of
exactly one full window and the learner never sees padding. The cost is (L - 1) / T extra memory
for pushes of T steps. A window may still cross an episode end inside a stream; the targets code
masks that with the discount field.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

from configs import ExperimentConfig, UsageError

__all__ = [
    "FifoQueue",
    "HOST_ALIGNMENT",
    "RateLimiter",
    "ReplaySample",
    "SequenceReplay",
    "Store",
    "aligned_empty",
    "make_rate_limiter",
    "make_sequence_replay",
    "steps_per_update_at_ratio",
]


# A CPU device (XLA's CPU client) takes a host array whose data starts on this boundary as it is:
# the device array aliases the host memory. Any other array is copied by a task on the client's
# thread pool, whose threads (one per core) also run the devices' computations, each for its
# whole length: on a busy CPU the copy waits behind the actors' searches and the learner's
# updates (a batch of 1.2 MB: 0.6 s behind one computation on each of 2 devices, 1.3 ms alone;
# BENCHMARKS.md). So both stores hand out samples in memory so aligned.
HOST_ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a `HOST_ALIGNMENT`-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + HOST_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % HOST_ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


class ReplaySample(NamedTuple):
    """A sampled batch: N windows of L steps (replay), or N trajectories side by side (queue)."""

    batch: Any  # the stored pytree with leaves [L, N, ...], time-major
    indices: np.ndarray | None  # [N] int64 ids to pass back to `update_priorities`; None: FIFO
    # [N] float32 importance weights (N_valid * P(i)) ** -beta / max over batch; None: FIFO
    weights: np.ndarray | None


class Store(Protocol):
    """What actors write to and the learner reads from (`SequenceReplay`, `FifoQueue`).

    Every blocking call takes a timeout and returns False / None when it passes or the store is
    closed, so the caller's loop can check its stop signal.
    """

    def add(
        self, trajectory: Any, stream: Hashable | None = None, timeout: float | None = None
    ) -> bool:
        """Stores a [T, B, ...] trajectory of the actor `stream`; False if not stored in time."""
        ...

    def sample(self, batch_size: int, timeout: float | None = None) -> ReplaySample | None:
        """A batch for one update, or None if none could be drawn in time."""
        ...

    def update_priorities(self, indices: np.ndarray | None, priorities: Any) -> None:
        """Writes back a sampled batch's new priorities (a store without priorities ignores it)."""
        ...

    def close(self) -> None:
        """Wakes every waiting thread; later adds and samples return at once."""
        ...

    @property
    def size(self) -> int:
        """Transitions held."""
        ...

    def fill_level(self) -> tuple[int, int]:
        """`(have, need)`: what the learner's first sample waits for, and how much of it is in."""
        ...


class _SumTree:
    """Sums of priorities over a binary tree, with vectorised set and prefix-sum search."""

    def __init__(self, capacity: int) -> None:
        self._size = 1 << max(0, int(capacity - 1).bit_length())
        self._tree = np.zeros(2 * self._size, np.float64)  # node i has children 2i, 2i+1

    @property
    def total(self) -> float:
        return float(self._tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self._tree[self._size + idx]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        # Recomputing each parent from its children (not adding deltas) keeps sums exact.
        nodes = idx + self._size
        self._tree[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def inconsistent_nodes(self) -> np.ndarray:
        """Inner nodes whose sum is not their children's (none, unless a bug wrote it)."""
        inner = np.arange(1, self._size)
        return inner[self._tree[inner] != self._tree[2 * inner] + self._tree[2 * inner + 1]]

    def find(self, targets: np.ndarray) -> np.ndarray:
        """The leaf whose prefix-sum interval holds each target in [0, total)."""
        nodes = np.ones(targets.shape, np.int64)
        targets = targets.copy()
        while nodes[0] < self._size:
            left = self._tree[2 * nodes]
            # Rounding can put a target past the left sum when the right subtree is empty.
            go_right = (targets >= left) & (self._tree[2 * nodes + 1] > 0)
            targets = np.where(go_right, targets - left, targets)
            nodes = 2 * nodes + go_right
        return nodes - self._size


def _leaf_paths(treedef: Any) -> list[str]:
    """The key paths of a structure's leaves ('.observation', ...): a structure saved as text."""
    if treedef is None:
        return []
    example = jax.tree_util.tree_unflatten(treedef, [0] * treedef.num_leaves)
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(example)]


class SequenceReplay:
    """Prioritised replay of fixed-length windows over per-environment sequences.

    `add` takes time-major trajectories (a pytree of arrays with leaves [T, B, ...]) and stores each
    of the B columns as a sequence in one ring buffer of `capacity` transitions (preallocated numpy
    arrays, oldest evicted first). `sample` draws N windows of `sequence_length` steps with
    probability priority ** alpha and gathers them in one vectorised indexing per leaf.

    Thread-safe: one lock guards the buffer; `sample` waits (with a timeout) for data to exist and,
    when a `RateLimiter` is given, for the limiter to allow it; `add` likewise waits on the limiter.
    """

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        alpha: float = 1.0,
        beta: float = 1.0,
        *,
        min_priority: float = 1e-6,
        rate_limiter: RateLimiter | None = None,
        seed: int = 0,
    ) -> None:
        """
        Args:
          capacity: transitions kept in memory, overlap included; the oldest are evicted first.
          sequence_length: L, the steps of each sampled window (unroll K + n-step + 1).
          alpha: priority exponent; 0 samples uniformly.
          beta: importance-weight exponent; 0 gives weights of 1. The attribute may be set
            later (the learner anneals it); each `sample` reads it once.
          min_priority: priorities are clipped below to this so no window becomes unreachable.
          rate_limiter: optional; `add` and `sample` then wait for its permission.
          seed: seed of the sampling generator.
        """
        if sequence_length < 1:
            raise UsageError(f"replay sequence_length must be >= 1, got {sequence_length}")
        if capacity < sequence_length:
            raise UsageError(
                f"replay capacity {capacity} is smaller than one window of {sequence_length} steps"
            )
        if alpha < 0 or beta < 0:
            raise UsageError(f"replay alpha and beta must be >= 0, got {alpha}, {beta}")
        self.capacity = int(capacity)
        self.sequence_length = int(sequence_length)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.min_priority = float(min_priority)
        self.rate_limiter = rate_limiter
        self._rng = np.random.default_rng(seed)
        self._cond = threading.Condition()
        self._treedef = None
        self._storage: list[np.ndarray] = []  # one [capacity, ...] array per leaf
        self._uid = np.full(capacity, -1, np.int64)  # global id of the transition in each slot
        self._is_start = np.zeros(capacity, bool)  # whether a full window starts at the slot
        self._priorities = _SumTree(capacity)  # priority ** alpha of every window start
        self._max_priority = 1.0
        self._num_starts = 0
        self._next_uid = 0  # the slot of a transition is its id modulo capacity
        self._tails: dict[Hashable, list[np.ndarray]] = {}  # last L - 1 steps per stream
        self._closed = False

    @property
    def size(self) -> int:
        """Transitions stored (overlap included)."""
        with self._cond:
            return min(self._next_uid, self.capacity)

    @property
    def num_windows(self) -> int:
        """Windows that can be sampled now."""
        with self._cond:
            return self._num_starts

    def close(self) -> None:
        """Wakes every thread waiting to add or sample; later calls return False / None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.rate_limiter is not None:
            self.rate_limiter.close()

    def fill_level(self) -> tuple[int, int]:
        """`(have, need)` in transitions: inserted so far against the rate limiter's minimum (or
        one window without a limiter)."""
        if self.rate_limiter is not None:
            need = self.rate_limiter.min_size_to_sample
            return min(self.rate_limiter.inserts, need), need
        return min(self.size, self.sequence_length), self.sequence_length

    def add(
        self,
        trajectory: Any,
        stream: Hashable | None = None,
        timeout: float | None = None,
        priorities: np.ndarray | None = None,
    ) -> bool:
        """Stores a time-major trajectory with leaves [T, B, ...].

        Args:
          trajectory: a pytree of arrays [T, B, ...], the same structure and trailing shapes
            for every call; jax arrays are copied to host memory.
          stream: identifies consecutive pushes of the same B environments (e.g. the actor's
            name): its previous last L - 1 steps are prepended so windows cross the push border.
            None stores the push on its own (windows only inside it).
          timeout: seconds to wait for the rate limiter (None waits for ever).
          priorities: optional [T, B] initial priorities of the windows starting at each new
            step (e.g. |search value - n-step return| from the actor); by default the largest
            priority seen so far, so new data is sampled soon.

        Returns:
          True when stored; False when the rate limiter did not allow it within `timeout`, or the
          replay was closed (the trajectory is not stored: try again after checking the stop
          signal).
        """
        leaves, treedef = jax.tree_util.tree_flatten(trajectory)
        leaves = [np.asarray(x) for x in leaves]
        if not leaves or any(x.ndim < 2 for x in leaves):
            raise ValueError("a trajectory needs array leaves with shape [T, B, ...]")
        steps, envs = leaves[0].shape[:2]
        for x in leaves:
            if x.shape[:2] != (steps, envs):
                raise ValueError(
                    f"trajectory leaves disagree on [T, B]: {x.shape[:2]} vs {(steps, envs)}"
                )
        if priorities is None:
            priorities = np.full((steps, envs), np.nan)  # NaN: the max priority when written
        else:
            priorities = np.asarray(priorities, np.float64)
            if priorities.shape != (steps, envs) or np.any(~np.isfinite(priorities)):
                raise ValueError(f"priorities must be finite with shape {(steps, envs)}")
        if stream is None and steps < self.sequence_length:
            raise ValueError(
                f"a push of {steps} steps without a stream holds no window of "
                f"{self.sequence_length} steps: pass stream= or push longer trajectories"
            )
        if self.rate_limiter is not None and not self.rate_limiter.acquire_insert(
            steps * envs, timeout
        ):
            return False
        with self._cond:
            if self._closed:
                return False
            if self._treedef is None:
                self._allocate(leaves, treedef)
            self._check_structure(leaves, treedef)
            leaves.append(priorities)  # travels with the steps through the stream's tail
            tail = self._tails.get(stream) if stream is not None else None
            if tail is not None and tail[0].shape[1] != envs:
                raise ValueError(
                    f"stream {stream!r} pushed {envs} environments after {tail[0].shape[1]}"
                )
            seg_len = steps + (0 if tail is None else tail[0].shape[0])
            if seg_len * envs > self.capacity:
                raise UsageError(
                    f"one push of {envs} sequences of {seg_len} steps exceeds the replay "
                    f"capacity {self.capacity}: raise the capacity"
                )
            if tail is not None:
                leaves = [np.concatenate([t, x]) for t, x in zip(tail, leaves, strict=True)]
            if stream is not None:
                # Copies: the actor may reuse its trajectory buffer after the push.
                keep = min(self.sequence_length - 1, seg_len)
                self._tails[stream] = [x[seg_len - keep :].copy() for x in leaves]
            self._write(leaves[:-1], leaves[-1])
            self._cond.notify_all()
        return True

    def _check_structure(self, leaves: list[np.ndarray], treedef: Any) -> None:
        if treedef != self._treedef:
            raise ValueError(f"trajectory structure {treedef} differs from {self._treedef}")
        for x, s in zip(leaves, self._storage, strict=True):
            if x.shape[2:] != s.shape[1:] or x.dtype != s.dtype:
                raise ValueError(
                    f"trajectory leaf {x.dtype}{list(x.shape[2:])} differs from the stored "
                    f"{s.dtype}{list(s.shape[1:])}"
                )

    def _allocate(self, leaves: list[np.ndarray], treedef: Any) -> None:
        self._treedef = treedef
        self._storage = [np.zeros((self.capacity, *x.shape[2:]), x.dtype) for x in leaves]

    def state(self) -> dict[str, np.ndarray]:
        """The replay's contents as plain arrays (saved without pickle): the stored transitions,
        their window starts and priorities, and the rate limiter's counts. `restore` gives them
        to a replay of the same capacity and window. The streams' last steps are left out: the
        actors of a resumed run begin new sequences."""
        with self._cond:
            slots = np.arange(self.capacity)
            arrays = {f"leaf/{i}": x.copy() for i, x in enumerate(self._storage)}
            arrays.update(
                paths=np.asarray(_leaf_paths(self._treedef), dtype=str),
                uid=self._uid.copy(),
                is_start=self._is_start.copy(),
                priorities=self._priorities.get(slots),  # priority ** alpha of each slot
                counters=np.asarray([self._next_uid, self._num_starts], np.int64),
                max_priority=np.asarray(self._max_priority),
                shape=np.asarray([self.capacity, self.sequence_length], np.int64),
            )
        if self.rate_limiter is not None:
            arrays["rate_limiter"] = self.rate_limiter.counts()
        return arrays

    def restore(self, arrays: dict[str, np.ndarray], treedef: Any) -> None:
        """Takes the contents `state` returned into this empty replay: trajectories of structure
        `treedef`, which must have the saved leaves, in a replay of this capacity and window
        (UsageError otherwise). Pushes after it must have the same structure, as always."""
        capacity, sequence_length = (int(x) for x in arrays["shape"])
        if (capacity, sequence_length) != (self.capacity, self.sequence_length):
            raise UsageError(
                f"the saved replay has capacity {capacity} and windows of {sequence_length} "
                f"steps, this run {self.capacity} and {self.sequence_length}: delete the run's "
                "replay/ folder to start with an empty one"
            )
        saved_paths = [str(p) for p in arrays["paths"]]
        if _leaf_paths(treedef) != saved_paths:
            raise UsageError(
                f"the saved replay holds trajectories with leaves {saved_paths}, this run's "
                f"have {_leaf_paths(treedef)}: delete the run's replay/ folder to start empty"
            )
        leaves = sorted((k for k in arrays if k.startswith("leaf/")), key=lambda k: int(k[5:]))
        with self._cond:
            if self._next_uid:
                raise ValueError("restore needs an empty replay")
            self._treedef = treedef
            self._storage = [np.array(arrays[k]) for k in leaves]
            self._uid = np.array(arrays["uid"], np.int64)
            self._is_start = np.array(arrays["is_start"], bool)
            self._priorities.set(np.arange(self.capacity), np.asarray(arrays["priorities"]))
            self._next_uid, self._num_starts = (int(x) for x in arrays["counters"])
            self._max_priority = float(arrays["max_priority"])
        if self.rate_limiter is not None and "rate_limiter" in arrays:
            self.rate_limiter.set_counts(arrays["rate_limiter"])

    def _write(self, leaves: list[np.ndarray], priorities: np.ndarray) -> None:
        seg_len, envs = leaves[0].shape[:2]  # segment = stream tail + new steps
        count = seg_len * envs
        slots = (self._next_uid + np.arange(count)) % self.capacity  # [B * S]
        for store, x in zip(self._storage, leaves, strict=True):
            # [S, B, ...] -> [B, S, ...] so that each environment's sequence is contiguous.
            store[slots] = np.swapaxes(x, 0, 1).reshape(count, *x.shape[2:])
        is_start = np.tile(np.arange(seg_len) <= seg_len - self.sequence_length, envs)  # [B * S]
        self._num_starts += int(is_start.sum()) - int(self._is_start[slots].sum())
        self._is_start[slots] = is_start
        self._uid[slots] = self._next_uid + np.arange(count)
        self._next_uid += count
        priorities = np.swapaxes(priorities, 0, 1).reshape(count)  # [B * S]
        given = ~np.isnan(priorities)
        priorities = np.maximum(np.where(given, priorities, self._max_priority), self.min_priority)
        if np.any(given & is_start):
            self._max_priority = max(self._max_priority, float(priorities[given & is_start].max()))
        self._priorities.set(slots, np.where(is_start, priorities**self.alpha, 0.0))

    def sample(
        self, batch_size: int, timeout: float | None = None, beta: float | None = None
    ) -> ReplaySample | None:
        """Draws `batch_size` windows with probability priority ** alpha.

        Waits up to `timeout` seconds (None: for ever) for a window to exist and for the rate
        limiter, if any, to allow `batch_size` more samples; returns None if either does not
        happen in time (or the replay is closed). `beta` overrides the exponent for annealing.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            ready = self._cond.wait_for(lambda: self._closed or self._num_starts > 0, timeout)
            if not ready or self._closed:
                return None
        if self.rate_limiter is not None:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.rate_limiter.acquire_sample(batch_size, remaining):
                return None
        beta = self.beta if beta is None else beta
        with self._cond:
            total = self._priorities.total
            # Stratified: one uniform draw per equal slice of the total lowers sampling variance.
            targets = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
            slots = self._priorities.find(np.minimum(targets, np.nextafter(total, 0)))  # [N]
            probs = self._priorities.get(slots) / total  # [N]
            offsets = np.arange(self.sequence_length)  # [L]
            window = (slots[None, :] + offsets[:, None]) % self.capacity  # [L, N]
            leaves = [_gather(store, window) for store in self._storage]  # [L, N, ...]
            indices = self._uid[slots].copy()
            num_starts = self._num_starts
        weights = (num_starts * probs) ** -beta
        weights = (weights / weights.max()).astype(np.float32)
        batch = jax.tree_util.tree_unflatten(self._treedef, leaves)
        return ReplaySample(batch, indices, weights)

    def update_priorities(self, indices: np.ndarray | None, priorities: Any) -> None:
        """Sets the priorities of sampled windows (e.g. |value target - predicted value|).

        Indices whose transitions were evicted since they were sampled are skipped.
        """
        if indices is None:
            raise ValueError("update_priorities needs the sample's indices")
        indices = np.asarray(indices, np.int64).reshape(-1)
        priorities = np.maximum(np.asarray(priorities, np.float64).reshape(-1), self.min_priority)
        if indices.shape != priorities.shape:
            raise ValueError(f"{indices.shape[0]} indices but {priorities.shape[0]} priorities")
        if not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite")
        with self._cond:
            slots = indices % self.capacity
            live = (self._uid[slots] == indices) & self._is_start[slots]
            if live.any():
                self._max_priority = max(self._max_priority, float(priorities[live].max()))
                self._priorities.set(slots[live], priorities[live] ** self.alpha)

    def check_consistency(self) -> None:
        """Raises ValueError unless the sum tree agrees with itself and with the stored windows:
        every sum is its children's, and exactly the slots where a window starts have a priority
        (the learner writes priorities back late, after the writes of newer data)."""
        with self._cond:
            bad = self._priorities.inconsistent_nodes()
            slots = np.arange(self.capacity)
            priced = self._priorities.get(slots) > 0
            wrong = slots[priced != self._is_start]
        if bad.size or wrong.size:
            raise ValueError(
                f"sum tree inconsistent: {bad.size} sums differ from their children's "
                f"(e.g. nodes {bad[:5].tolist()}); {wrong.size} slots priced where no window "
                f"starts, or not priced where one does (e.g. {wrong[:5].tolist()})"
            )


def _gather(store: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """`store[slots]` in aligned memory (`aligned_empty`); every slot is in range."""
    out = aligned_empty(slots.shape + store.shape[1:], store.dtype)
    return np.take(store, slots, axis=0, out=out, mode="clip")


def _concatenate(arrays: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """`np.concatenate(arrays, axis)` in aligned memory (`aligned_empty`)."""
    shape = list(arrays[0].shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    out = aligned_empty(tuple(shape), np.result_type(*arrays))
    return np.concatenate(arrays, axis=axis, out=out)


class RateLimiter:
    """Keeps samples drawn per item inserted near `samples_per_insert`, like Reverb's
    SampleToInsertRatio: actors block when too far ahead, the learner blocks when too far ahead.

    Counts are in items: transitions for inserts, windows for samples. Sampling waits until
    `min_size_to_sample` items were inserted. After that, inserts * samples_per_insert - samples
    is kept within `error_buffer` of min_size_to_sample * samples_per_insert. With
    `samples_per_insert=None` only the minimum size is enforced.
    """

    def __init__(
        self,
        min_size_to_sample: int,
        samples_per_insert: float | None = None,
        error_buffer: float | None = None,
    ) -> None:
        """
        Args:
          min_size_to_sample: items to insert before the first sample.
          samples_per_insert: target ratio of sampled to inserted items; None for no limit.
          error_buffer: the tolerance around the target, in sampled items; it must be at least
            one insert's worth (items * samples_per_insert) and one sample batch, or the two sides
            could wait on each other for ever.
        """
        if min_size_to_sample < 1:
            raise UsageError(f"min_size_to_sample must be >= 1, got {min_size_to_sample}")
        if samples_per_insert is not None:
            if samples_per_insert <= 0:
                raise UsageError(f"samples_per_insert must be > 0, got {samples_per_insert}")
            if error_buffer is None or error_buffer <= 0:
                raise UsageError("a samples_per_insert ratio needs a positive error_buffer")
        self.min_size_to_sample = int(min_size_to_sample)
        self.samples_per_insert = samples_per_insert
        self.error_buffer = error_buffer
        self._cond = threading.Condition()
        self._inserts = 0
        self._samples = 0
        self._closed = False
        # Over several processes (`share_job`): the others' inserts as last shared, and how many
        # processes there are. The ratio is then the job's (see `share_job`).
        self._peer_inserts = 0
        self._processes = 1

    @property
    def inserts(self) -> int:
        with self._cond:
            return self._inserts

    @property
    def samples(self) -> int:
        with self._cond:
            return self._samples

    def counts(self) -> np.ndarray:
        """[2] int64: the inserts and samples so far (what a saved replay carries)."""
        with self._cond:
            return np.asarray([self._inserts, self._samples], np.int64)

    def set_counts(self, counts: np.ndarray) -> None:
        """Goes on from saved `counts`: a restored replay keeps its ratio of samples to inserts."""
        with self._cond:
            self._inserts, self._samples = (int(x) for x in counts)
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def close(self) -> None:
        """Wakes every waiting thread; later calls return False at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def share_job(self, inserts_by_process: Sequence[int], index: int) -> None:
        """Makes the ratio the job's: every process's items inserted so far (this one's is
        `index`), as the processes last shared them. The processes' learners sample in lockstep,
        the same count each; a ratio kept per process would hold every process's actors to the
        slowest one's pace (its learner can only go as fast as the job's). Over the job, the
        ratio counts the mean of the processes' inserts: a faster process's actors insert more
        of the job's share. Each process still waits for its own `min_size_to_sample`."""
        with self._cond:
            self._peer_inserts = int(sum(inserts_by_process)) - int(inserts_by_process[index])
            self._processes = len(inserts_by_process)
            self._cond.notify_all()

    def _ratio_inserts(self, n: int = 0) -> float:
        """The inserts the ratio counts (after `n` more here): this process's, or over several
        processes the mean of theirs."""
        return (self._inserts + n + self._peer_inserts) / self._processes

    def _can_insert(self, n: int) -> bool:
        if self._inserts < self.min_size_to_sample or self.samples_per_insert is None:
            return True
        spi = self.samples_per_insert
        return self._ratio_inserts(n) * spi - self._samples <= (
            self.min_size_to_sample * spi + self.error_buffer
        )

    def _can_sample(self, n: int) -> bool:
        if self._inserts < self.min_size_to_sample:
            return False
        if self.samples_per_insert is None:
            return True
        spi = self.samples_per_insert
        return self._ratio_inserts() * spi - (self._samples + n) >= (
            self.min_size_to_sample * spi - self.error_buffer
        )

    def acquire_insert(self, n: int, timeout: float | None) -> bool:
        """Waits until `n` items may be inserted and counts them; False on timeout or close."""
        if self.samples_per_insert is not None and n * self.samples_per_insert > self.error_buffer:
            raise UsageError(
                f"an insert of {n} items at {self.samples_per_insert} samples per insert exceeds "
                f"the rate limiter's error_buffer {self.error_buffer}: raise it"
            )
        with self._cond:
            ok = self._cond.wait_for(lambda: self._closed or self._can_insert(n), timeout)
            if not ok or self._closed:
                return False
            self._inserts += n
            self._cond.notify_all()
            return True

    def acquire_sample(self, n: int, timeout: float | None) -> bool:
        """Waits until `n` items may be sampled and counts them; False on timeout or close."""
        if self.samples_per_insert is not None and n > self.error_buffer:
            raise UsageError(
                f"a sample batch of {n} exceeds the rate limiter's error_buffer "
                f"{self.error_buffer}: raise it"
            )
        with self._cond:
            ok = self._cond.wait_for(lambda: self._closed or self._can_sample(n), timeout)
            if not ok or self._closed:
                return False
            self._samples += n
            self._cond.notify_all()
            return True


class FifoQueue:
    """A bounded first-in first-out queue of trajectories for V-trace, closable for shutdown.

    `put` (and `add`) blocks while full, which is the backpressure that keeps actors from running
    ahead of the learner; `close` wakes every blocked thread. `sample(n)` hands out the n oldest
    trajectories [T, B_i] side by side as one [T, sum B_i] batch, each exactly once.
    """

    def __init__(self, maxsize: int) -> None:
        """`maxsize`: items held at most (each item is one actor push)."""
        if maxsize < 1:
            raise UsageError(f"queue maxsize must be >= 1, got {maxsize}")
        self.maxsize = int(maxsize)
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        # Items a `sample` took before its timeout: the next sample starts with them, so a batch
        # larger than the queue still fills and no trajectory is dropped.
        self._taken: list[Any] = []
        self._batch_size = 1  # the learner's batch, known from its first `sample`

    def put(self, item: Any, timeout: float | None) -> bool:
        """Appends `item`, waiting while full; False on timeout or when closed (not stored)."""
        if item is None:
            raise ValueError("None cannot be queued: get() returns None on timeout")
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._closed or len(self._items) < self.maxsize, timeout
            )
            if not ok or self._closed:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self, timeout: float | None) -> Any | None:
        """The oldest item, waiting while empty; None on timeout, or when closed and empty."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._closed or bool(self._items), timeout)
            if not ok or not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def add(
        self, trajectory: Any, stream: Hashable | None = None, timeout: float | None = None
    ) -> bool:
        """`Store.add`: `put` (the stream does not matter: trajectories are used whole)."""
        del stream
        return self.put(trajectory, timeout)

    def sample(self, batch_size: int, timeout: float | None = None) -> ReplaySample | None:
        """The `batch_size` oldest trajectories [T, B_i] as one [T, sum B_i] batch, or None if
        they did not all arrive within `timeout` (those that did wait for the next call)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._batch_size = batch_size
        while len(self._taken) < batch_size:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            item = self.get(remaining)
            if item is None:
                return None
            self._taken.append(item)
        items, self._taken = self._taken, []
        batch = jax.tree.map(lambda *xs: _concatenate(xs, axis=1), *items)
        return ReplaySample(batch, None, None)

    def update_priorities(self, indices: np.ndarray | None, priorities: Any) -> None:
        """No priorities in a FIFO queue: every trajectory is used once, in order."""
        del indices, priorities

    def close(self) -> None:
        """Wakes every waiting thread; puts fail from now on, gets drain what is left."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def qsize(self) -> int:
        with self._cond:
            return len(self._items)

    def fill_level(self) -> tuple[int, int]:
        """`(have, need)` in trajectories: queued (or taken by a waiting sample) against one
        learner batch (the learner waits for nothing else: `need` is set by its first sample)."""
        with self._cond:
            have = len(self._items) + len(self._taken)
        return min(have, self._batch_size), self._batch_size

    @property
    def size(self) -> int:
        """Transitions queued (T x B of every trajectory held)."""
        with self._cond:
            items = list(self._items)
        return sum(int(np.prod(np.shape(jax.tree.leaves(item)[0])[:2])) for item in items)


def steps_per_update_at_ratio(config: ExperimentConfig) -> float | None:
    """Agent steps the actors insert per learner update once the rate limiter of
    `make_sequence_replay` holds its ratio (a long run; the first `error_buffer` of samples or
    inserts either side runs free): `learner.batch_size / replay.samples_per_insert`. Over
    several processes it is the job's (the batch is global). None where no ratio is kept: none
    set, V-trace's queue, Anakin (its iteration acts and learns in fixed proportion)."""
    spi = config.replay.samples_per_insert
    if not spi or config.mode == "vtrace" or config.runtime != "sebulba":
        return None
    return config.learner.batch_size / spi


def make_sequence_replay(
    config: ExperimentConfig, window_length: int, num_streams: int
) -> SequenceReplay:
    """The prioritised replay of a MuZero / AlphaZero run with `num_streams` actor threads, its
    rate limiter sized so that neither side can starve the other (`make_rate_limiter`)."""
    return SequenceReplay(
        config.replay.capacity,
        window_length,
        alpha=config.replay.priority_alpha,
        beta=config.replay.priority_beta,
        rate_limiter=make_rate_limiter(config, window_length, num_streams),
        seed=config.seed,
    )


def make_rate_limiter(
    config: ExperimentConfig, window_length: int, num_streams: int
) -> RateLimiter:
    """The rate limiter between `num_streams` actor threads and the learner of a replay of
    windows of `window_length` steps: `replay.samples_per_insert`, with room for every actor's
    push and a learner batch, and a first sample once some stream holds a window."""
    per_push = config.actors.unroll_length * config.actors.envs_per_thread
    spi = config.replay.samples_per_insert or None
    error_buffer = None
    if spi:
        # Room for every actor's push and a learner batch, so neither side can starve the other.
        error_buffer = max(per_push * spi, config.learner.batch_size) * (num_streams + 1)
    # A window spans several pushes of one actor's stream. The learner starts once the actors
    # together pushed that many each, so some stream holds a window: a smaller start could let
    # the limiter stop the actors before any window exists while the learner waits for one.
    pushes_per_window = -(-window_length // config.actors.unroll_length)  # ceil
    min_size = max(config.replay.min_size, pushes_per_window * per_push * num_streams)
    return RateLimiter(min_size, spi, error_buffer)
