"""Peer benchmark: environment steps, wall and CPU seconds to a CartPole return, LightZero vs ours.

    .venv/bin/python benchmarks/peers.py --seeds 0 1 2
    .venv/bin/python benchmarks/peers.py --systems podracer --seeds 0 --podracer-set \\
        replay.samples_per_insert=8

Why: people choose MuZero for how much it learns from each step of an expensive environment.
LightZero's own `cartpole_muzero_config` reaches an evaluation return of 200 on CartPole-v0
within a few thousand environment steps on a 2-core CPU (3,237-5,383 for seeds 0-2 on
2026-12-06, torch 2.12.1); this measures ours on the same task, seeds and evaluation protocol
(`cartpole_muzero`: a median of 3,008 that day, in a third of the wall time), so that the
difference is a number the project tracks. `--podracer-set` runs ours with overrides (how the
table of changes in BENCHMARKS.md was measured).

What runs, per seed (`--seeds`), each in a process of its own, one after the other:

- `lightzero`: LightZero 0.2.0's `zoo/classic_control/cartpole/config/cartpole_muzero_config.py`
  (`--algorithm efficientzero`: `cartpole_efficientzero_config.py`), unchanged but for the device
  (`policy.cuda=False`), through `lzero.entry.train_muzero([main_config, create_config],
  seed=S, max_env_step=--lightzero-steps)`, run by LightZero's own virtual environment's python
  (`--lightzero-python`) in `--run-root/lightzero-<algo>-seed<S>/` (its `exp_name` folder, logs
  and TensorBoard events go there). A small wrapper around `MuZeroEvaluator.eval` prints each
  evaluation (collector env steps, learner updates, mean return) as a JSON line; nothing else of
  LightZero's is touched. It stops itself at its `stop_value` (200: the mean return of one
  evaluation), or at the step cap.
- `podracer`: `podracer train --config cartpole_muzero env.name=envpool:CartPole-v1
  'env.options={"max_episode_steps": 200}' seed=S learner.max_frames=--podracer-frames`, the
  evaluator run only at `evaluation.at_frames` (every `--mark-every` frames: the parameters of
  the first update at or past each mark, evaluated in a thread beside the run; marks passed
  before the first update share its evaluation; `evaluation.every_s=0`: no timed ones), in
  `--run-root/podracer-<algo>-seed<S>/`; read from its `metrics.jsonl` (`eval/return`,
  `eval/frames`). This script stops it (SIGINT: a clean stop) once one evaluation's mean return
  reaches `--stop-at` (200, LightZero's own stop rule), so both end at the same bar.

The evaluation protocols (written into every line):

- LightZero: `evaluator_env_num=3` episodes (`n_evaluator_episode=3`) of CartPole-v0 (200 steps),
  greedy (`_forward_eval`: the root without Dirichlet noise, the most visited action), 25
  simulations; the evaluation envs are seeded with the run's seed, the same at every evaluation
  (`dynamic_seed=False`); after every `eval_freq=100` learner updates (at update 0, then after
  each collection of 8 episodes and its 100 updates; its EfficientZero config: every 200, after
  every second collection), at the collector's env steps then. This
  script ends its run at the first evaluation of `--stop-at` or more (its MuZero config's own
  `stop_value` ends it there too; its EfficientZero config has no stop value).
- ours: `--eval-games` (3 by default, as LightZero's) episodes of the greedy agent (no root noise,
  the most visited action, the run's 25 simulations), CartPole-v1 capped at 200 steps, seeded with
  the run's seed, the same at every evaluation; at the frame marks. Each line carries the run's
  own account (its `evaluation.txt`, `arena.progress.one_player_protocol`).

Each line (one per system and seed): `steps_to_195` (the environment steps of the first
evaluation with a mean return >= 195; null if none), `wall_s_to_195` (seconds from the process's
start, imports and compilation included, to when the system had those steps and parameters:
LightZero's evaluation's start, ours the first metrics record with the mark's frames),
`cpu_s_to_195` (the user + system CPU seconds of the process and its children until then,
sampled from /proc every `--sample-s`), `updates_to_195` (learner updates then), `last_mark`
(the last evaluation: its steps, updates and return), `best_mark`, the total wall and CPU seconds
and steps, and the evaluation protocol. A final line has the medians over seeds of each system
and the ratios ours/LightZero (steps, wall and CPU seconds to 195; null where a seed of either
system never reached it). `--earlier FILE` adds the lines of earlier invocations to the summary
(seeds run a few at a time):

    .venv/bin/python benchmarks/peers.py --systems lightzero --seeds 1 --earlier seed0.jsonl

LightZero lives in a virtual environment of its own (never a dependency of the project):

    python3.11 -m venv /work/peers/lightzero
    /work/peers/lightzero/bin/pip install LightZero==0.2.0  # torch and CUDA wheels: 5.6 GB

Threads: both systems run with `OMP_NUM_THREADS=1` and `MKL_NUM_THREADS=1` (LightZero's main
process also `torch.set_num_threads(1)`): on a small CPU one OpenMP/torch thread per process is
what its users should set, since LightZero's 8 collector and 3 evaluator environments are
subprocesses of their own (its `env_manager=subprocess`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

TARGET = 195.0
LIGHTZERO_PYTHON = "/work/peers/lightzero/bin/python"
ENV_LABEL = "CartPole-v0 (200 steps)"
CONFIGS = {
    "muzero": ("cartpole_muzero_config", "cartpole_muzero"),
    "efficientzero": ("cartpole_efficientzero_config", "cartpole_efficientzero"),
}

# Run by LightZero's python: its own config, the device set to CPU, one torch thread, and each
# evaluation printed as a JSON line (LightZero's own logs and TensorBoard files are kept too).
_LIGHTZERO_RUNNER = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from importlib import import_module
module = import_module("zoo.classic_control.cartpole.config." + sys.argv[1])
seed, max_env_step = int(sys.argv[2]), int(sys.argv[3])
main_config, create_config = module.main_config, module.create_config
main_config.policy.cuda = False
from lzero.worker import MuZeroEvaluator

original = MuZeroEvaluator.eval


class _Capture:
    def __init__(self, inner):
        self.inner, self.values = inner, {}

    def add_scalar(self, key, value, step, *args, **kwargs):
        self.values[key] = value
        return self.inner.add_scalar(key, value, step, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def eval_and_report(self, save_ckpt_fn=None, train_iter=-1, envstep=-1, *args, **kwargs):
    began = time.time()
    capture = _Capture(self._tb_logger)
    self._tb_logger = capture
    try:
        out = original(self, save_ckpt_fn, train_iter, envstep, *args, **kwargs)
    finally:
        self._tb_logger = capture.inner
    mean = capture.values.get("evaluator_step/reward_mean")
    record = {"peers_eval": True, "envstep": int(envstep), "train_iter": int(train_iter),
              "reward_mean": None if mean is None else float(mean), "began": began,
              "ended": time.time()}
    print("PEERS " + json.dumps(record), flush=True)
    return out


MuZeroEvaluator.eval = eval_and_report
from lzero.entry import train_muzero
train_muzero([main_config, create_config], seed=seed, max_env_step=max_env_step)
print("PEERS " + json.dumps({"peers_done": True, "ended": time.time()}), flush=True)
"""


