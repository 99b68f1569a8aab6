"""Runs the accelerator-only paths on 2 CPU devices (`devices.accelerator_paths=on`) for
tests/test_train.py; prints one JSON line of what each run did. Usage: _devices_worker.py DIR"""

import collections
import json
import pathlib
import sys

import jax

jax.config.update("jax_num_cpu_devices", 2)

import configs  # noqa: E402
from selfplay import anakin, run, sebulba  # noqa: E402
from selfplay.collector import quiet_garbage_collector  # noqa: E402
from tests import fakes  # noqa: E402

TINY = [
    "devices.accelerator_paths=on",
    "learner.batch_size=16",
    "replay.min_size=64",
    "replay.capacity=4000",
    "actors.envs_per_thread=8",
    "actors.unroll_length=8",
    "search.num_simulations=4",
    "network.channels=8",
    "network.head_hidden=8",
    "learner.log_every_s=0.05",
    "learner.checkpoint_every=1000",
    "learner.max_updates=32",  # its loss is below 0.95 of the first by update 11-19
    "optimizer.learning_rate=3e-3",
    "evaluation.every_s=0",
]


def records(run_dir: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def losses(run_dir: pathlib.Path) -> list[float]:
    return [r["loss"] for r in records(run_dir) if "loss" in r]


# A runtime's programs (the agent's, the environments', the learner's, Anakin's).
PROGRAMS = {"act", "act_step", "rollout", "reset", "step", "make_batch", "update"}
PROGRAMS |= {"iterate", "learn_per_device", "init_carry"}


def lowered_again(lowered: list[str]) -> list[str]:
    """The runtime's programs that a run lowered more than once: each a whole compilation
    repeated (on an accelerator, tens of seconds)."""
    counts = collections.Counter(lowered)
    return sorted(name for name, count in counts.items() if count > 1 and name[4:-1] in PROGRAMS)


def main(out: pathlib.Path) -> None:
    quiet_garbage_collector()  # as `podracer train` does
    results = {}
    again = results["lowered_again"] = {}
    runtimes = []
    built_on = set()  # the devices the learner's batches were built on

    def make_sebulba(config, optimizer):
        runtime = sebulba.SebulbaRuntime(config, optimizer)
        make_batch = runtime.input.agent.make_batch

        def recording_make_batch(window, weights, context):
            batch, priorities = make_batch(window, weights, context)
            built_on.update(d.id for d in priorities.devices())
            return batch, priorities

        runtime.input.agent = runtime.input.agent._replace(make_batch=recording_make_batch)
        runtimes.append(runtime)
        return runtime

    # Move by move and the host replay: the fused act+step, batches built across devices.
    per_move = ["actors.scan_moves=off", "replay.on_device=off"]
    config = configs.load_config(
        "tic_tac_toe_alphazero", [*TINY, *per_move, "devices.cpu_devices=2"]
    )
    with fakes.lowered_programs() as lowered:
        result = run.run(config, out / "sebulba", make_sebulba, progress=False)
    again["sebulba"] = lowered_again(lowered)
    runtime = runtimes[-1]
    stages = {
        key[len("time/actors/") : -len("_s")]
        for r in records(out / "sebulba")
        for key in r
        if key.startswith("time/actors/") and key.endswith("_s")
    }
    runtime.store.check_consistency()
    results["sebulba"] = {
        "stopped_by": result.stopped_by,
        "losses": losses(out / "sebulba"),
        "devices": [
            [d.id for d in runtime.actor_devices],
            [d.id for d in runtime.learner_devices],
        ],
        "donates_state": runtime.donates_state,
        "batch_built_on": sorted(built_on),
        "fused": "env" not in stages and "search" in stages,
        "actor_stages": sorted(stages),
    }

    # A segment per device call on device 0, the replay on the learner's device 1.
    config = configs.load_config(
        "tic_tac_toe_alphazero", [*TINY, "learner.max_updates=8", "devices.cpu_devices=2"]
    )
    segment_runtimes = []

    def make_segments(config, optimizer):
        segment_runtimes.append(sebulba.SebulbaRuntime(config, optimizer))
        return segment_runtimes[-1]

    with fakes.lowered_programs() as lowered:
        result = run.run(config, out / "segments", make_segments, progress=False)
    again["segments"] = lowered_again(lowered)
    replay = segment_runtimes[-1].device_replay
    results["segments"] = {
        "stopped_by": result.stopped_by,
        "replay_on": [replay.device.id] if replay is not None else [],
        "donates_state": segment_runtimes[-1].donates_state,
        "windows": replay.num_windows if replay is not None else 0,
    }

    config = configs.load_config(
        "tic_tac_toe_alphazero",
        [
            *TINY,
            "runtime=anakin",
            "replay.samples_per_insert=1",
            "replay.min_size=200",  # the first losses from 4 games' windows, not 1
            "learner.max_updates=64",
            "learner.log_every_s=0.01",
        ],
    )
    anakin_runtimes = []

    def make_anakin(config, optimizer):
        anakin_runtimes.append(anakin.AnakinRuntime(config, optimizer))
        return anakin_runtimes[-1]

    with fakes.lowered_programs() as lowered:
        result = run.run(config, out / "anakin", make_anakin, progress=False)
    again["anakin"] = lowered_again(lowered)
    results["anakin"] = {
        "stopped_by": result.stopped_by,
        "losses": losses(out / "anakin"),
        "learn_in_jit": anakin_runtimes[-1].inside,
    }

    # Anakin's updates called one by one (the CPU's path) over the 2 devices: how many the host
    # dispatches before it waits for them (hundreds at once hung XLA:CPU's all-reduce).
    one_by_one = [*TINY, "devices.accelerator_paths=off", "runtime=anakin"]
    one_by_one += ["replay.samples_per_insert=4", "replay.min_size=64", "learner.max_updates=32"]
    config = configs.load_config("tic_tac_toe_alphazero", one_by_one)
    ahead, counts = [0], {"most_ahead": 0, "waits": 0}
    real_wait = jax.block_until_ready

    def counting_wait(x):
        counts["waits"] += 1
        ahead[0] = 0
        return real_wait(x)

    def make_counted(config, optimizer):
        runtime = anakin.AnakinRuntime(config, optimizer)
        update, learn = runtime._update, runtime.learn

        def counted_update(*args):
            ahead[0] += 1
            counts["most_ahead"] = max(counts["most_ahead"], ahead[0])
            return update(*args)

        def counted_learn():
            ahead[0] = 0  # the previous iteration's updates were fetched at its end
            return learn()

        runtime._update, runtime.learn = counted_update, counted_learn
        anakin_runtimes.append(runtime)
        return runtime

    jax.block_until_ready = counting_wait
    with fakes.lowered_programs() as lowered:
        result = run.run(config, out / "one_by_one", make_counted, progress=False)
    again["one_by_one"] = lowered_again(lowered)
    jax.block_until_ready = real_wait
    results["one_by_one"] = {
        "stopped_by": result.stopped_by,
        "learn_in_jit": anakin_runtimes[-1].inside,
        "updates_per_iteration": anakin_runtimes[-1].plan.updates,
        "bound": anakin.CPU_UPDATES_IN_FLIGHT,
        **counts,
    }
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
