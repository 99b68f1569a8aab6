"""`podracer train --local-processes N`: N processes of one `jax.distributed` job on this machine.

Each child runs `python -m podracer train ARGS --coordinator 127.0.0.1:PORT --num-processes N
--process-id I` (a free port). On a CPU the cores are split between the children (each pinned to
its share with `sched_setaffinity`); with several GPUs each child sees its share of them
(`CUDA_VISIBLE_DEVICES`). The launcher forwards SIGINT, SIGTERM and SIGUSR1 to every child,
waits for all, names each one that failed, and returns the first failure's exit code (0 when all
succeeded). A child killed by a signal takes the others with it after `DIED_GRACE_S`.

`podracer train` run as one process of a job it does not launch (`--distributed`, or the explicit
`--coordinator/--num-processes/--process-id`) runs the training in a child of its own, `supervise`:
JAX's client aborts a process whose job lost its coordination service (process 0's host died, or
the link to it is down) from a C++ thread, with a stack trace and no exit Python could make. The
supervisor relays the child's output without that trace and ends with one line and exit 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO

from configs import UsageError
from selfplay.lifetime import STOP_SIGNALS

__all__ = [
    "JOB_PROCESS",
    "check_job_flags",
    "free_port",
    "launch_local",
    "split_evenly",
    "supervise",
]

# Set in the environment of a job's process that a launcher or a supervisor of ours watches.
JOB_PROCESS = "PODRACER_JOB_PROCESS"
# What JAX's client writes before it aborts a process whose job lost its coordination service,
# and the lines of the stack trace that follow it (dropped from the relayed output).
_COORDINATION_LOST = b"JAX distributed service detected fatal errors"
_STACK_TRACE = re.compile(rb"^(\*\*\* Check failure stack trace|\s+@\s+0x[0-9a-f]+ )")
COORDINATION_LOST = (
    "the job lost its coordination service (process 0 died, or its host cannot be reached)"
)

# Once a child has failed, how long the others get to see it (a collective fails at once; a
# silent peer takes the heartbeat timeout, selfplay.processes.HEARTBEAT_S) before they are killed.
GRACE_S = 90.0
# Once a child has been killed by a signal (SIGKILL, a crash): the others cannot checkpoint or
# go on without it, and one waiting in the agreement would only learn of it at the heartbeat
# timeout, so they get this long to say what they saw.
DIED_GRACE_S = 5.0


def check_job_flags(
    coordinator: str | None, num_processes: int | None, process_id: int | None
) -> None:
    """Refuses explicit job flags that cannot name a job, before anything imports JAX (one line
    in a fraction of a second, not after the seconds JAX's import takes)."""
    explicit = (coordinator, num_processes, process_id)
    if any(x is not None for x in explicit) and any(x is None for x in explicit):
        raise UsageError("--coordinator, --num-processes and --process-id go together")
    if num_processes is not None and num_processes < 1:
        raise UsageError(f"--num-processes must be at least 1, got {num_processes}")
    if process_id is not None and not 0 <= process_id < (num_processes or 0):
        raise UsageError(f"--process-id {process_id} is not in 0..{(num_processes or 1) - 1}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_evenly(items: Sequence, parts: int) -> list[list]:
    """`items` in `parts` contiguous shares as even as can be (each share non-empty when there
    are at least `parts` items)."""
    size, extra = divmod(len(items), parts)
    shares, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        shares.append(list(items[start:end]))
        start = end
    return shares


def _gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return sorted(
        (n[6:] for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()), key=int
    )


def launch_local(
    train_args: Sequence[str], num_processes: int, program: Sequence[str] | None = None
) -> int:
    """Runs `podracer train *train_args` as `num_processes` processes of one job; returns the
    exit code of the first child that failed, or 0. `program` replaces `python -m podracer
    train` (the launcher's own tests run stand-ins that need no JAX)."""
    program = list(program or [sys.executable, "-m", "podracer", "train"])
    port = free_port()
    cores = sorted(os.sched_getaffinity(0))
    core_shares = split_evenly(cores, num_processes) if len(cores) >= num_processes else None
    gpus = _gpus()
    gpu_shares = split_evenly(gpus, num_processes) if len(gpus) >= num_processes > 1 else None
    children: list[subprocess.Popen] = []
    for i in range(num_processes):
        env = dict(os.environ, **{JOB_PROCESS: "1"})
        if gpu_shares is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_shares[i])
        share = core_shares[i] if core_shares is not None else None
        children.append(
            _start(
                [*program, *train_args]
                + ["--coordinator", f"127.0.0.1:{port}"]
                + ["--num-processes", str(num_processes), "--process-id", str(i)],
                env,
                cores=share,
            )
        )
    relays = [_relay(child) for child in children]
    with _forwarding_stop_signals(children):
        failed_at: float | None = None
        grace = GRACE_S
        died: int | None = None  # the first child killed by a signal
        while any(child.poll() is None for child in children):
            if failed_at is None and any(child.poll() for child in children):
                failed_at = time.monotonic()
            if died is None:
                died = next((i for i, c in enumerate(children) if (c.poll() or 0) < 0), None)
                if died is not None:
                    grace = min(grace, DIED_GRACE_S + (time.monotonic() - failed_at))
            if failed_at is not None and time.monotonic() - failed_at > grace:
                if died is not None:
                    print(
                        f"podracer train: process {died} of {num_processes} was killed; the "
                        "others cannot go on without it and are stopped",
                        flush=True,
                    )
                for child in children:
                    if child.poll() is None:
                        child.kill()
                failed_at, grace = None, float("inf")  # killed once; now wait for them
            time.sleep(0.2)
    codes = [_exit_code(child.wait(), relay) for child, relay in zip(children, relays, strict=True)]
    for i, (code, relay) in enumerate(zip(codes, relays, strict=True)):
        if relay.coordination_lost:
            print(f"podracer train: process {i} of {num_processes}: {COORDINATION_LOST}")
        elif code:
            name = f" ({signal.Signals(code - 128).name})" if 128 < code < 160 else ""
            print(f"podracer train: process {i} of {num_processes} exited with code {code}{name}")
    return next((code for code in codes if code), 0)


def supervise(command: Sequence[str], who: str) -> int:
    """Runs `command` (one process of a job, `python -m podracer train ...`) as a child: relays
    its output and the stop signals, and returns its exit code; a child that JAX aborted because
    the job lost its coordination service ends with one line naming that, `who` its process,
    and 1."""
    child = _start(command, dict(os.environ, **{JOB_PROCESS: "1"}))
    relay = _relay(child)
    with _forwarding_stop_signals([child]):
        code = _exit_code(child.wait(), relay)
    if relay.coordination_lost and not relay.said_why:
        print(
            f"podracer train{who}: run stopped: {COORDINATION_LOST}; the saved checkpoints are "
            "whole: run the job again to resume from the newest",
            file=sys.stderr,
            flush=True,
        )
    return code


class _Relay:
    """Copies a child's stderr to ours as it comes, less the C++ stack trace of an abort, and
    notes whether JAX's client aborted it for a lost coordination service, and whether it said
    itself why it stopped (the peer watch's line can come in the same instant as the abort)."""

    def __init__(self, source: IO[bytes], sink: IO[bytes]):
        self.coordination_lost = self.said_why = False
        self._source, self._sink = source, sink
        self._thread = threading.Thread(target=self._copy, name="relay", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=10.0)

    def _copy(self) -> None:
        pending = b""  # the end of the newest chunk, not yet a whole line
        started = b""  # the part of the line now arriving that already went out (no newline)
        while chunk := os.read(self._source.fileno(), 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                whole, started = started + line, b""
                self._note(whole)
                if not _STACK_TRACE.match(whole):
                    self._sink.write(line + b"\n")
            # A line still open (a progress line redrawn with \r; a line whose writer was
            # interrupted, as by an abort's output) goes out as it is; noted once it is whole.
            if pending and not _STACK_TRACE.match(started + pending) and not pending.isspace():
                self._sink.write(pending)
                # What a redrawn line last said (one line's worth: a long run redraws for hours).
                started, pending = (started + pending).rsplit(b"\r", 1)[-1][-4096:], b""
            self._sink.flush()
        self._note(started + pending)
        self._sink.write(pending)
        self._sink.flush()
        self._source.close()

    def _note(self, line: bytes) -> None:
        self.coordination_lost |= _COORDINATION_LOST in line
        self.said_why |= b"run stopped:" in line or b": error: " in line


def _start(
    command: Sequence[str], env: dict[str, str], cores: Sequence[int] | None = None
) -> subprocess.Popen:
    """`command` in its own session (a Ctrl-C reaches it once, from us, not twice), killed
    with us (Linux), on `cores`; its stderr a pipe for a `_relay`. Start every child before
    any relay: the forked child runs `prepare` alone, with no other thread's lock held."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None

    def prepare() -> None:
        if prctl is not None:  # PR_SET_PDEATHSIG: SIGKILL when the parent dies
            prctl(1, signal.SIGKILL)
        if cores:
            os.sched_setaffinity(0, cores)

    return subprocess.Popen(
        list(command),
        env=env,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=prepare,
    )


def _relay(child: subprocess.Popen) -> _Relay:
    assert child.stderr is not None
    # Our stderr's bytes (a stream replaced by text only, as in a test's capture: its file).
    sink = getattr(sys.stderr, "buffer", None) or open(2, "wb", closefd=False)  # noqa: SIM115
    return _Relay(child.stderr, sink)


@contextlib.contextmanager
def _forwarding_stop_signals(children: list[subprocess.Popen]) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGUSR1 go on to every child still running."""

    def forward(signum, frame) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _exit_code(returncode: int, relay: _Relay) -> int:
    """A child's exit code as a shell reports it (killed by signal N: 128 + N), its output all
    relayed; 1 for a child JAX aborted because the job lost its coordination service."""
    relay.join()
    if relay.coordination_lost:
        return 1
    return returncode if returncode >= 0 else 128 - returncode
