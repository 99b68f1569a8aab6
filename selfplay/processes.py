"""Training over several processes (`jax.distributed`): joining the job, agreeing on the config,
and the per-update agreement that keeps the processes in lockstep.

    initialize(...)          before any other JAX call: joins the job (JAX detects SLURM, MPI
                             and TPU pod slices, or takes an explicit coordinator)
    check_same_config(d)     every process must train the same config: the first key that
                             differs from process 0's is named, in every process
    share_usage_error(e)     bad input found by one process (a run directory it cannot write)
                             is reported by every process, which all exit with it
    lockstep = Lockstep()    every round of the run loop: `agree(...)` shares each process's
                             stop reason, whether it holds a batch, whether a log line is due,
                             its frames and its replay's inserts (through the coordination
                             service, not the devices);
                             all go on, learn, log and stop together

A collective that one process never reaches hangs the others, so every collective of a run (the
update, a log line's sums, a checkpoint) happens in a round all processes agreed on. A process
that dies outright is seen at once by `PeerWatch` (its connection to process 0 closes without a
goodbye) or by the next collective (gloo: the peer's connection is reset); a host lost without
closing its connections, or cut off by its link, by the watch's missing heartbeats
(`WATCH_SILENCE_S`): the others end, never hang. The CPU collectives listen on an address the
other hosts reach (`place_collectives`). The launcher of several local processes is
`selfplay.launch`.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import ipaddress
import json
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from configs import UsageError
from selfplay import _jax_internals
from selfplay.checkpoints import flatten_dict
from selfplay.launch import check_job_flags
from selfplay.lifetime import check_finite

__all__ = [
    "HEARTBEAT_S",
    "WATCH_BEAT_S",
    "WATCH_SILENCE_S",
    "CollectivesPlace",
    "Agreement",
    "Lockstep",
    "CollectivesUnreachable",
    "PeerLost",
    "PeerWatch",
    "check_replicas_agree",
    "check_same_config",
    "share_usage_error",
    "fingerprint",
    "initialize",
    "place_collectives",
    "is_distributed",
    "peer_lost",
    "watch_peers",
]

# JAX declares a process that sends its coordinator no heartbeat this long dead, and aborts the job.
HEARTBEAT_S = 30
# Each process's `PeerWatch` hears from the processes it watches every WATCH_BEAT_S; one silent
# for WATCH_SILENCE_S is lost (a host gone, a link cut): long enough for a link's brief flap or
# a loaded host's pause, and well before JAX's own heartbeats abort the processes.
WATCH_BEAT_S = 1.0
WATCH_SILENCE_S = 10.0
# Process 0 holds the job's coordination service, and JAX aborts every other process the moment
# it goes: where the others are leaving too (a stop passed on), it waits this long first, so
# they leave with their own line and exit code.
LEAVE_LAST_S = 1.0
REASON_BYTES = 480  # a stop reason's room in the gather that shares it


class PeerLost(RuntimeError):
    """Another process of the job died or stopped answering in a collective."""


class CollectivesUnreachable(PeerLost):
    """The collectives (gloo) could not connect this process to another: an address that does
    not reach it (a usage error: the job cannot start)."""


class PeerWatch:
    """Ends this process at once, with one line (`on_lost`), when another process of the job
    dies outright (killed, crashed, out of memory) or is cut off (its host lost, a link down),
    wherever this one waits: in the per-update agreement, in a checkpoint's barrier, in a
    collective. JAX itself only notices a lost process after `HEARTBEAT_S` without
    heartbeats, and then aborts every other process with a C++ stack trace.

    Process 0 listens on a free port of its host (`listen`), every other process connects to it
    (`connect`): a star of plain TCP connections that carry a heartbeat line each way every
    `beat_s`. A process leaving through Python's exit (the run's end, a usage error, an error
    it reports) says goodbye first (`close`, at exit); a connection that closes without one is
    a process that died, and one silent for `silence_s` is a process cut off (a link down, a
    host gone without closing its connections). Process 0 tells the others which one before
    it goes; a process that loses process 0 knows it by itself.
    """

    # The lines (each ends with a newline): a heartbeat; leaving on purpose; leaving, and the
    # job cannot go on without this process, for the reason that follows.
    BEAT, GOODBYE, STOP = b"beat", b"bye", b"stop"

    def __init__(
        self,
        index: int,
        count: int,
        on_lost: Callable[[str], None],
        silence_s: float = WATCH_SILENCE_S,
        beat_s: float = WATCH_BEAT_S,
    ):
        self.index, self.count, self.on_lost = index, count, on_lost
        self.silence_s, self.beat_s = silence_s, beat_s
        self._peers: dict[socket.socket, int] = {}  # connection -> the process at its other end
        self._heard: dict[socket.socket, float] = {}  # connection -> when it last said anything
        self._partial: dict[socket.socket, bytes] = {}  # a line's start, until its newline
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._closed = False

    def listen(self) -> int:
        """Process 0: listens for the others' connections on every interface; the port."""
        if socket.has_dualstack_ipv6():
            listener = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            listener = socket.create_server(("", 0))
        self._listener = listener
        self._start()
        return listener.getsockname()[1]

    def connect(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        """A process other than 0: connects to process 0's watch (OSError if it cannot)."""
        connection = socket.create_connection((host, port), timeout=timeout_s)
        connection.sendall(f"{self.index}\n".encode())
        connection.settimeout(None)
        self._add(connection, 0)
        self._start()

    def close(self, stop_job: str | None = None) -> None:
        """Says goodbye on every connection: this process leaves on purpose. With `stop_job`,
        the job cannot go on without it: every other process stops with that line."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            line = self.GOODBYE if stop_job is None else self.STOP + b" " + stop_job.encode()
            self._send_all(line.replace(b"\n", b" "))
        if stop_job is not None and self.index == 0 and self._peers:
            time.sleep(LEAVE_LAST_S)  # the others stop on this line: they leave first

    def _add(self, connection: socket.socket, peer: int) -> None:
        self._peers[connection] = peer
        self._heard[connection] = time.monotonic()

    def _drop(self, connection: socket.socket) -> None:
        del self._peers[connection], self._heard[connection]
        self._partial.pop(connection, None)
        connection.close()

    def _send_all(self, line: bytes, but: int | None = None) -> None:
        for connection, peer in list(self._peers.items()):
            if peer == but:
                continue
            try:  # never blocks: a full buffer (a link down) just misses a beat
                connection.send(line + b"\n", socket.MSG_DONTWAIT)
            except OSError:
                pass  # that peer is gone already: its end of the connection says so

    def _start(self) -> None:
        threading.Thread(target=self._watch, name="peer-watch", daemon=True).start()

    def _watch(self) -> None:
        last_beat = last_turn = time.monotonic()
        while True:
            ends = list(self._peers) + ([self._listener] if self._listener is not None else [])
            if not ends:
                return
            readable, _, _ = select.select(ends, [], [], self.beat_s)
            now = time.monotonic()
            if now - last_turn > 3 * self.beat_s:
                # This thread itself was held (a starved or stopped process): the peers'
                # silence is counted from now, not from before the pause.
                self._heard = dict.fromkeys(self._heard, now)
            last_turn = now
            if now - last_beat >= self.beat_s:
                with self._lock:
                    if not self._closed:
                        self._send_all(self.BEAT)
                last_beat = now
            for end in readable:
                if end is self._listener:
                    self._accept()
                elif not self._read(end, now):
                    return
            for connection, heard in list(self._heard.items()):
                if now - heard > self.silence_s:
                    peer = self._peers[connection]
                    self._lost(peer, f"nothing heard from it for {self.silence_s:g} s")
                    return

    def _read(self, connection: socket.socket, now: float) -> bool:
        """Takes what `connection` sent; False once a peer is lost (this watch ends)."""
        peer = self._peers[connection]
        try:
            data = connection.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._lost(peer, "its connection closed without a goodbye")
            return False
        self._heard[connection] = now
        *lines, self._partial[connection] = (self._partial.get(connection, b"") + data).split(b"\n")
        for line in lines:
            if line == self.GOODBYE:
                self._drop(connection)
                return True
            if line.startswith(self.STOP + b" "):
                reason = line[len(self.STOP) + 1 :].decode(errors="replace")
                self._stop(reason, peer, peer_leaving=True)
                return False
        return True

    def _accept(self) -> None:
        assert self._listener is not None
        connection, _ = self._listener.accept()
        connection.settimeout(10.0)
        try:
            index = int(connection.recv(64).split(b"\n")[0])
        except (OSError, ValueError):
            connection.close()
            return
        connection.settimeout(None)
        self._add(connection, index)
        if len(self._peers) == self.count - 1:  # everyone is here
            self._listener.close()
            self._listener = None

    def _lost(self, peer: int, why: str) -> None:
        self._stop(
            f"another process of the job died or stopped answering (process {peer}: {why})", peer
        )

    def _stop(self, message: str, peer: int, peer_leaving: bool = False) -> None:
        """The job cannot go on (`peer` is lost, or stopped it and is `peer_leaving`):
        `on_lost(message)`, once process 0 has passed `message` on to the others (they hear
        only from process 0) and, where any of them is still there to leave, given them
        `LEAVE_LAST_S` to do so."""
        with self._lock:
            if self._closed:
                return  # this process is leaving anyway
            if self.index == 0:
                self._send_all(self.STOP + b" " + message.encode(), but=peer)
        if self.index == 0 and (peer_leaving or self.count > 2):
            time.sleep(LEAVE_LAST_S)
        self.on_lost(message)


def watch_peers(on_lost: Callable[[str], None], timeout_s: float = 60.0) -> PeerWatch | None:
    """Starts this process's `PeerWatch` once the job is joined (its port is shared through the
    coordination service's key-value store); says goodbye at exit. None for one process, or
    where a process cannot reach process 0's port (a firewall lets only the coordinator's
    through): it says so in one line, and the heartbeats alone find a dead process."""
    if not is_distributed():
        return None
    state = _jax_internals.distributed_state()  # the job's client and coordinator
    client = state.client
    index, count = jax.process_index(), jax.process_count()
    watch = PeerWatch(index, count, on_lost)
    key = "podracer/peer_watch/port"
    if index == 0:
        client.key_value_set(key, str(watch.listen()))
    else:
        port = int(client.blocking_key_value_get(key, int(timeout_s * 1000)))
        host = state.coordinator_address.rpartition(":")[0].strip("[]")
        try:
            watch.connect(host, port)
        except OSError as error:
            print(
                f"process {index}: cannot reach process 0's watch at {host}:{port} ({error}); "
                f"a process that dies is found by the heartbeats, within {HEARTBEAT_S} s",
                flush=True,
            )
            return None
    atexit.register(watch.close)  # before the interpreter's end shuts the JAX client down
    return watch


def is_distributed() -> bool:
    return jax.process_count() > 1


def _local_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    return len([n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()])


def _processes_on_this_host() -> int | None:
    """How many processes of the job run on this host, where the launcher says (SLURM, Open
    MPI); None where it does not."""
    for name in ("SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        value = os.environ.get(name, "").split("(")[0]
        if value.isdigit():
            return int(value)
    return None


def _mpi_launcher() -> str | None:
    """The MPI launcher that started this process where JAX cannot detect it by itself, else None.

    JAX detects Open MPI's mpirun only up to version 4 (`OMPI_MCA_orte_hnp_uri`); Open MPI 5's
    mpirun (PRRTE) and MPICH's mpiexec (Hydra) set only their own variables, and JAX finds those
    jobs through mpi4py. An mpirun inside a SLURM allocation inherits the batch step's SLURM_*
    variables (every process would be SLURM's task 0), so MPI's variables come first, as in JAX."""
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        return None  # Open MPI 4: JAX's own detection
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        return "Open MPI's mpirun"
    if "MPI_LOCALNRANKS" in os.environ:
        return "MPICH's mpiexec"
    return None


def _detection_method() -> str | None:
    """`cluster_detection_method` for `jax.distributed.initialize` under `--distributed`."""
    launcher = _mpi_launcher()
    if launcher is None:
        return None
    if importlib.util.find_spec("mpi4py") is None:
        raise UsageError(
            f"started by {launcher}: JAX joins such a job through mpi4py, which is not installed "
            "(pip install 'podracer[mpi]', built against the same MPI)"
        )
    return "mpi4py"


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: int = 300,
    collectives_interface: str | None = None,
) -> None:
    """Joins the `jax.distributed` job: the explicit coordinator, process count and id, or what
    JAX detects (SLURM's srun, Open MPI's and MPICH's mpirun, a TPU pod slice; MPI jobs other
    than Open MPI 4's through mpi4py, `_mpi_launcher`). Must come before anything
    starts JAX's backends. A coordinator that does not answer within `timeout_s` is a UsageError
    naming it.

    JAX gives each process one GPU under SLURM and Open MPI unless told otherwise; where one
    process runs per host, it takes all of the host's GPUs.

    The CPU collectives (gloo) listen on the address that reaches the coordinator, or on
    `collectives_interface`'s (`place_collectives`).

    Where JAX's client finds the job's coordination service in error (the coordinator's host
    died), it aborts the process from a C++ thread (a Python callback cannot stop it: jaxlib
    cannot hand one the error), so `podracer train` runs a job's process under a supervisor
    that says so in one line (`selfplay.launch.supervise`)."""
    check_job_flags(coordinator, num_processes, process_id)
    if collectives_interface is not None:
        _interface_address(collectives_interface)  # refused before joining the job
    # JAX aborts the process (no exception, a stack trace) when the coordinator never answers:
    # ask first.
    if coordinator is not None and process_id == 0:
        _check_coordinator_is_here(coordinator)
    elif coordinator is not None:
        _wait_for_coordinator(coordinator, timeout_s)
    kwargs: dict[str, Any] = {}
    if coordinator is None:
        kwargs["cluster_detection_method"] = _detection_method()
    gpus = _local_gpu_count()
    if gpus > 1 and _processes_on_this_host() == 1:
        kwargs["local_device_ids"] = list(range(gpus))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
            heartbeat_timeout_seconds=HEARTBEAT_S,
            shutdown_timeout_seconds=HEARTBEAT_S,
            **kwargs,
        )
    except (RuntimeError, ValueError) as error:
        if coordinator is None and "coordinator_address should be defined" in str(error):
            raise UsageError(
                "--distributed found no job to join (not started by srun, mpirun or mpiexec, nor "
                "on a TPU pod slice): name it with --coordinator, --num-processes and "
                "--process-id, or use --local-processes N on one machine"
            ) from None
        where = coordinator or "the coordinator the cluster names"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"could not join the job at {where} within {timeout_s} s "
            f"(is process 0 running and reachable?): {first}"
        ) from None
    _jax_internals.cache_programs_of_this_process()
    place_collectives(collectives_interface, timeout_s)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--coordinator must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Returns once `address` (HOST:PORT) accepts a connection; UsageError after `timeout_s`."""
    host, port = _split_address(address)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            left = max(0.1, min(1.0, deadline - time.monotonic()))
            with socket.create_connection((host, port), timeout=left):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"could not join the job at {address} within {timeout_s:g} s "
                    f"(is process 0 running and reachable?): {error.strerror or error}"
                ) from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _check_coordinator_is_here(address: str) -> None:
    """Process 0 runs the coordinator: UsageError unless `address`'s host is this host's."""
    host, _ = _split_address(address)
    try:
        resolved = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError as error:
        raise UsageError(f"--coordinator {address}: {host} is unknown ({error.strerror})") from None
    for family, _, _, _, where in resolved:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((where[0], 0))  # only an address of this host can be bound
                return
            except OSError:
                continue
    raise UsageError(
        f"--coordinator {address}: process 0 runs the coordinator, and {host} is not an "
        "address of this host (give every process process 0's host and a free port there)"
    )


class CollectivesPlace(NamedTuple):
    """Where this process's CPU collectives (gloo) listen, and why there."""

    address: str  # the address every other process connects to
    why: str  # how it was chosen, for the line that names it when a peer cannot connect


_place: CollectivesPlace | None = None  # this process's, once `place_collectives` has run


def place_collectives(interface: str | None, timeout_s: float) -> CollectivesPlace:
    """Opens this process's CPU collectives (gloo) on the address the other processes reach it
    at, before JAX's CPU backend starts: `interface`'s IPv4 address where one is named, else
    the address of this host's route to the coordinator. JAX (0.10) lets gloo pick by itself,
    from this host's name: where the hosts file maps it to loopback (as on many clusters),
    every process offers 127.0.0.1 and none can reach another. Loopback is kept only where
    every process's route to the coordinator is loopback (all on one host); the coordinator's
    own host, whose route to itself may be loopback, takes its route to another process."""
    global _place
    state = _jax_internals.distributed_state()
    client = state.client
    if interface is not None:
        place = CollectivesPlace(_interface_address(interface), f"interface {interface}'s")
    else:
        host = state.coordinator_address.rpartition(":")[0].strip("[]")
        place = CollectivesPlace(_address_toward(host), "its route to the coordinator's")
    key = "podracer/collectives/address"
    client.key_value_set(f"{key}/{state.process_id}", place.address)
    try:
        offered = [
            client.blocking_key_value_get(f"{key}/{i}", int(timeout_s * 1000))
            for i in range(state.num_processes)
        ]
    except Exception as error:  # noqa: BLE001 - the client raises several types
        raise UsageError(
            f"the job's processes did not share their addresses within {timeout_s:g} s: "
            f"{_first_line(error)}"
        ) from None
    remote = next((a for a in offered if not _is_loopback(a)), None)
    if interface is None and _is_loopback(place.address) and remote is not None:
        place = CollectivesPlace(_address_toward(remote), "its route to another host's")
    try:
        collectives = _jax_internals.make_gloo_collectives(client, place.address)
    except Exception as error:  # noqa: BLE001 - gloo raises whatever its socket calls do
        raise UsageError(
            f"could not open the collectives (gloo) on {place.address}: {_first_line(error)}"
        ) from None
    _jax_internals.use_cpu_collectives(collectives)  # no public way to give gloo its address
    _place = place
    return place


def _interface_address(name: str) -> str:
    """The IPv4 address of this host's network interface `name` (UsageError naming the host's
    interfaces where it has none such)."""
    import fcntl
    import struct

    siocgifaddr = 0x8915  # Linux's ioctl for an interface's address (gloo runs on Linux only)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            answer = fcntl.ioctl(probe.fileno(), siocgifaddr, struct.pack("256s", name.encode()))
        return socket.inet_ntoa(answer[20:24])
    except (OSError, ValueError) as error:
        names = ", ".join(n for _, n in socket.if_nameindex())
        why = error.strerror if isinstance(error, OSError) else error
        raise UsageError(
            f"--collectives-interface {name}: no IPv4 address on an interface of that name "
            f"here ({why}); this host's interfaces: {names}"
        ) from None


def _address_toward(host: str) -> str:
    """This host's address on its route to `host` (a UDP socket's connect: nothing is sent)."""
    family, _, _, _, where = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(where)
        return probe.getsockname()[0]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address.split("%")[0]).is_loopback


