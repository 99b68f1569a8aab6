"""A run's life, the same for both runtimes: its directory, start and resume, stop limits and
signals, periodic logging and checkpoints, the final checkpoint and the plot.

    _open                           the runtime (make_runtime(config, optimizer): Sebulba or
                                    Anakin), the evaluator, the run directory (config.json; a
                                    folder holding another run is refused), its lock
    state    <- start_run           a fresh train state, or the newest whole checkpoint's
    runtime.start(state, key)
    with runtime.running(stop):     Sebulba: actor threads; Anakin: nothing to start
        until a limit or the stop signal (`_RunLoop.round`, agreed by every process):
            runtime.learn()         Sebulba: sample -> update;  Anakin: one jitted iteration
            every log_every_s:      metrics.jsonl, TensorBoard, the progress line (and at the end)
            every checkpoint_every updates: a checkpoint (`_RunLoop.save`)
    final checkpoint, learning curves

A runtime supplies only what differs (`Runtime`): how a step of learning happens and where its
data comes from. SIGINT, SIGTERM, SIGUSR1 and an exception in any thread end the loop the same way
for both.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

import muzero
from configs import ExperimentConfig, UsageError, to_dict, with_predated_fields
from configs.experiment import OptimizerConfig
from envs import EnvSpec
from selfplay.actors import ACTOR_STAGES
from selfplay.agent import Agent
from selfplay.checkpoints import Checkpointer, ReplayWriter, config_differences, load_replay
from selfplay.files import (
    RunLock,
    WriteFailed,
    describe_write_error,
    probe_writable,
    write_atomically,
)
from selfplay.lifetime import (
    StopSignal,
    ThreadGroup,
    check_finite,
    handle_signals,
    watch_for_stalls,
)
from selfplay.metrics import MetricsLogger, StageTimer, plot_learning_curves
from selfplay.processes import (
    Lockstep,
    check_replicas_agree,
    check_same_config,
    is_distributed,
    share_usage_error,
)
from selfplay.programs import LIMITS, ProgramCache, built_once
from selfplay.replay import SequenceReplay

__all__ = [
    "LIMITS",
    "EVALUATION_FILE",
    "Evaluator",
    "MUST_MATCH",
    "RunResult",
    "ReplicatedState",
    "RunStart",
    "RunTotals",
    "Runtime",
    "plot_run",
    "prepare_run_dir",
    "run",
    "split_cpu",
    "start_run",
]

# The evaluator's protocol (what its figures measure) in the run directory.
EVALUATION_FILE = "evaluation.txt"

# Config keys a checkpoint must share with the run that resumes it: they fix the state's shapes.
MUST_MATCH = ("mode", "env.name", "network", "optimizer.optimizer")


class RunResult(NamedTuple):
    """What a run reports when it returns. Its counts are the run's: a resumed run's include
    what it did before it stopped."""

    run_dir: pathlib.Path
    updates: int  # learner step at the end
    frames: int  # environment steps (over several processes: the job's, as Sebulba agreed)
    seconds: float  # training time, to the final checkpoint (what a resume counts on from)
    stopped_by: str  # one of LIMITS, or the stop signal's reason
    resumed_from: int | None  # the checkpoint step this invocation resumed from
    # (have, need) at the end: what the learner's first update waited for (see Store.fill_level)
    replay_fill: tuple[int, int] = (0, 0)


class RunTotals(NamedTuple):
    """What a run had done when its checkpoint was saved, so that a resumed run counts on from
    there: its frame budget, its metrics and every curve by frames or by time are the run's, not
    the process's."""

    frames: int = 0  # environment steps (the job's)
    episodes: int = 0  # episodes ended (as of the last log line before the save)
    seconds: float = 0.0  # training time

    @classmethod
    def from_metadata(cls, meta: dict) -> RunTotals:
        """Read from a checkpoint's metadata (a field an older checkpoint lacks counts as 0)."""
        return cls(
            int(meta.get("frames", 0)), int(meta.get("episodes", 0)), float(meta.get("seconds", 0))
        )


class RunStart(NamedTuple):
    """A run's starting point, shared by both runtimes."""

    state: muzero.TrainState  # fresh, or the newest checkpoint's
    checkpointer: Checkpointer
    config_dict: dict
    resumed_from: int | None  # the checkpoint's step, or None
    key: jax.Array  # for the runtime's own randomness (actors, games)
    before: RunTotals = RunTotals()  # what the resumed run had done; zeros for a new one


