"""Test-wide settings: one XLA thread per test process (pytest -n 2 on 2 cores), and a persistent
compilation cache so the many small training runs of the suite compile each program once."""

import os
import pathlib
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

_CACHE = pathlib.Path(tempfile.gettempdir()) / "podracer-test-jax-cache"
jax.config.update("jax_compilation_cache_dir", str(_CACHE))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
