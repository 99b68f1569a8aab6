"""Checkpoints: round trip, keep-K, resume from the newest, refusal of a mismatched config or
state, and a crash's leftovers ignored; damage found and set aside, kills during saves, a full
disk and a file-size limit."""

import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import UsageError
from selfplay.checkpoints import (
    Checkpointer,
    ReplayWriter,
    checkpoint_step,
    config_differences,
    load_replay,
    restore_params,
    save_replay,
)

CONFIG = {"env": {"name": "tic_tac_toe"}, "network": {"width": 8}, "learner": {"lr": 1e-3}}


class TrainState(NamedTuple):
    params: dict
    opt_state: tuple
    step: jax.Array
    key: jax.Array  # a typed PRNG key


def _state(width: int = 8, step: int = 0, seed: int = 0) -> TrainState:
    key = jax.random.key(seed)
    w = jax.random.normal(key, (3, width))
    return TrainState(
        params={"dense": {"w": w, "b": jnp.zeros(width)}},
        opt_state=(jnp.asarray(step, jnp.int32), {"mu": jnp.ones(width)}),
        step=jnp.asarray(step, jnp.int32),
        key=jax.random.fold_in(key, step),
    )


def _assert_trees_equal(a, b):
    a = jax.tree.map(
        lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x, a
    )
    b = jax.tree.map(
        lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x, b
    )
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_round_trip_keeps_values_structure_and_typed_keys(tmp_path):
    ckpt = Checkpointer(tmp_path / "checkpoints", max_to_keep=2)
    state = _state(step=7)
    assert ckpt.save(7, state, CONFIG, metadata={"params_version": 7})
    ckpt.wait()
    restored = ckpt.restore(target=jax.eval_shape(lambda: _state()))
    assert isinstance(restored, TrainState)
    assert jnp.issubdtype(restored.key.dtype, jax.dtypes.prng_key)
    _assert_trees_equal(restored, state)
    # The restored key draws the same numbers as the saved one.
    np.testing.assert_array_equal(
        jax.random.uniform(restored.key, (2,)), jax.random.uniform(state.key, (2,))
    )
    assert ckpt.restore_config() == CONFIG
    meta = ckpt.restore_metadata()
    assert meta["step"] == 7 and meta["params_version"] == 7 and meta["time"] > 0
    ckpt.close()


def test_keeps_the_last_k_and_resume_picks_the_newest(tmp_path):
    ckpt = Checkpointer(tmp_path, max_to_keep=2)
    for step in (10, 20, 30):
        ckpt.save(step, _state(step=step), CONFIG)
    assert not ckpt.save(30, _state(step=30), CONFIG)  # already saved: not rewritten
    ckpt.close()
    resumed = Checkpointer(tmp_path, max_to_keep=2)  # a new process resuming the run
    assert resumed.all_steps() == [20, 30]
    assert resumed.latest_step() == 30
    state = resumed.restore(target=_state(), config=CONFIG)
    assert int(state.step) == 30
    assert int(resumed.restore(step=20, target=_state()).step) == 20
    with pytest.raises(UsageError, match=r"no checkpoint for step 10 .*\[20, 30\]"):
        resumed.restore(step=10, target=_state())
    resumed.close()


def test_a_different_config_or_state_shape_is_refused_naming_the_keys(tmp_path):
    ckpt = Checkpointer(tmp_path, must_match=("env.name", "network"))
    ckpt.save(1, _state(), CONFIG)
    ckpt.wait()
    other = {**CONFIG, "env": {"name": "connect_four"}, "network": {"width": 16}}
    with pytest.raises(UsageError, match=r"env\.name, network\.width differ"):
        ckpt.restore(target=_state(), config=other)
    learner_changed = {**CONFIG, "learner": {"lr": 1.0}}  # not in must_match: allowed
    ckpt.restore(target=_state(), config=learner_changed)
    with pytest.raises(UsageError, match=r"params\.dense\.w: saved float32\[3, 8\] != expected"):
        ckpt.restore(target=_state(width=16))
    ckpt.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["1"]  # kept


class GrownState(NamedTuple):  # TrainState with a field the code that saved it did not have
    params: dict
    opt_state: tuple
    step: jax.Array
    key: jax.Array
    extra: object = None


def _save_closed(directory, state):
    ckpt = Checkpointer(directory)
    ckpt.save(1, state, CONFIG)
    ckpt.close()