def _tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of `root` and its live descendants (and of the children they
    have reaped), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        # fields[1] is ppid; utime, stime, cutime, cstime are fields 14-17 of the stat line.
        stats[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, frontier = 0.0, [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats:
            total += stats[pid][1]
        frontier.extend(p for p, (ppid, _) in stats.items() if ppid == pid)
    return total


class _CpuSampler:
    """Samples the CPU seconds of a process tree every `every_s` seconds, in a thread."""

    def __init__(self, pid: int, every_s: float):
        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, float]] = []  # (time.time(), CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            seconds = _tree_cpu_seconds(self.pid)
            if seconds or not self.samples:
                self.samples.append((time.time(), seconds))
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, when: float) -> float | None:
        """The CPU seconds at wall time `when` (linear between the samples around it)."""
        before = [s for s in self.samples if s[0] <= when]
        after = [s for s in self.samples if s[0] > when]
        if not before:
            return after[0][1] if after else None
        if not after:
            return before[-1][1]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 + (c1 - c0) * (when - t0) / (t1 - t0)


def _thread_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def _line(
    system: str,
    args,
    seed: int,
    marks: list[dict],
    started: float,
    sampler,
    total: dict,
    protocol: str = "",
):
    """One JSON line from a run's marks: dicts of steps, updates, return and wall time `at`."""
    reached = next((m for m in marks if m["eval_return"] >= TARGET), None)
    best = max(marks, key=lambda m: m["eval_return"], default=None)

    def at(mark):
        if mark is None:
            return None, None
        cpu = sampler.at(mark["at"])
        return round(mark["at"] - started, 1), None if cpu is None else round(cpu, 1)

    wall, cpu = at(reached)
    if system == "lightzero":
        protocol = (
            "LightZero MuZeroEvaluator: 3 episodes (n_evaluator_episode=3), greedy (no root "
            "noise, most visited action), 25 simulations, eval envs seeded with the run's seed, "
            "the same each time; "
            + (
                "every eval_freq=100 updates (after each 8-episode collection)"
                if args.algorithm == "muzero"
                else "every eval_freq=200 updates (after every second 8-episode collection)"
            )
        )
    return {
        "benchmark": "peers",
        "system": system,
        "algorithm": args.algorithm,
        "env": ENV_LABEL,
        "seed": seed,
        "target": TARGET,
        "steps_to_195": reached["steps"] if reached else None,
        "wall_s_to_195": wall,
        "cpu_s_to_195": cpu,
        "updates_to_195": reached["updates"] if reached else None,
        "last_mark": (
            {k: marks[-1][k] for k in ("steps", "updates", "eval_return")} if marks else None
        ),
        "best_mark": {k: best[k] for k in ("steps", "updates", "eval_return")} if best else None,
        "evaluations": len(marks),
        **total,
        "eval_protocol": protocol,
    }


