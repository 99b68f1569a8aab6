"""Replay: windows are true sub-sequences, priorities steer sampling, limits block and wake."""

import threading

import jax
import numpy as np
import pytest

from configs import UsageError, load_config
from selfplay.replay import FifoQueue, RateLimiter, SequenceReplay, steps_per_update_at_ratio


def _trajectory(steps: int, envs: int, start: int = 0) -> dict:
    """Leaves [T, B, ...] whose values encode (env, time) so windows can be checked."""
    t = np.arange(start, start + steps)[:, None]
    b = np.arange(envs)[None, :]
    code = (1000 * b + t).astype(np.int64)  # [T, B]
    return {
        "code": code,
        "obs": np.broadcast_to(code[..., None], (steps, envs, 3)).astype(np.float32),  # [T, B, 3]
        "nested": {"discount": np.ones((steps, envs), np.float32)},
    }


def _assert_windows_are_sequences(batch: dict, length: int, size: int) -> None:
    code = batch["code"]  # [L, N]
    assert code.shape == (length, size)
    assert batch["obs"].shape == (length, size, 3)
    assert batch["nested"]["discount"].shape == (length, size)
    np.testing.assert_array_equal(batch["obs"][..., 0], code)
    # One environment per window, consecutive times.
    np.testing.assert_array_equal(np.diff(code, axis=0), np.ones((length - 1, size)))
    np.testing.assert_array_equal(code[0] // 1000, code[-1] // 1000)


def test_windows_stay_inside_one_push_without_a_stream():
    replay = SequenceReplay(capacity=100, sequence_length=3)
    replay.add(_trajectory(5, 2))
    assert replay.size == 10
    assert replay.num_windows == (5 - 3 + 1) * 2
    sample = replay.sample(64, timeout=1.0)
    _assert_windows_are_sequences(sample.batch, 3, 64)
    starts = set(sample.batch["code"][0].tolist())
    assert starts == {0, 1, 2, 1000, 1001, 1002}  # every start position reachable
    np.testing.assert_allclose(sample.weights, 1.0)  # equal priorities: equal weights


def test_a_stream_overlaps_pushes_so_every_transition_starts_a_window():
    replay = SequenceReplay(capacity=1000, sequence_length=4)
    for i in range(3):
        replay.add(_trajectory(5, 2, start=5 * i), stream="actor-0")
    # The last L - 1 steps of the stream wait for the next push.
    assert replay.num_windows == (15 - 3) * 2
    sample = replay.sample(256, timeout=1.0)
    _assert_windows_are_sequences(sample.batch, 4, 256)
    starts = set(sample.batch["code"][0].tolist())
    assert starts == {b * 1000 + t for b in range(2) for t in range(12)}


def test_short_pushes_in_a_stream_still_form_windows():
    replay = SequenceReplay(capacity=1000, sequence_length=5)
    for i in range(6):
        replay.add(_trajectory(2, 1, start=2 * i), stream=7)
    assert replay.num_windows == 12 - 4
    _assert_windows_are_sequences(replay.sample(32, timeout=1.0).batch, 5, 32)


def test_oldest_transitions_are_evicted_and_stale_priority_updates_skipped():
    replay = SequenceReplay(capacity=24, sequence_length=2, alpha=1.0)
    replay.add(_trajectory(4, 3, start=0))
    old = replay.sample(8, timeout=1.0)
    for i in range(1, 5):
        replay.add(_trajectory(4, 3, start=100 * i))
    assert replay.size == 24
    assert replay.num_windows == 2 * 3 * 3  # the two newest pushes: 3 windows per env each
    sample = replay.sample(128, timeout=1.0)
    _assert_windows_are_sequences(sample.batch, 2, 128)
    assert sample.batch["code"].min() % 1000 >= 300
    replay.update_priorities(old.indices, np.full(8, 1e6))  # all evicted: no effect
    np.testing.assert_allclose(replay.sample(64, timeout=1.0).weights, 1.0)


def test_sampling_follows_priorities_and_weights_correct_for_it():
    alpha, beta = 0.5, 1.0
    replay = SequenceReplay(capacity=100, sequence_length=1, alpha=alpha, beta=beta, seed=3)
    replay.add(_trajectory(4, 1))  # windows are single steps 0..3
    first = replay.sample(4, timeout=1.0)  # stratified: each of the 4 equal slices once
    index_of = dict(zip(first.batch["code"][0].tolist(), first.indices.tolist(), strict=True))
    priorities = np.array([1.0, 4.0, 9.0, 16.0])
    replay.update_priorities(np.array([index_of[t] for t in range(4)]), priorities)
    expected = priorities**alpha / np.sum(priorities**alpha)  # [1, 2, 3, 4] / 10
    sample = replay.sample(4000, timeout=1.0)
    counts = np.bincount(sample.batch["code"][0], minlength=4) / 4000
    np.testing.assert_allclose(counts, expected, atol=0.01)
    weights = (4 * expected) ** -beta
    weights /= weights.max()
    np.testing.assert_allclose(sample.weights, weights[sample.batch["code"][0]], rtol=1e-5)


def test_bad_input_is_refused():
    with pytest.raises(UsageError, match="capacity"):
        SequenceReplay(capacity=3, sequence_length=4)
    replay = SequenceReplay(capacity=20, sequence_length=2)
    with pytest.raises(UsageError, match="exceeds the replay capacity"):
        replay.add(_trajectory(8, 3))
    replay.add(_trajectory(4, 2))
    with pytest.raises(ValueError, match="differs"):
        replay.add({"code": np.zeros((4, 2), np.int64)})
    bad = _trajectory(4, 2)
    bad["obs"] = bad["obs"][..., :2]
    with pytest.raises(ValueError, match="differs"):
        replay.add(bad)
    with pytest.raises(ValueError, match="no window"):
        replay.add(_trajectory(1, 2))
    with pytest.raises(ValueError, match="priorities"):
        replay.update_priorities(np.arange(3), np.ones(2))


def test_sample_on_empty_replay_times_out():
    assert SequenceReplay(capacity=10, sequence_length=2).sample(4, timeout=0.01) is None


def test_rate_limiter_keeps_the_ratio_between_actor_and_learner_threads():
    spi, batch, push = 2.0, 8, 4 * 2  # push = T * B transitions
    limiter = RateLimiter(min_size_to_sample=16, samples_per_insert=spi, error_buffer=32)
    replay = SequenceReplay(capacity=200, sequence_length=2, rate_limiter=limiter)
    worst = []
    stop = threading.Event()

    def actor():
        i = 0
        while not stop.is_set():
            if replay.add(_trajectory(4, 2, start=4 * i), stream=0, timeout=0.05):
                i += 1

    thread = threading.Thread(target=actor)
    thread.start()
    for _ in range(40):
        assert replay.sample(batch, timeout=5.0) is not None
        ratio_error = limiter.inserts * spi - limiter.samples - 16 * spi
        worst.append(abs(ratio_error))
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert max(worst) <= 32 + push * spi
    assert limiter.samples == 40 * batch


def test_steps_per_update_at_ratio_is_the_batch_over_the_ratio_where_a_ratio_is_kept():
    sebulba = ["learner.batch_size=96", "replay.samples_per_insert=3"]
    assert steps_per_update_at_ratio(load_config("tic_tac_toe_muzero", sebulba)) == 32.0
    for preset, overrides in [
        ("tic_tac_toe_muzero", [*sebulba, "replay.samples_per_insert=0"]),  # no ratio
        ("tic_tac_toe_alphazero", [*sebulba, "runtime=anakin"]),  # the iteration's proportion
        ("cartpole_vtrace", []),  # a FIFO queue
    ]:
        assert steps_per_update_at_ratio(load_config(preset, overrides)) is None


def test_rate_limiter_blocks_then_unblocks_and_close_wakes_waiters():
    limiter = RateLimiter(min_size_to_sample=4, samples_per_insert=1.0, error_buffer=4)
    assert not limiter.acquire_sample(2, timeout=0.01)  # below the minimum size
    assert limiter.acquire_insert(4, timeout=0.01)
    assert limiter.acquire_insert(4, timeout=0.01)  # 8 * 1 - 0 <= 4 + 4
    assert not limiter.acquire_insert(1, timeout=0.01)  # too far ahead of the learner
    assert limiter.acquire_sample(4, timeout=0.01)
    assert limiter.acquire_insert(1, timeout=0.01)
    results = []
    waiter = threading.Thread(target=lambda: results.append(limiter.acquire_insert(4, 5.0)))
    waiter.start()
    limiter.close()
    waiter.join(5.0)
    assert results == [False]
    with pytest.raises(UsageError, match="error_buffer"):
        RateLimiter(4, 1.0, error_buffer=4).acquire_sample(8, timeout=0.01)
    with pytest.raises(UsageError, match="error_buffer"):
        RateLimiter(4, samples_per_insert=1.0)


def test_rate_limiter_over_a_job_keeps_the_job_s_ratio():
    # Two processes, each learner sampling the same count (lockstep): the ratio goes by the mean
    # of the processes' inserts, so the faster process's actors are not held to the slower's.
    fast = RateLimiter(min_size_to_sample=4, samples_per_insert=1.0, error_buffer=4)
    assert fast.acquire_insert(4, timeout=0.01) and fast.acquire_insert(4, timeout=0.01)
    assert not fast.acquire_insert(1, timeout=0.01)  # alone: 8 inserts, 0 samples is the edge
    fast.share_job([8, 0], index=0)  # the other process has inserted nothing yet
    assert fast.acquire_insert(4, timeout=0.01) and fast.acquire_insert(4, timeout=0.01)
    assert not fast.acquire_insert(1, timeout=0.01)  # mean (16 + 0) / 2 = 8: the edge again
    fast.share_job([12, 16], index=0)  # the other ran ahead since (its own row was 12 then)
    assert not fast.acquire_insert(1, timeout=0.01)  # mean (16 + 16) / 2: the job is ahead
    assert fast.acquire_sample(4, timeout=0.01) and fast.acquire_sample(4, timeout=0.01)
    # A waiting actor wakes when the shared counts let it on.
    results = []
    waiter = threading.Thread(target=lambda: results.append(fast.acquire_insert(1, 5.0)))
    waiter.start()
    fast.share_job([16, 8], index=0)  # mean (17 + 8) / 2 = 12.5 against 8 samples: room
    waiter.join(5.0)
    assert results == [True]
    # The slower process's learner keeps the job's pace, beyond what its own inserts allow.
    alone, slow = (RateLimiter(4, samples_per_insert=1.0, error_buffer=40) for _ in range(2))
    slow.share_job([100, 2], index=1)
    assert slow.acquire_insert(2, timeout=0.01)  # below its own minimum: always
    assert not slow.acquire_sample(1, timeout=0.01)  # its own minimum first, whatever the job's
    assert slow.acquire_insert(2, timeout=0.01) and alone.acquire_insert(4, timeout=0.01)
    assert slow.acquire_sample(40, timeout=0.01) and alone.acquire_sample(40, timeout=0.01)
    assert slow.acquire_sample(40, timeout=0.01)  # mean (4 + 100) / 2 = 52: 52 - 80 >= 4 - 40
    assert not alone.acquire_sample(40, timeout=0.01)  # 4 - 80 < 4 - 40


def test_fifo_queue_order_backpressure_and_close():
    queue = FifoQueue(maxsize=2)
    assert queue.put("a", timeout=0.01) and queue.put("b", timeout=0.01)
    assert not queue.put("c", timeout=0.01)  # full: the actor is held back
    assert queue.get(timeout=0.01) == "a"
    assert queue.put("c", timeout=0.01)
    assert [queue.get(0.01), queue.get(0.01)] == ["b", "c"]
    assert queue.get(timeout=0.01) is None
    got = []
    waiter = threading.Thread(target=lambda: got.append(queue.get(timeout=5.0)))
    waiter.start()
    queue.close()
    waiter.join(5.0)
    assert got == [None] and not waiter.is_alive()
    assert not queue.put("d", timeout=0.01)


def test_initial_priorities_follow_their_steps_across_pushes():
    replay = SequenceReplay(capacity=100, sequence_length=2, alpha=1.0, beta=0.0)
    replay.add(_trajectory(2, 1, start=0), stream="a", priorities=np.array([[1.0], [1000.0]]))
    replay.add(_trajectory(2, 1, start=2), stream="a", priorities=np.array([[1.0], [1.0]]))
    assert replay.num_windows == 3  # starts at t = 0, 1, 2
    starts = replay.sample(1000, timeout=1.0).batch["code"][0]
    # t = 1 was pushed first, but starts its window only once t = 2 arrives.
    assert np.mean(starts == 1) > 0.99
    np.testing.assert_allclose(replay.sample(8, timeout=1.0).weights, 1.0)  # beta = 0
    with pytest.raises(ValueError, match="priorities must be finite"):
        replay.add(_trajectory(2, 1), stream="a", priorities=np.ones((2, 2)))


def test_late_priority_writes_keep_the_sum_tree_consistent():
    # As the learner's input pipeline does: a batch's priorities come back several samples
    # later, while an actor thread keeps overwriting the oldest windows of a small replay.
    replay = SequenceReplay(capacity=64, sequence_length=3)
    stop = threading.Event()

    def actor():
        step = 0
        while not stop.is_set():
            replay.add(_trajectory(4, 3, start=step), stream="actor-0")
            step += 4

    thread = threading.Thread(target=actor)
    thread.start()
    rng = np.random.default_rng(0)
    pending = []
    try:
        for _ in range(300):
            sample = replay.sample(8, timeout=5.0)
            assert sample is not None
            pending.append(sample.indices)
            if len(pending) > 5:  # written back 5 samples late
                replay.update_priorities(pending.pop(0), rng.uniform(0.01, 10.0, 8))
    finally:
        stop.set()
        thread.join()
    for indices in pending:
        replay.update_priorities(indices, rng.uniform(0.01, 10.0, 8))
    replay.check_consistency()
    # A corrupted sum is caught.
    replay._priorities._tree[1] += 1.0
    with pytest.raises(ValueError, match="sum tree inconsistent"):
        replay.check_consistency()


def _filled_replay(limiter: RateLimiter | None = None) -> SequenceReplay:
    replay = SequenceReplay(capacity=40, sequence_length=3, alpha=0.5, rate_limiter=limiter)
    for i in range(4):  # 48 transitions into 40 slots: the oldest evicted
        replay.add(_trajectory(6, 2, start=6 * i), stream="actor-0")
    sample = replay.sample(8, timeout=1.0)
    replay.update_priorities(sample.indices, np.linspace(0.1, 5.0, 8))
    return replay


def test_a_restored_replay_holds_the_same_windows_priorities_and_limiter_counts(tmp_path):
    limiter = RateLimiter(min_size_to_sample=10, samples_per_insert=2.0, error_buffer=100.0)
    saved = _filled_replay(limiter)
    state = saved.state()
    # Plain arrays, loadable without pickle.
    np.savez(tmp_path / "replay.npz", **state)
    with np.load(tmp_path / "replay.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    restored_limiter = RateLimiter(
        min_size_to_sample=10, samples_per_insert=2.0, error_buffer=100.0
    )
    restored = SequenceReplay(
        capacity=40, sequence_length=3, alpha=0.5, rate_limiter=restored_limiter
    )
    restored.restore(arrays, jax.tree.structure(_trajectory(1, 1)))
    assert restored.size == saved.size and restored.num_windows == saved.num_windows
    np.testing.assert_array_equal(restored_limiter.counts(), limiter.counts())
    restored.check_consistency()
    slots = np.arange(40)
    np.testing.assert_array_equal(restored._priorities.get(slots), saved._priorities.get(slots))
    sample = restored.sample(64, timeout=1.0)  # before any new push
    _assert_windows_are_sequences(sample.batch, 3, 64)
    restored.add(_trajectory(6, 2, start=100), stream="actor-0")
    sample = restored.sample(64, timeout=1.0)
    _assert_windows_are_sequences(sample.batch, 3, 64)
    starts = set(sample.batch["code"][0].tolist())
    assert starts & {18, 19, 20, 1018}  # restored windows are sampled
    # The new push starts its own sequence: no window runs from the old data into it.
    assert not starts & {22, 23, 1022, 1023}
    assert starts & {100, 101, 102, 103, 1100, 1101, 1102, 1103}  # the new windows are there


def test_restoring_into_another_shape_or_structure_is_refused():
    state = _filled_replay().state()
    structure = jax.tree.structure(_trajectory(1, 1))
    with pytest.raises(UsageError, match="capacity 40 and windows of 3 steps, this run 50 and 3"):
        SequenceReplay(capacity=50, sequence_length=3).restore(state, structure)
    other = _trajectory(1, 1)
    other["extra"] = other.pop("nested")
    with pytest.raises(UsageError, match="the saved replay holds trajectories with leaves"):
        SequenceReplay(capacity=40, sequence_length=3).restore(state, jax.tree.structure(other))


def test_a_sampled_batch_reaches_a_cpu_device_without_a_copy():
    # XLA's CPU client aliases aligned host memory; a copy would be a task on its thread pool,
    # behind the searches and updates running there.
    from selfplay.learner_input import _aliasable

    replay = SequenceReplay(capacity=100, sequence_length=3)
    replay.add(_trajectory(5, 2))
    fifo = FifoQueue(maxsize=4)
    fifo.add(_trajectory(5, 2))
    fifo.add(_trajectory(5, 9_000))
    cpu = jax.local_devices(backend="cpu")[0]
    # Large batches too: numpy's large arrays start 16 bytes into a page, not 64.
    samples = [replay.sample(n, timeout=1.0) for n in (8, 20_000)]
    for sample in (*samples, fifo.sample(2, timeout=1.0)):
        host = _aliasable((sample.batch, sample.weights))
        assert host[0]["obs"] is sample.batch["obs"]  # the stores' own leaves are kept as they are
        np.testing.assert_array_equal(host[0]["code"], sample.batch["code"])  # int64 -> int32
        for leaf in jax.tree.leaves(host):
            assert np.shares_memory(np.asarray(jax.device_put(leaf, cpu)), leaf)
