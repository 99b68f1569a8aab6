"""`podracer pbt`: a population on Ray Tune exploits and explores, survives an interruption and
a member whose host is cut off, and refuses a bad --explore before starting Ray (the command end
to end: on tic-tac-toe, stopped and resumed, and on CartPole over two hosts)."""

import contextlib
import io
import json
import os
import pathlib
import signal
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import configs
from podracer import cli
from selfplay import pbt
from selfplay.checkpoints import restore_params

CARTPOLE = [  # a tiny V-trace learner: each 1,000-frame interval takes seconds once compiled
    "evaluation.every_s=0",
    "network.mlp_sizes=[16,16]",
    "learner.batch_size=2",
    "actors.envs_per_thread=4",
    "actors.unroll_length=8",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=20",  # a checkpoint within the first interval (the two-host test)
]
TIC_TAC_TOE = [  # AlphaZero, tiny: a member process compiles its programs in about 4 s of CPU
    "learner.batch_size=16",
    "replay.min_size=64",
    "replay.capacity=4000",
    "actors.threads_per_device=1",
    "actors.envs_per_thread=8",
    "actors.unroll_length=8",
    "search.num_simulations=4",
    "network.torso=mlp",  # the fitness is the point here: an MLP compiles in 80% of the time
    "network.mlp_sizes=[16,16]",
    "network.head_hidden=8",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=50",
    "evaluation.opponents=[random]",
    "evaluation.games=2",
]
LEARNING_RATE = "optimizer.learning_rate=1e-5:1e-2:log"
# Sebulba's replay samples on the host: values explored there change no program (nothing is
# traced again: selfplay.programs.AGENT_FREE_FIELDS).
PRIORITIES = ("replay.priority_alpha=0.2:1", "replay.priority_beta=0.2:1")