def test_a_whole_checkpoint_of_another_structure_is_refused_in_one_line_and_kept(tmp_path):
    # A field only the code that restores has, None or empty (no array in it), or only the
    # code that saved had: orbax refuses each as another tree, which is no damage: the resume
    # says what differs and sets nothing aside (a code change would otherwise set every
    # checkpoint of the run aside, and the next start would train from nothing).
    _save_closed(tmp_path / "checkpoints", _state())
    grown = GrownState(*_state())
    cases = [
        (grown, "extra: saved missing != expected empty"),
        (grown._replace(extra={}), "extra: saved missing != expected empty"),
        (grown._replace(extra=jnp.ones(2)), "extra: saved missing != expected float32[2]"),
        (_state()._replace(opt_state=(jnp.int32(0),)), "opt_state.1.mu: saved float32[8] != "),
    ]
    for target, difference in cases:
        ckpt = Checkpointer(tmp_path / "checkpoints")
        with pytest.raises(UsageError) as refused:
            ckpt.newest_whole(target=target, config=CONFIG, set_aside_in=tmp_path)
        line = str(refused.value)
        assert "\n" not in line and "does not match the expected state" in line, line
        assert difference in line and "damaged" not in line, line
        assert ckpt.all_steps() == [1]
        ckpt.close()
    assert not (tmp_path / "checkpoints-damaged").exists()
    # The state it holds, and None against the EmptyState orbax saved as None, restore.
    saved = GrownState(*_state(), extra=optax.EmptyState())
    _save_closed(tmp_path / "other", saved)
    restored = Checkpointer(tmp_path / "other").restore(target=grown)
    assert restored.extra is None
    _assert_trees_equal(TrainState(*restored[:4]), _state())
    _assert_trees_equal(Checkpointer(tmp_path / "checkpoints").restore(target=_state()), _state())


def test_config_differences_reports_missing_keys():
    saved = {"network": {"width": 8, "depth": 2}}
    current = {"network": {"width": 8}, "other": 1}
    assert config_differences(saved, current, ["network"]) == ["network.depth"]
    assert config_differences(saved, current, []) == []


def test_a_half_written_checkpoint_is_ignored(tmp_path):
    ckpt = Checkpointer(tmp_path, max_to_keep=3)
    ckpt.save(5, _state(step=5), CONFIG)
    ckpt.close()
    # A crash while writing step 6 leaves orbax's temporary directory behind.
    tmp = tmp_path / "6.orbax-checkpoint-tmp-1234567"
    (tmp / "state").mkdir(parents=True)
    (tmp / "state" / "garbage").write_text("half")
    resumed = Checkpointer(tmp_path, max_to_keep=3)
    assert resumed.latest_step() == 5
    assert int(resumed.restore(target=_state()).step) == 5
    resumed.save(6, _state(step=6), CONFIG)  # the run continues and saves step 6 again
    resumed.close()
    assert Checkpointer(tmp_path, read_only=True).latest_step() == 6


def test_missing_or_corrupt_checkpoints_give_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no checkpoint directory"):
        Checkpointer(tmp_path / "nowhere", read_only=True)
    with pytest.raises(UsageError, match="no complete checkpoint"):
        Checkpointer(tmp_path / "empty").restore(target=_state())
    ckpt = Checkpointer(tmp_path / "c")
    ckpt.save(3, _state(), CONFIG)
    ckpt.close()
    (tmp_path / "c" / "3" / "config" / "metadata").write_text("{not json")
    for path in (tmp_path / "c" / "3" / "config").iterdir():
        path.write_text("{not json")
    with pytest.raises(UsageError, match="unreadable"):
        Checkpointer(tmp_path / "c").restore_config()
    assert (tmp_path / "c" / "3").is_dir()  # nothing deleted


def test_restore_params_from_a_run_directory(tmp_path):
    ckpt = Checkpointer(tmp_path / "checkpoints")
    ckpt.save(1, _state(step=1), CONFIG)
    ckpt.save(2, _state(step=2, seed=1), CONFIG)
    ckpt.close()
    expected = _state(step=2, seed=1).params
    params = restore_params(tmp_path)
    jax.tree.map(np.testing.assert_array_equal, params, expected)
    typed = restore_params(tmp_path, step=2, target=jax.eval_shape(lambda: expected))
    assert isinstance(typed["dense"]["w"], jax.Array)
    jax.tree.map(np.testing.assert_array_equal, typed, expected)
    with pytest.raises(UsageError, match="do not match"):
        restore_params(tmp_path, target={"dense": {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4)}})
    with pytest.raises(UsageError, match="no checkpoint directory"):
        restore_params(tmp_path / "missing")
    # The config is plain JSON next to the arrays: readable without this code.
    config_files = (tmp_path / "checkpoints" / "2" / "config").glob("*")
    assert CONFIG in [_json_or_none(p.read_text()) for p in config_files if p.is_file()]