def _gather(values: np.ndarray) -> np.ndarray:
    """`values` of every process, stacked in process order: [processes, ...]. A dead peer raises
    `PeerLost`."""
    from jax.experimental import multihost_utils

    try:
        return np.asarray(multihost_utils.process_allgather(values))
    except Exception as error:  # noqa: BLE001 - gloo and the runtime raise several types
        raise peer_lost(error) from error


def peer_lost(error: BaseException) -> PeerLost:
    """What an error a collective or the coordination service raised means: a `PeerLost`, or a
    `CollectivesUnreachable` naming the address gloo tried, each with its one line."""
    unreachable = _unreachable_message(str(error))
    if unreachable is not None:
        return CollectivesUnreachable(unreachable)
    return PeerLost(
        "another process of the job died or stopped answering "
        f"({type(error).__name__}: {_first_line(error) if str(error).strip() else ''})"
    )


def _unreachable_message(text: str) -> str | None:
    """The line for gloo's failure to connect this process to another (None for other errors):
    the address it tried, and the one this process offers."""
    if "Gloo context initialization failed" not in text:
        return None
    first = text.strip().splitlines()[0]
    remote = re.search(r"remote=(\S+?)(\$\d+)?(,|$)", first)
    where = f" at {remote.group(1)}" if remote else ""
    cause = re.sub(r", remote=.*$", "", first.rpartition("] ")[2]) or first
    offered = f"; it offers {_place.address} ({_place.why} address)" if _place else ""
    return (
        f"the collectives (gloo) of process {jax.process_index()} could not connect to another "
        f"process{where} ({cause})"
        f"{offered}: every process must reach every other at the address it offers "
        "(--collectives-interface names the interface to use)"
    )


