"""Thread lifetime for the Sebulba runtime: one stop signal, supervised threads, signal handlers.

The rule that keeps a run from hanging: every loop checks the `StopSignal`, every blocking call has
a timeout, and any exception in any thread sets the signal so the main thread stops the whole run
within seconds and re-raises that exception.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import select
import signal
import socket
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from configs import UsageError

__all__ = [
    "STOP_SIGNALS",
    "Diverged",
    "StopSignal",
    "ThreadFailure",
    "ThreadGroup",
    "check_finite",
    "handle_signals",
    "watch_for_stalls",
]


class Diverged(UsageError):
    """The training diverged: the parameters, or the priorities an update gave, hold NaN or
    inf (a learning rate too high, most often). The run stops with this one line (exit 2)
    before any checkpoint holds them; the checkpoints saved before are whole."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(
            f"the training diverged: {what}; no checkpoint holds them (those saved before are "
            "whole): lower optimizer.learning_rate or set optimizer.max_grad_norm, and run "
            "again to resume from the newest"
        )

    def __reduce__(self):
        # Rebuilt from `what` (Ray sends a member's exception to the driver pickled), not from
        # the whole message, which would be wrapped in the sentence again.
        return (type(self), (self.what,))


def check_finite(what: str, leaves: list[Any]) -> None:
    """Raises `Diverged` naming `what` if any of `leaves` (host or device arrays) holds NaN or
    inf."""
    if not all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves):
        raise Diverged(f"{what} hold NaN or inf")


class StopSignal:
    """A `threading.Event` that remembers why it was set: shared by every thread of a run."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None

    def set(self, reason: str = "stop requested") -> None:
        """Asks every thread to stop; the first reason given is kept."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleeps up to `timeout` seconds or until set; returns whether it is set.

        Use it instead of `time.sleep` inside loops so a stop is seen at once.
        """
        return self._event.wait(timeout)

    @property
    def reason(self) -> str | None:
        """Why the run was stopped, or None while it runs."""
        with self._lock:
            return self._reason


class ThreadFailure(NamedTuple):
    """An exception raised inside a supervised thread."""

    thread_name: str  # the name given to `ThreadGroup.start`
    exception: BaseException  # the exception object itself (re-raised by the main thread)
    traceback: str  # the formatted traceback, for logs


class ThreadGroup:
    """Starts named threads, records the first exception of any of them and stops the run with it.

    Usage from the main thread:

        stop = StopSignal()
        with handle_signals(stop), ThreadGroup(stop) as threads:
            threads.start("actor-0", actor_loop, stop, ...)
            threads.start("learner", learner_loop, stop, ...)
            threads.wait()  # returns when stopped, a thread failed, or all threads finished
        # leaving the block sets `stop`, joins every thread and re-raises a thread's exception.

    Threads are daemons, so a thread stuck past its join timeout cannot keep the process alive.
    """

    def __init__(self, stop: StopSignal, join_timeout: float = 10.0) -> None:
        self.stop = stop
        self.join_timeout = join_timeout
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._failures: list[ThreadFailure] = []
        self._finished = threading.Condition(self._lock)

    def start(self, name: str, target: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Runs `target(*args, **kwargs)` in a new daemon thread called `name`."""
        with self._lock:
            if name in self._threads:
                raise ValueError(f"a thread named {name!r} was already started")

            def run() -> None:
                try:
                    target(*args, **kwargs)
                except BaseException as e:  # every failure must reach the main thread
                    failure = ThreadFailure(name, e, traceback.format_exc())
                    with self._lock:
                        self._failures.append(failure)
                    self.stop.set(f"thread {name!r} failed: {type(e).__name__}: {e}")
                finally:
                    with self._lock:
                        self._finished.notify_all()

            thread = threading.Thread(target=run, name=name, daemon=True)
            self._threads[name] = thread
        thread.start()

    @property
    def failures(self) -> list[ThreadFailure]:
        """Every exception raised in a thread so far, first first."""
        with self._lock:
            return list(self._failures)

    def alive(self) -> list[str]:
        """The names of the threads still running."""
        with self._lock:
            return [name for name, t in self._threads.items() if t.is_alive()]

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> bool:
        """Blocks until the stop signal is set or every thread has finished (or `timeout` passes).

        Returns True if the run stopped or finished, False on timeout. Polls so that a signal
        handler that sets the stop signal is seen within `poll` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.stop.is_set() or not self.alive():
                return True
            remaining = poll if deadline is None else min(poll, deadline - time.monotonic())
            if remaining <= 0:
                return False
            with self._lock:
                self._finished.wait(remaining)

    def join(self, timeout: float | None = None) -> list[str]:
        """Joins every thread within `timeout` seconds in total; returns those still alive.

        It does not set the stop signal: call `stop.set()` first to end the loops.
        """
        timeout = self.join_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.alive()

    def raise_if_failed(self) -> None:
        """Re-raises the first thread's exception, with a note naming the thread."""
        failures = self.failures
        if failures:
            first = failures[0]
            note = f"(raised in thread {first.thread_name!r})"
            if note not in getattr(first.exception, "__notes__", []):
                first.exception.add_note(note)
            raise first.exception

    def __enter__(self) -> ThreadGroup:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop.set("main thread left the thread group" if exc is None else f"main: {exc!r}")
        stuck = self.join()
        if exc is None:
            self.raise_if_failed()
            if stuck:
                raise RuntimeError(
                    f"threads {stuck} did not stop within {self.join_timeout}s of the stop signal"
                )