class Runtime(Protocol):
    """What a runtime gives the run loop. `learn` runs in the main thread; the loop reads `step`
    and `frames` between calls."""

    agent: Agent
    spec: EnvSpec  # of the environment it trains on

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

    def ready(self) -> bool:
        """Whether the next `learn` has its data (it waits a moment for it): over several
        processes, the update runs only in a round where every process is ready."""
        ...

    @property
    def step(self) -> int:
        """Updates so far, a resumed run's included."""
        ...

    @property
    def frames(self) -> int:
        """Environment steps taken so far in this invocation: by this process's actors where
        `counts_local`, else by every process's."""
        ...

    # Whether `frames` and the episodes of `log_values` are this process's alone (Sebulba: each
    # process has its own actors) or already the job's (Anakin: its iteration sums them).
    counts_local: bool
    # This process's replay where the run may save it with its checkpoints (replay.checkpoint).
    replay: SequenceReplay | None
    # The learner's stage times (`log_values` reports them); over several processes the loop
    # adds each round's agreement to them as `agree`.
    timer: StageTimer

    def log_values(self) -> dict[str, Any]:
        """The runtime's figures since the last call: losses, episodes, replay, stage times."""
        ...

    def train_state(self) -> muzero.TrainState:
        """The current train state on the host, for a checkpoint."""
        ...

    def params(self) -> Any:
        """The current parameters on the host (for an evaluator)."""
        ...

    def replicated_params(self) -> Any:
        """The current parameters as global arrays, a copy on each learner device (for
        `check_replicas_agree`)."""
        ...

    def fill_level(self) -> tuple[int, int]:
        """`(have, need)`: what the first update waits for (replay examples, trajectories)."""
        ...


class Evaluator(Protocol):
    """Plays a run's parameters against fixed opponents (`arena.RunEvaluator` is one)."""

    every_s: float  # seconds between evaluations
    # What its figures measure, in words (written to the run directory's evaluation.txt); "":
    # nothing to write.
    protocol: str

    def evaluate(self, params: Any, step: int, stop: StopSignal) -> dict[str, Any]:
        """The figures of `params` (taken at `step`), to log; it returns early, with what it
        has, once `stop` is set."""
        ...


class ReplicatedState:
    """For runtimes whose train state is replicated over their devices (`self._state`): the
    host copies a checkpoint and an evaluator take."""

    _state: Any

    def train_state(self) -> muzero.TrainState:
        return jax.device_get(muzero.unreplicate(self._state))

    def params(self) -> Any:
        return jax.device_get(muzero.unreplicate(self._state).params)

    def replicated_params(self) -> Any:
        return self._state.params


# XLA aborts the process when one CPU device waits 40 s (its default) for another at an
# all-reduce. Devices that share two busy cores can fall that far behind each other without
# being stuck (a MinAtar run beside other jobs, load 6-8, waited 20-40 s and went on); a true
# deadlock still ends, after this limit, with XLA's message.
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"
COLLECTIVE_TIMEOUT_S = 600


def split_cpu(count: int) -> None:
    """Asks JAX for `count` CPU devices (0: leave JAX's default). JAX reads it when it starts its
    backends; after that only a warning says it had no effect, if the count differs. With
    several devices, XLA's limit on a wait at a collective rises to COLLECTIVE_TIMEOUT_S (unless
    XLA_FLAGS sets it)."""
    if not count:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if count > 1 and COLLECTIVE_TIMEOUT_FLAG not in flags:
        os.environ["XLA_FLAGS"] = (
            f"{flags} {COLLECTIVE_TIMEOUT_FLAG}={COLLECTIVE_TIMEOUT_S}".strip()
        )
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


