"""Self-play speed of the Sebulba runtime: positions/s, games/minute and where the time goes.

    .venv/bin/python benchmarks/selfplay.py                          # every configuration
    .venv/bin/python benchmarks/selfplay.py --only az_connect_four_1x128 --seconds 60
    .venv/bin/python benchmarks/selfplay.py --actors-only --reference  # actor threads alone
    .venv/bin/python benchmarks/selfplay.py --only az_tic_tac_toe_2x64 --pgx-loop  # vs pgx's loop
    .venv/bin/python benchmarks/selfplay.py --only az_tic_tac_toe_1x128 --paths per_move segment
    .venv/bin/python benchmarks/selfplay.py --only mz_tic_tac_toe --set actors.envs_per_thread=64
    .venv/bin/python benchmarks/selfplay.py --only az_tic_tac_toe_2x64 --reference \
        --set runtime=anakin devices.cpu_devices=2     # Anakin: 64 games on each of 2 devices

Each configuration runs `selfplay.train.train(config, <tmp run dir>, progress=False)` and reads
its `metrics.jsonl`. The clock starts at its first line of status `learning` (after the learner's
first update), so by then the actors' search and the learner's update are compiled and the
replay has filled; the run goes on for `--warmup` + `--seconds` after that line and is then
stopped. Positions/s is the frames
between the first line at or after `--warmup` s and the last line, over the time between them.
A position (frame) is one actor step of one environment. The shares of time come from the same
lines' `time/actors/{env,search,queue}_s` (summed over actor threads) and
`time/learner/{wait,build,dispatch,device,publish}_s`: `env_share`, `search_share` and
`update_share` (the learner's `build` + `dispatch` + `device`: building batches and updating on
its devices) are each a share of all the time measured in the actors plus the learner.
`learner_wait_share` is the learner's `wait` (for a sample from the store and the input thread)
over all its stages' time (selfplay/learner_input.py); `samples_per_s` is
updates/s times the batch size. `--prefetch 0 2` runs each configuration once per
`learner.prefetch` value, in that order (0: sample, update and wait in series, as before the
input pipeline), and each line after the first carries `updates_per_s_ratio_to_first` and
`positions_per_s_ratio_to_first`; `--rounds N` repeats them, alternating the values within each
round (the ratios compare runs of one round). `frames_per_update` beside
`frames_per_update_at_ratio` says whether the window measured the rate a long run settles at:
the replay's rate limiter lets either side run free until its `error_buffer` is used up.
Where a pgx env step runs inside the search's jitted call (a segment's scan; move by move, on
an accelerator, the fused act+step), its time is in `search`; on the per-move path
`pgx_step_share_of_act_step` measures it apart after the run (CPU time of the pgx step alone over
that of the fused act+step, same batch).

`--paths per_move segment` runs each configuration on both of Sebulba's paths for a JAX
environment, in that order: `per_move` (`actors.scan_moves=off replay.on_device=off`: a device
round trip per move, the host replay and its input thread) and `segment`
(`actors.scan_moves=on replay.on_device=on`: a whole segment per device call, the replay on the
learner's device; "auto" takes both on accelerators only); each line says its `path`, and the
second carries `host_cpu_s_per_1000_positions_ratio_to_first` beside the rates' ratios.

The host's CPU proxy: `cpu_s_per_1000_positions_{actors,input,learner,other}` is the CPU time
of the actor threads, the learner's input thread, the learner (the main thread) and every other
thread (XLA's, where a CPU device computes the search and the update), per 1,000 positions, over
the same window (/proc/self/task/*/stat); `host_cpu_s_per_1000_positions` sums the first three:
the host's own work, which on a GPU host competes with nothing the device does, measured here
so that a change to it is seen on this CPU and only confirmed on a card. `--actors-only` reports
the same for its actor threads.

`positions_per_cpu_s` divides the same frames by the process's CPU time over the same window
(all its threads). On a machine shared with other jobs the wall-clock rate depends on what share
of the cores the scheduler gives us; the CPU rate does much less, and twice it
(`two_core_estimate`) estimates the rate on two idle cores if both are kept busy.

The learner learns from each position once on average (`replay.samples_per_insert=1`), as pgx's
AlphaZero example does (it alternates self-play and training, so its positions/s counts training
time too); `--set` overrides any config field, e.g. `replay.samples_per_insert=0` to let the
actors run free of the learner.

`--actors-only`: no learner. The parameters are published once and the actor threads of the
runtime (`selfplay.actors.start_actors`, the same code) act into a store that drops what it is
given, for `--seconds` after every thread's first steps (compiled) and `--warmup-actors` s more.

`--reference` adds, per AlphaZero configuration, the same search and the same pgx rules fully
jitted (act and step in one `lax.scan` over `actors.unroll_length` steps, the pattern of pgx's
example, no learner, no host round trip), measured in the same process after the run, so that the
machine's load at the time hits both: `ratio_to_jitted` is ours / jitted.

`--pgx-loop` adds, per AlphaZero configuration, pgx's AlphaZero example's loop written with the
configuration's own network, search, rules, loss and optimizer (a jitted self-play scan of
`--loop-steps` moves of all the games, then one update per `--loop-batch` positions), in the same
process after the run: `ratio_to_pgx_loop` is ours / that loop, on the same cores. Both learn
from every position once, but in batches of their own: `batch_size` (the configuration's
`learner.batch_size`) against `pgx_loop_batch_size` (`--loop-batch`, pgx's example's 4,096);
`--set learner.batch_size=4096` makes the updates the same too.

`--runtimes sebulba anakin` runs each configuration on both runtimes in turn; the ceilings of
`--pgx-loop` and `--reference` are measured once per configuration (and round), after its first
run, and every line carries its ratios to them.

With `--set runtime=anakin` the same configurations run on the Anakin runtime (selfplay/anakin.py:
`actors.envs_per_thread` games on each device, acting and learning in one jitted step per
iteration; no actor or learner stages to share the time between); `devices.cpu_devices=2` splits
a 2-core CPU into two devices, as the line's `devices` says.

One JSON line per configuration, with the fixed reference figures of pgx's AlphaZero example on
this machine (740 positions/s on connect four with 32 simulations, 6,800 on tic-tac-toe with 16;
128 games at once, 32 channels, 2 blocks), our ratio to them, and the load average.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import threading
import time

# Run as `python benchmarks/selfplay.py`, this folder is first on sys.path and this file's name
# would hide the `selfplay` package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import configs  # noqa: E402
from envs import make_env  # noqa: E402
from selfplay.agent import make_agent  # noqa: E402
from selfplay.lifetime import StopSignal, ThreadGroup  # noqa: E402
from selfplay.params import ParameterServer  # noqa: E402
from selfplay.replay import steps_per_update_at_ratio  # noqa: E402

# The module, not the `train` function that `selfplay` re-exports under the same name.
train_module = importlib.import_module("selfplay.train")


def _actors_module():
    """`selfplay.actors`, or None in a checkout from before it existed (to compare the runtime's
    speed against an older commit, run this file with that commit first on PYTHONPATH)."""
    try:
        return importlib.import_module("selfplay.actors")
    except ImportError:
        return None


_AZ = ["network.channels=32", "network.representation_blocks=2", "network.prediction_blocks=1"]
# name: (preset, overrides, reference positions/s of pgx's example or None)
CONFIGS: dict[str, tuple[str, list[str], float | None]] = {
    "az_connect_four_1x128": (
        "connect_four_alphazero",
        [
            *_AZ,
            "search.num_simulations=32",
            "actors.threads_per_device=1",
            "actors.envs_per_thread=128",
        ],
        740.0,
    ),
    "az_connect_four_2x64": (
        "connect_four_alphazero",
        [
            *_AZ,
            "search.num_simulations=32",
            "actors.threads_per_device=2",
            "actors.envs_per_thread=64",
        ],
        740.0,
    ),
    "az_tic_tac_toe_1x128": (
        "tic_tac_toe_alphazero",
        [
            *_AZ,
            "search.num_simulations=16",
            "actors.threads_per_device=1",
            "actors.envs_per_thread=128",
        ],
        6800.0,
    ),
    "az_tic_tac_toe_2x64": (
        "tic_tac_toe_alphazero",
        [
            *_AZ,
            "search.num_simulations=16",
            "actors.threads_per_device=2",
            "actors.envs_per_thread=64",
        ],
        6800.0,
    ),
    "mz_tic_tac_toe": ("tic_tac_toe_muzero", [], None),
    "mz_connect_four": ("connect_four_muzero", [], None),
}
# --paths: Sebulba's two ways of playing a JAX environment, as config overrides.
PATHS = {
    "per_move": ["actors.scan_moves=off", "replay.on_device=off"],
    "segment": ["actors.scan_moves=on", "replay.on_device=on"],
}
# Applied to every configuration before --set: each position learned from once, like pgx's example.
_COMMON = [
    "replay.samples_per_insert=1",
    "learner.max_updates=0",
    "learner.checkpoint_every=100000",
]


def make_config(name: str, args) -> configs.ExperimentConfig:
    preset, overrides, _ = CONFIGS[name]
    return configs.load_config(
        preset,
        [
            *_COMMON,
            *overrides,
            f"learner.max_seconds={args.max_seconds}",
            f"learner.log_every_s={args.log_every}",
            *args.set,
        ],
    )


def _games_per_minute(config, frames_per_s: float, mean_length: float | None) -> float | None:
    if "tic_tac_toe" not in config.env.name or not mean_length:
        return None
    return 60.0 * frames_per_s / mean_length


def _shares(totals: dict[str, float]) -> dict[str, float]:
    whole = sum(totals.values())
    return {f"share_{k}": round(v / whole, 3) for k, v in sorted(totals.items()) if whole > 0}


# The threads whose CPU time the host spends on its own work, by their role: the actor threads
# (their Python, the dispatch of their device calls, a host step's env work, building segments),
# the learner's input thread (host sampling, the copy's dispatch) and the learner (the main
# thread: building and dispatching updates, publishing). XLA's own threads, where a CPU device
# computes (the search, the update), are `other`, with any thread not named here.
ROLES = ("actors", "input", "learner", "other")


def thread_cpu_by_role() -> dict[int, tuple[str, float]]:
    """{thread id: (role, CPU seconds so far)} of this process's threads (roles: `ROLES`), from
    /proc/self/task/*/stat (Linux; {} elsewhere)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    ticks = os.sysconf("SC_CLK_TCK")
    threads: dict[int, tuple[str, float]] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        tid, name = int(task), names.get(int(task), "")
        role = (
            "learner"
            if tid == main
            else "actors"
            if name.startswith("actor-")
            else "input"
            if name == "learner-input"
            else "other"
        )
        threads[tid] = (role, seconds)
    return threads


def _role_differences(before: dict | None, after: dict | None) -> dict[str, float | None]:
    """The CPU seconds each role's threads spent between two `thread_cpu_by_role` readings; None
    for a role one of whose threads ended between them (its time went with it: in a short run
    the second reading can come as the run stops). A thread that started between them counts
    from zero."""
    if not before or not after:
        return {}
    ended = {role for tid, (role, _) in before.items() if tid not in after}
    spent = dict.fromkeys(ROLES, 0.0)
    for tid, (role, seconds) in after.items():
        spent[role] += seconds - before.get(tid, (role, 0.0))[1]
    return {role: None if role in ended else spent[role] for role in ROLES}


def _host_cpu_per_1000(threads_cpu: dict[str, float | None], frames: int) -> dict:
    """CPU seconds per 1,000 positions by thread role, and the host's own (actors + input +
    learner: what a GPU host spends beside the device's work)."""
    if not threads_cpu or frames <= 0:
        return {}
    per: dict[str, float | None] = {
        f"cpu_s_per_1000_positions_{r}": None if s is None else round(1000 * s / frames, 4)
        for r, s in threads_cpu.items()
    }
    host = [s for r in ("actors", "input", "learner") if (s := threads_cpu[r]) is not None]
    per["host_cpu_s_per_1000_positions"] = (
        round(1000 * sum(host) / frames, 4) if len(host) == 3 else None
    )
    return per


def bench_train(name: str, args) -> dict:
    config = make_config(name, args)
    with tempfile.TemporaryDirectory(prefix="podracer-bench-") as tmp:
        path = os.path.join(tmp, "run", "metrics.jsonl")
        cpu_at_line: dict[int, float] = {}
        threads_at_line: dict[int, dict[str, float]] = {}
        done = threading.Event()
        stop = StopSignal()

        def watch():  # the process's CPU time when each metric line appears (within 50 ms)
            first_line_at = None
            # Half a log period more, so that the last period is logged.
            end = args.warmup + args.seconds + 0.5 * args.log_every
            while not done.wait(0.05):
                try:
                    with open(path, "rb") as f:
                        text = f.read()
                except OSError:
                    continue
                lines = text.count(b"\n")
                if lines and lines - 1 not in cpu_at_line:
                    cpu_at_line[lines - 1] = time.process_time()
                    threads_at_line[lines - 1] = thread_cpu_by_role()
                # The clock starts at the first line of a learning run (the run logs from its
                # first second: compiling, filling the replay).
                if b'"status": "learning"' in text:
                    first_line_at = first_line_at or time.monotonic()
                if first_line_at is not None and time.monotonic() - first_line_at >= end:
                    stop.set("benchmark done")

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            result = train_module.train(config, os.path.join(tmp, "run"), progress=False, stop=stop)
        finally:
            done.set()
            watcher.join()
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    if len(records) < 2:
        raise RuntimeError(f"{name}: fewer than two metric lines in {args.max_seconds} s")
    learning = [r for r in records if r.get("status") == "learning"] or records
    start = learning[0]["time"] + args.warmup
    first = next((i for i, r in enumerate(records) if r["time"] >= start), 0)
    if len(records) - first < 2:
        first = max(0, len(records) - 2)
    window = records[first:]
    cpu_s = cpu_at_line.get(len(records) - 1, float("nan")) - cpu_at_line.get(first, float("nan"))
    # The threads' CPU up to the line before the last: the last comes as the run stops, when the
    # actor threads may have ended (their CPU time gone with them).
    last_alive = max(first + 1, len(records) - 2)
    threads_cpu = _role_differences(threads_at_line.get(first), threads_at_line.get(last_alive))
    thread_frames = records[last_alive]["frames"] - records[first]["frames"]
    seconds = window[-1]["time"] - window[0]["time"]
    frames = window[-1]["frames"] - window[0]["frames"]
    frames_per_s = frames / seconds if seconds > 0 else float("nan")
    totals: dict[str, float] = {}
    for record in window[1:]:  # each line's timers cover the period since the line before
        for key, value in record.items():
            if key.startswith("time/") and key.endswith("_s"):
                stage = key[len("time/") : -len("_s")].replace("/", "_")
                totals[stage] = totals.get(stage, 0.0) + value
    lengths = [r["episode_length"] for r in window[1:] if "episode_length" in r]
    updates = window[-1]["step"] - window[0]["step"]
    out = {
        "config": name,
        "mode": "train",
        "runtime": config.runtime,
        "devices": len(jax.devices()),
        "env": config.env.name,
        "threads": config.actors.threads_per_device,
        "envs_per_thread": config.actors.envs_per_thread,
        "simulations": config.search.num_simulations,
        "measured_s": round(seconds, 1),
        "positions_per_s": round(frames_per_s, 1),
        "positions_per_cpu_s": round(frames / cpu_s, 1),
        "updates_per_s": round(updates / seconds, 2) if seconds > 0 else None,
        "batch_size": config.learner.batch_size,
        "samples_per_s": round(updates * config.learner.batch_size / seconds, 1)
        if seconds > 0
        else None,
        "frames_per_update": round(frames / updates, 1) if updates else None,
        # What the replay's ratio holds a long run to (a window that starts before the limiter's
        # error_buffer is used up measures the two sides' free rates instead).
        "frames_per_update_at_ratio": steps_per_update_at_ratio(config),
        "prefetch": config.learner.prefetch,
        "stopped_by": result.stopped_by,
    }
    out.update(_host_cpu_per_1000(threads_cpu, thread_frames))
    mean_length = float(np.mean(lengths)) if lengths else None
    games = _games_per_minute(config, frames_per_s, mean_length)
    if games is not None:
        out["games_per_minute"] = round(games, 1)
    out.update(_shares(totals))
    # The three the requirement names, as shares of all the time measured.
    whole = sum(totals.values())
    update = sum(totals.get(f"learner_{stage}", 0.0) for stage in ("build", "dispatch", "device"))
    for stage, seconds_in in (
        ("env", totals.get("actors_env", 0.0)),
        ("search", totals.get("actors_search", 0.0)),
        ("update", update),
    ):
        out[f"{stage}_share"] = round(seconds_in / whole, 3) if whole else None
    learner = sum(v for k, v in totals.items() if k.startswith("learner_"))
    out["learner_wait_share"] = (
        round(totals.get("learner_wait", 0.0) / learner, 4) if learner else None
    )
    return out


class _DropStore:
    """A store that takes every trajectory and keeps none: the actors never wait on a learner.
    With `keeps_device_arrays`, as the device replay, the segments stay on the device."""

    def __init__(self, keeps_device_arrays: bool = False):
        self.keeps_device_arrays = keeps_device_arrays

    def add(self, trajectory, stream, timeout):
        del trajectory, stream, timeout
        return True


def bench_actors(name: str, args) -> dict:
    config = make_config(name, args)
    actors = importlib.import_module("selfplay.actors")
    actor_devices, _ = importlib.import_module("selfplay.sebulba").split_devices(config)
    probe = make_env(config.env.name, 1, seed=config.seed, **config.env.options)
    spec = probe.spec
    probe.close()
    agent = make_agent(config, spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(config.seed))
    server = ParameterServer(actor_devices)
    server.publish(params, version=0)
    stats = actors.ActorStats("benchmark")
    # Where the run's replay would be the learner device's, the segments stay on the device.
    on_device = config.replay.on_device != "off" and agent.uses_replay
    scans = getattr(actors, "scans_moves", lambda config, devices: False)
    store = _DropStore(scans(config, actor_devices) and on_device)
    stop = StopSignal()
    key = jax.random.PRNGKey(config.seed + 1)
    with ThreadGroup(stop, join_timeout=60.0) as threads:
        index = actors.start_actors(
            threads, actor_devices, config, agent, server, store, stats, stop, key
        )
        # Past compilation: every thread has stepped at least twice.
        per_step = config.actors.envs_per_thread
        deadline = time.monotonic() + 600
        while stats.frames < 2 * per_step * index and time.monotonic() < deadline:
            if stop.wait(0.05):
                break  # an actor failed: the ThreadGroup re-raises its error on exit
        stop.wait(args.warmup_actors)
        stats.drain_episodes()
        stats.timer.summary(reset=True)
        frames0, start, cpu0 = stats.frames, time.monotonic(), time.process_time()
        threads0 = thread_cpu_by_role()
        stop.wait(args.seconds)
        frames1, end, cpu1 = stats.frames, time.monotonic(), time.process_time()
        threads1 = thread_cpu_by_role()
        totals = stats.timer.totals()
        _, lengths = stats.drain_episodes()
        stop.set("benchmark done")
    frames_per_s = (frames1 - frames0) / (end - start)
    out = {
        "config": name,
        "mode": "actors_only",
        "env": config.env.name,
        "threads": config.actors.threads_per_device,
        "envs_per_thread": config.actors.envs_per_thread,
        "simulations": config.search.num_simulations,
        "measured_s": round(end - start, 1),
        "positions_per_s": round(frames_per_s, 1),
        "positions_per_cpu_s": round((frames1 - frames0) / (cpu1 - cpu0), 1),
        **_host_cpu_per_1000(_role_differences(threads0, threads1), frames1 - frames0),
    }
    games = _games_per_minute(config, frames_per_s, float(np.mean(lengths)) if lengths else None)
    if games is not None:
        out["games_per_minute"] = round(games, 1)
    out.update(_shares({f"actors_{k}": v for k, v in totals.items()}))
    # Time of the actor threads outside the timed stages (building the segment, bookkeeping).
    threads_time = index * (end - start)
    out["share_actors_untimed"] = round(max(0.0, 1 - sum(totals.values()) / threads_time), 3)
    return out


def _all_games_at_once(config) -> tuple:
    """The agent, and pgx's functions over all the configuration's games (every actor thread's)
    as one batch: what the fully jitted ceilings step."""
    from envs import pgx_functions

    num_envs = config.actors.envs_per_thread * config.actors.threads_per_device
    functions = pgx_functions(config.env.name.split(":", 1)[1], num_envs)
    probe = make_env(config.env.name, 1, seed=config.seed)
    agent = make_agent(config, probe.spec)
    probe.close()
    return agent, functions, num_envs


def _add_ceiling(result: dict, prefix: str, ceiling: dict | None) -> None:
    """Puts a same-run ceiling's rates, and ours over it, into `result`."""
    if ceiling:
        result[f"{prefix}_positions_per_s"] = ceiling["positions_per_s"]
        result[f"{prefix}_positions_per_cpu_s"] = ceiling["positions_per_cpu_s"]
        result[f"ratio_to_{prefix}"] = round(
            result["positions_per_s"] / ceiling["positions_per_s"], 3
        )
        if "batch_size" in ceiling:  # the loop's updates: as many samples, in batches this size
            result[f"{prefix}_batch_size"] = ceiling["batch_size"]


def bench_jitted(name: str, args) -> dict | None:
    """Our search and pgx rules in one jitted scan per segment: the host-free upper bound."""
    config = make_config(name, args)
    if config.mode != "alphazero":
        return None
    import jax.numpy as jnp

    agent, functions, num_envs = _all_games_at_once(config)
    params = jax.jit(agent.init)(jax.random.PRNGKey(config.seed))
    length = config.actors.unroll_length

    @jax.jit
    def segment(params, env_state, key):
        def body(env_state, key):
            legal = env_state.game.legal_action_mask
            greedy = jnp.zeros(num_envs, bool)
            out = agent.act_inside_jit(
                params, key, env_state.game.observation, legal, greedy, env_state.game
            )
            env_state, timestep = functions.step(env_state, out.action)
            return env_state, (out, timestep.done)

        return jax.lax.scan(body, env_state, jax.random.split(key, length))

    env_state, _ = jax.jit(functions.reset)(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    env_state, data = segment(params, env_state, key)  # compile
    jax.block_until_ready(data)
    steps, start, cpu = 0, time.monotonic(), time.process_time()
    while time.monotonic() - start < args.seconds:
        key, sub = jax.random.split(key)
        env_state, data = segment(params, env_state, sub)
        jax.device_get(data)  # as an actor would: the segment comes to the host
        steps += length
    seconds, cpu = time.monotonic() - start, time.process_time() - cpu
    return {
        "config": name,
        "mode": "jitted_actor",
        "env": config.env.name,
        "envs": num_envs,
        "simulations": config.search.num_simulations,
        "measured_s": round(seconds, 1),
        "positions_per_s": round(steps * num_envs / seconds, 1),
        "positions_per_cpu_s": round(steps * num_envs / cpu, 1),
    }


def bench_pgx_loop(name: str, args) -> dict | None:
    """pgx's AlphaZero example's loop, written with our parts: the same-run ceiling.

    pgx's example alternates a fully jitted self-play (`lax.scan` of `--loop-steps` moves of all
    the configuration's games at once, auto-reset) with training: value targets to the end of the
    scan, the positions shuffled into batches of `--loop-batch`, one update each (every position
    learned from once). Here the network, search, rules, loss and optimizer are the
    configuration's own, so the ratio to it measures the runtime (threads, replay, host round
    trips) and the batch: the loop's updates are of `--loop-batch` positions, the
    configuration's of `learner.batch_size` (the line carries both). Positions/s counts
    self-play and training time.
    """
    config = make_config(name, args)
    if config.mode != "alphazero":
        return None
    import jax.numpy as jnp

    import muzero

    agent, functions, num_envs = _all_games_at_once(config)
    length = args.loop_steps
    optimizer = muzero.make_optimizer(config.optimizer)
    update = jax.jit(muzero.make_update(agent.loss_fn, optimizer))
    state = muzero.init_train_state(
        jax.jit(agent.init)(jax.random.PRNGKey(config.seed)),
        optimizer,
        jax.random.PRNGKey(config.seed + 1),
    )

    @jax.jit
    def selfplay(params, key):  # [length, num_envs] positions and their targets, as one batch
        reset_key, scan_key = jax.random.split(key)
        env_state, _ = functions.reset(reset_key)

        def body(env_state, key):
            game_state = env_state.game
            greedy = jnp.zeros(num_envs, bool)
            out = agent.act_inside_jit(
                params,
                key,
                game_state.observation,
                game_state.legal_action_mask,
                greedy,
                game_state,
            )
            env_state, timestep = functions.step(env_state, out.action)
            step = muzero.Trajectory(
                observation=game_state.observation,
                action=out.action,
                reward=timestep.reward.astype(jnp.float32),
                discount=jnp.where(timestep.done, 0.0, 1.0),
                search_policy=out.search_policy,
                search_value=out.search_value,
                legal_mask=game_state.legal_action_mask,
                to_play=game_state.current_player.astype(jnp.int32),
                behaviour_logits=out.behaviour_logits,
                policy_version=jnp.zeros(num_envs, jnp.int32),
            )
            return env_state, step

        _, trajectory = jax.lax.scan(body, env_state, jax.random.split(scan_key, length))
        # As pgx's example: every position of the trajectory, its value target the outcome (or,
        # for a game still running at the end, the last search value).
        d = muzero.ply_discount(trajectory.discount, config.loss.discount, two_player=True)
        z = muzero.n_step_values(trajectory.reward, d, trajectory.search_value, length)  # [T, B]
        flat = lambda x: x.reshape((length * num_envs,) + x.shape[2:])  # noqa: E731
        ones = jnp.ones(length * num_envs, jnp.float32)
        return muzero.AlphaZeroBatch(
            observation=flat(trajectory.observation.astype(jnp.float32)),
            policy_target=flat(trajectory.search_policy.astype(jnp.float32)),
            value_target=flat(z),
            mask=ones,
            importance_weight=ones,
        )

    @jax.jit
    def minibatches(batch, key):  # shuffled, [updates, loop_batch, ...]
        order = jax.random.permutation(key, length * num_envs)
        updates = length * num_envs // args.loop_batch
        return jax.tree.map(
            lambda x: x[order][: updates * args.loop_batch].reshape(
                (updates, args.loop_batch) + x.shape[1:]
            ),
            batch,
        )

    def iteration(state, key):
        play_key, shuffle_key = jax.random.split(key)
        batches = minibatches(jax.device_get(selfplay(state.params, play_key)), shuffle_key)
        for i in range(jax.tree.leaves(batches)[0].shape[0]):
            state, metrics = update(state, jax.tree.map(lambda x, i=i: x[i], batches))
            float(metrics["loss"])  # as the example: each update's loss comes to the host
        return state

    key = jax.random.PRNGKey(2)
    state = iteration(state, key)  # compile
    iterations, start, cpu = 0, time.monotonic(), time.process_time()
    while iterations < 2 or time.monotonic() - start < args.seconds:
        key, sub = jax.random.split(key)
        state = iteration(state, sub)
        iterations += 1
    seconds, cpu = time.monotonic() - start, time.process_time() - cpu
    positions = iterations * length * num_envs
    return {
        "config": name,
        "mode": "pgx_example_loop",
        "env": config.env.name,
        "envs": num_envs,
        "simulations": config.search.num_simulations,
        "batch_size": args.loop_batch,
        "measured_s": round(seconds, 1),
        "positions_per_s": round(positions / seconds, 1),
        "positions_per_cpu_s": round(positions / cpu, 1),
    }


def pgx_step_share(name: str, args, calls: int = 8) -> float:
    """CPU time of the pgx step alone over that of the actor's fused act+step, same batch."""
    config = make_config(name, args)
    env = make_env(config.env.name, config.actors.envs_per_thread, seed=config.seed)
    agent = make_agent(config, env.spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(config.seed))
    env.reset(config.seed)
    fused = _actors_module().fused_pgx_act_step(agent, env)
    step = jax.jit(env.functions.step)
    state = env.env_state
    greedy = np.zeros(config.actors.envs_per_thread, bool)
    key = jax.random.PRNGKey(0)
    state, out, _ = jax.block_until_ready(fused(params, key, state, greedy))  # compile
    jax.block_until_ready(step(state, out.action))
    fused_s = step_s = 0.0
    for _ in range(calls):  # interleaved, so that the machine's load hits both alike
        key, sub = jax.random.split(key)
        start = time.process_time()
        state, out, _ = jax.block_until_ready(fused(params, sub, state, greedy))
        fused_s += time.process_time() - start
        start = time.process_time()
        jax.block_until_ready(step(state, out.action))
        step_s += time.process_time() - start
    return step_s / fused_s


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--seconds", type=float, default=60.0, help="measured wall time")
    parser.add_argument(
        "--warmup",
        type=float,
        default=10.0,
        help="train mode: seconds after the first metric line (which comes "
        "after compilation and the replay's first fill) not measured",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=900.0,
        help="train mode: a run that has not finished by then stops",
    )
    parser.add_argument(
        "--warmup-actors",
        type=float,
        default=3.0,
        help="actors-only: seconds not measured after the first steps",
    )
    parser.add_argument("--log-every", type=float, default=5.0, help="learner.log_every_s")
    parser.add_argument("--actors-only", action="store_true", help="no learner: only act")
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also time the fully jitted actor (AlphaZero configurations)",
    )
    parser.add_argument(
        "--pgx-loop",
        action="store_true",
        help="also time pgx's example loop (jitted self-play, then training) "
        "with the configuration's parts, in the same process",
    )
    parser.add_argument(
        "--loop-steps",
        type=int,
        default=256,
        help="--pgx-loop: moves per self-play scan (pgx's max_num_steps)",
    )
    parser.add_argument(
        "--loop-batch",
        type=int,
        default=4096,
        help="--pgx-loop: training batch (pgx's training_batch_size)",
    )
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides applied to every configuration",
    )
    parser.add_argument(
        "--prefetch",
        nargs="+",
        type=int,
        default=None,
        metavar="N",
        help="train mode: run each configuration with each learner.prefetch, in order",
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=list(PATHS),
        default=None,
        help="run each configuration on each of Sebulba's paths for JAX environments, in "
        "order: per_move (a device round trip per move, the host replay), segment (a "
        "segment per device call, the replay on the learner's device)",
    )
    parser.add_argument(
        "--runtimes",
        nargs="+",
        choices=["sebulba", "anakin"],
        default=None,
        help="run each configuration on each runtime, in order (the ceilings of --pgx-loop and "
        "--reference are measured once, after the first, and given to each line)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="train mode: repeat the runs, alternating the --prefetch values within each round",
    )
    parser.add_argument(
        "--compile-cache",
        default=os.path.join(tempfile.gettempdir(), "podracer-bench-jax-cache"),
        help="persistent compilation cache ('' for none)",
    )
    args = parser.parse_args(argv)
    if args.compile_cache:
        jax.config.update("jax_compilation_cache_dir", args.compile_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    # Each configuration once per (--prefetch, --paths, --runtimes value), in order, per round.
    prefetches = args.prefetch if args.prefetch and not args.actors_only else [None]
    variants = [
        (prefetch, path, runtime)
        for prefetch in prefetches
        for path in args.paths or [None]
        for runtime in args.runtimes or [None]
    ]
    runs = [
        (round_, name, variant)
        for round_ in range(args.rounds)
        for name in args.only
        for variant in variants
    ]
    first_of_round: dict[tuple[int, str], dict] = {}
    ceilings: dict[tuple[int, str], dict] = {}  # measured once per round and configuration
    for round_, name, (prefetch, path, runtime) in runs:
        run_args = argparse.Namespace(**vars(args))
        if prefetch is not None:
            run_args.set = [*run_args.set, f"learner.prefetch={prefetch}"]
        if path is not None:
            run_args.set = [*run_args.set, *PATHS[path]]
        if runtime is not None:
            run_args.set = [*run_args.set, f"runtime={runtime}"]
        if args.actors_only:
            result = bench_actors(name, run_args)
        else:
            result = bench_train(name, run_args)
        if path is not None:
            result["path"] = path
        if len(variants) > 1:
            first = first_of_round.setdefault((round_, name), result)
            if first is not result:
                for key in ("updates_per_s", "positions_per_s", "host_cpu_s_per_1000_positions"):
                    if key in result:
                        ratio = (result[key] or float("nan")) / (first.get(key) or float("nan"))
                        result[f"{key}_ratio_to_first"] = round(ratio, 3)
        result["round"] = round_
        reference = CONFIGS[name][2]
        result["two_core_estimate"] = round(2 * result["positions_per_cpu_s"], 1)
        if reference:
            result["reference_positions_per_s"] = reference
            result["ratio_to_reference"] = round(result["positions_per_s"] / reference, 3)
            result["two_core_estimate_ratio"] = round(result["two_core_estimate"] / reference, 3)
        first_of_name = round_ == 0 and (prefetch, path, runtime) == variants[0]
        alphazero = CONFIGS[name][0].endswith("alphazero")
        actors_module = _actors_module()
        # The fused act+step is the per-move actor's; a segment's scan steps the game itself.
        scans = getattr(actors_module, "scans_moves", lambda config, devices: False)
        per_move = actors_module is not None and not scans(
            make_config(name, run_args), jax.local_devices()[:1]
        )
        if alphazero and per_move and first_of_name:
            result["pgx_step_share_of_act_step"] = round(pgx_step_share(name, run_args), 4)
        if (round_, name) not in ceilings:
            ceilings[(round_, name)] = {
                "pgx_loop": bench_pgx_loop(name, args) if args.pgx_loop else None,
                "jitted": bench_jitted(name, args) if args.reference else None,
            }
        for prefix, ceiling in ceilings[(round_, name)].items():
            _add_ceiling(result, prefix, ceiling)
        result["loadavg_1m"] = round(os.getloadavg()[0], 2)
        result["xla_flags"] = os.environ.get("XLA_FLAGS", "")
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
