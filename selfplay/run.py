"""A run's life, the same for both runtimes: its directory, start and resume, stop limits and
signals, periodic logging and checkpoints, the final checkpoint and the plot.

    runtime  <- make_runtime(config, optimizer)     Sebulba or Anakin: agent, devices, programs
    run_dir  <- prepare_run_dir     config.json; a folder holding another run is refused
    state    <- start_run           a fresh train state, or the newest checkpoint's
    runtime.start(state, key)
    with runtime.running(stop):     Sebulba: actor threads; Anakin: nothing to start
        until a limit or the stop signal:
            runtime.learn()         Sebulba: sample -> update;  Anakin: one jitted iteration
            every log_every_s:      metrics.jsonl, TensorBoard, the progress line
            every checkpoint_every updates: a checkpoint
    final checkpoint, learning curves

A runtime supplies only what differs (`Runtime`): how a step of learning happens and where its
data comes from. SIGINT/SIGTERM and an exception in any thread end the loop the same way for both.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax

import muzero
from configs import ExperimentConfig, UsageError, to_dict
from selfplay.agent import Agent
from selfplay.checkpoints import Checkpointer, config_differences
from selfplay.lifetime import StopSignal, handle_signals
from selfplay.metrics import MetricsLogger, plot_learning_curves

__all__ = [
    "LIMITS",
    "MUST_MATCH",
    "RunResult",
    "RunStart",
    "Runtime",
    "plot_run",
    "prepare_run_dir",
    "run",
    "split_cpu",
    "start_run",
]

# Config keys a checkpoint must share with the run that resumes it: they fix the state's shapes.
MUST_MATCH = ("mode", "env.name", "network", "optimizer.optimizer")
# The reasons a run ends by reaching what it was asked to do (any other ends it early).
LIMITS = ("max_updates", "max_seconds", "max_frames")


class RunResult(NamedTuple):
    """What a run reports when it returns."""

    run_dir: pathlib.Path
    updates: int  # learner step at the end (counting a resumed run's earlier updates)
    frames: int  # environment steps taken by this process in this invocation
    seconds: float
    stopped_by: str  # one of LIMITS, or the stop signal's reason
    resumed_from: int | None  # the checkpoint step this invocation resumed from


class RunStart(NamedTuple):
    """A run's starting point, shared by both runtimes."""

    state: muzero.TrainState  # fresh, or the newest checkpoint's
    checkpointer: Checkpointer
    config_dict: dict
    resumed_from: int | None  # the checkpoint's step, or None
    key: jax.Array  # for the runtime's own randomness (actors, games)


class Runtime(Protocol):
    """What a runtime gives the run loop. `learn` runs in the main thread; the loop reads `step`
    and `frames` between calls."""

    agent: Agent

    def start(self, state: muzero.TrainState, key: jax.Array) -> None:
        """Takes the starting train state (host) and the key for its own randomness."""
        ...

    def running(self, stop: StopSignal) -> contextlib.AbstractContextManager[Any]:
        """Around the loop: starts what runs beside it (actor threads) and, on exit, wakes and
        joins it; an exception of one of its threads is raised from the exit."""
        ...

    def learn(self) -> bool:
        """One step of learning; False when no data came in time (the loop checks its stop
        signal and limits, then asks again)."""
        ...

    @property
    def step(self) -> int:
        """Updates so far, a resumed run's included."""
        ...

    @property
    def frames(self) -> int:
        """Environment steps taken by this process's actors so far in this invocation."""
        ...

    def log_values(self) -> dict[str, Any]:
        """The runtime's figures since the last call: losses, episodes, replay, stage times."""
        ...

    def train_state(self) -> muzero.TrainState:
        """The current train state on the host, for a checkpoint."""
        ...


def split_cpu(count: int) -> None:
    """Asks JAX for `count` CPU devices (0: leave JAX's default). JAX reads it when it starts its
    backends; after that only a warning says it had no effect, if the count differs."""
    if not count:
        return
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        have = len(jax.devices("cpu"))
        if have != count:
            warnings.warn(
                f"devices.cpu_devices={count} has no effect: JAX already runs with "
                f"{have} CPU device(s) in this process (set it before JAX starts, as "
                f"`podracer train` does)",
                stacklevel=3,
            )