def prepare_run_dir(
    run_dir: str | os.PathLike,
    config: ExperimentConfig,
    *,
    write: bool = True,
    lock: RunLock | None = None,
) -> pathlib.Path:
    """Creates (or reopens) the run directory, takes `lock` (if given and not held yet) and
    writes config.json atomically (with `write`; over several processes only process 0 writes).

    A directory that already holds a run with a different game, mode or network is refused, so a
    mistyped --run-dir cannot overwrite someone's checkpoints.
    """
    run_dir = pathlib.Path(run_dir).absolute()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_writable(run_dir)
    except OSError as error:
        raise UsageError(f"cannot write to run directory {run_dir}: {error.strerror}") from None
    if lock is not None:
        lock.acquire()
    config_path = run_dir / "config.json"
    new = to_dict(config)
    if config_path.exists():
        try:
            old = with_predated_fields(json.loads(config_path.read_text()))
        except (OSError, json.JSONDecodeError):
            raise UsageError(f"{config_path} exists but is not a readable config") from None
        differences = config_differences(old, new, MUST_MATCH)
        if differences:
            raise UsageError(
                f"{run_dir} holds a different run ({'; '.join(differences)}); use another --run-dir"
            )
    if write:
        tmp = config_path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(new, indent=2))
            tmp.replace(config_path)
        except OSError as error:
            tmp.unlink(missing_ok=True)
            detail = describe_write_error(error)
            raise WriteFailed(f"cannot write {config_path}: {detail}") from None
    return run_dir


_OPTIMIZERS = ProgramCache()


def _optimizer(config: OptimizerConfig):
    """One optimizer (and so one update built with it) for each config but its peak learning
    rate, which the update takes from the train state (`STATE_FIELDS`): the first such config's
    optimizer, whose own rate no run uses."""
    fields = dataclasses.fields(config)
    key = tuple((f.name, getattr(config, f.name)) for f in fields if f.name != "learning_rate")
    return _OPTIMIZERS.get(key, lambda: muzero.make_optimizer(config))


@built_once(maxsize=4)  # a run's fresh state, compiled once a process (selfplay.programs)
def _fresh_state(agent: Agent, optimizer) -> Callable:
    """`(init_key, state_key) -> TrainState` in two programs: the parameters alone
    (`jax.jit(agent.init)`, the same program for every run of one network and game whatever its
    optimizer, search or replay, so that the persistent compilation cache serves it to the next
    such run), then the optimizer's state (and target network) around them (small, no draws)."""
    init = jax.jit(agent.init)
    around = jax.jit(
        lambda params, state_key: muzero.init_train_state(
            params, optimizer, state_key, agent.target
        )
    )
    return lambda init_key, state_key: around(init(init_key), state_key)


class SavedState(NamedTuple):
    """A `muzero.TrainState` as a checkpoint holds it: all but the peak learning rate, which is
    the config's, written in at every start (a checkpoint's structure is the same as before the
    rate was a field of the state, so those checkpoints resume)."""

    params: Any
    opt_state: Any
    step: Any
    key: Any
    target_params: Any = None


def saved_state(state: muzero.TrainState) -> SavedState:
    """The part of `state` a checkpoint holds."""
    return SavedState(state.params, state.opt_state, state.step, state.key, state.target_params)


def start_run(config: ExperimentConfig, agent: Agent, optimizer, run_dir: pathlib.Path) -> RunStart:
    """The train state for `optimizer` (from the newest whole checkpoint in `run_dir` if there
    is one: each newer one found damaged is set aside, with a line saying which and why) and the
    checkpointer that keeps saving there."""
    init_key, state_key, key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    # The optimizer's state in a program of its own (`_fresh_state`): called outside `jit`, its
    # init compiles an operation for each shape of leaf, each its own program. A resume restores
    # into the state's shapes alone (`eval_shape`: traced, never compiled nor run), so only a
    # fresh run compiles the two.
    fresh_state = _fresh_state(agent, optimizer)
    shapes = saved_state(jax.eval_shape(fresh_state, init_key, state_key))
    checkpointer = Checkpointer(
        run_dir / "checkpoints",
        config.learner.keep_checkpoints,
        must_match=MUST_MATCH,
        complete_saved=with_predated_fields,
    )
    config_dict = to_dict(config)
    lead = jax.process_index() == 0  # sets damaged checkpoints aside and says so
    found = checkpointer.newest_whole(shapes, config_dict, set_aside_in=run_dir if lead else None)
    for damaged, moved in found.damaged if lead else ():
        print(
            f"podracer: checkpoint {damaged.step} is damaged ({damaged.why}); set aside in "
            f"{moved}; resuming from an older one",
            flush=True,
        )
    before = RunTotals()
    if found.step is None:
        state = fresh_state(init_key, state_key)
    else:
        state = muzero.TrainState(*found.state)
        before = RunTotals.from_metadata(found.metadata)
    # The config's peak rate, an input of the update (`TrainState.learning_rate`): a resume
    # with another rate, or a PBT member's next interval, runs the programs it has.
    state = state._replace(learning_rate=np.float32(config.optimizer.learning_rate))
    return RunStart(state, checkpointer, config_dict, found.step, key, before)


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
    make_evaluator: Callable[[ExperimentConfig, EnvSpec], Evaluator] | None = None,
    plot: bool = True,
) -> RunResult:
    """Trains `config` in `run_dir` on the runtime `make_runtime(config, optimizer)` builds,
    resuming from the run directory's newest checkpoint if there is one. With
    `config.evaluation.every_s` > 0, the evaluator `make_evaluator(config, env spec)` builds plays
    the newest parameters every that many seconds, in a thread of its own. With `plot`, the
    learning curves are drawn at the end (`plot_run`).

    Over several processes (`jax.distributed`) every process calls this with the same config and
    run directory: the processes agree every round on whether to go on, learn and log
    (`selfplay.processes.Lockstep`); process 0 writes config.json, the logs and the plot and runs
    the evaluator; all take part in each checkpoint (orbax writes the replicated state once).

    One process writes a run directory: process 0 holds its lock (`selfplay.files.RunLock`)
    from the start (an existing run) or from the directory's creation (a new one) to the end;
    another process that would train it is refused at once, its holder named."""
    lock = RunLock(run_dir) if jax.process_index() == 0 else None
    try:
        return _run(
            config,
            run_dir,
            make_runtime,
            lock,
            progress=progress,
            stop=stop,
            make_evaluator=make_evaluator,
            plot=plot,
        )
    finally:
        if lock is not None:
            lock.release()


