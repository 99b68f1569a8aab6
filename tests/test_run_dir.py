"""A run directory has one writer (a second `podracer train` is refused at once, naming the
holder; a killed holder leaves no lock), a resume skips and sets aside a damaged checkpoint with
one line, and a write that fails stops the command with one line."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

import configs
import muzero
from podracer import cli
from selfplay.files import LOCK_FILE, RunLock, WriteFailed
from tests.fakes import TINY

ENV = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])}
# Takes the lock of the run directory argv[1] and holds it until killed (no JAX: starts at once).
HOLDER = """
import sys, time
from selfplay.files import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _hold(run: pathlib.Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_is_refused_at_once_and_a_killed_holder_leaves_no_lock(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    holder = _hold(run)
    try:
        started = time.monotonic()
        code = cli.main(["train", "--run-dir", str(run), "learner.max_updates=1"])
        refused_in = time.monotonic() - started
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"is being trained by process {holder.pid} on {socket.gethostname()} since" in err
        assert refused_in < 10, refused_in  # before any start-up work
        assert not (run / "config.json").exists()  # nothing of the holder's run rewritten
        with pytest.raises(configs.UsageError, match=f"process {holder.pid}"):
            RunLock(run).acquire()
    finally:
        holder.kill()  # as a crash: no chance to release
        holder.wait(timeout=30)
    lock = RunLock(run)
    lock.acquire()  # the kernel released the dead holder's lock
    assert (run / LOCK_FILE).read_text().startswith(f"process {os.getpid()} on ")
    lock.release()
    assert (run / LOCK_FILE).read_text() == ""  # released: the note goes with it


def test_a_read_only_run_directory_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # Read-only for this command only: bound onto itself, read-only, in a mount namespace of its
    # own (root writes through file modes, so a chmod would not do).
    read_only = [
        "unshare",
        "--mount",
        "sh",
        "-c",
        f'mount --bind "{run}" "{run}" && mount -o remount,bind,ro "{run}" && exec "$@"',
        "sh",
    ]
    if shutil.which("unshare") is None or subprocess.run([*read_only, "true"]).returncode != 0:
        pytest.skip("`unshare --mount` cannot bind a folder here (needs root or CAP_SYS_ADMIN)")
    done = subprocess.run(
        [*read_only, sys.executable, "-m", "podracer", "train", "--run-dir", str(run), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert lines == [
        f"podracer train: error: cannot write to run directory {run}: Read-only file system"
    ], done.stderr[-3000:]
    assert os.listdir(run) == []


def test_a_resume_skips_a_damaged_checkpoint_with_one_line(tmp_path, capsys):
    from envs import env_spec
    from selfplay.agent import make_agent
    from selfplay.run import prepare_run_dir, saved_state, start_run
    from tests.test_checkpoints import garble_file

    config = configs.load_config("tic_tac_toe_alphazero", TINY)
    agent = make_agent(config, env_spec(config.env.name))
    optimizer = muzero.make_optimizer(config.optimizer)
    run = prepare_run_dir(tmp_path / "run", config)
    begun = start_run(config, agent, optimizer, run)
    assert begun.resumed_from is None
    for step in (1, 2):
        state = begun.state._replace(step=begun.state.step + step)
        saved = saved_state(state)  # as the run saves it
        begun.checkpointer.save(step, saved, begun.config_dict, metadata={"frames": 10 * step})
    begun.checkpointer.close()
    # Every data file garbled: a small state's arrays spread over several files, and the middle
    # of the largest alone fell on bytes a restore never reads in 1 save of 12 (the checkpoint
    # was then whole for all it restores, and rightly resumed).
    for path in (run / "checkpoints" / "2" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            garble_file(path)

    again = start_run(config, agent, optimizer, run)
    again.checkpointer.close()
    assert again.resumed_from == 1 and again.before.frames == 10 and int(again.state.step) == 1
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("podracer: checkpoint 2 is damaged (")
    assert line.endswith(f"set aside in {run}/checkpoints-damaged/2-" + line.split("/2-")[-1])
    assert (run / "checkpoints-damaged").is_dir() and not (run / "checkpoints" / "2").exists()


def test_a_failed_write_stops_the_command_in_one_line(tmp_path, capsys, monkeypatch):
    from selfplay import train as train_module

    def full_disk(config, run_dir, **kwargs):
        raise WriteFailed(f"cannot write {run_dir}/metrics.jsonl: [Errno 28] No space left")

    monkeypatch.setattr(train_module, "train", full_disk)
    monkeypatch.setattr("selfplay.train.enable_compilation_cache", lambda: None)
    code = cli.main(["train", "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"podracer train: run stopped: cannot write {tmp_path}/run/metrics.jsonl: [Errno 28] No "
        "space left; the checkpoints saved before it are whole"
    )


def test_a_run_saved_before_fields_existed_is_read_as_it_was_trained(tmp_path):
    """A config.json that predates fields: those whose default has changed since take the value
    the run was trained with (`configs.loading.PREDATED_FIELDS`), the others their default; the
    run directory and its checkpoint's config are accepted as the same run."""
    from selfplay.checkpoints import config_differences
    from selfplay.evaluation import read_run_config
    from selfplay.run import MUST_MATCH, prepare_run_dir

    config = configs.presets.get("minatar_muzero")
    saved = configs.to_dict(config)
    for field in ("dynamics_residual", "zero_init_heads", "box_policy", "box_bins"):
        del saved["network"][field]
    (tmp_path / "config.json").write_text(json.dumps(saved))

    read = read_run_config(tmp_path)
    assert read.network.dynamics_residual is False and read.network.zero_init_heads is False
    assert read.network.box_policy == muzero.NetworkConfig().box_policy
    assert read == config  # minatar_muzero writes the earlier values out
    loaded = configs.load_config(str(tmp_path / "config.json"), saved=True)
    assert loaded == config
    # Today's defaults where the file is not a run's own.
    assert configs.load_config(str(tmp_path / "config.json")).network.dynamics_residual is True
    prepare_run_dir(tmp_path, read, write=False)  # the same run: no "holds a different run"
    filled = configs.with_predated_fields(saved)
    assert not config_differences(filled, configs.to_dict(read), MUST_MATCH)
