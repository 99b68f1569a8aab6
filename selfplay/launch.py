"""`podracer train --local-processes N`: N processes of one `jax.distributed` job on this machine.

Each child runs `python -m podracer train ARGS --coordinator 127.0.0.1:PORT --num-processes N
--process-id I` (a free port). On a CPU the cores are split between the children (each pinned to
its share with `sched_setaffinity`); with several GPUs each child sees its share of them
(`CUDA_VISIBLE_DEVICES`). The launcher forwards SIGINT, SIGTERM and SIGUSR1 to every child,
waits for all, names each one that failed, and returns the first failure's exit code (0 when all
succeeded). A child killed by a signal takes the others with it after `DIED_GRACE_S`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from selfplay.lifetime import STOP_SIGNALS

__all__ = ["free_port", "launch_local", "split_evenly"]

# Once a child has failed, how long the others get to see it (a collective fails at once; a
# silent peer takes the heartbeat timeout, selfplay.processes.HEARTBEAT_S) before they are killed.
GRACE_S = 90.0
# Once a child has been killed by a signal (SIGKILL, a crash): the others cannot checkpoint or
# go on without it, and one waiting in the agreement would only learn of it at the heartbeat
# timeout, so they get this long to say what they saw.
DIED_GRACE_S = 5.0


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


def launch_local(train_args: Sequence[str], num_processes: int) -> int:
    """Runs `podracer train *train_args` as `num_processes` processes of one job; returns the
    exit code of the first child that failed, or 0."""
    port = free_port()
    cores = sorted(os.sched_getaffinity(0))
    core_shares = split_evenly(cores, num_processes) if len(cores) >= num_processes else None
    gpus = _gpus()
    gpu_shares = split_evenly(gpus, num_processes) if len(gpus) >= num_processes > 1 else None
    children: list[subprocess.Popen] = []
    for i in range(num_processes):
        env = dict(os.environ)
        if gpu_shares is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_shares[i])
        share = core_shares[i] if core_shares is not None else None
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "podracer", "train", *train_args]
                + ["--coordinator", f"127.0.0.1:{port}"]
                + ["--num-processes", str(num_processes), "--process-id", str(i)],
                env=env,
                # Their own session: a Ctrl-C reaches them once, from here, not twice.
                start_new_session=True,
                preexec_fn=(lambda share=share: os.sched_setaffinity(0, share)) if share else None,
            )
        )

    def forward(signum, frame) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
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
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    # A child killed by signal N reads -N here: report it as a shell would, 128 + N.
    codes = [code if code >= 0 else 128 - code for code in (c.wait() for c in children)]
    for i, code in enumerate(codes):
        if code:
            name = f" ({signal.Signals(code - 128).name})" if 128 < code < 160 else ""
            print(f"podracer train: process {i} of {num_processes} exited with code {code}{name}")
    return next((code for code in codes if code), 0)
