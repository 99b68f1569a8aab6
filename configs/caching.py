"""Values built once a process for their keys, thread-safe: what jit's caches need.

`jax.jit` keeps what it traced and compiled with the function it wraps, so a builder of programs
or of their parts (an environment's batched functions, an agent's `act`) must hand every caller
the one function object it built for the same arguments. `built_once` is `functools.lru_cache`
made thread-safe: actor threads build their environments and programs at the same moment, and two
threads that both miss an `lru_cache` each build a function of their own, which JAX then compiles
twice. It lives here, below `envs` and `selfplay`, since both build programs.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ProgramCache", "built_once"]


class ProgramCache:
    """The newest `size` values built for their keys (least recently used out first; None: all
    of them); thread-safe, a value built once even when two threads ask for it at once."""

    def __init__(self, size: int | None = 4):
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
            if self._size is not None and len(self._values) > self._size:
                self._values.popitem(last=False)
            return value


def built_once(maxsize: int | None = None) -> Callable[[Callable], Callable]:
    """`functools.lru_cache(maxsize)` for a function that builds a program or its parts, made
    thread-safe: threads calling it at once with the same (hashable) arguments all get the one
    value the first of them built."""

    def decorate(build: Callable) -> Callable:
        cache = ProgramCache(maxsize)

        @functools.wraps(build)
        def cached(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items())))
            return cache.get(key, lambda: build(*args, **kwargs))

        return cached

    return decorate
