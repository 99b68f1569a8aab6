"""Thread lifetime: a failing thread stops the run and its exception reaches the main thread."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from selfplay.lifetime import StopSignal, ThreadGroup, handle_signals, watch_for_stalls


def _loop_until_stopped(stop: StopSignal, ticks: list) -> None:
    while not stop.is_set():
        ticks.append(1)
        stop.wait(0.01)


def _fail_after(n: int, stop: StopSignal) -> None:
    for _ in range(n):
        if stop.wait(0.01):
            return
    raise ValueError("actor exploded")


def test_a_failing_thread_stops_the_others_and_is_reraised():
    stop = StopSignal()
    ticks: list = []
    start = time.monotonic()
    with pytest.raises(ValueError, match="actor exploded") as info:
        with ThreadGroup(stop, join_timeout=5.0) as threads:
            threads.start("learner", _loop_until_stopped, stop, ticks)
            threads.start("actor-0", _fail_after, 3, stop)
            assert threads.wait(timeout=5.0)
    assert time.monotonic() - start < 5.0
    assert stop.is_set()
    assert "actor-0" in stop.reason and "actor exploded" in stop.reason
    assert any("actor-0" in note for note in info.value.__notes__)
    assert ticks  # the learner ran before it was stopped


def test_clean_stop_joins_every_thread():
    stop = StopSignal()
    threads = ThreadGroup(stop)
    for i in range(3):
        threads.start(f"actor-{i}", _loop_until_stopped, stop, [])
    assert threads.wait(timeout=0.05) is False  # nothing stopped yet: a timeout, not a hang
    stop.set("done")
    assert threads.join(timeout=5.0) == []
    threads.raise_if_failed()
    assert stop.reason == "done"


def test_wait_returns_when_all_threads_finish():
    stop = StopSignal()
    with ThreadGroup(stop) as threads:
        threads.start("short", lambda: None)
        assert threads.wait(timeout=5.0)
    assert threads.failures == []


def test_join_reports_a_stuck_thread_without_hanging():
    stop = StopSignal()
    release = threading.Event()
    threads = ThreadGroup(stop, join_timeout=0.05)
    threads.start("stuck", release.wait, 5.0)  # ignores the stop signal
    with pytest.raises(RuntimeError, match="stuck"):
        with threads:
            pass
    release.set()


def test_duplicate_thread_name_is_refused():
    stop = StopSignal()
    threads = ThreadGroup(stop)
    threads.start("a", lambda: None)
    with pytest.raises(ValueError, match="already started"):
        threads.start("a", lambda: None)
    threads.join(1.0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["TERM", "USR1"])
def test_a_stop_signal_sets_the_stop_signal_and_handlers_are_restored(signum):
    # SIGUSR1: what mpirun passes on to every process (its SIGTERM ends the job itself).
    before = signal.getsignal(signum)
    stop = StopSignal()
    with handle_signals(stop):
        os.kill(os.getpid(), signum)
        assert stop.wait(2.0)
    assert stop.reason == f"received {signal.Signals(signum).name}"
    assert signal.getsignal(signum) is before


def test_second_sigint_raises_keyboard_interrupt():
    stop = StopSignal()
    with pytest.raises(KeyboardInterrupt):
        with handle_signals(stop):
            os.kill(os.getpid(), signal.SIGINT)
            stop.wait(2.0)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)  # the handler raises before this ends


def test_a_stop_signal_answered_by_the_main_thread_never_trips_the_watchdog():
    # Two SIGTERMs at once (SLURM and a launcher both send one) are one request; once the
    # handler ran, no wait is too long: a final save may take minutes.
    stop = StopSignal()
    with handle_signals(stop, unanswered_after=1.0):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(2.0)
        time.sleep(1.5)  # the watchdog would have ended this process by now
    assert stop.reason == "received SIGTERM"


def _wait_in_a_native_call(seconds: float) -> None:
    """Blocks the calling thread for `seconds` in C, deaf to signals (a mutex locked twice, the
    second time with a deadline), as a device computation that takes a while is to Python."""
    import ctypes

    class Timespec(ctypes.Structure):
        _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]

    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    deadline = time.time() + seconds
    until = Timespec(int(deadline), int(deadline % 1 * 1e9))
    libc.pthread_mutex_timedlock(mutex, ctypes.byref(until))


def test_signals_heard_while_the_main_thread_waits_are_answered_by_one_run_of_the_handler():
    # Three SIGTERMs while the main thread is in a native call: Python runs the handler once for
    # all three when the call returns, and the watchdog counts all three answered.
    stop = StopSignal()
    with handle_signals(stop, unanswered_after=2.5):

        def send_three() -> None:
            for _ in range(3):
                time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGTERM)

        sender = threading.Thread(target=send_three)
        sender.start()
        _wait_in_a_native_call(0.8)
        sender.join()
        assert stop.wait(2.0)
        time.sleep(2.2)  # counting deliveries, the watchdog would have ended this process by now
    assert stop.reason == "received SIGTERM"


# The main thread blocked in a native call that never returns, as a device computation that never
# finishes (a collective waiting for a device that never started) is to Python: a mutex locked
# twice by one thread. The signal's handler can never run.
_STUCK_IN_A_NATIVE_CALL = """
import ctypes, sys
from selfplay.lifetime import StopSignal, handle_signals, watch_for_stalls