def _run(
    config: ExperimentConfig,
    run_dir: str | os.PathLike,
    make_runtime: Callable[[ExperimentConfig, Any], Runtime],
    lock: RunLock | None,
    *,
    progress: bool,
    stop: StopSignal | None,
    make_evaluator: Callable[[ExperimentConfig, EnvSpec], Evaluator] | None,
    plot: bool,
) -> RunResult:
    optimizer = _optimizer(config.optimizer)
    runtime, evaluator, run_dir = _open(
        config, run_dir, make_runtime, optimizer, lock, make_evaluator
    )
    begun = start_run(config, runtime.agent, optimizer, run_dir)
    runtime.start(begun.state, begun.key)
    if config.replay.checkpoint and begun.resumed_from is not None:
        _restore_replay(runtime, run_dir, begun.resumed_from)
    loop = _RunLoop(config, runtime, begun, run_dir, progress)
    stop = stop if stop is not None else StopSignal()  # an unset StopSignal is falsy
    watch = _Progress(loop.counts, runtime.step)
    profile = _Profile(config, run_dir, runtime.step)
    # Before the first step: the run may compile for a while, and says so.
    loop.logger.log(runtime.step, {"status": "compiling", "frames": loop.counts.frames})
    marks_left = tuple(m for m in config.evaluation.at_frames if m > loop.counts.frames)
    evaluation = _EvaluationThread(
        evaluator, runtime, loop.logger, stop, lambda: loop.counts.frames, marks_left
    )
    stopped_by: str | None = None
    try:
        # Signals reach the main thread only: a run in another thread (a Ray Tune trial's)
        # leaves them to its process, and ends on its limits or on `stop`.
        main = threading.current_thread() is threading.main_thread()
        signals = handle_signals(stop) if main else contextlib.nullcontext(stop)
        # A stall is watched over the loop alone: the final save after it may take long.
        stalls = watch_for_stalls(
            stop, lambda: (runtime.frames, runtime.step), config.learner.stall_timeout_s
        )
        with signals, evaluation.running(), runtime.running(stop):
            with stalls:
                while True:
                    reason, learned, log_due = loop.round(stop, watch)
                    if reason is not None:
                        stopped_by = reason
                        break
                    profile.after(runtime.step)
                    if log_due:
                        loop.log(watch)
                    evaluation.offer()
                    unsaved = runtime.step - loop.last_saved
                    if learned and unsaved >= config.learner.checkpoint_every:
                        loop.save()
            stop.set(stopped_by)  # ends what runs beside the loop before it is joined
            if runtime.step != watch.step:  # the figures of the stretch since the last line
                watch.due(0.0)
                loop.log(watch)
            profile.stop()
            # Every device: one model, and a finite one.
            check_replicas_agree(runtime.replicated_params(), runtime.step)
            # Before the threads are joined (which re-raises a failed thread's exception): every
            # process saves the same final step, whichever of them stopped the run.
            loop.save(final=True)
        evaluation.finish()  # the frame marks the run reached and did not evaluate yet
    finally:
        loop.close()
    if loop.lead and plot:
        plot_run(run_dir)
    return RunResult(
        run_dir,
        runtime.step,
        loop.counts.frames,
        loop.seconds(),
        stopped_by,
        begun.resumed_from,
        runtime.fill_level(),
    )


