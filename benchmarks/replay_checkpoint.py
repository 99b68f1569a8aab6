"""How long a checkpoint with `replay.checkpoint=true` holds the learner up: one JSON line per
replay size.

    python benchmarks/replay_checkpoint.py                       # Atari frames, 20k transitions
    python benchmarks/replay_checkpoint.py --capacity 100000 --rounds 2 --dir /scratch

A `SequenceReplay` of `--capacity` transitions of Atari's stacked frames (84x84x4 uint8, about
28 KB a transition, as `pong_muzero_small` stores) is filled, then saved in rounds that
alternate the two ways: `hold_sync_s` copies the replay (`SequenceReplay.state`) and writes the
file in the caller (`save_replay`, as runs did before `ReplayWriter`), `hold_async_s` copies it
and hands the file to a `ReplayWriter` (what a run does now); `write_s` is the writer's time to
have the file on disk after that. `copy_s`, the copy alone, is the floor of the hold: the
learner must wait for a consistent snapshot. `ratio_hold` is `hold_async_s / hold_sync_s`
(medians over the rounds). The files go to a temporary folder under `--dir` (default: the
current directory, so the figure is the disk's, not a RAM-backed /tmp's) and are removed.
"""

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the packages, not this folder's selfplay.py

from selfplay.checkpoints import ReplayWriter, save_replay  # noqa: E402
from selfplay.replay import SequenceReplay  # noqa: E402

FRAME = (84, 84, 4)  # Atari's stacked frames, uint8


def filled_replay(capacity: int, window: int = 16, push_steps: int = 64, envs: int = 16):
    """A replay of `capacity` transitions of Atari-shaped steps, full."""
    replay = SequenceReplay(capacity, window, alpha=1.0, beta=1.0, seed=0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (push_steps, envs, *FRAME), dtype=np.uint8)  # [T, B, 84, 84, 4]
    for _ in range(-(-capacity // (push_steps * envs)) + 1):
        replay.add(
            {
                "observation": frames,
                "action": rng.integers(0, 18, (push_steps, envs), dtype=np.int32),
                "reward": rng.normal(size=(push_steps, envs)).astype(np.float32),
                "search_value": rng.normal(size=(push_steps, envs)).astype(np.float32),
                "policy": rng.random((push_steps, envs, 18), dtype=np.float32),
            },
            stream="actor",
        )
    return replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, nargs="+", default=[20_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    for capacity in args.capacity:
        replay = filled_replay(capacity)
        folder = tempfile.mkdtemp(prefix="replay-bench-", dir=args.dir)
        try:
            copy, sync, hold, write = [], [], [], []
            writer = ReplayWriter(folder, process=0)
            for round_ in range(args.rounds):
                started = time.perf_counter()
                arrays = replay.state()
                copy.append(time.perf_counter() - started)
                save_replay(folder, 0, 2 * round_, arrays)
                sync.append(time.perf_counter() - started)
                del arrays

                started = time.perf_counter()
                writer.save(2 * round_ + 1, replay.state())
                hold.append(time.perf_counter() - started)
                writer.wait()
                write.append(time.perf_counter() - started - hold[-1])
            files = list((pathlib.Path(folder) / "replay").iterdir())  # the newest kept
            size = statistics.mean(path.stat().st_size for path in files)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        hold_sync, hold_async = statistics.median(sync), statistics.median(hold)
        print(
            json.dumps(
                {
                    "config": f"atari_frames_{capacity}",
                    "capacity": capacity,
                    "file_mb": round(size / 2**20, 1),
                    "rounds": args.rounds,
                    "copy_s": round(statistics.median(copy), 3),
                    "hold_sync_s": round(hold_sync, 3),
                    "hold_async_s": round(hold_async, 3),
                    "write_s": round(statistics.median(write), 3),
                    "ratio_hold": round(hold_async / hold_sync, 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
