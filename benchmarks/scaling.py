"""Weak scaling over processes: 1 process on 1 core against 2 processes each on its own core,
the same settings per process (the 2-process job's global batch is twice as large), measured in
one run, alternating. One JSON line per configuration and round:

    python benchmarks/scaling.py                          # all configurations, 60 s each
    python benchmarks/scaling.py --only az_connect_four_sebulba_preset az_connect_four_anakin_preset
    python benchmarks/scaling.py --only vtrace_cartpole --seconds 30 --rounds 2
    python benchmarks/scaling.py --only az_connect_four_sebulba --set devices.cpu_devices=2

Each run is the real command: `podracer train` pinned to core 0 (`os.sched_setaffinity`), and
`podracer train --local-processes 2` (the launcher pins process i to core i). The figures come
from the run's metrics.jsonl (process 0 logs the job's frames): frames/s and updates/s from the
first line of status `learning` plus `--warmup` seconds to the end. `ratio_frames` and
`ratio_updates` are the 2-process figures over the 1-process ones (perfect weak scaling: 2.0);
`efficiency` is `ratio_frames / 2`. The ceiling, in the same round (`--no-apart` leaves it out):
`two_apart` is two independent 1-process runs at once on cores 0 and 1 (no collective between
them), `ceiling_ratio_frames` their frames/s over the 1-process run's (what the two cores give
when both work: shared caches, memory bandwidth, clocks), and `of_ceiling` the 2-process job's
frames/s over theirs (what the job's communication costs). `agreement_ms` is the per-update
cost of the processes' agreement (`selfplay.processes.Lockstep`) measured alone on the same two
cores.

A replay's rate limiter lets either side run up to its `error_buffer` ahead of the replay ratio
(`replay.samples_per_insert`) before it holds it back: for the connect-four preset that is 96
updates' worth, which a side 5% faster than the other takes minutes to use up. Until then both
run free and a window's frames/s and updates/s are the two sides' free rates, not the rate a
long run settles at. Each run's `frames_per_update` says which: `at_ratio` is the value the
limiter holds in the long run (a process's batch over the ratio, times the processes), and
`steady` is true when both runs' windows were within 5% of it (a longer `--warmup` gets there).

`cpu_share` is each job's CPU time (every thread of its processes, from /proc, sampled once a
second) over the same window per second and per core it is pinned to: 1.0 when its cores were
busy throughout. Below that, a process sat idle: in the 2-process job, a learner waiting for its
peer's half of the all-reduce while its own actors are held by the replay's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the packages, not this folder's selfplay.py

# name: (preset, per-process overrides, the batch override's key and per-process value)
CONFIGS: dict[str, tuple[str, list[str], int]] = {
    "az_connect_four_sebulba": (
        "connect_four_alphazero",
        [
            # Sebulba's split: the actors on CPU device 0, the learner on device 1 (both on the
            # process's one core). On one device, the update's all-reduce, waiting for the other
            # process, holds up the actors' searches queued behind it (1.56x against 1.66x).
            "devices.cpu_devices=2",
            "network.channels=32",
            "network.representation_blocks=2",
            "network.prediction_blocks=1",
            "search.num_simulations=32",
            "actors.threads_per_device=1",
            "actors.envs_per_thread=64",
        ],
        64,
    ),
    "az_connect_four_anakin": (
        "connect_four_alphazero",
        [
            "runtime=anakin",
            "network.channels=32",
            "network.representation_blocks=2",
            "network.prediction_blocks=1",
            "search.num_simulations=32",
            "actors.envs_per_thread=64",
        ],
        64,
    ),
    # The preset as users run it (its own batch of 256 and 2 x 128 games a process): the same
    # network as above with 4 times the batch, so what an update costs across processes (the
    # all-reduce's latency, the agreement) weighs less against it (BENCHMARKS.md: 23% -> 8%).
    "az_connect_four_sebulba_preset": ("connect_four_alphazero", ["devices.cpu_devices=2"], 256),
    "az_connect_four_anakin_preset": ("connect_four_alphazero", ["runtime=anakin"], 256),
    "vtrace_cartpole": ("cartpole_vtrace", [], 2),
}
COMMON = ["devices.cpu_devices=1", "evaluation.every_s=0", "learner.log_every_s=2"]


def _start(
    name: str, processes: int, run_dir: pathlib.Path, seconds: float, extra: list[str], core
) -> subprocess.Popen:
    """Starts `podracer train` of configuration `name` over `processes` processes (the global
    batch `processes` times the per-process one) until `seconds`: pinned to `core`, or, under
    the launcher (`core` None), process i on core i."""
    preset, overrides, batch = CONFIGS[name]
    args = ["--config", preset, "--run-dir", str(run_dir), "--quiet", *COMMON, *overrides, *extra]
    args += [f"learner.batch_size={batch * processes}", f"learner.max_seconds={seconds}"]
    if processes > 1:
        args += ["--local-processes", str(processes)]
    return subprocess.Popen(
        [sys.executable, "-m", "podracer", "train", *args],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=None if core is None else (lambda: os.sched_setaffinity(0, {core})),
    )


def _rates(run_dir: pathlib.Path, warmup: float) -> dict:
    """frames/s and updates/s from the run's first `learning` line plus `warmup` s to its end."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    learning = [r for r in records if r.get("status") == "learning" and "frames" in r]
    start = learning[0]["time"] + warmup
    window = [r for r in learning if r["time"] >= start]
    first, last = window[0], window[-1]
    seconds_measured = last["time"] - first["time"]
    frames, updates = last["frames"] - first["frames"], last["step"] - first["step"]
    return {
        "frames_per_s": frames / seconds_measured,
        "updates_per_s": updates / seconds_measured,
        "frames_per_update": round(frames / updates, 1) if updates else None,
        "measured_s": round(seconds_measured, 1),
        "window": (first["wall_time"], last["wall_time"]),  # unix time, as the CPU samples
    }