def _open(
    config: ExperimentConfig,
    run_dir: str | os.PathLike,
    make_runtime: Callable[[ExperimentConfig, Any], Runtime],
    optimizer: Any,
    lock: RunLock | None,
    make_evaluator: Callable[[ExperimentConfig, EnvSpec], Evaluator] | None,
) -> tuple[Runtime, Evaluator | None, pathlib.Path]:
    """The runtime, the evaluator (process 0's, where one is asked for) and the run directory,
    made ready; bad input is refused (one line, in every process) before anything is written."""
    check_same_config(to_dict(config))  # one line in every process if any differs
    lead = jax.process_index() == 0  # logs, plots and evaluates
    refused: UsageError | None = None
    try:
        if lock is not None and pathlib.Path(run_dir).is_dir():
            lock.acquire()  # a run another process trains: refused before any start-up work
        runtime = make_runtime(config, optimizer)
        evaluator = None
        evaluates = config.evaluation.every_s > 0 or config.evaluation.at_frames
        if lead and make_evaluator is not None and evaluates:
            evaluator = make_evaluator(config, runtime.spec)
        if config.logging.wandb and importlib.util.find_spec("wandb") is None:
            raise UsageError(
                "logging.wandb=true needs the wandb package: pip install 'podracer[wandb]'"
            )
        run_dir = prepare_run_dir(run_dir, config, write=lead, lock=lock)
        if evaluator is not None and getattr(evaluator, "protocol", ""):
            path = pathlib.Path(run_dir) / EVALUATION_FILE
            text = (evaluator.protocol + "\n").encode()
            write_atomically(path, path.with_suffix(".tmp"), lambda f: f.write(text), str(path))
    except UsageError as error:
        refused = error
    share_usage_error(refused)  # whichever process refused, every process exits with its line
    if is_distributed():  # the others open the run directory once process 0 has made it
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("podracer: run directory ready")
    return runtime, evaluator, pathlib.Path(run_dir)