def _encode(text: str, size: int) -> np.ndarray:
    raw = text.encode()[:size]
    return np.frombuffer(raw.ljust(size, b"\0"), np.uint8)


def _decode(row: np.ndarray) -> str:
    return bytes(row).rstrip(b"\0").decode(errors="replace")


def check_same_config(config: dict) -> None:
    """Raises UsageError, in every process, when any process's config differs from process 0's:
    the first differing key (in sorted order) and the process are named."""
    if not is_distributed():
        return
    from jax.experimental import multihost_utils

    text = json.dumps(config, sort_keys=True)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
    digests = _gather(digest)
    if all((d == digests[0]).all() for d in digests):
        return
    # Someone differs: share process 0's config to name the key.
    length = int(multihost_utils.broadcast_one_to_all(np.int64(len(text.encode()))))
    reference = _decode(
        np.asarray(multihost_utils.broadcast_one_to_all(_encode(text, max(length, 1))))
    )
    ours, theirs = flatten_dict(config), flatten_dict(json.loads(reference))
    missing = object()
    mine = sorted(
        k for k in ours.keys() | theirs.keys() if ours.get(k, missing) != theirs.get(k, missing)
    )
    first = mine[0] if mine else ""
    keys = _gather(_encode(first, REASON_BYTES))
    for process, row in enumerate(keys):
        key = _decode(row)
        if key:
            raise UsageError(
                f"the processes disagree on the config: process {process} has a different "
                f"{key} than process 0; every process must get the same config and overrides"
            )
    raise UsageError("the processes disagree on the config (same keys, different text)")