@pytest.mark.parametrize(
    "explore, message",
    [
        ("optimizer.no_such_rate=1:2", "unknown config field 'optimizer.no_such_rate'"),
        ("network.channels=8:16", "network.channels: not a field a run may change"),
        ("optimizer=1:2", "'optimizer' is a section"),
        ("optimizer.learning_rate=3e-3:1e-4", "LOW < HIGH"),
        ("replay.priority_alpha=-1:1", "bound -1.0 is out of range"),
        ("actors.random_move_prob=0.5:2", "bound 2.0 is out of range"),
        ("optimizer.learning_rate=0:1e-3:log", "a log scale needs LOW > 0"),
        ("optimizer.learning_rate=1e-4", "is not KEY=LOW:HIGH"),
        ("optimizer.learning_rate=1e-4:1e-3:ln", "is not KEY=LOW:HIGH"),
        ("optimizer.learning_rate=a:b", "bounds must be numbers"),
    ],
)
def test_a_bad_explore_gets_one_line_and_exit_2_before_ray_starts(
    explore, message, capsys, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "selfplay.pbt_tune", None)  # importing it (Ray) would fail
    code = cli.main(
        [
            "pbt",
            "--config",
            "cartpole_vtrace",
            "--population=2",
            "--interval-frames=100",
            "--max-frames=200",
            "--explore",
            explore,
            "--run-dir",
            str(tmp_path / "pop"),
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "pop").exists()


@pytest.mark.parametrize(
    "sizes, message",
    [
        # 0 was taken for a flag not given: "a new population needs --interval-frames"
        (["--population=2", "--interval-frames=0", "--max-frames=200"], "--interval-frames must"),
        (["--population=0", "--interval-frames=100", "--max-frames=200"], "--population must"),
        (["--population=2", "--interval-frames=100", "--max-frames=50"], "at least --interval"),
        (["--population=2", "--max-frames=200"], "a new population needs --interval-frames"),
    ],
)
def test_bad_sizes_get_one_line_and_exit_2_before_ray_starts(
    sizes, message, capsys, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "selfplay.pbt_tune", None)  # importing it (Ray) would fail
    run_dir = tmp_path / "pop"
    code = cli.main(["pbt", "--config=cartpole_vtrace", *sizes, f"--explore={LEARNING_RATE}",
                     f"--run-dir={run_dir}"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert not run_dir.exists()


def test_a_ray_population_resumed_with_another_budget_is_refused_before_ray_starts(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "selfplay.pbt_tune", None)  # importing it (Ray) would fail
    run_dir = tmp_path / "pop"
    config = configs.load_config("cartpole_vtrace")
    explore = (pbt.parse_explore(LEARNING_RATE, config),)
    pbt.write_settings(run_dir, pbt.PopulationSettings(config, 2, 100, 200, explore))
    pbt.log_event(run_dir, {"event": "start", "population": 2, "max_frames": 200})
    for budget, message in [
        ("100", "may raise that budget, not lower it"),
        ("400", "keep the budget they started with (200 frames)"),
    ]:
        code = cli.main(["pbt", f"--run-dir={run_dir}", f"--max-frames={budget}"])
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert pbt.read_settings(run_dir).max_frames == 200


def test_a_ray_cluster_that_takes_no_connection_is_refused_in_one_line():
    # Ray retries such an address for minutes, a log line each try.
    pytest.importorskip("ray")
    import socket

    from selfplay.pbt_tune import check_reachable

    with pytest.raises(configs.UsageError) as refused:
        check_reachable("127.0.0.1:1")  # nothing listens on port 1
    assert str(refused.value).startswith("cannot reach the Ray cluster at 127.0.0.1:1 (")
    assert len(str(refused.value).splitlines()) == 1
    with pytest.raises(configs.UsageError, match="ray://127.0.0.1:1"):
        check_reachable("ray://127.0.0.1:1")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")  # reachable: no error
    check_reachable("auto")  # Ray's own search, and its own message


def test_a_consistency_weight_stays_on_when_explored():
    config = configs.load_config("minatar_efficientzero")
    with pytest.raises(configs.UsageError, match="needs LOW > 0"):
        pbt.parse_explore("loss.consistency_weight=0:2", config)
    assert pbt.parse_explore("loss.consistency_weight=0.5:4", config).high == 4.0


def test_an_interval_is_counted_and_scored_whole():
    settings = pbt.PopulationSettings(configs.load_config("cartpole_vtrace"), 2, 1_000, 2_500, ())
    # Frames run a little past an interval's end; the last interval is the shorter one.
    done = [settings.intervals_done(f) for f in (0, 999, 1_016, 2_040, 2_499, 2_532)]
    assert done == [0, 0, 1, 2, 2, 3]
    assert [settings.interval_end(f) for f in (0, 1_016, 2_040)] == [1_000, 2_000, 2_500]
    # Member killed at 1,400 frames in the interval that began at 1,016, restarted from its
    # checkpoint at 1,300: its fitness counts the whole interval, not what came before it.
    records = [
        {"status": "compiling", "frames": 0},
        {"frames": 1_016, "episodes": 4, "episode_return": 9.0},
        {"status": "compiling", "frames": 1_016},
        {"frames": 1_400, "episodes": 1, "episode_return": 20.0},
        {"status": "compiling", "frames": 1_300},
        {"frames": 2_040, "episodes": 3, "episode_return": 40.0},
    ]
    assert pbt.interval_records(records, 1_016) == records[2:]
    assert pbt.fitness_of(pbt.interval_records(records, 1_016), two_player=False) == 35.0


def test_an_adopted_checkpoint_is_copied_once(tmp_path):
    source, target = tmp_path / "member_0", tmp_path / "member_1"
    for run, steps in ((source, (10, 20)), (target, (12,))):
        for step in steps:
            (run / "checkpoints" / str(step)).mkdir(parents=True)
            (run / "checkpoints" / str(step) / "state").write_text(f"{run.name} {step}")
    assert pbt.adopt(source, 20, target) == 20
    assert (target / "checkpoints" / "20" / "state").read_text() == "member_0 20"
    assert sorted(p.name for p in (target / "checkpoints").iterdir()) == ["20"]
    # The member trained on from it (and the population stopped before it reported): adopting
    # the same checkpoint again, as a resume does, keeps what it did since.
    (target / "checkpoints" / "30").mkdir()
    assert pbt.adopt(source, 20, target) == 20
    assert sorted(p.name for p in (target / "checkpoints").iterdir()) == ["20", "30"]


def test_a_diverged_member_ranks_last_and_a_second_divergence_fails_it(tmp_path, monkeypatch):
    """A member whose interval diverges reports its newest whole checkpoint at fitness -inf, its
    interval counted as finished, so that the population's next decision has it take over a
    better member's checkpoint; diverging again from the same checkpoint (not exploited) fails
    its trial with the one-line error."""
    pytest.importorskip("ray")
    from selfplay import pbt_tune, train
    from selfplay.lifetime import Diverged

    reports, calls = [], []

    def diverging_train(config, run_dir, **kwargs):
        calls.append(config.learner.max_frames)
        raise Diverged("the parameters at update 3 hold NaN or inf")

    def report(metrics, checkpoint):
        with checkpoint.as_directory() as folder:
            pointer = json.loads((pathlib.Path(folder) / pbt_tune.POINTER_FILE).read_text())
        reports.append((metrics, pointer))

    trial = SimpleNamespace(get_trial_name=lambda: "_member_f00d1_00001")
    monkeypatch.setattr(pbt_tune.tune, "get_context", lambda: trial)
    monkeypatch.setattr(pbt_tune.tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(pbt_tune.tune, "report", report)
    monkeypatch.setattr(pbt_tune.ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    monkeypatch.setattr(train, "train", diverging_train)
    monkeypatch.setattr(train, "enable_compilation_cache", lambda: None)
    settings = _settings("cartpole_vtrace", CARTPOLE, 1_000, 3_000)
    with pytest.raises(Diverged, match="the training diverged"):
        pbt_tune._member(
            {"explore": {"optimizer.learning_rate": 1.0}}, settings=settings, run_dir=str(tmp_path)
        )
    assert calls == [1_000, 1_000]  # the first interval, twice from the same (empty) start
    ((metrics, pointer),) = reports
    assert metrics["fitness"] == -np.inf and metrics["diverged"]
    assert metrics[pbt_tune.INTERVAL] == 1 and metrics["frames"] == 0
    assert pointer == {"member": 1, "step": 0, "frames": 0}


def test_a_failed_members_line_is_its_own_errors_not_rays():
    # Ray hands the driver the member's exception pickled, wrapped in a RayTaskError whose first
    # line is the worker's, in color; `podracer pbt` prints the member's own first line.
    pytest.importorskip("ray")
    import pickle

    from selfplay.lifetime import Diverged
    from selfplay.pbt_tune import error_line

    diverged = pickle.loads(pickle.dumps(Diverged("the parameters at update 2 hold NaN or inf")))
    assert str(diverged).count("the training diverged") == 1  # not wrapped again when rebuilt

    class RayTaskError(Exception):  # ray.exceptions.RayTaskError's shape: a header, `cause`
        cause = diverged

    wrapped = RayTaskError("\x1b[36mray::ImplicitFunc.train()\x1b[39m (pid=1, ip=10.0.0.1)\n...")
    assert error_line(wrapped) == str(diverged)
    assert error_line(RuntimeError("\n\x1b[31m  the actor died \x1b[0m\nmore")) == "the actor died"


def test_a_diverged_member_takes_over_a_top_checkpoint_and_gives_none(monkeypatch):
    """At a decision, a member whose interval diverged exploits whichever quantile it is in, and
    only top members that did not diverge are sources; where none is left, no one exploits."""
    pytest.importorskip("ray")
    from ray.tune.schedulers import PopulationBasedTraining

    from selfplay import pbt_tune

    class Member:  # a trial, as much of one as the scheduler's override reads
        checkpoint = None

    decisions = []

    def record(self, trial, controller, upper, lower):
        decisions.append((trial, list(upper), list(lower)))

    monkeypatch.setattr(PopulationBasedTraining, "_checkpoint_or_exploit", record)
    scheduler = pbt_tune._Scheduler.__new__(pbt_tune._Scheduler)
    good, fine, bad, diverged = Member(), Member(), Member(), Member()
    scheduler._trial_state = {
        member: SimpleNamespace(
            last_result={"diverged": True} if member is diverged else {}, last_checkpoint=None
        )
        for member in (good, fine, bad, diverged)
    }
    for member in (good, fine, bad, diverged):  # diverged ranks in the middle: a tie at -inf
        scheduler._checkpoint_or_exploit(member, None, [good, diverged], [bad])
    assert all(upper == [good] for _, upper, _ in decisions)
    assert dict((t, lower) for t, _, lower in decisions)[diverged] == [bad, diverged]
    assert dict((t, lower) for t, _, lower in decisions)[bad] == [bad]
    decisions.clear()
    scheduler._checkpoint_or_exploit(bad, None, [diverged], [bad])  # every top member diverged
    assert decisions == [(bad, [], [])]


def _settings(preset, overrides, interval, total, explore=(LEARNING_RATE,)):
    config = configs.load_config(preset, overrides)
    return pbt.PopulationSettings(
        config, 2, interval, total, tuple(pbt.parse_explore(e, config) for e in explore)
    )


def _pbt_command(args):
    """`podracer pbt ARGS` in this process: its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["pbt", *args])
    return code, out.getvalue()


def _saved_checkpoints(run_dir):
    """Each member's checkpoint in the state Tune saved: the member and step it points to (None
    where Tune had not registered one: a report it had not finished taking in when it stopped,
    which the member makes again when it resumes)."""
    from ray import tune

    from selfplay.pbt_tune import POINTER_FILE, TUNE_DIR

    pointers = {}
    for trial in tune.ExperimentAnalysis(str(run_dir / TUNE_DIR)).trials:
        if trial.checkpoint is None:
            pointers[int(str(trial).rsplit("_", 1)[1])] = None
            continue
        with trial.checkpoint.as_directory() as folder:
            pointer = json.loads((pathlib.Path(folder) / POINTER_FILE).read_text())
        pointers[int(str(trial).rsplit("_", 1)[1])] = pointer
    return pointers


def test_podracer_pbt_on_tic_tac_toe_decides_by_the_bots_stops_and_resumes(tmp_path):
    """`podracer pbt` of 2 AlphaZero members on tic-tac-toe, 2 intervals of 400 frames, on a Ray
    of one CPU (the members take turns in one process, which compiles each program once):
    interrupted (SIGUSR1, Tune's graceful stop, as Ctrl-C is for `podracer pbt`) the moment it
    has decided at the first interval's end, then resumed with the folder alone. One test, so
    that one pytest worker trains the population. (A member whose process dies is restarted
    from its checkpoint: the two-host test below cuts one off.)"""
    ray = pytest.importorskip("ray")
    from selfplay import pbt_tune

    run_dir = tmp_path / "pop"
    events: list = []

    log_event = pbt_tune.log_event

    def log_then_stop(root, event):  # Tune stops in the step that decided, before the next
        line = log_event(root, event)
        if event["event"] == "exploit" and not events:
            events.append("interrupted")
            os.kill(os.getpid(), signal.SIGUSR1)
        return line

    explore = [f"--explore={spec}" for spec in PRIORITIES]
    # Every checkpoint stays on disk: the adopted one is compared with its source's below.
    keep = "learner.keep_checkpoints=10"
    args = ["--config=tic_tac_toe_alphazero", "--population=2", "--interval-frames=400",
            "--max-frames=800", *explore, f"--run-dir={run_dir}", "--no-plot"]  # fmt: skip
    pbt_tune.start_local_ray(num_cpus=1)
    try:
        # Ray's default puts its workers 15 above the driver: a member would get only what the
        # machine's other processes leave.
        assert ray.get(ray.remote(lambda: os.nice(0)).remote()) == os.nice(0)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pbt_tune, "log_event", log_then_stop)
            code, output = _pbt_command([*args, *TIC_TAC_TOE, keep])
        saved = _saved_checkpoints(run_dir)
        resumed_code, resumed = _pbt_command([f"--run-dir={run_dir}", "--no-plot"])
    finally:
        ray.shutdown()
    _check_stopped_and_resumed(run_dir, events, code, output, saved, resumed_code, resumed)
    _check_exploited_and_explored(run_dir)
    intervals = [e for e in pbt.read_events(run_dir) if e["event"] == "interval"]
    # The fitness is the score against the random bot. 2 members, 2 intervals each (a report
    # Tune took in as it stopped, but whose checkpoint it had not registered, is made again on
    # the resume, from the checkpoint's frames).
    done = pbt.read_settings(run_dir).intervals_done
    assert {(e["member"], done(e["frames"])) for e in intervals} == {(0, 1), (0, 2), (1, 1), (1, 2)}
    assert all(0.0 <= e["fitness"] <= 1.0 for e in intervals)
    # --no-plot, given again with the folder: no member drew its learning curves.
    assert not list(run_dir.glob("member_*/learning_curves.png"))


def _check_stopped_and_resumed(run_dir, events, code, output, saved, resumed_code, resumed):
    assert events == ["interrupted"]
    assert code == 130, output[-3000:]
    assert f"resume with: podracer pbt --run-dir {run_dir}" in output
    # The exploit decided just before the stop is in the state Tune saved: the member resumes
    # from the source's checkpoint.
    exploit = next(e for e in pbt.read_events(run_dir) if e["event"] == "exploit")
    assert saved[exploit["target"]]["member"] == exploit["source"]
    assert resumed_code == 0, resumed[-3000:]
    assert "podracer pbt: finished; best member" in resumed
    lines = pbt.read_events(run_dir)
    kinds = [e["event"] for e in lines]
    assert kinds[0] == "start" and "stopped" in kinds and "resume" in kinds
    assert kinds[-1] == "end"
    max_frames = pbt.read_settings(run_dir).max_frames
    assert all(m["frames"] >= max_frames and m["error"] is None for m in lines[-1]["members"])


def _check_exploited_and_explored(run_dir):
    settings = pbt.read_settings(run_dir)
    lines = pbt.read_events(run_dir)
    exploits = [e for e in lines if e["event"] == "exploit"]
    assert [e["target"] for e in exploits] in ([0], [1]), "one exploit, at the first interval"
    for line in lines:
        for values in (line.get("values"), line.get("old"), line.get("new")):
            for bounds in settings.explore if values else ():
                assert bounds.low <= values[bounds.key] <= bounds.high
    # The worse member's next interval starts from the better one's parameters: the checkpoint
    # it adopted is the source's, leaf for leaf, and it trained on from that step.
    exploit = exploits[-1]
    target = pbt.member_dir(run_dir, exploit["target"])
    adopted = json.loads((target / pbt.ADOPTED_FILE).read_text())
    source = pbt.member_dir(run_dir, int(adopted["source"].rsplit("_", 1)[1]))
    theirs = restore_params(source, adopted["step"])
    ours = restore_params(target, adopted["step"])
    leaves = zip(*(jax_leaves(p) for p in (theirs, ours)), strict=True)
    assert all(np.array_equal(a, b) for a, b in leaves)
    records = [json.loads(line) for line in (target / "metrics.jsonl").read_text().splitlines()]
    assert any(r["step"] > adopted["step"] for r in records)


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_a_ray_cluster_of_two_hosts_spreads_members_and_restarts_one_whose_host_is_cut_off(
    tmp_path,
):
    # Two network namespaces (tests/two_hosts.py): `ray start --head` on host 0, `ray start
    # --address` on host 1, one CPU each, so each runs one member; the members' folders on
    # storage both see (this machine's). Host 1 fails mid-run, once its member has saved a
    # checkpoint: the member freezes (so that it cannot finish in the moment the test takes to
    # cut, however fast it trains), the link goes down, and the member ends, as on a host that
    # lost its power (its run's lock is free again; a frozen process would keep it, as it
    # shares this machine's kernel). The head hears nothing more from host 1: its health
    # checks mark it dead within seconds, Tune restarts its member on host 0 from the member's
    # newest checkpoint, and the population finishes.
    pytest.importorskip("ray")
    import shutil
    import subprocess
    import tempfile

    from tests.two_hosts import TwoHosts

    hosts = TwoHosts.create()
    ray = str(pathlib.Path(sys.executable).parent / "ray")
    head = f"{hosts.addresses[0]}:6379"
    # No token: the cluster lives inside the test's own namespaces. Health checks every
    # second; a node cut off from the head ends itself (and its workers) after 5 s.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_worker_niceness": "0", "RAY_health_check_period_ms": "1000",
           "RAY_health_check_timeout_ms": "2000", "RAY_health_check_failure_threshold": "5",
           "RAY_gcs_rpc_server_reconnect_timeout_s": "5"}  # fmt: skip
    # Short folders: a node's Unix sockets live under its temp dir (at most 107 characters).
    temp = [tempfile.mkdtemp(prefix="ray", dir="/tmp") for _ in range(2)]
    run_dir = tmp_path / "pop"
    driver_log = tmp_path / "driver.log"
    try:
        quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        head_node = hosts.start(0, [ray, "start", "--head", "--node-ip-address",
                                    hosts.addresses[0], "--port", "6379", "--num-cpus", "1",
                                    "--include-dashboard=false", "--temp-dir", temp[0]],
                                **quiet)  # fmt: skip
        assert head_node.wait(120) == 0
        other = hosts.start(1, [ray, "start", "--address", head, "--node-ip-address",
                                hosts.addresses[1], "--num-cpus", "1", "--temp-dir", temp[1]],
                            **quiet)  # fmt: skip
        assert other.wait(120) == 0
        argv = [sys.executable, "-m", "podracer", "pbt", "--ray", "--address", head,
                "--config=cartpole_vtrace", "--population=2", "--interval-frames=2000",
                "--max-frames=4000", f"--explore={LEARNING_RATE}", f"--run-dir={run_dir}",
                "--max-failures=2", "--no-plot", *CARTPOLE]  # fmt: skip
        with driver_log.open("w") as log:
            driver = hosts.start(0, argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        # Wait for a member training on host 1 (its metrics written within the last second)
        # with a checkpoint saved.
        deadline = time.monotonic() + 240
        frozen = None  # the process id of a member on host 1
        while frozen is None:
            assert driver.poll() is None, driver_log.read_text()[-3000:]
            assert time.monotonic() < deadline, driver_log.read_text()[-3000:]
            for member in range(2):
                folder = pbt.member_dir(run_dir, member)
                try:
                    process = json.loads((folder / "process.json").read_text())
                except (OSError, ValueError):
                    continue
                metrics = folder / "metrics.jsonl"
                training = metrics.is_file() and time.time() - metrics.stat().st_mtime < 1.0
                if (
                    process["node"] == hosts.addresses[1]
                    and training
                    and pbt._steps(folder / "checkpoints")
                ):
                    frozen = process["pid"]
            time.sleep(0.1)
        os.kill(frozen, signal.SIGSTOP)  # the namespaces share this machine's process ids
        hosts.cut()
        os.kill(frozen, signal.SIGKILL)
        assert driver.wait(300) == 0, driver_log.read_text()[-3000:]
    finally:
        hosts.close()  # kills what still runs on either host: the nodes, the driver
        for folder in temp:
            shutil.rmtree(folder, ignore_errors=True)
    events = pbt.read_events(run_dir)
    assert events[-1]["event"] == "end"
    # Members trained on both hosts: one was seen on host 1 above, and host 0 finished them.
    assert {e["node"] for e in events if e["event"] == "interval"} >= {hosts.addresses[0]}
    # The member host 1 ran when the link went down (members change processes at exploits, so
    # not necessarily the one seen there before) was restarted on host 0, from its checkpoint.
    restarted = [e["member"] for e in events if e["event"] == "restart"]
    assert restarted, "no member was restarted"
    again = json.loads((pbt.member_dir(run_dir, restarted[0]) / "process.json").read_text())
    assert again["node"] == hosts.addresses[0]
    metrics = pbt.member_dir(run_dir, restarted[0]) / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    starts = [r["frames"] for r in records if r.get("status") == "compiling"]
    assert len(starts) >= 2 and max(starts) > 0