class _RunLoop:
    """What one round of the run loop does, and the run's counts, clock, logs and saves:
    `round` (over several processes, the round every process agreed on), `log`, `save`,
    `close`."""

    def __init__(
        self,
        config: ExperimentConfig,
        runtime: Runtime,
        begun: RunStart,
        run_dir: pathlib.Path,
        progress: bool,
    ):
        self.config, self.runtime, self.begun = config, runtime, begun
        self.lead = jax.process_index() == 0
        self.distributed = is_distributed()
        self.lockstep = Lockstep(shared=LIMITS)
        self.job: Runtime = (
            _JobCounts(runtime, self.lockstep)
            if self.distributed and runtime.counts_local
            else runtime
        )
        # The run's frames and episodes, a resume's included.
        self.counts = _RunCounts(self.job, begun.before)
        self.limiter = runtime.replay.rate_limiter if runtime.replay is not None else None
        self._start = time.monotonic()  # before the logger's clock, which must not run ahead
        self.logger: MetricsLogger | _Silent = (
            MetricsLogger(
                run_dir,
                progress=progress,
                total_steps=config.learner.max_updates or None,
                wandb_project=config.logging.wandb_project if config.logging.wandb else None,
                wandb_config=begun.config_dict,
                seconds_before=begun.before.seconds,
            )
            if self.lead
            else _Silent()
        )
        self.last_saved = runtime.step
        self.replay_writer = ReplayWriter(run_dir, jax.process_index())
        self._final_save: float | None = None  # when the final checkpoint took the counts

    def seconds(self) -> float:
        """The run's training time: up to its final checkpoint once that is taken (what a
        resume counts on from), not the waits for the files and the plot after it."""
        end = self._final_save if self._final_save is not None else time.monotonic()
        return self.begun.before.seconds + end - self._start

    def limit_reached(self) -> str | None:
        limits = self.config.learner
        if limits.max_updates and self.runtime.step >= limits.max_updates:
            return "max_updates"
        if limits.max_seconds and self.seconds() >= limits.max_seconds:
            return "max_seconds"
        if limits.max_frames and self.counts.frames >= limits.max_frames:
            return "max_frames"
        return None

    def round(self, stop: StopSignal, watch: _Progress) -> tuple[str | None, bool, bool]:
        """One round: `(why the run stops or None, whether it learned, whether a log is due)`."""
        runtime = self.runtime
        reason = stop.reason if stop.is_set() else self.limit_reached()
        if not self.distributed:
            learned = reason is None and runtime.learn()
            return reason, learned, watch.due(self.config.learner.log_every_s)
        # Every collective below happens in a round all processes agreed on.
        ready = reason is None and runtime.ready()
        limiter = self.limiter
        with runtime.timer.stage("agree"):
            agreed = self.lockstep.agree(
                reason,
                ready,
                watch.due(self.config.learner.log_every_s),
                runtime.frames,
                limiter.inserts if limiter is not None else 0,
            )
        if limiter is not None:  # the replay ratio is the job's
            limiter.share_job(agreed.inserts_by_process, jax.process_index())
        if isinstance(self.job, _JobCounts):
            self.job.job_frames = agreed.frames
            self.job.frames_by_process = agreed.frames_by_process
        reason = agreed.stop_reason
        learned = reason is None and agreed.ready and runtime.learn()
        return reason, learned, agreed.log_due

    def log(self, watch: _Progress) -> None:
        self.logger.log(self.runtime.step, {**self.counts.log_values(), **watch.values()})

    def save(self, final: bool = False) -> None:
        """A checkpoint of the current step (with `final`, even one saved already: it gets the
        run's final counts), and the replay beside it where `replay.checkpoint`."""
        runtime, checkpointer = self.runtime, self.begun.checkpointer
        if runtime.step == self.last_saved and not final:
            return
        if final:
            self._final_save = time.monotonic()
        totals = {
            "frames": self.counts.frames,
            "episodes": self.counts.episodes,
            "seconds": self.seconds(),
        }
        state = saved_state(runtime.train_state())
        # Never a checkpoint of a diverged run: the ones before stay the newest.
        check_finite(f"the parameters at update {runtime.step}", jax.tree.leaves(state.params))
        saved = checkpointer.save(
            runtime.step,
            state,
            self.begun.config_dict,
            metadata={**totals, "final": final, "runtime": self.config.runtime},
        )
        if final and not saved:
            # The run stops at a step it saved already: that checkpoint gets the final counts
            # (the frames and episodes since its save), which a resume goes on from.
            checkpointer.wait()  # in every process: orbax's wait may be a collective
            if self.lead:
                checkpointer.update_metadata(runtime.step, {**totals, "final": True})
        if self.config.replay.checkpoint and runtime.replay is not None:
            # After the state's save: the previous replay write's error, if any, raises here.
            self.replay_writer.save(runtime.step, runtime.replay.state())
        self.last_saved = runtime.step

    def close(self) -> None:
        """Waits for the last replay file and checkpoint, and closes the logs."""
        try:
            self.replay_writer.wait()  # the last replay's file is on disk
        finally:
            self.begun.checkpointer.close()
            self.logger.close()


def _restore_replay(runtime: Runtime, run_dir: pathlib.Path, step: int) -> None:
    """Refills this process's replay with what it saved at checkpoint `step`, if it did, and says
    which it was (a process that saved none, or a job now larger than the one that saved, starts
    with an empty replay)."""
    index = jax.process_index()
    arrays = load_replay(run_dir, index, step)
    who = f"process {index}: " if is_distributed() else ""
    if arrays is None or runtime.replay is None:
        print(f"{who}no replay saved with update {step}: the replay starts empty", flush=True)
        return
    # Trajectory's fields that the saved leaves name (`truncated` is None without time limits).
    fields = {str(path).lstrip(".") for path in arrays["paths"]}
    example = muzero.Trajectory(
        **{f: 0 if f in fields else None for f in muzero.Trajectory._fields}
    )
    runtime.replay.restore(arrays, jax.tree.structure(example))
    print(
        f"{who}replay restored from update {step}: {runtime.replay.size:,} transitions", flush=True
    )


class _Silent:
    """The logger of a process other than 0: the job's figures are logged once, by process 0."""

    def log(self, step: int, values: Any) -> None:
        pass

    def close(self) -> None:
        pass