# The signals that stop a run with a final checkpoint (`handle_signals`).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

# How long a stop signal may go unanswered before the process exits without a final checkpoint.
# Python runs a signal's handler only when the main thread comes back from a native call, and a
# device computation that never finishes (a collective waiting for a device that never started)
# never comes back; a compile or a save that takes long does, well within this.
UNANSWERED_SIGNAL_S = 60.0
# A second stop signal this long after an unanswered first one exits at once (a user pressing
# Ctrl-C again); two within it are one request (SLURM and a launcher both sending SIGTERM).
SIGNAL_REPEATED_S = 1.0


@contextlib.contextmanager
def handle_signals(
    stop: StopSignal, unanswered_after: float = UNANSWERED_SIGNAL_S
) -> Iterator[StopSignal]:
    """While inside, SIGINT, SIGTERM and SIGUSR1 set `stop` instead of killing the process.

    SIGUSR1 is the one a job launcher passes on without ending the job itself: Open MPI's mpirun
    forwards it to every process (its own SIGINT and SIGTERM kill the job moments later), and
    SLURM's `--signal=USR1@SECONDS` sends it ahead of a time limit.

    A second SIGINT raises KeyboardInterrupt in the main thread, for a run that will not stop.

    A process whose main thread is blocked in a native call that never returns would never run
    the handler: a watchdog thread hears each signal at once (`signal.set_wakeup_fd`) and, if
    the handler has not run `unanswered_after` seconds later, or another signal comes
    `SIGNAL_REPEATED_S` or more after an unanswered one, writes one line naming where the main
    thread is stuck and exits with 128 + the signal's number, without a final checkpoint (those
    saved before are whole).

    The previous handlers are restored on exit. Must be entered from the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("handle_signals must be used from the main thread")
    watchdog = _SignalWatchdog(unanswered_after)

    def on_signal(signum: int, frame: Any) -> None:
        watchdog.answered()
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        stop.set(f"received {signal.Signals(signum).name}")

    previous_wakeup = signal.set_wakeup_fd(watchdog.wakeup_fd, warn_on_full_buffer=False)
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    watchdog.start()
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_wakeup)
        watchdog.close()


class _SignalWatchdog:
    """The stop signals the process received (each writes its number to the wakeup socket, from
    C, whatever the main thread is doing) that no run of the Python handler has answered yet.

    Python runs a handler once for any number of deliveries of one signal before it, so the
    handler answers every signal heard so far: it takes the bytes the watchdog has not read yet
    and clears those it has."""

    def __init__(self, unanswered_after: float) -> None:
        self.unanswered_after = unanswered_after
        self._socket, self._wakeup = socket.socketpair()
        for end in (self._socket, self._wakeup):
            end.setblocking(False)  # set_wakeup_fd's requirement; reads that never wait
        self.wakeup_fd = self._wakeup.fileno()
        self._lock = threading.RLock()  # a handler may run inside another's bytecodes
        self._unanswered: list[tuple[int, float]] = []  # (signal, when heard), oldest first
        self._thread = threading.Thread(target=self._watch, name="signal-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def answered(self) -> None:
        """Called by the handler, in the main thread."""
        with self._lock:
            self._read()
            self._unanswered.clear()

    def close(self) -> None:
        self._wakeup.close()  # the watchdog reads the end of the stream and returns
        self._thread.join(5.0)
        self._socket.close()

    def _read(self) -> bytes | None:
        """The bytes waiting (b"" where none), or None at the end of the stream."""
        data = b""
        while True:
            try:
                chunk = self._socket.recv(64)
            except BlockingIOError:
                return data
            if not chunk:
                return None
            data += chunk

    def _watch(self) -> None:
        while True:
            with self._lock:
                pending = list(self._unanswered)
            wait = None
            if pending:
                waited = time.monotonic() - pending[0][1]
                insisted = pending[-1][1] - pending[0][1] >= SIGNAL_REPEATED_S
                if insisted or waited >= self.unanswered_after:
                    _exit_unanswered(pending[0][0], waited)
                wait = self.unanswered_after - waited
            readable, _, _ = select.select([self._socket], [], [], wait)
            if readable:
                with self._lock:
                    data = self._read()
                    if data is None:  # the run left `handle_signals`
                        return
                    now = time.monotonic()
                    self._unanswered += [(s, now) for s in data if s in STOP_SIGNALS]


def _exit_unanswered(signum: int, waited: float) -> None:
    name = signal.Signals(signum).name
    what = f"received {name} and the run did not answer it for {waited:.0f} s"
    _exit_stuck(what, threading.main_thread(), 128 + signum)


def _exit_stuck(what: str, thread: threading.Thread, code: int) -> None:
    """Writes one line saying where the run's `thread` is stuck and ends the process at once."""
    frame = sys._current_frames().get(thread.ident or -1)
    stack = traceback.extract_stack(frame) if frame is not None else []
    where = next(
        (f"{s.filename}:{s.lineno} in {s.name}" for s in reversed(stack) if _ours(s.filename)),
        "an unknown place",
    )
    line = (
        f"podracer: {what}: its {'main ' if thread is threading.main_thread() else ''}thread is "
        f"blocked in a call that does not return ({where}); "
        "exiting without a final checkpoint (those saved before are whole: the same command "
        "resumes from the newest)\n"
    )
    os.write(2, line.encode())
    os._exit(code)