def share_usage_error(error: UsageError | None) -> None:
    """Raises UsageError in every process when any process passes one (its own, or the first
    failing process's as 'process I: ...'); returns when none does. Without it, a process that
    refuses its input leaves the others waiting at the job's next collective."""
    if not is_distributed():
        if error is not None:
            raise error
        return
    failed = _gather(np.array([error is not None], np.int64))[:, 0]  # [processes]
    if not failed.any():
        return
    messages = _gather(_encode(str(error) if error else "", REASON_BYTES))
    if error is not None:
        raise error
    first = int(np.flatnonzero(failed)[0])
    raise UsageError(f"process {first}: {_decode(messages[first])}")


class Agreement(NamedTuple):
    """What all processes agreed on in one round."""

    stop_reason: str | None  # the first process's (in process order) reason to stop, if any
    ready: bool  # every process holds a batch: the update may run
    log_due: bool  # process 0's clock says a log line is due
    frames: int  # environment steps of all processes' actors
    frames_by_process: tuple[int, ...] = ()  # each process's share of `frames`
    inserts_by_process: tuple[int, ...] = ()  # each process's replay inserts (its rate limiter's)


class Lockstep:
    """The per-round agreement of a run's processes (one process: its own decisions, no
    collective). A process keeps its own reason to stop; another's reaches it as 'process I:
    reason', but for the `shared` reasons (the limits), which stop every process alike.

    The rounds go through the coordination service's key-value store (`jax.distributed`'s,
    which every job has), not through a collective on the devices: a device collective waits
    behind the update in flight on the same device, so an agreement there would serialise the
    host with the device every update (measured: an all-gather issued after an 87 ms
    computation returned after 89 ms) and end the learner's pipelining. Process 0 collects every
    process's row of a round and publishes them together; the others read that.
    """

    _instances = 0  # each Lockstep of a job has its own keys (made in the same order everywhere)

    def __init__(self, shared: tuple[str, ...] = (), timeout_s: float = 600.0):
        self.shared = shared
        self.timeout_ms = int(timeout_s * 1000)
        self._round = 0
        self._prefix = f"podracer/lockstep/{Lockstep._instances}"
        Lockstep._instances += 1

    def agree(
        self, stop_reason: str | None, ready: bool, log_due: bool, frames: int, inserts: int = 0
    ) -> Agreement:
        if not is_distributed():
            return Agreement(stop_reason, ready, log_due, frames, (frames,), (inserts,))
        mine = [stop_reason or "", bool(ready), bool(log_due), int(frames), int(inserts)]
        rows = self._exchange(json.dumps(mine))  # [processes] of `mine`
        reason = None
        stopping = [i for i, row in enumerate(rows) if row[0]]
        if stop_reason:
            reason = stop_reason
        elif stopping:
            text = rows[stopping[0]][0]
            reason = text if text in self.shared else f"process {stopping[0]}: {text}"
        return Agreement(
            reason,
            all(row[1] for row in rows),
            bool(rows[0][2]),
            sum(row[3] for row in rows),
            tuple(row[3] for row in rows),
            tuple(row[4] for row in rows),
        )

    def _exchange(self, mine: str) -> list[Any]:
        """Every process's `mine` of this round, in process order."""
        client = _jax_internals.coordination_client()
        index, count = jax.process_index(), jax.process_count()
        round_key = f"{self._prefix}/{self._round}"
        self._round += 1
        try:
            if index != 0:
                client.key_value_set(f"{round_key}/row/{index}", mine)
                everyone = client.blocking_key_value_get(f"{round_key}/all", self.timeout_ms)
                return json.loads(everyone)
            rows = [mine] + [
                client.blocking_key_value_get(f"{round_key}/row/{i}", self.timeout_ms)
                for i in range(1, count)
            ]
            client.key_value_set(f"{round_key}/all", json.dumps([json.loads(r) for r in rows]))
            # Every process has read the last round's rows (it wrote this round's after).
            for i in range(1, count):
                client.key_value_delete(f"{round_key}/row/{i}")
            if self._round > 1:
                client.key_value_delete(f"{self._prefix}/{self._round - 2}/all")
            return [json.loads(r) for r in rows]
        except Exception as error:  # noqa: BLE001 - the client raises several types
            raise peer_lost(error) from error

    def rows(self, values: np.ndarray) -> np.ndarray:
        """[processes, N] float64: every process's `values` ([N] numbers), in process order.
        A round like `agree` (every process calls it in the same round), through the key-value
        store: the log line's figures never wait behind a search or an update on a device."""
        mine = np.asarray(values, np.float64)  # [N]
        assert mine.ndim == 1, mine.shape
        if not is_distributed():
            return mine[None]
        # JSON writes a float64 by its shortest repr: it reads back bit for bit.
        return np.asarray(self._exchange(json.dumps(mine.tolist())), np.float64)