def test_checkpoint_step_is_the_newest_or_a_saved_one_else_one_line(tmp_path):
    def error(step=None):
        with pytest.raises(UsageError) as raised:
            checkpoint_step(tmp_path, step)
        assert "\n" not in str(raised.value)
        return str(raised.value)

    assert "has no checkpoints/ folder" in error()
    (tmp_path / "checkpoints").mkdir()
    assert "no complete checkpoint in" in error()
    ckpt = Checkpointer(tmp_path / "checkpoints")
    for step in (4, 9):
        ckpt.save(step, _state(step=step), CONFIG)
    ckpt.close()
    assert checkpoint_step(tmp_path) == 9 and checkpoint_step(str(tmp_path), 4) == 4
    assert "no checkpoint for step 5 in" in error(5) and error(5).endswith("saved steps: [4, 9]")
    # restore_params resolves the step by the same rule, with the same words.
    with pytest.raises(UsageError, match=r"no checkpoint for step 5 .* saved steps: \[4, 9\]"):
        restore_params(tmp_path, step=5)


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def test_round_trip_of_a_real_optax_state_with_empty_nodes(tmp_path):
    import optax

    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    params = _state().params

    @jax.jit  # one program: op by op, each of the update's operations compiles its own
    def updated(params):
        grads = jax.tree.map(jnp.ones_like, params)
        return optimizer.update(grads, optimizer.init(params), params)[1]

    opt_state = updated(params)
    state = TrainState(params, opt_state, jnp.asarray(1, jnp.int32), jax.random.key(3))
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, state, CONFIG)
    ckpt.close()
    fresh = TrainState(params, optimizer.init(params), jnp.asarray(0, jnp.int32), jax.random.key(0))
    restored = Checkpointer(tmp_path).restore(target=jax.eval_shape(lambda: fresh))
    assert jax.tree.structure(restored) == jax.tree.structure(fresh)
    _assert_trees_equal(restored, state)


def test_a_checkpoint_with_corrupt_state_metadata_gives_a_usage_error(tmp_path):
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, _state(), CONFIG)
    ckpt.close()
    for path in (tmp_path / "1" / "state").rglob("*"):
        if path.is_file():
            path.write_text("garbage")
    with pytest.raises(UsageError, match="checkpoint .*1"):
        Checkpointer(tmp_path).restore(target=_state())
    with pytest.raises(UsageError, match="checkpoint .*1"):
        restore_params(tmp_path)


def test_saved_replays_are_atomic_the_last_two_kept_and_bad_files_refused(tmp_path):
    arrays = {"uid": np.arange(5), "paths": np.asarray(["['obs']"], dtype=str)}
    for step in (10, 20, 30):
        save_replay(tmp_path, 1, step, {**arrays, "uid": arrays["uid"] + step})
    save_replay(tmp_path, 0, 30, arrays)  # another process's files are its own
    names = sorted(p.name for p in (tmp_path / "replay").iterdir())
    assert names == ["process_0-step_30.npz", "process_1-step_20.npz", "process_1-step_30.npz"]
    loaded = load_replay(tmp_path, 1, 20)
    np.testing.assert_array_equal(loaded["uid"], np.arange(5) + 20)
    assert loaded["paths"].tolist() == ["['obs']"]
    assert load_replay(tmp_path, 1, 10) is None  # removed: not the checkpoint's data
    assert load_replay(tmp_path, 2, 30) is None  # a process that saved none
    (tmp_path / "replay" / "process_1-step_30.npz").write_bytes(b"not a zip file")
    with pytest.raises(UsageError, match="cannot read the saved replay .*process_1-step_30.npz"):
        load_replay(tmp_path, 1, 30)