def prepare_run_dir(run_dir: str | os.PathLike, config: ExperimentConfig) -> pathlib.Path:
    """Creates (or reopens) the run directory and writes config.json atomically.

    A directory that already holds a run with a different game, mode or network is refused, so a
    mistyped --run-dir cannot overwrite someone's checkpoints.
    """
    run_dir = pathlib.Path(run_dir).absolute()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"cannot write to run directory {run_dir}: {error.strerror}") from None
    config_path = run_dir / "config.json"
    new = to_dict(config)
    if config_path.exists():
        try:
            old = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise UsageError(f"{config_path} exists but is not a readable config") from None
        differences = config_differences(old, new, MUST_MATCH)
        if differences:
            raise UsageError(
                f"{run_dir} holds a different run ({'; '.join(differences)}); use another --run-dir"
            )
    tmp = config_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(new, indent=2))
    tmp.replace(config_path)
    return run_dir


def start_run(config: ExperimentConfig, agent: Agent, optimizer, run_dir: pathlib.Path) -> RunStart:
    """The train state for `optimizer` (from the newest checkpoint in `run_dir` if there is
    one) and the checkpointer that keeps saving there."""
    init_key, state_key, key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    state = muzero.init_train_state(jax.jit(agent.init)(init_key), optimizer, state_key)
    checkpointer = Checkpointer(
        run_dir / "checkpoints", config.learner.keep_checkpoints, must_match=MUST_MATCH
    )
    config_dict = to_dict(config)
    resumed_from = checkpointer.latest_step()
    if resumed_from is not None:
        state = checkpointer.restore(target=state, config=config_dict)
    return RunStart(state, checkpointer, config_dict, resumed_from, key)


def plot_run(run_dir: pathlib.Path) -> None:
    """The run's learning curves; a failed plot is reported, never raised."""
    try:
        plot_learning_curves(run_dir)
    except Exception as error:  # noqa: BLE001 - a plot must never fail a finished run
        print(f"podracer: could not plot learning curves: {error}")


def run(
    config: ExperimentConfig,
    run_dir: str | os.PathLike,
    make_runtime: Callable[[ExperimentConfig, Any], Runtime],
    *,
    progress: bool = True,
    stop: StopSignal | None = None,
) -> RunResult:
    """Trains `config` in `run_dir` on the runtime `make_runtime(config, optimizer)` builds,
    resuming from the run directory's newest checkpoint if there is one."""
    optimizer = muzero.make_optimizer(config.optimizer)
    runtime = make_runtime(config, optimizer)  # refuses bad input before anything is written
    run_dir = prepare_run_dir(run_dir, config)
    begun = start_run(config, runtime.agent, optimizer, run_dir)
    runtime.start(begun.state, begun.key)
    logger = MetricsLogger(
        run_dir, progress=progress, total_steps=config.learner.max_updates or None
    )
    stop = stop if stop is not None else StopSignal()  # an unset StopSignal is falsy
    start = time.monotonic()
    last_saved = runtime.step

    def save(final: bool = False) -> None:
        nonlocal last_saved
        if runtime.step == last_saved and not final:
            return
        begun.checkpointer.save(
            runtime.step,
            runtime.train_state(),
            begun.config_dict,
            metadata={"frames": runtime.frames, "final": final, "runtime": config.runtime},
        )
        last_saved = runtime.step

    def limit_reached() -> str | None:
        limits = config.learner
        if limits.max_updates and runtime.step >= limits.max_updates:
            return "max_updates"
        if limits.max_seconds and time.monotonic() - start >= limits.max_seconds:
            return "max_seconds"
        if limits.max_frames and runtime.frames >= limits.max_frames:
            return "max_frames"
        return None

    stopped_by: str | None = None
    try:
        with handle_signals(stop), runtime.running(stop):
            last_log, frames_at_log, step_at_log = start, runtime.frames, runtime.step
            while not stop.is_set():
                stopped_by = limit_reached()
                if stopped_by:
                    break
                if not runtime.learn():
                    continue
                now = time.monotonic()
                if now - last_log >= config.learner.log_every_s:
                    seconds = now - last_log
                    logger.log(
                        runtime.step,
                        {
                            **runtime.log_values(),
                            "frames": runtime.frames,
                            "frames_per_s": (runtime.frames - frames_at_log) / seconds,
                            "updates_per_s": (runtime.step - step_at_log) / seconds,
                        },
                    )
                    last_log, frames_at_log, step_at_log = now, runtime.frames, runtime.step
                if runtime.step - last_saved >= config.learner.checkpoint_every:
                    save()
            if stopped_by is None:
                stopped_by = stop.reason or "stopped"
            stop.set(stopped_by)  # ends what runs beside the loop before it is joined
        save(final=True)
    finally:
        begun.checkpointer.close()
        logger.close()
    plot_run(run_dir)
    return RunResult(
        run_dir,
        runtime.step,
        runtime.frames,
        time.monotonic() - start,
        stopped_by,
        begun.resumed_from,
    )