class _JobCounts:
    """A runtime whose counters are its own process's (Sebulba), seen with the job's: frames
    as summed in the last agreement, episodes and the replay's size summed at each log line."""

    def __init__(self, runtime: Runtime, lockstep: Lockstep):
        self._runtime, self._lockstep = runtime, lockstep
        self.job_frames = 0
        self.frames_by_process: tuple[int, ...] = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    @property
    def frames(self) -> int:
        return self.job_frames

    def log_values(self) -> dict[str, Any]:
        values = self._runtime.log_values()
        episodes = values.get("episodes", 0)
        local = np.array(
            [
                episodes,
                values.get("episode_return", 0.0) * episodes,
                values.get("episode_length", 0.0) * episodes,
                values.get("replay_size", 0),
                *(values.get(f"time/actors/{stage}_share", 0.0) for stage in ACTOR_STAGES),
            ],
            np.float64,
        )
        rows = self._lockstep.rows(local)  # [processes, 4 + stages]
        episodes, return_sum, length_sum, replay_size = rows[:, :4].sum(axis=0)
        values["replay_size"] = int(replay_size)
        for process, shares in enumerate(rows[:, 4:]):  # each process's actors, where they wait
            for stage, share in zip(ACTOR_STAGES, shares, strict=True):
                values[f"time/actors/process_{process}/{stage}_share"] = float(share)
        for process, frames in enumerate(self.frames_by_process):
            values[f"frames/process_{process}"] = frames
        if episodes:
            values.update(
                episodes=int(episodes),
                episode_return=return_sum / episodes,
                episode_length=length_sum / episodes,
            )
        return values


class _RunCounts:
    """The run's counts where a runtime (or `_JobCounts`) has this invocation's: the frames and
    episodes a resumed run had done before are added to them."""

    def __init__(self, counts: Runtime, before: RunTotals):
        self._counts, self._before = counts, before
        self.episodes = before.episodes  # as of the newest `log_values`

    def __getattr__(self, name: str) -> Any:
        return getattr(self._counts, name)

    @property
    def frames(self) -> int:
        return self._before.frames + self._counts.frames

    def log_values(self) -> dict[str, Any]:
        values = self._counts.log_values()
        self.episodes += int(values.get("episodes", 0))
        values["episodes_total"] = self.episodes
        return values


class _Progress:
    """What the run is doing, for the log: compiling, filling the replay (how full, and when
    learning should start at the current rate), or learning; and frames/s and updates/s."""

    def __init__(self, runtime: Runtime, first_step: int):
        self.runtime, self.first_step = runtime, first_step
        self.last = time.monotonic()
        self.frames, self.step = runtime.frames, runtime.step
        self.first_frames = runtime.frames  # a resumed run's, before this invocation
        self.filled = runtime.fill_level()[0]
        self.seconds = 0.0

    def due(self, every_s: float) -> bool:
        """Whether `every_s` passed since the last `values()`."""
        self.seconds = time.monotonic() - self.last
        return self.seconds >= every_s

    def values(self) -> dict[str, Any]:
        runtime, seconds = self.runtime, max(self.seconds, 1e-9)
        values: dict[str, Any] = {
            "frames": runtime.frames,
            "frames_per_s": (runtime.frames - self.frames) / seconds,
            "updates_per_s": (runtime.step - self.step) / seconds,
        }
        have, need = runtime.fill_level()
        if runtime.step > self.first_step:
            # None takes the fill off the progress line: learning has started.
            values.update(status="learning", replay_fill=None, learning_starts_in_s=None)
        else:
            rate = (have - self.filled) / seconds  # of what the learner waits for, per second
            values.update(
                status="compiling" if runtime.frames == self.first_frames else "filling replay",
                replay_fill=have / need,
                learning_starts_in_s=(need - have) / rate if rate > 0 else None,
            )
        # Device memory where the backend reports it (GPUs, TPUs; CPUs do not).
        memory = jax.local_devices()[0].memory_stats() or {}
        if "bytes_in_use" in memory:
            values["device_memory_gb"] = memory["bytes_in_use"] / 2**30
            values["device_memory_peak_gb"] = memory.get("peak_bytes_in_use", 0) / 2**30
        self.last, self.frames, self.step, self.filled = (
            time.monotonic(),
            runtime.frames,
            runtime.step,
            have,
        )
        return values


