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
including waiting for the device, `queue`) and of the learner (`wait`, `build`, `dispatch`,
`device`, `publish`: selfplay/learner_input.py) from the run's metrics.jsonl, with
`learner_wait_share` (the learner's `wait` share) and `samples_per_s` apart. The first
`--warmup` seconds (compilation) are left out. `--prefetch 0 2` trains each mode once per
`learner.prefetch` value, in that order (0: the learner samples, updates and waits in series);
`--rounds N` repeats the training modes, alternating the values within each round.
`agent_steps_per_update` beside
`agent_steps_per_update_at_ratio` says whether a MuZero window measured the rate a long run
settles at (the replay's rate limiter lets either side run free until its buffer is used up).
`load_avg` is the machine's 1-minute load average at the end (other jobs share the cores).
`--progress` prints each training run's progress lines (compiling, filling the replay,
learning) as it goes, for a run that a time limit may stop before its JSON line.
For V-trace the line adds where the CPU goes: the process CPU ms per agent step of the whole run
(`cpu_ms_per_step`) next to the CPU ms per step of its parts measured alone (`act_cpu_ms_per_step`,
`learn_cpu_ms_per_step`, `env_cpu_ms_per_step`), and the compute bound they imply for this
host's cores (`compute_bound_agent_steps_per_s`).
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
    return {
        "agent_steps_per_s": steps / wall,
        "frames_per_s": steps * FRAME_SKIP / wall,
        "cpu_cores_busy": cpu / wall,
        "num_envs": num_envs,
    }


def _rates(records: list[dict], warmup: float) -> dict:
    """Frames and updates per second, and stage shares, over the records after `warmup`."""
    if len(records) < 2:
        raise RuntimeError("the run logged fewer than 2 metric lines; give it more --seconds")
    first = next((i for i, r in enumerate(records) if r["time"] >= warmup), len(records) - 2)
    first = min(first, len(records) - 2)
    start, window = records[first], records[first + 1 :]
    end = window[-1]
    seconds = end["time"] - start["time"]
    steps = end["frames"] - start["frames"]
    # A learner-bound run at a high replay ratio (Atari 100k: 1.2 updates per agent step) holds
    # its actors at the rate limiter for longer than a short window: updates without steps.
    if steps <= 0 and end["step"] <= start["step"]:
        raise RuntimeError(
            "no agent steps and no updates in the measured window; give it more --seconds"
        )
    totals: dict[str, float] = {}
    for record in window:
        for key, value in record.items():
            if key.startswith("time/") and key.endswith("_s"):
                totals[key[:-2]] = totals.get(key[:-2], 0.0) + value
    stages = {}
    for side in ("actors", "learner"):
        prefix = f"time/{side}/"
        side_total = sum(v for k, v in totals.items() if k.startswith(prefix)) or 1.0
        stages[side] = {
            k[len(prefix) :]: round(v / side_total, 3)
            for k, v in sorted(totals.items())
            if k.startswith(prefix)
        }
    # Records logged before the learner's first update carry no lag.
    lags = [r["policy_lag"] for r in window if "policy_lag" in r]
    return {
        "learner_wait_share": stages["learner"].get("wait", 0.0),
        "agent_steps_per_s": steps / seconds,
        "frames_per_s": steps * FRAME_SKIP / seconds,
        "updates_per_s": (end["step"] - start["step"]) / seconds,
        "measured_s": seconds,
        "stage_shares": stages,
        "policy_lag": float(np.mean(lags)) if lags else None,
    }


def vtrace_costs(config: configs.ExperimentConfig, repeats: int = 5) -> dict:
    """CPU milliseconds per agent step of the V-trace agent's parts, each alone on the host.

    `act` is one actor inference on a [envs_per_thread] batch, `learn` one replicated update on
    a [unroll_length + 1, batch_size x envs_per_thread] trajectory (process CPU time, so other
    jobs on the machine barely change them). With `cores` cores the runtime can do at most
    `cores * 1000 / (act + learn + env)` agent steps per second: the compute bound.
    """
    import jax

    import muzero
    from envs import make_env
    from selfplay.agent import make_agent

    env = make_env(config.env.name, 1, **config.env.options)
    spec = env.spec
    env.close()
    agent = make_agent(config, spec)
    rng = np.random.default_rng(0)
    b = config.actors.envs_per_thread
    n = b * config.learner.batch_size
    t = agent.window_length
    a = spec.num_actions
    key = jax.random.PRNGKey(0)
    params = jax.jit(agent.init)(key)

    def cpu_ms(fn) -> float:
        fn()  # compile and warm up
        start = time.process_time()
        for _ in range(repeats):
            fn()
        return (time.process_time() - start) / repeats * 1000

    obs = rng.integers(0, 256, (b, *spec.observation_shape), dtype=np.uint8)
    mask, greedy = np.ones((b, a), bool), np.zeros(b, bool)
    act = cpu_ms(lambda: jax.device_get(agent.act(params, key, obs, mask, greedy, None)))

    optimizer = muzero.make_optimizer(config.optimizer)
    devices = jax.local_devices()[:1]
    update = muzero.make_replicated_update(
        agent.loss_fn,
        optimizer,
        devices,
        batch_axis=agent.batch_axis,
        donate=True,
        compiler_options=dict(agent.compiler_options),
    )
    state = [muzero.replicate(muzero.init_train_state(params, optimizer, key), devices)]
    trajectory = muzero.Trajectory(
        observation=rng.integers(0, 256, (t, n, *spec.observation_shape), dtype=np.uint8),
        action=rng.integers(0, a, (t, n), dtype=np.int32),
        reward=rng.choice([-1.0, 0.0, 1.0], (t, n)).astype(np.float32),
        discount=np.ones((t, n), np.float32),
        search_policy=np.full((t, n, a), 1.0 / a, np.float32),
        search_value=np.zeros((t, n), np.float32),
        legal_mask=np.ones((t, n, a), bool),
        to_play=np.zeros((t, n), np.int32),
        behaviour_logits=rng.normal(size=(t, n, a)).astype(np.float32),
        policy_version=np.zeros((t, n), np.int32),
    )

    def learn():
        batch, _ = agent.make_batch(trajectory, None, None)
        batch = muzero.shard_batch(batch, devices, agent.batch_axis)
        state[0], metrics = update(state[0], batch)
        jax.block_until_ready(metrics)

    learn_ms = cpu_ms(learn) / ((t - 1) * n)  # each update learns from (T - 1) x N steps
    return {"act_cpu_ms_per_step": act / b, "learn_cpu_ms_per_step": learn_ms}


def train_mode(
    preset: str,
    overrides: list[str],
    seconds: float,
    warmup: float,
    log_every: float,
    progress: bool = False,
) -> dict:
    """Trains `preset` for `warmup + seconds` in a temporary run directory; its throughput."""
    from selfplay.replay import steps_per_update_at_ratio
    from selfplay.train import train

    config = configs.load_config(
        preset,
        [
            f"learner.max_seconds={warmup + seconds}",
            "learner.max_updates=0",
            f"learner.log_every_s={log_every}",
            "learner.checkpoint_every=1000000",
            *overrides,
        ],
    )
    with tempfile.TemporaryDirectory() as run_dir:
        cpu = time.process_time()
        start = time.perf_counter()
        result = train(config, run_dir, progress=progress)
        cpu_busy = (time.process_time() - cpu) / (time.perf_counter() - start)
        lines = (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    rates = _rates([json.loads(line) for line in lines], warmup)
    actors = config.actors
    updates_per_s = rates["updates_per_s"]
    at_ratio = steps_per_update_at_ratio(config)
    # Where the rate limiter holds its ratio, a long run makes `updates/s x steps per update` agent
    # steps a second whichever side bounds it; a window shorter than the actors' bursts measures
    # the updates well and the steps poorly, so the projection uses the updates.
    steps_at_ratio = updates_per_s * at_ratio if at_ratio and updates_per_s else None
    limit = config.learner.max_frames
    return {
        **rates,
        "agent_steps_per_update": rates["agent_steps_per_s"] / updates_per_s
        if updates_per_s
        else None,
        "agent_steps_per_update_at_ratio": at_ratio,
        "agent_steps_per_s_at_ratio": steps_at_ratio,
        "max_frames": limit or None,
        "projected_s_to_max_frames": limit / steps_at_ratio if limit and steps_at_ratio else None,
        "cpu_cores_busy": cpu_busy,
        "updates": result.updates,
        "samples_per_s": rates["updates_per_s"] * config.learner.batch_size,
        "prefetch": config.learner.prefetch,
        "actors": f"{actors.threads_per_device} threads x {actors.envs_per_thread} envs, "
        f"{actors.unroll_length}-step segments",
        "learner_batch": config.learner.batch_size,
        "preset": preset,
        "overrides": overrides,
        "game": config.env.name,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="ceiling,vtrace,muzero")
    parser.add_argument("--game", default="Pong-v5", help="envpool task id")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per mode")
    parser.add_argument(
        "--warmup",
        type=float,
        default=40.0,
        help="seconds of a training mode left out (compilation, first batches)",
    )
    parser.add_argument("--log-every", type=float, default=5.0)
    parser.add_argument("--vtrace-preset", default="atari_vtrace")
    parser.add_argument("--muzero-preset", default="pong_muzero_small")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="key.path=value for the trained presets (repeatable)",
    )
    parser.add_argument(
        "--prefetch",
        nargs="+",
        type=int,
        default=None,
        metavar="N",
        help="train each mode with each learner.prefetch, in order",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the training modes, alternating the --prefetch values within each round",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print each run's progress lines (its status: compiling, filling the replay, "
        "learning) so a run stopped by a time limit shows how far it got",
    )
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
    env_ms = base["cpu_cores_busy"] * 1000 / base["agent_steps_per_s"]
    runs = [(mode, None) for mode in modes]
    if args.prefetch:
        runs = [
            (mode, prefetch)
            for mode in modes
            for prefetch in ([None] if mode == "ceiling" else args.prefetch)
        ]
    trained = [(mode, prefetch) for mode, prefetch in runs if mode != "ceiling"]
    runs = [(mode, prefetch, 0) for mode, prefetch in runs] + [
        (mode, prefetch, round_) for round_ in range(1, args.rounds) for mode, prefetch in trained
    ]
    for mode, prefetch, round_ in runs:
        if mode == "ceiling":
            line = {"mode": "ceiling", "game": args.game, "env_cpu_ms_per_step": env_ms, **base}
        else:
            extra = [] if prefetch is None else [f"learner.prefetch={prefetch}"]
            line = {
                "mode": mode,
                **train_mode(
                    presets[mode],
                    [*overrides, *extra],
                    args.seconds,
                    args.warmup,
                    args.log_every,
                    progress=args.progress,
                ),
            }
            line["cpu_ms_per_step"] = line["cpu_cores_busy"] * 1000 / line["agent_steps_per_s"]
            if mode == "vtrace":
                costs = vtrace_costs(vtrace_config)
                parts = costs["act_cpu_ms_per_step"] + costs["learn_cpu_ms_per_step"] + env_ms
                cores = os.cpu_count() or 1
                line.update(
                    costs,
                    env_cpu_ms_per_step=env_ms,
                    compute_bound_agent_steps_per_s=cores * 1000 / parts,
                )
        line["round"] = round_
        line["ceiling_frames_per_s"] = ceiling_fps
        line["ratio"] = line["frames_per_s"] / ceiling_fps
        line["load_avg"] = _load_avg()
        print(
            json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in line.items()}),
            flush=True,
        )


if __name__ == "__main__":
    main()