def frames_per_update_at_ratio(name: str, extra: list[str]) -> float | None:
    """Frames per update of one process at the replay ratio (None: no ratio is kept)."""
    from configs import load_config
    from selfplay.replay import steps_per_update_at_ratio

    preset, overrides, batch = CONFIGS[name]
    config = load_config(preset, [*COMMON, *overrides, *extra, f"learner.batch_size={batch}"])
    return steps_per_update_at_ratio(config)


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process `pid` and its descendants so far;
    0 for processes that are gone."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            fields = pathlib.Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime
            for task in pathlib.Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


class _CpuSampler:
    """Samples the CPU seconds of each child's process tree once a second (a thread), so that
    a window chosen afterwards from the metrics can say what share of its cores a job used:
    a process waiting for its peer in a collective, with its actors held by the replay's
    ratio, leaves its core idle."""

    def __init__(self, pids: list[int]):
        self._pids = pids
        self.samples: list[tuple[float, list[float]]] = []  # (unix time, CPU s per child)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append((time.time(), [_tree_cpu_s(pid) for pid in self._pids]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def share(self, child: int, start: float, end: float, cores: int) -> float | None:
        """CPU seconds of child `child` over [start, end] (the samples nearest inside) per
        second and core."""
        inside = [(t, cpu[child]) for t, cpu in self.samples if start <= t <= end]
        if len(inside) < 2:
            return None
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return round((c1 - c0) / (t1 - t0) / cores, 3)


def _run_jobs(name: str, jobs: list[tuple[int, int | None]], seconds, warmup, extra) -> list:
    """Runs the jobs (processes, core) of configuration `name` at once; each job's rates and
    `cpu_share`: the CPU time of its processes over the same window per second and core (1.0:
    every core it is pinned to busy throughout)."""
    with tempfile.TemporaryDirectory(prefix="podracer-scaling-") as tmp:
        run_dirs = [pathlib.Path(tmp) / f"run{i}" for i in range(len(jobs))]
        started = time.monotonic()
        children = [
            _start(name, processes, run_dir, seconds + warmup + 30, extra, core)
            for (processes, core), run_dir in zip(jobs, run_dirs, strict=True)
        ]
        sampler = _CpuSampler([child.pid for child in children])
        outputs = [child.communicate()[0] for child in children]
        sampler.stop()
        wall_s = round(time.monotonic() - started, 1)
        for child, output, (processes, _) in zip(children, outputs, jobs, strict=True):
            if child.returncode:
                raise RuntimeError(f"{name} x{processes} failed:\n{output[-2000:]}")
        results = []
        for i, (run_dir, (processes, _)) in enumerate(zip(run_dirs, jobs, strict=True)):
            rates = _rates(run_dir, warmup)
            window = rates.pop("window")
            cpu_share = sampler.share(i, *window, cores=processes)
            results.append({**rates, "cpu_share": cpu_share, "wall_s": wall_s})
        return results


