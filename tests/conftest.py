"""Test-wide settings: keep XLA to one thread per test process (pytest -n 2 on 2 cores)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