def fingerprint(tree: Any) -> np.ndarray:
    """Two float64 sums per leaf of `tree` (of the values, and weighted by position): equal
    replicas give equal fingerprints, bit for bit."""
    rows = []
    for leaf in jax.tree.leaves(tree):
        x = np.asarray(leaf, np.float64).ravel()
        rows.append([x.sum(), (x * np.arange(1, x.size + 1)).sum()])
    return np.asarray(rows, np.float64)


def check_replicas_agree(replicated: Any, step: int | None = None) -> None:
    """Raises RuntimeError if the copies of the replicated parameters `replicated` (global
    arrays, one copy on each device) differ: any of this process's devices from its first, or
    any process's first from process 0's (a lost update, a non-deterministic reduction);
    `Diverged` if they hold NaN or inf (taken at update `step`)."""
    leaves = jax.tree.leaves(replicated)
    copies = [
        fingerprint([leaf.addressable_shards[d].data for leaf in leaves])
        for d in range(len(leaves[0].addressable_shards))
    ]
    # NaN differs from itself: diverged replicas would read as replicas that disagree. (A
    # fingerprint of float32 values is finite exactly when they are: float64 sums cannot
    # overflow.)
    check_finite(f"the parameters at update {step}", [copies[0]])
    local = [d for d in range(len(copies)) if not np.array_equal(copies[d], copies[0])]
    if local:
        raise RuntimeError(
            f"the parameters on local devices {local} of process {jax.process_index()} differ "
            f"from its first device's"
        )
    if not is_distributed():
        return
    prints = _gather(copies[0])
    differ = [i for i in range(len(prints)) if not np.array_equal(prints[i], prints[0])]
    if differ:
        raise RuntimeError(f"the parameters of processes {differ} differ from process 0's")