def _run(name: str, processes: int, seconds: float, warmup: float, extra: list[str]) -> dict:
    """One job: 1 process pinned to core 0, or `processes` under the launcher."""
    return _run_jobs(name, [(processes, 0 if processes == 1 else None)], seconds, warmup, extra)[0]


def _run_apart(name: str, seconds: float, warmup: float, extra: list[str]) -> dict:
    """The ceiling of weak scaling on these cores: two independent 1-process runs at once, on
    cores 0 and 1, with no collective between them. What the machine loses when both cores work
    (shared caches and memory bandwidth, clock) shows here, apart from what the job's
    communication costs. frames/s summed; updates/s their mean (each update of the 2-process
    job covers both processes' batches)."""
    rates = _run_jobs(name, [(1, 0), (1, 1)], seconds, warmup, extra)
    return {
        "frames_per_s": sum(r["frames_per_s"] for r in rates),
        "updates_per_s": sum(r["updates_per_s"] for r in rates) / 2,
        "measured_s": min(r["measured_s"] for r in rates),
        "cpu_share": [r["cpu_share"] for r in rates],
        "wall_s": rates[0]["wall_s"],
    }


def agreement_ms(rounds: int = 2000) -> float:
    """The mean cost of one `Lockstep.agree` between 2 processes on cores 0 and 1."""
    code = (
        "import sys, time, jax\n"
        "from selfplay.processes import initialize, Lockstep\n"
        "initialize(sys.argv[1], 2, int(sys.argv[2]), timeout_s=60)\n"
        "lock = Lockstep()\n"
        "for _ in range(50): lock.agree(None, True, False, 1)\n"
        "t = time.perf_counter()\n"
        f"for _ in range({rounds}): lock.agree(None, True, False, 1)\n"
        f"print((time.perf_counter() - t) / {rounds} * 1e3)\n"
    )
    from selfplay.launch import free_port

    address = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, address, str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=lambda i=i: os.sched_setaffinity(0, {i}),
        )
        for i in range(2)
    ]
    outs = [child.communicate(timeout=300)[0] for child in children]
    return round(float(outs[0].strip().splitlines()[-1]), 3)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds left out")
    parser.add_argument("--rounds", type=int, default=1, help="1- and 2-process runs, alternating")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every run (last wins)")
    parser.add_argument(
        "--apart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also two independent 1-process runs at once: the cores' own ceiling",
    )
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("scaling.py needs 2 cores")
    print(json.dumps({"benchmark": "scaling", "agreement_ms": agreement_ms()}), flush=True)
    for name in args.only:
        for round_ in range(args.rounds):
            one = _run(name, 1, args.seconds, args.warmup, args.set)
            two = _run(name, 2, args.seconds, args.warmup, args.set)
            apart = _run_apart(name, args.seconds, args.warmup, args.set) if args.apart else None
            ratio_frames = two["frames_per_s"] / one["frames_per_s"]
            at_ratio = frames_per_update_at_ratio(name, args.set)
            steady = {}
            if at_ratio is not None:
                runs = [(one, at_ratio), (two, 2 * at_ratio)]
                steady = {
                    "frames_per_update_at_ratio": [at_ratio, 2 * at_ratio],
                    "steady": all(
                        run["frames_per_update"] is not None
                        and abs(run["frames_per_update"] / want - 1) <= 0.05
                        for run, want in runs
                    ),
                }
            line = {
                "benchmark": "scaling",
                "config": name,
                "set": args.set,
                "round": round_,
                "one_process": one,
                "two_processes": two,
                "ratio_frames": round(ratio_frames, 3),
                "ratio_updates": round(two["updates_per_s"] / one["updates_per_s"], 3),
                "efficiency": round(ratio_frames / 2, 3),
                **steady,
                **(
                    {
                        "two_apart": apart,
                        "ceiling_ratio_frames": round(
                            apart["frames_per_s"] / one["frames_per_s"], 3
                        ),
                        "of_ceiling": round(two["frames_per_s"] / apart["frames_per_s"], 3),
                    }
                    if apart
                    else {}
                ),
                "load_avg": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
