"""Test-wide settings: one XLA thread per test process (pytest -n 2 on 2 cores), XLA's fastest
compilation (LLVM at -O0, XLA's older loop emitters instead of its MLIR fusion emitters, one
codegen module: the suite's programs are compiled far more than they run, and the tests check
behaviour, not speed; the emitters alone took a third off a MuZero smoke run's CPU time), and a
persistent compilation cache so the many small training runs of
the suite compile each program once. All three are environment variables, so the subprocesses the
tests start (workers, `podracer train`, several processes of one job) share them. The cache keeps
every program, however quick to compile: the suite compiles the same small programs (an init, a
copy to the devices) in dozens of runs, and reading one back is faster (8% less CPU over
test_train, test_anakin and test_progress from cold than with a 0.5 s threshold).

Tests build their inputs and read their results in one jitted program or in NumPy, unless they
exist to run code operation by operation (jit against no jit, an error raised outside `jit`):
each operation run outside `jit` compiles a program of its own for each shape, and so does
`jnp.asarray` of host data (`jax.device_put` compiles nothing). The suite compiled 3,465
programs in its two workers where it now compiles 1,153 (BENCHMARKS.md)."""

import os
import pathlib
import tempfile
from importlib import metadata

import pytest

# XLA aborts the process on a flag it does not know: jaxlib 0.11 has no fusion-emitter switch
# (its CPU backend has only the newer emitters).
_JAXLIB = tuple(int(part) for part in metadata.version("jaxlib").split(".")[:2])
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=0 "
    + ("--xla_cpu_use_fusion_emitters=false " if _JAXLIB < (0, 11) else "")
    + "--xla_cpu_parallel_codegen_split_count=1",
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
_CACHE = pathlib.Path(tempfile.gettempdir()) / "podracer-test-jax-cache"
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    # The test modules' imports (JAX and the rest) with the collector paused, as `podracer
    # train`'s are; once they are done, the product's collector settings from here on (each test
    # process traces hundreds of programs; `podracer train` does the same in its subprocesses).
    from selfplay.collector import collector_paused, quiet_garbage_collector

    with collector_paused():
        result = yield
    quiet_garbage_collector()
    return result


@pytest.fixture(autouse=True)
def _learning_curves_where_a_test_reads_them(request, monkeypatch):
    """A run draws its learning curves at its end (matplotlib: about 0.25 s of CPU a run, 1-2 s
    for a process's first); in a test, only where it is marked `plots` (those that read the
    picture). `tests/test_metrics.py` tests the drawing itself; `podracer train` in a subprocess
    draws unless given `--no-plot` (the jobs of several processes pass it where no test reads
    the picture)."""
    if request.node.get_closest_marker("plots") is None:
        from selfplay import run

        monkeypatch.setattr(run, "plot_run", lambda run_dir: None)
