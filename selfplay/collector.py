"""Python's garbage collector in a process that imports JAX and compiles programs.

    with collector_paused():          # around a command's heavy imports
        from selfplay.train import train
    quiet_garbage_collector()         # once they are done, before the programs compile

Importing JAX, flax, optax, orbax and the arena makes some 140,000 objects, nearly none of them
garbage, and the collector's defaults walk them again and again while they are made: 337 passes,
0.24-0.27 s of the imports' 1.9-2.2 s of CPU (`gc.callbacks`, three runs, 2026-12-02), which every
process of `podracer train` spends before its first program. Paused, one pass follows instead
(`quiet_garbage_collector`'s). This module imports nothing heavy, so a command can use it before
its imports.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator

__all__ = ["collector_paused", "quiet_garbage_collector"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside the block; the collector as it was after it, whatever
    the block raised (a process that goes on, a test's, keeps its collector)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@functools.cache  # once a process: a later call would freeze what the run made since
def quiet_garbage_collector() -> None:
    """Collect Python's garbage less often while programs compile: tracing and lowering a
    search or an update allocate millions of short-lived objects, and the collector's defaults
    (a pass every 700 allocations, full passes over every object the imports made) took 5-8% of
    a compile-heavy run's CPU (`perf`, 2026-11-28). Call it once the heavy imports are done:
    what exists then (modules, classes) is frozen out of every later pass, and the young
    generation is collected every 50,000 allocations (within 2% of the memory of the defaults
    in the tests measured)."""
    gc.collect()  # nothing that is garbage now gets frozen
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
