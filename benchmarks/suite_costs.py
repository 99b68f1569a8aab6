"""A pytest plugin for `benchmarks/suite.py --by-module`: what each test cost its worker.

Loaded with `-p benchmarks.suite_costs` (from the repository's root) and SUITE_COSTS_DIR set:
each worker appends one JSON line a test to SUITE_COSTS_DIR/<worker>.jsonl, with the CPU seconds
of the worker itself and of the processes it waited for during the test (`podracer train` in a
subprocess, the jobs of several processes), the wall seconds, and what JAX spent in the worker:
XLA's compilations (how many, their seconds) and tracing and lowering (seconds). A fixture's
setup counts towards the first test that uses it. PBT's members run in Ray's processes, which
no test waits for: their CPU shows in no line.

The XLA figures come from private names of jax 0.10 (`jax._src.compiler`,
`jax._src.monitoring`); on a JAX without them the lines carry the CPU and wall alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import time

import pytest

_DIR = os.environ.get("SUITE_COSTS_DIR")
_JAX = {"xla_compiles": 0, "xla_s": 0.0, "trace_lower_s": 0.0}
_TRACE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _watch_jax() -> bool:
    try:
        from jax._src import compiler, monitoring
    except ImportError:
        return False
    compile_and_load = getattr(compiler, "backend_compile_and_load", None)
    if compile_and_load is None:
        return False

    def timed_compile(*args, **kwargs):
        # Wall seconds: XLA compiles in a thread of its own while the caller waits (the tests
        # give XLA one thread, tests/conftest.py), so on a worker they are its CPU seconds.
        started = time.monotonic()
        try:
            return compile_and_load(*args, **kwargs)
        finally:
            _JAX["xla_compiles"] += 1
            _JAX["xla_s"] += time.monotonic() - started

    def on_duration(event: str, duration: float, **_) -> None:
        if event in _TRACE_EVENTS:
            _JAX["trace_lower_s"] += duration

    compiler.backend_compile_and_load = timed_compile
    monitoring.register_event_duration_secs_listener(on_duration)
    return True


def pytest_configure(config):
    if _DIR:
        config._suite_costs_jax = _watch_jax()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _DIR:
        return (yield)
    own, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    jax_before, started = dict(_JAX), time.monotonic()
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "cpu_s": _cpu(resource.RUSAGE_SELF) - own,
            "children_cpu_s": _cpu(resource.RUSAGE_CHILDREN) - children,
            "wall_s": time.monotonic() - started,
        }
        if item.config._suite_costs_jax:
            line.update({key: _JAX[key] - jax_before[key] for key in _JAX})
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with (pathlib.Path(_DIR) / f"{worker}.jsonl").open("a") as out:
            out.write(json.dumps(line) + "\n")
