"""A job across two hosts: `podracer train --distributed` with the explicit
`--coordinator/--num-processes/--process-id` flags, one process on each of two hosts made of
network namespaces (tests/two_hosts.py), each host with its own address and the run directory
shared. The coordinator is named as a cluster's hosts files often name it: loopback on its own
host, its link address on the other. The figures docs/across-hosts.md gives for failures
come from these runs."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from selfplay.launch import COORDINATION_LOST
from selfplay.processes import WATCH_SILENCE_S
from tests.test_multiprocess import (
    QUICK,
    _env,
    _records,
    _steps,
    _train,
)
from tests.two_hosts import HOST0_NAME, TwoHosts

COORDINATOR = f"{HOST0_NAME}:47123"
STOP_BOUND_S = 60  # a lost peer stops every other process within this (the bound)


@pytest.fixture
def two_hosts():
    hosts = TwoHosts.create()
    try:
        yield hosts
    finally:
        hosts.close()


class _Job:
    """One `podracer train --distributed` process on each host; each one's output in a file."""

    def __init__(self, hosts: TwoHosts, run: Path, per_process: list[list[str]], tag: str):
        self.logs = [run.parent / f"{tag}-process-{i}.log" for i in range(2)]
        self.processes = []
        for i, extra in enumerate(per_process):
            argv = [sys.executable, "-m", "podracer", "train", "--distributed",
                    "--coordinator", COORDINATOR, "--num-processes", "2", "--process-id", str(i),
                    "--run-dir", str(run), "--quiet", "--no-plot", *QUICK, *extra]  # fmt: skip
            with self.logs[i].open("w") as log:
                self.processes.append(
                    hosts.start(i, argv, env=_env(), stdout=log, stderr=subprocess.STDOUT)
                )

    def output(self, i: int) -> str:
        return self.logs[i].read_text()

    def wait(self, i: int | None = None, timeout: float = 240.0) -> list[tuple[int, str]]:
        """(exit code, output) of process `i`, or of both; kills what outlives `timeout`."""
        chosen = range(2) if i is None else [i]
        deadline = time.monotonic() + timeout
        try:
            for j in chosen:
                self.processes[j].wait(max(0.0, deadline - time.monotonic()))
        finally:
            for process in self.processes:
                if process.poll() is None and i is None:
                    process.kill()
        return [(self.processes[j].wait(), self.output(j)) for j in chosen]

    def wait_until(self, condition: Callable[[], bool], timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for i, process in enumerate(self.processes):
                if process.poll() is not None:
                    raise AssertionError(f"process {i} exited early:\n{self.output(i)[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            time.sleep(0.3)


def _learned_to(run: Path) -> int:
    """The newest update in the run's metrics (0 before the first)."""
    try:
        return max((r["step"] for r in _records(run) if "loss" in r), default=0)
    except (FileNotFoundError, ValueError):  # not written yet, or a line half written
        return 0


def _updating(run: Path, past: int = 0) -> Callable[[], bool]:
    """Whether the job learns past update `past`, with a checkpoint saved after it."""
    return lambda: (
        _learned_to(run) > past and (run / "checkpoints").is_dir() and _steps(run)[-1:] > [past]
    )


def _stop_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "run stopped:" in line or ": error:" in line]


def test_two_hosts_train_one_job_a_cut_link_stops_both_and_the_run_resumes_under_one(
    two_hosts, tmp_path
):
    """The job trains across the hosts, both processes in every checkpoint; the link is cut
    mid-run; once it is back the run resumes from the newest checkpoint, under one process. (A
    job's clean end, its replicas compared and found identical, is tests/test_multiprocess.py's,
    over loopback: the same collectives.)"""
    run = tmp_path / "run"
    saving = ["replay.checkpoint=true"]
    # Process 0 names its interface; process 1 takes its route to the coordinator's address.
    job = _Job(two_hosts, run, [["--collectives-interface", "link0", *saving], saving], "cut")
    job.wait_until(_updating(run, past=4))
    two_hosts.cut()
    cut = time.monotonic()
    results = job.wait(timeout=STOP_BOUND_S + 30)
    stopped_within = time.monotonic() - cut
    print(f"both processes stopped {stopped_within:.1f} s after the link was cut")  # docs
    assert stopped_within < STOP_BOUND_S, results
    for i, (code, out) in enumerate(results):
        assert code == 1, out[-3000:]
        # One line, naming the other host's process: it went silent, no connection closed.
        assert _stop_lines(out) == [
            f"podracer train [process {i} of 2]: run stopped: another process of the job died "
            f"or stopped answering (process {1 - i}: nothing heard from it for "
            f"{WATCH_SILENCE_S:g} s)"
        ], out[-3000:]
        assert "Traceback" not in out and "stack trace" not in out, out[-3000:]
    # Both processes' actors played in the one job, and both took part in every checkpoint.
    last = [r for r in _records(run) if "loss" in r][-1]
    assert last["frames/process_0"] > 0 and last["frames/process_1"] > 0, last
    # The replays kept (each process its newest two). The cut may have caught the newest save
    # mid-write (a process's replay file not yet written, its checkpoint not yet committed: a
    # resume from it says so and starts that replay empty), and a process that wrote it has
    # let its third newest go; the save before it is whole in both (each write waits for the
    # one before), and no newer than the newest whole checkpoint.
    saved = {p.name for p in (run / "replay").iterdir()}
    steps = {int(name.split("step_")[1].removesuffix(".npz")) for name in saved}
    before_newest = [step for step in steps if step < max(steps)]
    assert before_newest, saved
    step = max(before_newest)
    assert {f"process_0-step_{step}.npz", f"process_1-step_{step}.npz"} <= saved, saved
    assert step <= _steps(run)[-1], (saved, _steps(run))
    # The newest checkpoint is whole: the run resumes from it once the link is back.
    newest = _steps(run)[-1]
    two_hosts.mend()
    more = f"learner.max_updates={newest + 2}"
    code, out = _train("--run-dir", str(run), "--quiet", *QUICK, *saving, more)
    assert code == 0, out[-3000:]
    assert f"resumed from update {newest}" in out, out[-3000:]
    assert f"stopped (max_updates) at update {newest + 2}," in out, out[-3000:]


def test_a_two_second_link_flap_is_survived_and_the_coordinators_host_dying_stops_the_other(
    two_hosts, tmp_path
):
    run = tmp_path / "run"
    job = _Job(two_hosts, run, [[], []], "flap")
    job.wait_until(_updating(run))
    two_hosts.cut()
    cut = time.time()
    time.sleep(2.0)
    two_hosts.mend()
    # The job goes on: updates (each an all-reduce across the link) and checkpoints.
    mended_at, saved = _learned_to(run), _steps(run)[-1]
    job.wait_until(lambda: _learned_to(run) > mended_at + 8 and _steps(run)[-1] > saved)
    assert "run stopped" not in job.output(0) + job.output(1)
    logged = [r["wall_time"] for r in _records(run) if "wall_time" in r]
    held = max(b - a for a, b in zip(logged, logged[1:], strict=False) if b > cut)
    print(f"the 2 s flap held the job's log lines at most {held:.1f} s apart")  # docs

    killed = two_hosts.kill(0)  # the coordinator's host dies: its processes, at once
    assert job.processes[0].pid in killed
    died = time.monotonic()
    [(code, out)] = job.wait(1, timeout=STOP_BOUND_S + 30)
    print(f"process 1 stopped {time.monotonic() - died:.1f} s after host 0 died")  # docs
    assert time.monotonic() - died < STOP_BOUND_S, out[-3000:]
    assert code == 1, out[-3000:]
    # The peer watch's line, or the supervisor's where JAX's client aborted the process first
    # (both see process 0's connections close in the same instant).
    assert _stop_lines(out) in (
        [
            "podracer train [process 1 of 2]: run stopped: another process of the job died or "
            "stopped answering (process 0: its connection closed without a goodbye)"
        ],
        [
            f"podracer train [process 1 of 2]: run stopped: {COORDINATION_LOST}; the saved "
            "checkpoints are whole: run the job again to resume from the newest"
        ],
    ), out[-3000:]
    assert "stack trace" not in out, out[-3000:]


def test_a_coordinator_that_never_answers_is_refused_within_the_connect_timeout(
    two_hosts, tmp_path
):
    """Process 1 waits `--connect-timeout` for a host that never answers; process 0, given an
    address that is not its own host's, is refused at once."""
    nowhere = f"{two_hosts.unused_address}:47123"
    started = time.monotonic()
    waiting = [two_hosts.start(i, [sys.executable, "-m", "podracer", "train", "--distributed",
                                   "--coordinator", nowhere, "--num-processes", "2",
                                   "--process-id", str(i), "--connect-timeout", "3",
                                   "--run-dir", str(tmp_path / "run"), *QUICK],
                               env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
               for i in range(2)]  # fmt: skip
    outs = [process.communicate(timeout=120)[0] for process in waiting]
    elapsed = time.monotonic() - started
    print(f"refused after {elapsed:.1f} s with --connect-timeout 3")  # docs
    assert [p.returncode for p in waiting] == [2, 2], outs
    assert outs[0].strip() == (
        f"podracer train: error: --coordinator {nowhere}: process 0 runs the coordinator, and "
        f"{two_hosts.unused_address} is not an address of this host (give every process "
        "process 0's host and a free port there)"
    )
    assert (
        outs[1]
        .strip()
        .startswith(
            f"podracer train: error: could not join the job at {nowhere} within 3 s (is process 0 "
            "running and reachable?): "
        )
    ), outs[1]
    assert len(outs[1].strip().splitlines()) == 1, outs[1]
    assert 3 <= elapsed < STOP_BOUND_S, elapsed  # waited the timeout, not the default 300 s
    assert not (tmp_path / "run").exists()


def test_collectives_on_an_address_the_other_host_cannot_reach_get_one_line_naming_it(
    two_hosts, tmp_path
):
    """Each process's gloo on its loopback (`--collectives-interface lo`): they join the job,
    but cannot connect their collectives; the process that finds it names the address."""
    run = tmp_path / "run"
    loopback = ["--collectives-interface", "lo", "learner.max_updates=2"]
    results = _Job(two_hosts, run, [loopback, loopback], "loopback").wait(timeout=120)
    codes = [code for code, _ in results]
    assert 2 in codes and all(code in (1, 2) for code in codes), results
    for _, out in results:
        [line] = _stop_lines(out)
        assert "the collectives (gloo) of process " in line, out[-3000:]
        assert "could not connect to another process at [127.0.0.1]:" in line
        assert "it offers 127.0.0.1 (interface lo's address)" in line
    assert not (run / "checkpoints").exists()