class _Profile:
    """A JAX profiler trace of `learner.profile_updates` updates, from the 10th update of this
    invocation on (the first ones compile), of every thread: actors and learner together."""

    WARMUP_UPDATES = 10

    def __init__(self, config: ExperimentConfig, run_dir: pathlib.Path, first_step: int):
        self.updates = config.learner.profile_updates
        self.directory = config.learner.profile_dir or str(run_dir / "profile")
        self.start_at = first_step + self.WARMUP_UPDATES
        self.stop_at: int | None = None

    def after(self, step: int) -> None:
        """Starts or stops the trace as `step`, the learner's, passes its bounds."""
        if not self.updates:
            return
        if self.stop_at is None and step >= self.start_at:
            jax.profiler.start_trace(self.directory)
            self.stop_at = step + self.updates
        elif self.stop_at is not None and step >= self.stop_at:
            self.stop()

    def stop(self) -> None:
        if self.updates and self.stop_at is not None:
            jax.profiler.stop_trace()
            print(f"podracer: profile of {self.updates} updates in {self.directory}", flush=True)
            self.updates = 0  # once


class _EvaluationThread:
    """Runs an `Evaluator` beside the loop. Once `every_s` seconds have passed and the evaluator
    is idle, the loop hands it the newest parameters (a host copy, taken between steps in the
    main thread, so the runtime never shares its buffers with another thread); the evaluator's
    thread plays them and logs the figures at the step they were taken, with the run's frames
    then (`eval/frames`). The first parameters at or past each of `at_frames` are queued for an
    evaluation of their own whether the evaluator is busy or not; those the run's end cut short
    or left waiting are evaluated by `finish`, after the run's threads stopped."""

    def __init__(
        self,
        evaluator: Evaluator | None,
        runtime: Runtime,
        logger: MetricsLogger,
        stop: StopSignal,
        frames: Callable[[], int],
        at_frames: tuple[int, ...] = (),
    ):
        self.evaluator, self.runtime, self.logger, self.stop = evaluator, runtime, logger, stop
        self.frames = frames
        self._slot: queue.Queue = queue.Queue(maxsize=1)
        self._marks = sorted(at_frames)  # frame marks not reached yet
        self._due: collections.deque = collections.deque()  # (step, params, frames) at marks
        self._last = time.monotonic()  # the first evaluation comes every_s after the start
        self._busy = False  # set by the loop when it hands over parameters, cleared when done

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        if self.evaluator is None:
            yield
            return
        with ThreadGroup(self.stop, join_timeout=60.0) as threads:
            threads.start("evaluator", self._loop)
            yield

    def offer(self) -> None:
        """Queues the parameters at a frame mark just passed; hands over the newest parameters
        if a periodic evaluation is due and none is running."""
        if self.evaluator is None:
            return
        frames = self._queue_marks_reached()
        if self._busy or not self.evaluator.every_s:
            return
        if time.monotonic() - self._last < self.evaluator.every_s:
            return
        self._last, self._busy = time.monotonic(), True
        self._slot.put((self.runtime.step, self.runtime.params(), frames))

    def _queue_marks_reached(self) -> int:
        """Queues the current parameters for the frame marks the run has reached since the last
        call (one evaluation for all of them); returns the frames."""
        frames = self.frames()
        if self._marks and frames >= self._marks[0]:
            while self._marks and frames >= self._marks[0]:
                self._marks.pop(0)
            self._due.append((self.runtime.step, self.runtime.params(), frames))
        return frames

    def finish(self) -> None:
        """Evaluates the frame marks still queued, and those the last round reached (in the
        calling thread, once the run's threads have stopped). The actors count frames while the
        loop runs: a mark they pass after the loop's last offer, in the round that stops the run
        (`learner.max_frames` on a mark, as a PBT member's interval ends), is evaluated here."""
        if self.evaluator is None:
            return
        self._queue_marks_reached()
        while self._due:
            self._evaluate(*self._due.popleft(), StopSignal())

    def _evaluate(self, step: int, params: Any, frames: int, stop: StopSignal) -> bool:
        assert self.evaluator is not None
        values = self.evaluator.evaluate(params, step, stop)
        if not values or stop.is_set():
            return False
        self.logger.log(step, {**values, "eval/frames": frames})
        return True

    def _loop(self) -> None:
        while not self.stop.is_set():
            if self._due:  # the marks first: each is evaluated, never dropped
                item = self._due.popleft()
                if not self._evaluate(*item, self.stop):
                    self._due.appendleft(item)  # cut short by the run's end: `finish` redoes it
                continue
            try:
                item = self._slot.get(timeout=0.5)
            except queue.Empty:
                continue
            self._evaluate(*item, self.stop)
            self._busy = False
