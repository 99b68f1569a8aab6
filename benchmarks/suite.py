"""The test suite's time, measured beside the machine's speed at that moment.

    python benchmarks/suite.py                 # reference, the suite cold, reference again
    python benchmarks/suite.py --reference-only
    python benchmarks/suite.py --workers 3     # pytest -n 3 instead of the README's -n 2
    python benchmarks/suite.py --by-module     # and what each test module cost (suite_costs.py)
    python benchmarks/suite.py --tests tests/test_pbt.py tests/test_population.py   # a part

This machine's speed drifts: the same tests have taken 7:35 and 16:44 of wall a day apart, on a
quiet machine each time. A figure for the suite alone says little; its ratio to a fixed workload
measured just before and just after it says how the suite itself grew or shrank. The reference is
what the suite spends its time on: XLA compiling programs, here 32 distinct small training steps
(a scanned MLP update with its random init) under the tests' XLA flags and no compilation cache,
in two fresh interpreters at once (both cores busy, as under `pytest -n 2`), so it does not change
when the product or the tests do.

The suite runs as the README's test command does (`pytest -n 2`), with an empty compilation cache
of its own (the tests' usual cache is left alone). CPU is user + sys of pytest and every process
it waited for. Processes that leave their parent (Ray's nodes and workers, which the PBT tests
start) are in no one's rusage: where this machine lets a process make a cgroup (v1 `cpuacct` or
v2), `cpu_all_s` is the CPU of every process the suite started, waited for or not.

Lines: {"config": "reference", "cpu_s": S, "wall_s": S} before and after, then
{"config": "suite", "workers": N, "wall_s": S, "cpu_s": S, "passed": N, "skipped": N,
"failed": N, "failures": [test ids], "cpu_all_s": S or null, "reference_cpu_s": mean of the
two, "ratio": cpu_s / reference_cpu_s, "ratio_all": cpu_all_s / reference_cpu_s,
"bound_wall_s": 480, "wall_within_bound": bool}. With --by-module, before the last line, one
line a test module, costliest first: {"config": "module", "module":
"tests/test_x.py", "tests": N, "cpu_s": S (the workers' own and their children's),
"children_cpu_s": S, "wall_s": S, "xla_compiles": N, "xla_s": S, "trace_lower_s": S}
(benchmarks/suite_costs.py says what each counts); then the --top costliest tests the same way
({"config": "test", "test": ...}).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

from suite_costs import cpu_seconds  # this folder's plugin (the script's folder is on the path)

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
    return cpu_seconds(resource.RUSAGE_CHILDREN)


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


class _CpuGroup:
    """A cgroup counting the CPU of every process started inside it, daemons included (cgroup
    v1's cpuacct, else v2); `seconds()` is None where the machine lets no process make one."""

    def __init__(self) -> None:
        name = f"podracer-suite-{os.getpid()}"
        self.folder: pathlib.Path | None = None
        for root, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),
                            ("/sys/fs/cgroup/unified", "cpu.stat"),
                            ("/sys/fs/cgroup", "cpu.stat")):  # fmt: skip
            try:
                folder = pathlib.Path(root) / name
                folder.mkdir()
            except OSError:
                continue
            if (folder / usage).is_file():
                self.folder, self.usage = folder, usage
                break
            folder.rmdir()

    def enter(self) -> None:  # in the child, before it runs pytest
        if self.folder is not None:
            (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float | None:
        if self.folder is None:
            return None
        text = (self.folder / self.usage).read_text()
        if self.usage == "cpuacct.usage":
            return int(text) / 1e9
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

    def remove(self) -> None:
        if self.folder is not None:
            try:
                self.folder.rmdir()
            except OSError:  # a process still in it: left for the machine's next restart
                pass


def suite(workers: int = 2, costs_dir: str | None = None, tests: list[str] | None = None) -> dict:
    """`pytest -n WORKERS` (over `tests`, by default all) from a cold compilation cache: its
    wall, CPU and test counts (and, given `costs_dir`, each test's costs written there by
    benchmarks/suite_costs.py)."""
    group = _CpuGroup()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        plugin = []
        if costs_dir is not None:  # the plugin by its package's name: benchmarks/ itself on
            # the path would shadow Podracer's packages with the benchmarks of the same names
            env["SUITE_COSTS_DIR"] = costs_dir
            plugin = ["-p", "benchmarks.suite_costs"]
        before, started = _children_cpu(), time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", str(workers), "-p", "no:cacheprovider"]
            + plugin
            + (tests or []),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            preexec_fn=group.enter,
        )
        wall, cpu = time.monotonic() - started, _children_cpu() - before
        time.sleep(2.0)  # what the tests stopped (Ray's nodes) finishes exiting
        cpu_all = group.seconds()
        group.remove()
    counts = {
        kind: int(n)
        for n, kind in re.findall(r"(\d+) (passed|skipped|failed|errors?)", done.stdout)
    }
    return {
        "config": "suite",
        "workers": workers,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "passed": counts.get("passed", 0),
        "skipped": counts.get("skipped", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
        "exit": done.returncode,
        "failures": re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE),
        "cpu_all_s": None if cpu_all is None else round(cpu_all, 1),
        "bound_wall_s": BOUND_WALL_S,
        "wall_within_bound": wall <= BOUND_WALL_S,
    }


