"""A run's compiled programs, built once a process for each config.

`jax.jit` keeps what it traced and compiled with the function it wraps: a new closure over the
same config is a new function, traced, lowered and compiled (or read back from the persistent
cache) again. A run builds its programs from its config (the agent's `act` and `make_batch`, the
update, Anakin's iteration), so a second run of the same config in one process (a resume, a
PBT member's next interval, an evaluation beside the run) takes the same function objects from
here and starts at once.

Two configs share their programs when they differ only in what no program reads: the run's
limits (`learner.max_updates`, `max_seconds`, `max_frames`), which the run loop alone compares.
Everything else is in the key, so a changed learning rate or search setting builds anew.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Hashable
from typing import Any

from configs import ExperimentConfig, to_dict

__all__ = ["LIMITS", "ProgramCache", "program_key"]

# The reasons a run ends by reaching what it was asked to do (any other ends it early): the
# learner's fields no program reads, which the run loop compares with its counts.
LIMITS = ("max_updates", "max_seconds", "max_frames")


def program_key(config: ExperimentConfig) -> str:
    """The part of `config` a run's programs are built from, as a hashable string: all of it but
    the run's limits."""
    fields = to_dict(config)
    for name in LIMITS:
        del fields["learner"][name]
    return json.dumps(fields, sort_keys=True)


class ProgramCache:
    """The newest `size` values built for their keys (least recently used out first);
    thread-safe, a value built once even when two threads ask for it at once."""

    def __init__(self, size: int = 4):
        self._size = size
        self._values: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.RLock()  # a build may ask another key of the same cache

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value for `key`, from `build()` the first time (an exception is raised and
        nothing kept)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = build()
            self._values[key] = value
            if len(self._values) > self._size:
                self._values.popitem(last=False)
            return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
