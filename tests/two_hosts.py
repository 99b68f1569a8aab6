"""Two "hosts" on this machine for tests of a job across hosts: two network namespaces, each
with its own address on the two ends of a veth pair, as two machines on one link. A test runs a
process on a host (`ip netns exec`), cuts the link and mends it (`ip link set down/up`: a real
partition), or kills everything on a host. Only addresses inside the namespaces are used.

    hosts = TwoHosts.create()        # pytest.skip with one line where namespaces cannot be made
    process = hosts.start(0, argv)   # argv runs on host 0, at hosts.addresses[0]
    hosts.cut(); hosts.mend(); hosts.kill(0)
    hosts.close()                    # kills what still runs on either host, deletes both

Each host has its own hosts file: `HOST0_NAME` names host 0, as the loopback address on host 0
itself (as the hosts file of many cluster machines names the machine) and as its link address
on host 1. Namespaces are named `NAME_PREFIX<pid>-<n>-<host>`; `create` first deletes those of
processes no longer running (a test run killed before its teardown), never another's.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

__all__ = ["HOST0_NAME", "NAME_PREFIX", "TwoHosts"]

NAME_PREFIX = "podracer-test-"
HOST0_NAME = "podracer-host0"
_LINK = "link0"  # each namespace's end of the veth pair
_HOSTS_FILES = Path("/etc/netns")  # `ip netns exec NAME` mounts /etc/netns/NAME/hosts on /etc/hosts
_count = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in listing.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TwoHosts:
    """Host 0 at `addresses[0]`, host 1 at `addresses[1]`, on one link (a /24 of their own)."""

    addresses = ("10.231.7.1", "10.231.7.2")
    unused_address = "10.231.7.3"  # on the link, but no host answers there

    def __init__(self, names: tuple[str, str]):
        self.names = names

    @classmethod
    def create(cls) -> TwoHosts:
        """Makes both hosts and the link between them; skips the test (one line) where this
        machine cannot make network namespaces."""
        if shutil.which("ip") is None:
            pytest.skip("two hosts need network namespaces: no `ip` command (iproute2) here")
        if os.geteuid() != 0:
            pytest.skip("two hosts need network namespaces, which only root can make")
        _delete_stale()
        stem = f"{NAME_PREFIX}{os.getpid()}-{next(_count)}"
        hosts = cls((f"{stem}-0", f"{stem}-1"))
        try:
            hosts._build()
        except (OSError, subprocess.SubprocessError) as error:
            hosts.close()
            detail = getattr(error, "stderr", None) or error
            pytest.skip(f"two hosts need network namespaces, which failed here: {detail}".strip())
        return hosts

    def _build(self) -> None:
        for name in self.names:
            _ip("netns", "add", name)
        first, second = self.names
        _ip("link", "add", _LINK, "netns", first, "type", "veth", "peer", "name", _LINK,
            "netns", second)  # fmt: skip
        for name, address in zip(self.names, self.addresses, strict=True):
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", _LINK)
            _ip("-n", name, "link", "set", _LINK, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        for host, name in enumerate(self.names):
            folder = _HOSTS_FILES / name
            folder.mkdir(parents=True, exist_ok=True)
            host0 = "127.0.1.1" if host == 0 else self.addresses[0]
            (folder / "hosts").write_text(f"127.0.0.1 localhost\n{host0} {HOST0_NAME}\n")

    def start(self, host: int, argv: list[str], **popen) -> subprocess.Popen:
        """`argv` running on `host` (its network namespace; the same files and environment)."""
        return subprocess.Popen(["ip", "netns", "exec", self.names[host], *argv], **popen)

    def cut(self) -> None:
        """Takes the link down: neither host hears the other, and no connection is closed."""
        _ip("-n", self.names[0], "link", "set", _LINK, "down")

    def mend(self) -> None:
        _ip("-n", self.names[0], "link", "set", _LINK, "up")

    def kill(self, host: int) -> list[int]:
        """SIGKILLs every process on `host`, as if the machine died; their ids."""
        return _kill_all(self.names[host])

    def close(self) -> None:
        """Kills what still runs on either host, then deletes both (and the link with them)."""
        for name in self.names:
            _delete(name)


def _kill_all(name: str) -> list[int]:
    listing = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                             timeout=30)  # fmt: skip
    pids = [int(pid) for pid in listing.stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def _delete(name: str) -> None:
    if name in _namespaces():
        _kill_all(name)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
    shutil.rmtree(_HOSTS_FILES / name, ignore_errors=True)


def _delete_stale() -> None:
    """Deletes the namespaces (and hosts files) of test processes that no longer run."""
    names = set(_namespaces())
    if _HOSTS_FILES.is_dir():
        names |= {p.name for p in _HOSTS_FILES.iterdir()}
    for name in names:
        owner = name[len(NAME_PREFIX) :].split("-")[0]
        if name.startswith(NAME_PREFIX) and owner.isdigit() and not _alive(int(owner)):
            _delete(name)