_COSTS = ("cpu_s", "children_cpu_s", "wall_s", "xla_compiles", "xla_s", "trace_lower_s")


def cost_lines(costs_dir: str, top: int) -> list[dict]:
    """One line a test module, costliest first, then the `top` costliest tests."""
    tests = [
        json.loads(line)
        for path in sorted(pathlib.Path(costs_dir).glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    for test in tests:  # a worker's CPU and that of the processes it waited for
        test["cpu_s"] += test["children_cpu_s"]
    modules: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for test in tests:
        module = modules[test["test"].split("::")[0]]
        module["tests"] += 1
        module.update({key: test[key] for key in _COSTS if key in test})

    def rounded(line: dict) -> dict:
        return {key: round(value, 1) if isinstance(value, float) else value
                for key, value in line.items()}  # fmt: skip

    lines = [
        rounded({"config": "module", "module": name, **module})
        for name, module in sorted(modules.items(), key=lambda item: -item[1]["cpu_s"])
    ]
    costliest = sorted(tests, key=lambda test: -test["cpu_s"])[:top]
    return lines + [rounded({"config": "test", **test}) for test in costliest]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-only", action="store_true", help="only the reference, twice")
    parser.add_argument(
        "--workers", type=int, default=2, help="pytest's -n (the README's test command: 2)"
    )
    parser.add_argument(
        "--by-module", action="store_true", help="what each test module cost (suite_costs.py)"
    )
    parser.add_argument("--top", type=int, default=20, help="--by-module: the costliest tests")
    parser.add_argument("--tests", nargs="+", default=None, help="pytest's paths (default: all)")
    args = parser.parse_args()
    first = reference()
    print(json.dumps(first), flush=True)
    if args.reference_only:
        print(json.dumps(reference()), flush=True)
        return
    # The reference before and after: a drift of the machine's speed during the suite shows.
    with tempfile.TemporaryDirectory() as costs_dir:
        line = suite(args.workers, costs_dir if args.by_module else None, args.tests)
        for cost in cost_lines(costs_dir, args.top) if args.by_module else []:
            print(json.dumps(cost), flush=True)
    second = reference()
    print(json.dumps(second), flush=True)
    line["reference_cpu_s"] = round((first["cpu_s"] + second["cpu_s"]) / 2, 2)
    line["ratio"] = round(line["cpu_s"] / line["reference_cpu_s"], 1)
    if line["cpu_all_s"] is not None:
        line["ratio_all"] = round(line["cpu_all_s"] / line["reference_cpu_s"], 1)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