def wait_for_the_device():
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    print("stuck", flush=True)
    libc.pthread_mutex_lock(mutex)

if sys.argv[2] == "signal":
    with handle_signals(StopSignal(), unanswered_after=float(sys.argv[1])):
        wait_for_the_device()
else:  # no one signals: the stall watch sees the frames stop
    frames = iter([0, 1])  # one frame, then none
    stalls = watch_for_stalls(StopSignal(), lambda: (next(frames, 1), 0), 0.5, float(sys.argv[1]))
    with stalls:
        wait_for_the_device()
"""


def _run_stuck(script: pathlib.Path, mode: str, unanswered_after: float, signals: int):
    """Runs the stuck script, sends it `signals` SIGTERMs 1.5 s apart once it is stuck; returns
    (exit status, seconds from the first signal or the start to the exit, its line)."""
    script.write_text(_STUCK_IN_A_NATIVE_CALL)
    process = subprocess.Popen(
        [sys.executable, str(script), str(unanswered_after), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline() == "stuck\n"
        started = time.monotonic()
        for i in range(signals):
            time.sleep(0.5 if i == 0 else 1.5)  # inside the second lock by then
            process.send_signal(signal.SIGTERM)
            started = started if i else time.monotonic()
        process.wait(timeout=60)
        took = time.monotonic() - started
        stderr = process.stderr.read()
    finally:
        process.kill()
    (line,) = [text for text in stderr.splitlines() if text.startswith("podracer:")]
    assert re.search(rf"\({re.escape(str(script))}:\d+ in wait_for_the_device\)", line)  # where
    assert "without a final checkpoint" in line
    return process.returncode, took, line


@pytest.mark.parametrize("signals", [1, 2], ids=["one-signal-waits", "a-second-exits-at-once"])
def test_a_signal_a_stuck_main_thread_cannot_answer_ends_the_process_in_one_line(signals, tmp_path):
    unanswered_after = 2.0 if signals == 1 else 120.0
    code, took, line = _run_stuck(tmp_path / "stuck.py", "signal", unanswered_after, signals)
    assert code == 128 + signal.SIGTERM
    if signals == 1:
        assert unanswered_after <= took < unanswered_after + 20
    else:
        assert took < 20  # not the 120 s of one unanswered signal
    assert "received SIGTERM and the run did not answer it" in line


def test_a_stall_a_stuck_main_thread_cannot_answer_ends_the_process_in_one_line(tmp_path):
    # No one signals: the frames stop (0.5 s), the stop goes unanswered (1 s), exit 1.
    code, took, line = _run_stuck(tmp_path / "stuck.py", "stall", 1.0, signals=0)
    assert code == 1 and 1.5 <= took < 20
    assert "the run stalled (no frame for 0.5 s (learner.stall_timeout_s)) and did not stop" in line


def _watch(progress: list[int], timeout_s: float, seconds: float) -> StopSignal:
    """Runs `watch_for_stalls` over `progress` ([frames, updates], changed by the caller's
    thread) for `seconds`; returns the stop signal."""
    stop = StopSignal()
    with watch_for_stalls(stop, lambda: (progress[0], progress[1]), timeout_s):
        stop.wait(seconds)
    return stop


def test_counters_that_stop_advancing_stop_the_run_as_stalled():
    progress = [0, 0]

    def frames_then_updates_then_nothing() -> None:
        for _ in range(12):  # 1.2 s of frames and updates, then the updates stop
            time.sleep(0.1)
            progress[0] += 1
            progress[1] += 1
        for _ in range(60):
            time.sleep(0.1)
            progress[0] += 1

    threading.Thread(target=frames_then_updates_then_nothing, daemon=True).start()
    started = time.monotonic()
    stop = _watch(progress, timeout_s=1.0, seconds=8.0)
    assert stop.reason == "stalled: no update for 1 s (learner.stall_timeout_s)"
    assert 2.0 <= time.monotonic() - started < 6.0


def test_counters_that_never_moved_are_not_a_stall_nor_is_a_timeout_of_zero():
    # Before its first frame a run compiles, for minutes on a large model: never a stall.
    assert not _watch([5, 0], timeout_s=0.2, seconds=1.0)
    progress = [0, 0]
    threading.Thread(target=lambda: [time.sleep(0.2), progress.__setitem__(0, 1)]).start()
    assert not _watch(progress, timeout_s=0.0, seconds=1.0)


# Parameter publishing: the learner/actor handoff.


def test_parameter_server_serves_the_newest_version_without_blocking():
    import jax
    import jax.numpy as jnp

    from selfplay.params import ParameterServer

    device = jax.devices()[0]
    server = ParameterServer(devices=[device])
    assert server.latest() is None
    assert server.wait_for_version(0, timeout=0.01) is None  # a timeout, not a hang
    server.publish({"w": jnp.ones(3)}, version=1)
    server.publish({"w": jnp.full(3, 2.0)}, version=2)
    jax.block_until_ready(server.wait_for_version(2, timeout=1.0, device=device).params)
    snap = server.latest(device)
    assert snap.version == 2
    assert float(snap.params["w"][0]) == 2.0
    assert snap.params["w"].devices() == {device}
    with pytest.raises(ValueError, match="older"):
        server.publish({"w": jnp.zeros(3)}, version=1)


class _Computing:
    """A parameter leaf whose computation ends when the test says (as a jax.Array's)."""

    def __init__(self) -> None:
        self.done = False

    def is_ready(self) -> bool:
        return self.done


def test_parameter_server_serves_the_newest_computed_version():
    from selfplay.params import ParameterServer

    server = ParameterServer()
    leaves = {version: _Computing() for version in (1, 2, 3, 4)}
    for version, leaf in leaves.items():
        server.publish({"w": leaf}, version)
    # The first version is served before it is computed (there is nothing else); the others
    # only once computed, never waiting for them.
    assert server.latest().version == 1 and server.version == 4
    leaves[2].done = True
    assert server.latest().version == 2
    leaves[4].done = leaves[3].done = True
    assert server.latest().version == 4
    server.publish({"w": _Computing()}, 5)
    assert server.latest().version == 4
    assert server.wait_for_version(5, timeout=0.01).version == 5  # the newest, computed or not


def test_parameter_server_does_not_serve_an_update_still_running_on_the_device():
    import jax
    import jax.numpy as jnp

    from selfplay.params import ParameterServer

    @jax.jit
    def update(w):  # about 0.2 s of work on this machine's CPU
        return jax.lax.fori_loop(0, 200, lambda i, a: jnp.tanh(a @ a), w)

    device = jax.devices()[0]
    server = ParameterServer(devices=[device])
    w = jnp.eye(300) / 2
    jax.block_until_ready(update(w))  # compiled
    server.publish(w, version=1)
    server.publish(update(w), version=2)  # dispatched: running
    assert server.latest(device).version == 1
    jax.block_until_ready(server.wait_for_version(2, timeout=1.0, device=device).params)
    assert server.latest(device).version == 2


def test_parameter_server_wakes_a_waiting_actor():
    from selfplay.params import ParameterServer

    server = ParameterServer()
    got = []
    t = threading.Thread(target=lambda: got.append(server.wait_for_version(3, timeout=5.0)))
    t.start()
    server.publish("old", 2)
    server.publish("new", 3)
    t.join(5.0)
    assert got[0].params == "new" and got[0].version == 3


# The pieces together: a learner that fails stops actors blocked on backpressure.


def test_a_learner_failure_stops_actors_waiting_on_the_rate_limiter():
    import numpy as np

    from selfplay.replay import RateLimiter, SequenceReplay

    limiter = RateLimiter(min_size_to_sample=8, samples_per_insert=1.0, error_buffer=8)
    replay = SequenceReplay(capacity=64, sequence_length=2, rate_limiter=limiter)
    stop = StopSignal()
    pushes = []

    def actor(name):
        steps = {"x": np.zeros((2, 2), np.float32)}
        while not stop.is_set():
            if replay.add(steps, stream=name, timeout=0.05):  # blocks: nobody samples
                pushes.append(name)

    def learner():
        while not stop.is_set() and replay.num_windows < 4:
            stop.wait(0.01)
        raise FloatingPointError("loss is nan")

    start = time.monotonic()
    with pytest.raises(FloatingPointError, match="nan"):
        with ThreadGroup(stop, join_timeout=5.0) as threads:
            for i in range(2):
                threads.start(f"actor-{i}", actor, f"actor-{i}")
            threads.start("learner", learner)
            threads.wait(timeout=10.0)
    assert time.monotonic() - start < 5.0
    assert threads.alive() == []
    assert limiter.inserts <= 8 + 8  # backpressure held the actors