def test_the_replay_writer_returns_before_the_file_is_written_and_raises_a_failed_write(
    tmp_path, monkeypatch
):
    import selfplay.checkpoints as checkpoints

    arrays = {"uid": np.arange(5), "paths": np.asarray(["['obs']"], dtype=str)}
    release = threading.Event()
    real_save = checkpoints.save_replay

    def slow_save(run_dir, process, step, saved):
        assert release.wait(10.0), "the test never released the write"
        return real_save(run_dir, process, step, saved)

    monkeypatch.setattr(checkpoints, "save_replay", slow_save)
    writer = ReplayWriter(tmp_path, process=0)
    writer.save(10, arrays)  # returns while the write waits for the release
    assert load_replay(tmp_path, 0, 10) is None
    release.set()
    writer.save(20, {**arrays, "uid": arrays["uid"] + 20})  # after the first is on disk
    writer.wait()
    np.testing.assert_array_equal(load_replay(tmp_path, 0, 10)["uid"], np.arange(5))
    np.testing.assert_array_equal(load_replay(tmp_path, 0, 20)["uid"], np.arange(5) + 20)

    def failing_save(run_dir, process, step, saved):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_replay", failing_save)
    writer.save(30, arrays)
    with pytest.raises(OSError, match="No space left"):
        writer.save(40, arrays)  # the previous write's error, before a new one starts
    writer.save(50, arrays)
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    writer.wait()  # nothing under way: returns
    assert sorted(p.name for p in (tmp_path / "replay").iterdir()) == [
        "process_0-step_10.npz",
        "process_0-step_20.npz",
    ]


# What a checkpoint can suffer on disk, each applied to the newest of three: (name, reason the
# resume gives). The state's data file is the largest file under state/ocdbt.process_0/d/.
def _data_file(step_dir):
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    return max(files, key=lambda p: p.stat().st_size)


def _truncate(step_dir):
    path = _data_file(step_dir)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(step_dir):  # 64 bytes in the middle of the largest file: orbax reads it without error
    garble_file(_data_file(step_dir))