def run_lightzero(args, seed: int) -> dict:
    module, name = CONFIGS[args.algorithm]
    run_dir = os.path.abspath(os.path.join(args.run_root, f"lightzero-{name}-seed{seed}"))
    os.makedirs(run_dir, exist_ok=True)
    command = [
        args.lightzero_python,
        "-c",
        _LIGHTZERO_RUNNER,
        module,
        str(seed),
        str(args.lightzero_steps),
    ]
    marks: list[dict] = []
    started = time.time()
    with open(os.path.join(run_dir, "stdout.log"), "w") as log:
        proc = subprocess.Popen(
            command,
            cwd=run_dir,
            env=_thread_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        sampler = _CpuSampler(proc.pid, args.sample_s)
        timer = threading.Timer(args.max_seconds, lambda: os.killpg(proc.pid, signal.SIGTERM))
        timer.start()
        assert proc.stdout is not None
        for text in proc.stdout:
            log.write(text)
            if not text.startswith("PEERS "):
                continue
            record = json.loads(text[len("PEERS ") :])
            if record.get("peers_eval") and record["reward_mean"] is not None:
                marks.append(
                    {
                        "steps": record["envstep"],
                        "updates": record["train_iter"],
                        "eval_return": round(record["reward_mean"], 2),
                        "at": record["began"],
                    }
                )
                if args.verbose:
                    print(f"# lightzero seed {seed}: {marks[-1]}", file=sys.stderr, flush=True)
                # The same bar as ours: its CartPole MuZero config stops itself there (its
                # stop_value), its EfficientZero config has none and would run to the step cap.
                if record["reward_mean"] >= args.stop_at and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait()
        timer.cancel()
    ended = time.time()
    sampler.stop()
    total = {
        "steps": marks[-1]["steps"] if marks else None,
        "wall_s": round(ended - started, 1),
        "cpu_s": round(sampler.samples[-1][1], 1) if sampler.samples else None,
        "returncode": rc,
        "loadavg_1m": round(os.getloadavg()[0], 2),  # others' work on the machine shows here
        "run_dir": run_dir,
    }
    return _line("lightzero", args, seed, marks, started, sampler, total)


def run_podracer(args, seed: int) -> dict:
    if args.algorithm != "muzero":
        raise SystemExit("ours: only --algorithm muzero (the cartpole_muzero preset)")
    name = f"podracer-cartpole_muzero-seed{seed}-{time.strftime('%H%M%S')}"
    run_dir = os.path.abspath(os.path.join(args.run_root, name))
    at_frames = list(range(args.mark_every, args.podracer_frames + 1, args.mark_every))
    command = [
        os.path.join(_ROOT, ".venv", "bin", "podracer"),
        "train",
        "--config",
        "cartpole_muzero",
        "--run-dir",
        run_dir,
        "--quiet",
        "--no-plot",
        "env.name=envpool:CartPole-v1",
        'env.options={"max_episode_steps": 200}',
        f"seed={seed}",
        f"learner.max_frames={args.podracer_frames}",
        f"learner.max_seconds={args.max_seconds}",
        "learner.max_updates=0",
        "learner.log_every_s=1",
        "evaluation.every_s=0",  # only the marks
        f"evaluation.games={args.eval_games}",
        f"evaluation.at_frames=[{','.join(map(str, at_frames))}]",
        *args.podracer_set,
    ]
    metrics = os.path.join(run_dir, "metrics.jsonl")
    records: list[dict] = []
    started = time.time()
    with open(os.path.join(args.run_root, f"podracer-seed{seed}.log"), "w") as log:
        proc = subprocess.Popen(
            command, cwd=_ROOT, env=_thread_env(), stdout=log, stderr=subprocess.STDOUT
        )
        sampler = _CpuSampler(proc.pid, args.sample_s)
        offset, stopping = 0, False
        while True:
            done = proc.poll() is not None
            if os.path.exists(metrics):
                with open(metrics) as f:
                    f.seek(offset)
                    chunk = f.read()
                complete = chunk[: chunk.rfind("\n") + 1]
                offset += len(complete.encode())
                for text in complete.splitlines():
                    record = json.loads(text)
                    records.append(record)
                    if "eval/return" in record:
                        if args.verbose:
                            shown = (record["eval/frames"], record["step"], record["eval/return"])
                            print(f"# podracer seed {seed}: {shown}", file=sys.stderr, flush=True)
                        if record["eval/return"] >= args.stop_at and not stopping:
                            proc.send_signal(signal.SIGINT)  # a clean stop, as Ctrl-C
                            stopping = True
            if done:
                break
            time.sleep(0.5)
    ended = time.time()
    sampler.stop()
    trained = [r for r in records if "frames" in r and "eval/frames" not in r]
    marks = []
    for r in records:
        if "eval/return" not in r:
            continue
        # When the run had the mark's frames: the first metrics record with as many.
        when = next((t["wall_time"] for t in trained if t["frames"] >= r["eval/frames"]), None)
        marks.append(
            {
                "steps": r["eval/frames"],
                "updates": r["step"],
                "eval_return": round(r["eval/return"], 2),
                "at": when if when is not None else r["wall_time"] - r.get("eval/seconds", 0.0),
            }
        )
    marks.sort(key=lambda m: m["steps"])
    total = {
        "steps": max((t["frames"] for t in trained), default=None),
        "wall_s": round(ended - started, 1),
        "cpu_s": round(sampler.samples[-1][1], 1) if sampler.samples else None,
        "returncode": proc.returncode,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "run_dir": run_dir,
    }
    # The run's own account of its evaluation (arena.progress.one_player_protocol).
    protocol_file = os.path.join(run_dir, "evaluation.txt")
    protocol = open(protocol_file).read().strip() if os.path.exists(protocol_file) else ""
    return _line("podracer", args, seed, marks, started, sampler, total, protocol)


def summary(lines: list[dict]) -> dict:
    def median(system, key):
        values = [x[key] for x in lines if x["system"] == system]
        if not values or any(v is None for v in values):
            return None  # a seed that never reached the target: no median of the others
        return statistics.median(values)

    out: dict = {"benchmark": "peers", "summary": True, "target": TARGET}
    for system in sorted({x["system"] for x in lines}):
        own = [x for x in lines if x["system"] == system]
        out[system] = {
            "seeds": [x["seed"] for x in own],
            "reached_195": [x["seed"] for x in own if x["steps_to_195"] is not None],
            "median_steps_to_195": median(system, "steps_to_195"),
            "median_wall_s_to_195": median(system, "wall_s_to_195"),
            "median_cpu_s_to_195": median(system, "cpu_s_to_195"),
        }
    if "lightzero" in out and "podracer" in out:
        for key in ("steps", "wall_s", "cpu_s"):
            ours = out["podracer"][f"median_{key}_to_195"]
            theirs = out["lightzero"][f"median_{key}_to_195"]
            out[f"ratio_{key}_to_195"] = round(ours / theirs, 2) if ours and theirs else None
    return out


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", nargs="+", default=["lightzero", "podracer"])
    parser.add_argument("--algorithm", default="muzero", choices=sorted(CONFIGS))
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[0, 1, 2], help="none: only --earlier's summary"
    )
    parser.add_argument("--lightzero-python", default=LIGHTZERO_PYTHON)
    parser.add_argument("--lightzero-steps", type=int, default=20_000, help="max_env_step")
    parser.add_argument("--podracer-frames", type=int, default=40_000, help="learner.max_frames")
    parser.add_argument("--podracer-set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--mark-every", type=int, default=500, help="ours: evaluation frames")
    parser.add_argument("--eval-games", type=int, default=3, help="ours: episodes per evaluation")
    parser.add_argument("--stop-at", type=float, default=200.0, help="both: stop at this return")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="per run")
    parser.add_argument("--sample-s", type=float, default=0.5, help="CPU sampling interval")
    parser.add_argument("--run-root", default="/work/peers/runs")
    parser.add_argument("--verbose", action="store_true", help="each evaluation on stderr")
    parser.add_argument(
        "--earlier",
        nargs="*",
        default=[],
        metavar="JSONL",
        help="this command's output from earlier invocations: their lines join the summary",
    )
    args = parser.parse_args(argv)
    unknown = set(args.systems) - {"lightzero", "podracer"}
    if unknown:
        parser.error(f"--systems: unknown {sorted(unknown)} (lightzero, podracer)")
    if "lightzero" in args.systems and not os.access(args.lightzero_python, os.X_OK):
        parser.error(f"--lightzero-python {args.lightzero_python}: not found (see the docstring)")
    os.makedirs(args.run_root, exist_ok=True)
    earlier = []
    for path in args.earlier:  # read first: a bad file ends the command before any training
        with open(path) as f:
            earlier += [x for x in map(json.loads, f) if x.get("system")]
    lines = []
    for seed in args.seeds:
        for system in args.systems:
            run = run_lightzero if system == "lightzero" else run_podracer
            line = run(args, seed)
            print(json.dumps(line), flush=True)
            lines.append(line)
    print(json.dumps(summary(earlier + lines)), flush=True)
    return lines


if __name__ == "__main__":
    main()
