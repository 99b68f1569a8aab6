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


class ParameterServer:
    """Holds the newest `(params, version)`: the learner publishes, actors read the latest.

    `publish` only swaps a reference under a lock (plus an asynchronous `device_put` per actor
    device), so the learner never waits for actors; `latest` never waits for the learner, so an
    actor may act with a version one or two updates old, which is what Sebulba accepts in exchange
    for never stalling the environments.
    """

    def __init__(self, devices: Sequence[jax.Device] | None = None) -> None:
        """`devices`: actor devices to copy each published version to once, so that actors do
        not transfer parameters at every step; None keeps the pytree as published."""
        self._devices = list(devices) if devices is not None else None
        self._cond = threading.Condition()
        self._snapshot: ParamsSnapshot | None = None
        self._per_device: dict[jax.Device, Any] = {}

    def publish(self, params: Any, version: int) -> None:
        """Makes `params` the newest version; versions must not go backwards."""
        # device_put dispatches asynchronously: the copies overlap with the learner's next update.
        per_device = {d: jax.device_put(params, d) for d in self._devices} if self._devices else {}
        with self._cond:
            if self._snapshot is not None and version < self._snapshot.version:
                raise ValueError(
                    f"published version {version} is older than version {self._snapshot.version}"
                )
            self._snapshot = ParamsSnapshot(params, int(version))
            self._per_device = per_device
            self._cond.notify_all()

    def latest(self, device: jax.Device | None = None) -> ParamsSnapshot | None:
        """The newest snapshot (on `device` if given), or None before the first publish."""
        with self._cond:
            snapshot, per_device = self._snapshot, self._per_device
        if snapshot is None or device is None:
            return snapshot
        if device not in per_device:
            raise ValueError(f"{device} is not one of the actor devices {self._devices}")
        return ParamsSnapshot(per_device[device], snapshot.version)

    @property
    def version(self) -> int | None:
        """The newest published version, or None before the first publish."""
        with self._cond:
            return None if self._snapshot is None else self._snapshot.version

    def wait_for_version(
        self, min_version: int, timeout: float, device: jax.Device | None = None
    ) -> ParamsSnapshot | None:
        """Blocks until a version >= `min_version` is published; None after `timeout` seconds.

        For an actor's first parameters, or for a learner that runs in lockstep in a test.
        """
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._snapshot is not None and self._snapshot.version >= min_version,
                timeout,
            )
        return self.latest(device) if ok else None
