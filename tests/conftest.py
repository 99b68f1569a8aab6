"""Test-wide settings: one XLA thread per test process (pytest -n 2 on 2 cores), XLA's fastest
compilation (LLVM at -O0: the suite's programs are compiled far more than they run, and the tests
check behaviour, not speed), and a persistent compilation cache so the many small training runs of
the suite compile each program once. Subprocesses the tests start inherit the first two."""

import os
import pathlib
import tempfile

os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=0"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

_CACHE = pathlib.Path(tempfile.gettempdir()) / "podracer-test-jax-cache"
jax.config.update("jax_compilation_cache_dir", str(_CACHE))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
