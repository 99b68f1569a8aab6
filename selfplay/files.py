"""A run directory's files: a write that fails is one line (`WriteFailed`), and one process at a
time writes a run (`RunLock`).

Standard library only: a job's launcher and the tests' lock holders import it without JAX.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["LOCK_FILE", "RunLock", "WriteFailed", "describe_write_error", "write_atomically"]

LOCK_FILE = "run.lock"


class WriteFailed(OSError):
    """A file of the run could not be written (no space left, a file-size limit, a read-only
    folder): the run stops with this one line (`str(error)`), which names the file and the
    system's error; whatever was saved before it stays whole."""


def describe_write_error(error: BaseException) -> str:
    """The system's error behind a failed write, as one line: `[Errno 28] No space left on
    device` for an OSError or for orbax's and TensorStore's errors, which carry the code in their
    text (`[os_error_code='28']`); else the exception's first line."""
    if isinstance(error, OSError) and error.errno is not None:
        return f"[Errno {error.errno}] {error.strerror or os.strerror(error.errno)}"
    text = str(error)
    match = re.search(r"os_error_code='?(\d+)", text)
    if match:
        code = int(match.group(1))
        return f"[Errno {code}] {os.strerror(code)}"
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def probe_writable(directory: Path) -> None:
    """Creates and removes an empty file in `directory`: OSError where it cannot be written
    (read-only, not ours). The file is named by the pid: several processes may share the folder."""
    probe = Path(directory) / f".write-test-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def write_atomically(path: Path, tmp: Path, write: Callable[[BinaryIO], None], what: str) -> None:
    """`write(file)` into `tmp`, flushed to the disk, then renamed over `path`: a reader sees the
    old file or the new one, never a part. A failed write removes `tmp` and raises WriteFailed,
    "cannot write {what}: [Errno N] ...", one line."""
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise WriteFailed(f"cannot write {what}: {describe_write_error(error)}") from None


class RunLock:
    """The lock that makes one process the writer of a run directory: `fcntl.flock` on
    `<run_dir>/run.lock`, which holds the holder's pid, host and start time. The kernel releases
    it when the process ends, however it ends (a SIGKILL leaves nothing to clean up); the file
    stays, empty once released. A second process is refused at once with a line naming the
    holder. Over several processes of one job, process 0 takes it (it writes the run's files);
    the others and a launcher of local processes do not.
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir).absolute() / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock (the run directory must exist); nothing when already held.

        Raises:
          configs.UsageError: one line naming the process that holds it, or saying that the
            directory cannot be written.
        """
        from configs import UsageError

        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:  # a read-only folder, or one that is not ours to write
            raise UsageError(
                f"cannot write to run directory {self.path.parent}: {error.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_holder(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise WriteFailed(
                    f"cannot lock {self.path}: {describe_write_error(error)}"
                ) from None
            raise UsageError(
                f"{self.path.parent} is being trained by {holder or 'another process'}: "
                "one process writes a run; wait for it to stop, or use another --run-dir"
            ) from None
        self._fd = fd
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        line = f"process {os.getpid()} on {socket.gethostname()} since {started}\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line.encode(), 0)
        except OSError:
            pass  # the lock holds without its note (a full disk); the holder is then unnamed

    def release(self) -> None:
        """Releases the lock (empties the note first); nothing when not held."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
