"""A pytest plugin for `benchmarks/suite.py --by-module`: what each test cost its worker.

Loaded with `-p benchmarks.suite_costs` (from the repository's root) and SUITE_COSTS_DIR set:
each worker appends one JSON line a test to SUITE_COSTS_DIR/<worker>.jsonl, with the CPU seconds
of the worker itself and of the processes it waited for during the test (`podracer train` in a
subprocess, the jobs of several processes), the wall seconds, and what JAX did in the worker:
the programs XLA compiled (`tests.fakes.compiled_programs`: those the persistent cache served
are not counted), the seconds of XLA's compilations with the cache's reads and writes around
them (JAX's `compile_or_get_cached`), and those of tracing and lowering (`jax.monitoring`'s
events). A fixture's setup counts
towards the first test that uses it. PBT's members run in Ray's processes, which no test waits
for: their CPU shows in no line.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import time

import pytest

_DIR = os.environ.get("SUITE_COSTS_DIR")
_SECONDS = {"xla_s": 0.0, "trace_lower_s": 0.0}
_EVENTS = {  # jax.monitoring's duration events (JAX 0.10) -> the line's field
    "/jax/core/compile/backend_compile_duration": "xla_s",  # compile_or_get_cached
    "/jax/core/compile/jaxpr_trace_duration": "trace_lower_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "trace_lower_s",
}


def cpu_seconds(who: int) -> float:
    """User + system CPU seconds of `who` (`resource.RUSAGE_SELF` or `RUSAGE_CHILDREN`)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _add_seconds(event: str, duration: float, **_) -> None:
    if event in _EVENTS:
        _SECONDS[_EVENTS[event]] += duration


def pytest_configure(config):
    if _DIR:  # after the initial conftests: tests/conftest.py has set JAX's flags
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_add_seconds)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _DIR:
        return (yield)
    from tests import fakes

    own, children = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    seconds_before, started = dict(_SECONDS), time.monotonic()
    with fakes.compiled_programs() as compiled:
        try:
            return (yield)
        finally:
            line = {
                "test": item.nodeid,
                "cpu_s": cpu_seconds(resource.RUSAGE_SELF) - own,
                "children_cpu_s": cpu_seconds(resource.RUSAGE_CHILDREN) - children,
                "wall_s": time.monotonic() - started,
                "xla_compiles": len(compiled),
                **{key: _SECONDS[key] - seconds_before[key] for key in _SECONDS},
            }
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with (pathlib.Path(_DIR) / f"{worker}.jsonl").open("a") as out:
                out.write(json.dumps(line) + "\n")