@contextlib.contextmanager
def watch_for_stalls(
    stop: StopSignal,
    progress: Callable[[], tuple[int, int]],
    timeout_s: float,
    unanswered_after: float = UNANSWERED_SIGNAL_S,
) -> Iterator[None]:
    """While inside, stops the run when its frames or its updates (`progress()`: a pair of
    counters, read from another thread) have stopped advancing for `timeout_s` seconds (0:
    never): a run stuck in a call that never returns, with no one there to send a signal.

    Each counter is watched from its first change inside, so what comes before it (compiling,
    filling the replay) is never a stall. The stop's reason names the counter; where the block
    is not left `unanswered_after` seconds after the stop (the thread that entered it stuck,
    not only idle), one line names where and the process exits with status 1. Leave the block
    before a final save, whose length is not a stall."""
    if not timeout_s:
        yield
        return
    left = threading.Event()
    run_thread = threading.current_thread()  # the loop's: a Ray Tune trial's is not the main one

    def watch() -> None:
        poll = min(max(timeout_s / 4, 0.05), 5.0)
        names = ("frame", "update")
        last = progress()
        changed = [time.monotonic()] * 2
        moved = [False, False]  # a counter counts once it has changed
        while not left.wait(poll):
            now, current = time.monotonic(), progress()
            for i in range(2):
                if current[i] != last[i]:
                    changed[i], moved[i] = now, True
            last = current
            idle = [names[i] for i in range(2) if moved[i] and now - changed[i] >= timeout_s]
            if idle:
                what = f"no {' and no '.join(idle)} for {timeout_s:g} s (learner.stall_timeout_s)"
                stop.set(f"stalled: {what}")
                if not left.wait(unanswered_after):
                    _exit_stuck(f"the run stalled ({what}) and did not stop", run_thread, 1)
                return

    thread = threading.Thread(target=watch, name="stall-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        left.set()
        thread.join(5.0)


_LIBRARIES = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"])
_OUR_PACKAGES = {"selfplay", "muzero", "search", "configs", "arena", "podracer"}


def _ours(filename: str) -> bool:
    """Whether a frame's file is this project's (installed or not) or a user's script."""
    path = pathlib.Path(filename)
    if _OUR_PACKAGES.intersection(path.parts[-3:-1]):  # selfplay/run.py, envs/pgx.py
        return True
    return not filename.startswith("<") and not any(filename.startswith(p) for p in _LIBRARIES)
