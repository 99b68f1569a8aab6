"""A process that writes checkpoints, replays and metrics as a run does, for the tests of what a
kill or a full disk leaves behind (tests/test_checkpoints.py).

    _checkpoint_worker.py save-loop DIR     saves checkpoint 1, 2, ... (and each one's replay)
                                            until killed; prints "ready", then each step saved
    _checkpoint_worker.py full-disk DIR     writes replays, checkpoints and metrics until a
                                            write fails (the test limits the disk or the file
                                            size); prints one JSON line of what it saw
    _checkpoint_worker.py read-only DIR     saves a replay and a checkpoint, makes DIR read-only
                                            (a bind mount remounted, in the test's namespace),
                                            then writes each kind again; one JSON line as above
    _checkpoint_worker.py read-damaged DIR  reads the newest (damaged) checkpoint's params as
                                            the arena does, several times; the error's one line
                                            on stderr, exit 2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

CONFIG = {"env": {"name": "tic_tac_toe"}, "network": {"width": 8}}
SHAPE = (512, 512)  # 1 MiB of float32 per array: a save takes a while, and compresses little


def state(step: int, noise: bool = True) -> dict:
    """The state saved at `step`: random (incompressible) arrays, or zeros (a tiny file)."""
    rng = np.random.default_rng(step)
    w = rng.standard_normal(SHAPE, np.float32) if noise else np.zeros(SHAPE, np.float32)
    return {"params": {"w": w, "b": np.full(8, step, np.float32)}, "step": np.int32(step)}


def replay(step: int, rows: int = 4096) -> dict:
    return {"uid": np.arange(rows) + step, "paths": np.asarray(["['obs']"])}


def save_loop(run: Path) -> None:
    from selfplay.checkpoints import Checkpointer, save_replay

    ckpt = Checkpointer(run / "checkpoints", max_to_keep=3)
    print("ready", flush=True)
    step = 0
    while True:
        step += 1
        ckpt.save(step, state(step), CONFIG, metadata={"frames": step})
        save_replay(run, 0, step, replay(step))
        if step % 3 == 0:  # as a run that stops at a step it saved: its metadata rewritten
            ckpt.wait()
            ckpt.update_metadata(step, {"final": True})
        print(step, flush=True)


def _replay_seen(run: Path, kept: int, seen: dict) -> None:
    """Whether the newest replay saved (`kept`, 0 for none) reads back whole, and no temporary
    file is left beside it."""
    from selfplay.checkpoints import load_replay

    loaded = load_replay(run, 0, kept) if kept else None
    seen["replay_kept"] = kept
    seen["replay_whole"] = loaded is not None and int(loaded["uid"][0]) == kept
    seen["replay_tmp_left"] = sorted(p.name for p in (run / "replay").glob("*.tmp"))


def _checkpoint_seen(ckpt, run: Path, saved: int, seen: dict) -> None:
    """Closes `ckpt` (a save's error is the checkpoint's line if none was yet) and resumes:
    whether the newest whole checkpoint is `saved` (state(1) zeros, the rest noise)."""
    from selfplay.checkpoints import Checkpointer
    from selfplay.files import WriteFailed

    try:
        ckpt.close()
    except WriteFailed as error:
        seen.setdefault("checkpoint", str(error))
    resumed = Checkpointer(run / "checkpoints", max_to_keep=None).newest_whole(state(0))
    seen["saved"], seen["resumed"] = saved, resumed.step
    seen["resumed_equal"] = bool(
        resumed.step is not None
        and np.array_equal(
            resumed.state["params"]["w"], state(saved, noise=saved > 1)["params"]["w"]
        )
    )


def full_disk(run: Path) -> None:
    from selfplay.checkpoints import Checkpointer, save_replay
    from selfplay.files import WriteFailed
    from selfplay.metrics import MetricsLogger

    seen: dict = {}
    kept = 0
    try:
        for step in range(1, 100):
            save_replay(run, 0, step, replay(step, rows=16 if step == 1 else 1 << 18))
            kept = step
    except WriteFailed as error:
        seen["replay"] = str(error)
    _replay_seen(run, kept, seen)
    ckpt = Checkpointer(run / "checkpoints", max_to_keep=None)
    saved = 0
    try:
        for step in range(1, 100):
            # The first state is zeros (a small file under a file-size limit), the rest noise.
            ckpt.save(step, state(step, noise=step > 1), CONFIG)
            ckpt.wait()
            saved = step
    except WriteFailed as error:
        seen["checkpoint"] = str(error)
    _checkpoint_seen(ckpt, run, saved, seen)
    logger = MetricsLogger(run, tensorboard=False, progress=False)
    try:
        for step in range(1 << 20):
            logger.log(step, {"loss": 1.0, "note": "x" * 200})
    except WriteFailed as error:
        seen["metrics"] = str(error)
    try:
        logger.close()
    except WriteFailed as error:
        seen.setdefault("metrics", str(error))
    print(json.dumps(seen), flush=True)


def read_only(run: Path) -> None:
    """Saves a replay and a checkpoint into `run`, makes `run` read-only (the test binds it onto
    itself in a mount namespace of this process's own), then tries each kind of write again."""
    import subprocess

    from selfplay.checkpoints import Checkpointer, save_replay
    from selfplay.files import WriteFailed
    from selfplay.metrics import MetricsLogger

    seen: dict = {}
    save_replay(run, 0, 1, replay(1, rows=16))
    ckpt = Checkpointer(run / "checkpoints", max_to_keep=None)
    ckpt.save(1, state(1, noise=False), CONFIG)
    ckpt.wait()
    subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
    try:
        save_replay(run, 0, 2, replay(2, rows=16))
    except WriteFailed as error:
        seen["replay"] = str(error)
    _replay_seen(run, 1, seen)
    try:
        ckpt.save(2, state(2), CONFIG)
        ckpt.wait()
    except WriteFailed as error:
        seen["checkpoint"] = str(error)
    _checkpoint_seen(ckpt, run, 1, seen)
    try:
        MetricsLogger(run, tensorboard=False, progress=False)
    except WriteFailed as error:
        seen["metrics"] = str(error)
    print(json.dumps(seen), flush=True)


def read_damaged(run: Path) -> None:
    from configs import UsageError
    from selfplay.checkpoints import restore_params

    line = ""
    for _ in range(20):  # each failed read leaves TensorStore's reads in flight to call back
        try:
            restore_params(run)
        except UsageError as error:
            line = str(error)
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.exit(2)


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "full-disk" and len(sys.argv) > 3:  # a file-size limit: EFBIG, not SIGXFSZ
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    modes = {
        "save-loop": save_loop,
        "full-disk": full_disk,
        "read-only": read_only,
        "read-damaged": read_damaged,
    }
    modes[mode](where)