def garble_file(path):
    """Inverts 64 bytes in the middle of the file at `path`."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(255 - b for b in data[middle : middle + 64])
    path.write_bytes(bytes(data))


def _rewrite_json(step_dir, item, change):
    path = step_dir / item / "metadata"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _empty_folder(step_dir):
    shutil.rmtree(step_dir)
    step_dir.mkdir()


DAMAGE = {
    "truncated": (_truncate, "unreadable state"),
    "emptied": (lambda d: _data_file(d).write_bytes(b""), "unreadable state"),
    "file missing": (lambda d: _data_file(d).unlink(), "unreadable state"),
    "garbled": (_garble, "state garbled"),
    "metadata rewritten": (
        lambda d: _rewrite_json(d, "meta", lambda m: {**m, "frames": 10**9}),
        "metadata rewritten",
    ),
    "config rewritten": (
        lambda d: _rewrite_json(d, "config", lambda c: {**c, "learner": {"lr": 1.0}}),
        "config rewritten",
    ),
    "empty folder": (_empty_folder, "empty folder"),
    "commit marker gone": (lambda d: (d / "commit_success.txt").unlink(), "no commit marker"),
}


def _big_state(step: int) -> TrainState:
    """A state whose params are large enough (64 KiB of noise) to have a data file of their own."""
    state = _state(step=step, seed=step)
    w = np.random.default_rng(step).standard_normal((128, 128), np.float32)
    return state._replace(params={**state.params, "big": jnp.asarray(w)})


@pytest.fixture(scope="module")
def three_checkpoints(tmp_path_factory):
    """A run directory with checkpoints 1, 2 and 3, written once for every case."""
    run = tmp_path_factory.mktemp("whole") / "run"
    ckpt = Checkpointer(run / "checkpoints", max_to_keep=3)
    for step in (1, 2, 3):
        ckpt.save(step, _big_state(step), CONFIG, metadata={"frames": step * 100})
    ckpt.close()
    return run


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_set_aside_and_the_newest_whole_one_resumes(
    damage, three_checkpoints, tmp_path
):
    run = tmp_path / "run"
    shutil.copytree(three_checkpoints, run)
    apply, reason = DAMAGE[damage]
    apply(run / "checkpoints" / "3")
    files_before = sorted(p.name for p in (run / "checkpoints" / "3").rglob("*"))

    # The arena's read refuses it in one line that names it and the whole ones beside it.
    with pytest.raises(UsageError) as refused:
        restore_params(run)
    line = str(refused.value)
    assert "\n" not in line and reason in line and "other saved steps: [1, 2]" in line
    assert (run / "checkpoints" / "3").is_dir()  # a reader moves nothing

    ckpt = Checkpointer(run / "checkpoints", max_to_keep=3)
    found = ckpt.newest_whole(target=_big_state(0), config=CONFIG, set_aside_in=run)
    assert found.step == 2 and found.metadata["frames"] == 200
    _assert_trees_equal(found.state, _big_state(2))
    ((skipped, moved),) = found.damaged
    assert skipped.step == 3 and skipped.reason == reason
    assert moved == run / "checkpoints-damaged" / f"3-{reason.replace(' ', '-')}"
    assert sorted(p.name for p in moved.rglob("*")) == files_before  # moved whole, not deleted
    assert ckpt.all_steps() == [1, 2]
    ckpt.save(3, _big_state(3), CONFIG)  # the run goes on and saves step 3 again
    ckpt.close()
    assert int(Checkpointer(run / "checkpoints").restore(target=_big_state(0)).step) == 3


def test_with_no_whole_checkpoint_left_the_resume_stops_in_one_line(three_checkpoints, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(three_checkpoints, run)
    for step, damage in zip((1, 2, 3), ("garbled", "empty folder", "truncated"), strict=True):
        DAMAGE[damage][0](run / "checkpoints" / str(step))
    ckpt = Checkpointer(run / "checkpoints", max_to_keep=3)
    with pytest.raises(UsageError) as refused:
        ckpt.newest_whole(target=_big_state(0), config=CONFIG, set_aside_in=run)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"no whole checkpoint left in {run / 'checkpoints'}: 3 damaged")
    assert sorted(p.name for p in (run / "checkpoints-damaged").iterdir()) == [
        "1-state-garbled",
        "2-empty-folder",
        "3-unreadable-state",
    ]


def test_final_counts_written_after_the_save_keep_the_checkpoint_whole(tmp_path):
    ckpt = Checkpointer(tmp_path)
    ckpt.save(4, _state(step=4), CONFIG, metadata={"frames": 10})
    ckpt.wait()
    ckpt.update_metadata(4, {"frames": 25, "final": True})
    meta = ckpt.restore_metadata(4)
    assert meta["frames"] == 25 and meta["final"] and meta["step"] == 4
    assert "sha256" not in meta  # the digests are checked, not handed out
    ckpt.close()
    # A hand edit that the digest did not see is damage.
    _rewrite_json(tmp_path / "4", "meta", lambda m: {**m, "frames": 26})
    with pytest.raises(UsageError, match="is damaged .metadata rewritten"):
        Checkpointer(tmp_path).restore_metadata()


WORKER = str(pathlib.Path(__file__).parent / "_checkpoint_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])}


def test_kills_at_random_moments_of_saves_leave_the_newest_whole_checkpoint(tmp_path):
    # A process saves checkpoints and replays in a loop. 20 times, at random moments, it is
    # stopped and its run directory copied: what a SIGKILL at that moment leaves on disk (a kill
    # undoes no write the kernel took); then one real SIGKILL. Each copy resumes from its newest
    # whole checkpoint, with the state saved at that step.
    from tests._checkpoint_worker import CONFIG as WORKER_CONFIG
    from tests._checkpoint_worker import state

    run = tmp_path / "run"
    writer = subprocess.Popen(
        [sys.executable, WORKER, "save-loop", str(run)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        moments = random.Random(0)
        copies = []
        for i in range(20):
            time.sleep(moments.uniform(0.02, 0.2))
            os.kill(writer.pid, signal.SIGSTOP)
            _wait_stopped(writer.pid)
            try:
                copies.append(tmp_path / f"at_{i}")
                shutil.copytree(run, copies[-1]) if run.exists() else copies[-1].mkdir()
            finally:
                os.kill(writer.pid, signal.SIGCONT)
        deadline = time.monotonic() + 60  # a loaded machine saves slowly: a few saves first
        while len(list((run / "checkpoints").glob("[0-9]*"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        writer.kill()
        writer.communicate(timeout=30)
    copies.append(run)
    resumed = []
    for copy in copies:
        ckpt = Checkpointer(copy / "checkpoints", max_to_keep=3)
        found = ckpt.newest_whole(state(0), WORKER_CONFIG, set_aside_in=copy)
        ckpt.close()
        assert not found.damaged, found.damaged  # orbax's rename: never a half checkpoint listed
        if found.step is not None:
            np.testing.assert_array_equal(
                found.state["params"]["w"], state(found.step)["params"]["w"]
            )
            replay = load_replay(copy, 0, found.step)  # its replay, or none yet: never a torn one
            assert replay is None or int(replay["uid"][0]) == found.step
        assert not list((copy / "replay").glob("*.npz.tmp")) or found.step is not None
        resumed.append(found.step)
    assert resumed[-1] is not None and resumed[-1] >= 3, resumed  # it had saved a few


def _wait_stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped: a signal is delivered to each thread apart, and a
    loaded machine may run one on (and write) after `kill` returned."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, IndexError):
                continue  # a thread that just ended
        if all(state in "tT" for state in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop")


def _full_disk(run, prefix=(), limit: int | None = None, mode: str = "full-disk") -> dict:
    """What the worker saw writing into `run` until each kind of write failed."""
    done = subprocess.run(
        [*prefix, sys.executable, WORKER, mode, str(run)] + ([str(limit)] if limit else []),
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip() == "", done.stderr[-3000:]  # no traceback, no orbax log
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_each_write_failed_in_one_line(seen: dict, run, error: str) -> None:
    assert seen["replay"] == f"cannot write the replay {run}/replay/process_0-step_2.npz: {error}"
    assert seen["replay_kept"] == 1 and seen["replay_whole"] and seen["replay_tmp_left"] == []
    failed = run / "checkpoints" / str(seen["saved"] + 1)
    assert seen["checkpoint"] == f"cannot write checkpoint {failed}: {error}"
    assert seen["saved"] >= 1 and seen["resumed"] == seen["saved"] and seen["resumed_equal"]
    assert seen["metrics"] == f"cannot write {run}/metrics.jsonl: {error}"


def test_a_full_disk_stops_each_write_in_one_line_and_keeps_what_was_saved(tmp_path):
    run = tmp_path / "disk"
    run.mkdir()
    # A real full disk: a tmpfs of 1.5 MiB mounted in a mount namespace of the worker's own.
    mount = [
        "unshare",
        "--mount",
        "sh",
        "-c",
        f'mount -t tmpfs -o size=1536k tmpfs "{run}" && exec "$@"',
        "sh",
    ]
    if shutil.which("unshare") is None or subprocess.run([*mount, "true"]).returncode != 0:
        pytest.skip("`unshare --mount` cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    seen = _full_disk(run, prefix=mount)
    _assert_each_write_failed_in_one_line(seen, run, "[Errno 28] No space left on device")


def test_a_folder_made_read_only_stops_each_write_in_one_line_and_keeps_what_was_saved(tmp_path):
    run = tmp_path / "ro"
    run.mkdir()
    # The folder bound onto itself in a mount namespace of the worker's own, which remounts it
    # read-only after its first replay and checkpoint.
    bind = ["unshare", "--mount", "sh", "-c", f'mount --bind "{run}" "{run}" && exec "$@"', "sh"]
    if shutil.which("unshare") is None or subprocess.run([*bind, "true"]).returncode != 0:
        pytest.skip("`unshare --mount` cannot bind a folder here (needs root or CAP_SYS_ADMIN)")
    seen = _full_disk(run, prefix=bind, mode="read-only")
    _assert_each_write_failed_in_one_line(seen, run, "[Errno 30] Read-only file system")


def test_a_file_size_limit_stops_each_write_in_one_line_and_keeps_what_was_saved(tmp_path):
    # RLIMIT_FSIZE at 600 KiB (SIGXFSZ ignored, as Python does): a larger file fails with EFBIG.
    seen = _full_disk(tmp_path, limit=600 * 1024)
    _assert_each_write_failed_in_one_line(seen, tmp_path, "[Errno 27] File too large")


def test_a_damaged_checkpoint_read_ends_in_one_line_with_no_traceback(three_checkpoints, tmp_path):
    # TensorStore's reads still in flight after the first failed one call back into orbax's
    # closed event loop; that must not print `RuntimeError: Event loop is closed` after the line.
    run = tmp_path / "run"
    shutil.copytree(three_checkpoints, run)
    _truncate(run / "checkpoints" / "3")
    done = subprocess.run(
        [sys.executable, WORKER, "read-damaged", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is damaged (unreadable state" in lines[0], done.stderr[-3000:]
