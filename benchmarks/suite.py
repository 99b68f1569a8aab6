"""The test suite's time, measured beside the machine's speed at that moment.

    python benchmarks/suite.py                 # reference, the suite cold, reference again
    python benchmarks/suite.py --reference-only

This machine's speed drifts: the same tests have taken 7:35 and 16:44 of wall a day apart, on a
quiet machine each time. A figure for the suite alone says little; its ratio to a fixed workload
measured just before and just after it says how the suite itself grew or shrank. The reference is
what the suite spends its time on: XLA compiling programs, here 32 distinct small training steps
(a scanned MLP update with its random init) under the tests' XLA flags and no compilation cache,
in two fresh interpreters at once (both cores busy, as under `pytest -n 2`), so it does not change
when the product or the tests do.

The suite runs as the README's test command does (`pytest -n 2`), with an empty compilation cache
of its own (the tests' usual cache is left alone). CPU is user + sys of pytest and every process
it waited for.

Lines: {"config": "reference", "cpu_s": S, "wall_s": S} before and after, then
{"config": "suite", "wall_s": S, "cpu_s": S, "passed": N, "skipped": N, "failed": N,
"reference_cpu_s": mean of the two, "ratio": cpu_s / reference_cpu_s, "bound_wall_s": 480,
"wall_within_bound": bool}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOUND_WALL_S = 8 * 60  # the project's bound for pytest from a cold start on 2 cores

_REFERENCE = """
import os, sys
sys.path.insert(0, sys.argv[1])
import tests.conftest  # the tests' XLA flags (it sets them in the environment before JAX loads)
import jax, jax.numpy as jnp
jax.config.update("jax_enable_compilation_cache", False)

def program(i):
    def train(key):
        k1, k2, k3 = jax.random.split(key, 3)
        w1 = jax.random.normal(k1, (32, 64)) * 0.1
        w2 = jax.random.normal(k2, (64, 8)) * 0.1
        x = jax.random.normal(k3, (16, 32))
        def step(carry, _):
            w1, w2 = carry
            def loss(w1, w2):
                return jnp.mean((jnp.tanh(x @ w1) @ w2 - i) ** 2)
            g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
            return (w1 - 0.01 * g1, w2 - 0.01 * g2), loss(w1, w2)
        return jax.lax.scan(step, (w1, w2), None, length=4)[1]
    return jax.jit(train)

for i in range(32):  # each constant a distinct program
    program(float(i))(jax.random.PRNGKey(0)).block_until_ready()
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reference() -> dict:
    """The fixed compile workload in two fresh interpreters at once (both cores busy, as under
    `pytest -n 2`): their CPU and wall seconds."""
    before, started = _children_cpu(), time.monotonic()
    workers = [
        subprocess.Popen([sys.executable, "-c", _REFERENCE, str(ROOT)], cwd=ROOT) for _ in range(2)
    ]
    for worker in workers:
        if worker.wait() != 0:
            raise SystemExit(f"the reference workload failed (exit {worker.returncode})")
    return {
        "config": "reference",
        "cpu_s": round(_children_cpu() - before, 2),
        "wall_s": round(time.monotonic() - started, 2),
    }


def suite() -> dict:
    """`pytest -n 2` from a cold compilation cache: its wall, CPU and test counts."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        before, started = _children_cpu(), time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall, cpu = time.monotonic() - started, _children_cpu() - before
    counts = {
        kind: int(n)
        for n, kind in re.findall(r"(\d+) (passed|skipped|failed|errors?)", done.stdout)
    }
    return {
        "config": "suite",
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "passed": counts.get("passed", 0),
        "skipped": counts.get("skipped", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
        "exit": done.returncode,
        "bound_wall_s": BOUND_WALL_S,
        "wall_within_bound": wall <= BOUND_WALL_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-only", action="store_true", help="only the reference, twice")
    args = parser.parse_args()
    first = reference()
    print(json.dumps(first), flush=True)
    if args.reference_only:
        print(json.dumps(reference()), flush=True)
        return
    # The reference before and after: a drift of the machine's speed during the suite shows.
    line = suite()
    second = reference()
    print(json.dumps(second), flush=True)
    line["reference_cpu_s"] = round((first["cpu_s"] + second["cpu_s"]) / 2, 2)
    line["ratio"] = round(line["cpu_s"] / line["reference_cpu_s"], 1)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
