"""A population in one program against the same members as separate runs sharing the machine.

    .venv/bin/python benchmarks/population_speed.py                  # 8 V-trace members, 2 rounds

For each round, alternating: (A) `--population` members of `--preset` (MinAtar V-trace by
default) trained as one program (`selfplay.population.run_in_program`, exploits on), each
`--frames` frames; (B) the same number of ordinary `podracer train` runs of the preset, each
`--frames` frames, all at once, each its own process (Ray Tune's way of running a population on
one machine, without Ray's own overhead); with `--baselines separate ray`, also (C) the same
population as `podracer pbt --ray` on this machine: Ray Tune's own way, each member a run in a
Ray worker process, the same intervals, exploits and explore windows as (A). One JSON line per
configuration and round: the wall time from launch to the last member's last frame (compiles
included: what a user waits), the total frames/s, and for (A) its ratio to each baseline of the
same round. The ways alternate: their order turns by one each round. Bar (issue 81): >= 2x on
this project's 2-core CPU.

`--program-only --populations 1 8 32` measures populations of each size in one program alone
(the GPU step of `benchmarks/gpu.sh`: frames/s on one card).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

EXPLORE = ("optimizer.learning_rate=1e-4:1e-3:log", "loss.entropy_cost=3e-3:3e-2:log")
_PROGRAM = """
import json, sys, time
started = time.monotonic()
from selfplay.run import split_cpu
import configs
config = configs.load_config(sys.argv[1], json.loads(sys.argv[5]))
split_cpu(config.devices.cpu_devices)
from selfplay.pbt import PopulationSettings, parse_explore
from selfplay.population import run_in_program
from selfplay.train import enable_compilation_cache
enable_compilation_cache()  # as `podracer pbt` and `podracer train` do
population, frames = int(sys.argv[2]), int(sys.argv[3])
explore = tuple(parse_explore(e, config) for e in json.loads(sys.argv[6]))
settings = PopulationSettings(config, population, max(frames // 4, 1), frames, explore)
result = run_in_program(settings, sys.argv[4], plot=False)  # as the separate runs' --no-plot
print(json.dumps({"frames": result.frames, "seconds": time.monotonic() - started}))
"""


def program(preset: str, population: int, frames: int, overrides, folder: str) -> dict:
    """One process training `population` members in one program: its wall time from launch."""
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM, preset, str(population), str(frames), folder,
         json.dumps(overrides), json.dumps(list(EXPLORE))],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    last = json.loads(out.stdout.strip().splitlines()[-1])
    wall = time.monotonic() - started
    return {"frames_each": last["frames"], "seconds": round(wall, 1),
            "frames_per_s": round(population * last["frames"] / wall, 1)}  # fmt: skip


def separate(preset: str, runs: int, frames: int, overrides, folder: str) -> dict:
    """`runs` `podracer train` processes at once, each `frames` frames."""
    command = [sys.executable, "-m", "podracer", "train", "--config", preset, "--quiet",
               "--no-plot"]  # fmt: skip
    sets = [*overrides, f"learner.max_frames={frames}", "learner.max_seconds=0",
            "learner.max_updates=0", "evaluation.every_s=0"]  # fmt: skip
    started = time.monotonic()
    processes = [
        subprocess.Popen(
            [*command, "--run-dir", os.path.join(folder, f"run_{i}"), *sets, f"seed={i}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(runs)
    ]
    for p in processes:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a separate run failed ({p.returncode}): {err.strip()[-400:]}")
    wall = time.monotonic() - started
    from selfplay.metrics import read_metrics

    done = [read_metrics(os.path.join(folder, f"run_{i}"))[-1]["frames"] for i in range(runs)]
    return {"frames_each": min(done), "seconds": round(wall, 1),
            "frames_per_s": round(sum(done) / wall, 1)}  # fmt: skip


def on_ray(preset: str, population: int, frames: int, overrides, folder: str) -> dict:
    """`podracer pbt --ray` of `population` members on this machine, as (A) runs them."""
    run_dir = os.path.join(folder, "pop")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "podracer", "pbt", "--ray", "--config", preset,
         f"--population={population}", f"--interval-frames={max(frames // 4, 1)}",
         f"--max-frames={frames}", *[f"--explore={e}" for e in EXPLORE], "--run-dir", run_dir,
         "--no-plot", *overrides, "evaluation.every_s=0"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"podracer pbt --ray failed ({done.returncode}): {done.stderr[-400:]}")
    from selfplay.pbt import read_events

    end = read_events(run_dir)[-1]
    reached = [member["frames"] for member in end["members"]]
    return {"frames_each": min(reached), "seconds": round(wall, 1),
            "frames_per_s": round(sum(reached) / wall, 1)}  # fmt: skip


WAYS = {"separate": separate, "ray": on_ray}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="minatar_breakout_vtrace")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--frames", type=int, default=200_000, help="each member's")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--program-only", action="store_true")
    parser.add_argument("--populations", type=int, nargs="+", default=None)
    parser.add_argument("--set", nargs="*", default=[], help="overrides of every member")
    parser.add_argument(
        "--baselines", nargs="+", choices=tuple(WAYS), default=["separate"],
        help="(B) separate processes, (C) podracer pbt --ray",
    )  # fmt: skip
    args = parser.parse_args(argv)
    lines = []
    root = tempfile.mkdtemp(prefix="population_speed-")
    try:
        for round_ in range(args.rounds):
            if args.program_only:
                for size in args.populations or [args.population]:
                    folder = os.path.join(root, f"program_{size}_{round_}")
                    measured = program(args.preset, size, args.frames, args.set, folder)
                    line = {"benchmark": "population_speed", "round": round_,
                            "way": "one_program", "population": size, **measured}  # fmt: skip
                    print(json.dumps(line), flush=True)
                    lines.append(line)
                continue
            measured = {}
            ways = ["one_program", *args.baselines]
            turn = round_ % len(ways)  # each way first in turn
            for way in ways[turn:] + ways[:turn]:
                folder = os.path.join(root, f"{way}_{round_}")
                run = program if way == "one_program" else WAYS[way]
                measured[way] = run(args.preset, args.population, args.frames, args.set, folder)
            ours = measured["one_program"]["frames_per_s"]
            for way in ways:
                ratios = {
                    f"ratio_to_{other}": round(ours / measured[other]["frames_per_s"], 3)
                    for other in args.baselines
                    if way == "one_program"
                }
                line = {
                    "benchmark": "population_speed",
                    "preset": args.preset,
                    "round": round_,
                    "way": way,
                    "population": args.population,
                    **measured[way],
                    **ratios,
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
                print(json.dumps(line), flush=True)
                lines.append(line)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return lines


if __name__ == "__main__":
    main()
