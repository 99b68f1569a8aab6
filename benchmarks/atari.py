"""Atari throughput through the Sebulba runtime, one JSON line per mode, all in one process.

    python benchmarks/atari.py                                  # ceiling, vtrace, muzero
    python benchmarks/atari.py --modes ceiling,vtrace --seconds 90 --game Breakout-v5

Modes:
- `ceiling`: envpool alone (the game, random actions, as many envs as the actors hold, on the
  same cores): the most frames/s any agent could reach here.
- `vtrace`: the `atari_vtrace` preset (IMPALA network; 2 actor threads x 8 envs, 20-step
  rollouts), actors and learner running together through `selfplay.train.train`.
- `muzero`: the `pong_muzero_small` preset the same way (`--muzero-preset atari_muzero` on an
  accelerator).

Each line carries `mode`, `frames_per_s` (frames = agent steps x frame skip),
`ceiling_frames_per_s` and `ratio`, the agent steps and updates per second, the process's CPU
cores kept busy, and the share of each stage of the actors (`env`, `search`: inference or search
including waiting for the device, `queue`) and of the learner (`queue`, `transfer`, `update`,
`publish`) from the run's metrics.jsonl. The first `--warmup` seconds (compilation) are left out.
`load_avg` is the machine's 1-minute load average at the end (other jobs share the cores).
`--override key.path=value` (repeatable) changes the trained presets.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import configs  # noqa: E402

FRAME_SKIP = 4  # envpool's Atari default: one agent step is 4 emulator frames


def _load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def ceiling(game: str, num_envs: int, seconds: float, seed: int = 0) -> dict:
    """envpool alone: random actions in `num_envs` synchronous envs for `seconds`."""
    import envpool

    pool = envpool.make(game, env_type="gymnasium", num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    pool.reset()
    num_actions = int(pool.action_space.n)
    steps = 0
    cpu = time.process_time()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pool.step(rng.integers(0, num_actions, num_envs).astype(np.int32))
        steps += num_envs
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    pool.close()
    return {"agent_steps_per_s": steps / wall, "frames_per_s": steps * FRAME_SKIP / wall,
            "cpu_cores_busy": cpu / wall, "num_envs": num_envs}


def _rates(records: list[dict], warmup: float) -> dict:
    """Frames and updates per second, and stage shares, over the records after `warmup`."""
    if len(records) < 2:
        raise RuntimeError("the run logged fewer than 2 metric lines; give it more --seconds")
    first = next((i for i, r in enumerate(records) if r["time"] >= warmup), len(records) - 2)
    first = min(first, len(records) - 2)
    start, window = records[first], records[first + 1:]
    end = window[-1]
    seconds = end["time"] - start["time"]
    steps = end["frames"] - start["frames"]
    totals: dict[str, float] = {}
    for record in window:
        for key, value in record.items():
            if key.startswith("time/") and key.endswith("_s"):
                totals[key[:-2]] = totals.get(key[:-2], 0.0) + value
    stages = {}
    for side in ("actors", "learner"):
        prefix = f"time/{side}/"
        side_total = sum(v for k, v in totals.items() if k.startswith(prefix)) or 1.0
        stages[side] = {k[len(prefix):]: round(v / side_total, 3)
                        for k, v in sorted(totals.items()) if k.startswith(prefix)}
    return {"agent_steps_per_s": steps / seconds, "frames_per_s": steps * FRAME_SKIP / seconds,
            "updates_per_s": (end["step"] - start["step"]) / seconds, "measured_s": seconds,
            "stage_shares": stages, "policy_lag": float(np.mean([r["policy_lag"] for r in window]))}


def train_mode(preset: str, overrides: list[str], seconds: float, warmup: float,
               log_every: float) -> dict:
    """Trains `preset` for `warmup + seconds` in a temporary run directory; its throughput."""
    from selfplay.train import train

    config = configs.load_config(preset, [
        f"learner.max_seconds={warmup + seconds}", "learner.max_updates=0",
        f"learner.log_every_s={log_every}", "learner.checkpoint_every=1000000", *overrides])
    with tempfile.TemporaryDirectory() as run_dir:
        cpu = time.process_time()
        start = time.perf_counter()
        result = train(config, run_dir, progress=False)
        cpu_busy = (time.process_time() - cpu) / (time.perf_counter() - start)
        lines = (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    rates = _rates([json.loads(line) for line in lines], warmup)
    actors = config.actors
    return {**rates, "cpu_cores_busy": cpu_busy, "updates": result.updates,
            "actors": f"{actors.threads_per_device} threads x {actors.envs_per_thread} envs, "
                      f"{actors.unroll_length}-step segments",
            "learner_batch": config.learner.batch_size, "preset": preset,
            "overrides": overrides, "game": config.env.name}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="ceiling,vtrace,muzero")
    parser.add_argument("--game", default="Pong-v5", help="envpool task id")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per mode")
    parser.add_argument("--warmup", type=float, default=40.0,
                        help="seconds of a training mode left out (compilation, first batches)")
    parser.add_argument("--log-every", type=float, default=5.0)
    parser.add_argument("--vtrace-preset", default="atari_vtrace")
    parser.add_argument("--muzero-preset", default="pong_muzero_small")
    parser.add_argument("--override", action="append", default=[],
                        help="key.path=value for the trained presets (repeatable)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    presets = {"vtrace": args.vtrace_preset, "muzero": args.muzero_preset}
    overrides = [f"env.name=envpool:{args.game}", *args.override]
    unknown = set(modes) - {"ceiling", *presets}
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; modes: ceiling, vtrace, muzero")

    vtrace_config = configs.load_config(presets["vtrace"], overrides)
    num_envs = vtrace_config.actors.threads_per_device * vtrace_config.actors.envs_per_thread
    base = ceiling(args.game, num_envs, min(args.seconds, 20.0))
    ceiling_fps = base["frames_per_s"]
    for mode in modes:
        if mode == "ceiling":
            line = {"mode": "ceiling", "game": args.game, **base}
        else:
            line = {"mode": mode, **train_mode(presets[mode], overrides, args.seconds,
                                               args.warmup, args.log_every)}
        line["ceiling_frames_per_s"] = ceiling_fps
        line["ratio"] = line["frames_per_s"] / ceiling_fps
        line["load_avg"] = _load_avg()
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                          for k, v in line.items()}), flush=True)


if __name__ == "__main__":
    main()
