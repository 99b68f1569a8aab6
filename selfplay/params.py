"""Parameter publishing from the learner to the actors, never blocking either side for long."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

__all__ = ["ParameterServer", "ParamsSnapshot"]


class ParamsSnapshot(NamedTuple):
    """One published version of the parameters."""

    params: Any  # the parameter pytree (on the requested actor device when devices were given)
    version: int  # the learner's version counter (e.g. its update step) when published


class _Published(NamedTuple):
    snapshot: ParamsSnapshot
    per_device: dict[jax.Device, Any]  # the actor devices' copies (empty without devices)


def _computed(tree: Any) -> bool:
    """Whether every array of `tree` holds its value already (asks; never waits)."""
    return all(
        leaf.is_ready() for leaf in jax.tree.leaves(tree) if callable(getattr(leaf, "is_ready", 0))
    )


class ParameterServer:
    """Holds the newest `(params, version)`: the learner publishes, actors read the latest.

    `publish` only swaps a reference under a lock (plus an asynchronous `device_put` per actor
    device), so the learner never waits for actors. `latest` never waits for the learner: it
    serves the newest version whose values (and actor-device copies) are computed, so an actor
    acts with a version one or two updates old, which is what Sebulba accepts in exchange for
    never stalling the environments. The learner publishes an update's output as soon as it is
    dispatched; serving that at once would make the actors' next search wait behind the update
    on the learner's device, and, across processes, behind the other processes' gradients too
    (the connect-four preset with its actors and learner on separate CPU devices: 7-10% more
    frames/s in one process; a 2-process job unchanged within the noise; BENCHMARKS.md).
    """

    def __init__(self, devices: Sequence[jax.Device] | None = None) -> None:
        """`devices`: the devices to copy each published version to once (the actors', and
        where reanalyse searches), so that readers do not transfer parameters at every step;
        None keeps the pytree as published."""
        self._devices = list(devices) if devices is not None else None
        self._cond = threading.Condition()
        self._served: _Published | None = None  # what `latest` gives
        self._pending: list[_Published] = []  # published after it, oldest first, not computed

    def publish(self, params: Any, version: int) -> None:
        """Makes `params` the newest version; versions must not go backwards."""
        # device_put dispatches asynchronously: the copies overlap with the learner's next update.
        # Never an alias: a device the learner shares would otherwise hand out the learner's
        # own buffers, which its next update may donate.
        per_device = (
            {d: jax.device_put(params, d, may_alias=False) for d in self._devices}
            if self._devices
            else {}
        )
        with self._cond:
            newest = self._newest()
            if newest is not None and version < newest.snapshot.version:
                raise ValueError(
                    f"published version {version} is older than version {newest.snapshot.version}"
                )
            self._pending.append(_Published(ParamsSnapshot(params, int(version)), per_device))
            if self._served is None:  # the first version is served at once, computed or not
                self._served = self._pending.pop(0)
            self._advance()  # keeps the pending list as short as the updates in flight
            self._cond.notify_all()

    def _newest(self) -> _Published | None:
        return self._pending[-1] if self._pending else self._served

    def _advance(self) -> None:
        """Serves the newest pending version that is computed (under the lock). The learner's
        updates finish in order, so the versions before it are dropped unserved."""
        for i in range(len(self._pending) - 1, -1, -1):
            published = self._pending[i]
            if _computed(published.per_device or published.snapshot.params):
                self._served = published
                del self._pending[: i + 1]
                return

    def latest(self, device: jax.Device | None = None) -> ParamsSnapshot | None:
        """The newest computed snapshot (on `device` if given), or None before the first
        publish. Never waits for a computation."""
        with self._cond:
            self._advance()
            served = self._served
        return self._on(served, device)

    def _on(self, published: _Published | None, device: jax.Device | None) -> ParamsSnapshot | None:
        if published is None or device is None:
            return None if published is None else published.snapshot
        if device not in published.per_device:
            raise ValueError(f"{device} is not one of the actor devices {self._devices}")
        return ParamsSnapshot(published.per_device[device], published.snapshot.version)

    @property
    def version(self) -> int | None:
        """The newest published version, or None before the first publish."""
        with self._cond:
            newest = self._newest()
            return None if newest is None else newest.snapshot.version

    def wait_for_version(
        self, min_version: int, timeout: float, device: jax.Device | None = None
    ) -> ParamsSnapshot | None:
        """Blocks until a version >= `min_version` is published and returns the newest one,
        computed or not (its use waits for it); None after `timeout` seconds.

        For an actor's first parameters, or for a learner that runs in lockstep in a test.
        """
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    (newest := self._newest()) is not None
                    and newest.snapshot.version >= min_version
                ),
                timeout,
            )
            newest = self._newest()
        return self._on(newest, device) if ok else None
