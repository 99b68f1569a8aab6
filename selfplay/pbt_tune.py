"""Population Based Training on Ray Tune: each member an ordinary run, trained one interval at a
time in its Tune trial; Tune's `PopulationBasedTraining` scheduler ranks the members by their
fitness once all have reported an interval and has each member of the bottom quantile take over
a top member's checkpoint (exploit) with perturbed values of the explored fields (explore).

    run_population(settings, DIR)            ray.init() here (each member: its share of the
                                             cores and GPUs), or on a cluster with `address`
      Tuner(member trial x population, PBT)  DIR is Tune's storage_path: DIR/tune/
        member i, in its trial's process:    adopt the source's checkpoint after an exploit;
          until max_frames:                    train() to the interval's end in DIR/member_i
            report(fitness, frames)            with a pointer to the checkpoint just saved
      DIR/pbt.jsonl                          start, each interval, exploit, restart, end

A member's process killed mid-interval is restarted by Tune (`max_failures` times) and resumes
from the member's newest checkpoint. A member whose interval diverges reports it at fitness -inf
from its newest whole checkpoint and takes over a top member's at the next decision.
`run_population` again on the same DIR resumes the whole population (Tune's `Tuner.restore`).
Ray is imported here and by the `podracer pbt` command only.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import ray
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

from configs import UsageError
from selfplay.pbt import (
    PopulationSettings,
    adopt,
    fitness_of,
    interval_config,
    interval_records,
    log_event,
    member_dir,
    write_settings,
)

__all__ = [
    "MemberResult",
    "PopulationResult",
    "check_reachable",
    "member_resources",
    "run_population",
]

TUNE_DIR = "tune"  # DIR/tune: Tune's experiment
PROCESS_FILE = "process.json"  # in a member's folder: the process that trains it now
POINTER_FILE = "member_checkpoint.json"  # a Tune checkpoint's content: which member, which step
INTERVAL = "interval"  # a report's time for PBT: the intervals the member has finished


class MemberResult(NamedTuple):
    member: int
    frames: int  # behind its last reported parameters
    fitness: float  # of its last interval
    values: dict[str, float]  # its explored values then
    error: str | None  # why it failed, if it did


class PopulationResult(NamedTuple):
    members: list[MemberResult]
    finished: bool  # every member reached max_frames (else: stopped, or a member failed)


def member_resources(population: int, cpus: float, gpus: float) -> dict[str, float]:
    """Each member's share of a machine's (or a cluster's) cores and GPUs: whole cores, at
    least one; whole GPUs where there are as many as members, else a fraction of one."""
    share = {"cpu": max(1.0, float(int(cpus // population)))}
    if gpus >= population:
        share["gpu"] = float(int(gpus // population))
    elif gpus > 0:
        share["gpu"] = 1.0 / math.ceil(population / gpus)
    return share


def _member_name(trial: Any) -> str:
    """Tune's trial ids end in the trial's number (`1a2b3_00002`): member_2."""
    return f"member_{int(trial.trial_id.rsplit('_', 1)[1])}"


def _clipper(settings: PopulationSettings) -> Callable[[dict], dict]:
    def clip(config: dict) -> dict:
        values = config["explore"]
        config["explore"] = {k: settings.explore_value(k, v) for k, v in values.items()}
        return config

    return clip


class _Scheduler(PopulationBasedTraining):
    """Ray's synchronous PBT, its time the intervals each member finished: once every member
    has reported an interval, the bottom quantile takes over the top's checkpoints, so each
    interval's end is a decision for the whole population. Its last interval is no decision (a
    member at `max_frames` ends). Each exploit is a line of DIR/pbt.jsonl when it is decided.

    A resumed population (`Tuner.restore`) starts a fresh scheduler: it takes each member's
    place from its last result, where Ray's would wait for intervals the members finished."""

    def __init__(self, run_dir: str, max_frames: int, **options: Any):
        super().__init__(synch=True, time_attr=INTERVAL, perturbation_interval=1, **options)
        self.run_dir = run_dir
        self.max_frames = max_frames

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        super().on_trial_add(tune_controller, trial)
        last = trial.run_metadata.last_result
        if INTERVAL in last:  # a member restored with the population
            state = self._trial_state[trial]
            state.last_train_time = state.last_perturbation_time = last[INTERVAL]
            state.last_result = last
            state.last_score = self._metric_op * last["fitness"]
        # The next decision: when the members furthest behind have finished one more interval.
        waiting = [
            state.last_train_time for t, state in self._trial_state.items() if not t.is_finished()
        ]
        self._next_perturbation_sync = min(waiting, default=0) + self._perturbation_interval

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if result.get("frames", 0) >= self.max_frames:  # its last interval: the member ends
            self._save_trial_state(self._trial_state[trial], result[INTERVAL], result, trial)
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)

    def _checkpoint_or_exploit(
        self, trial: Any, tune_controller: Any, upper_quantile: list, lower_quantile: list
    ) -> None:
        # A member whose interval diverged takes over a top member's checkpoint, in the bottom
        # quantile or not, and is no one's source: its values diverge, and it may have no
        # checkpoint yet. Where every top member diverged, no one exploits.
        upper_quantile = [t for t in upper_quantile if not _diverged(self._trial_state[t])]
        if not upper_quantile:
            lower_quantile = []
        elif _diverged(self._trial_state[trial]) and trial not in lower_quantile:
            lower_quantile = [*lower_quantile, trial]
        # Ray records a top member's checkpoint only when that member reports while in the top
        # quantile; a member's newest reported one (a pointer to its newest checkpoint, which
        # its folder keeps) serves as well, so a bottom member can exploit at any report.
        if trial in lower_quantile:
            for top in upper_quantile:
                state = self._trial_state[top]
                if state.last_checkpoint is None and top.checkpoint is not None:
                    state.last_checkpoint = top.checkpoint
        super()._checkpoint_or_exploit(trial, tune_controller, upper_quantile, lower_quantile)

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        old = dict(trial.config["explore"])
        target, source = self._trial_state[trial], self._trial_state[trial_to_clone]
        super()._exploit(tune_controller, trial, trial_to_clone)
        # Ray points the member at the source's checkpoint inside its run metadata, whose JSON
        # it caches, and saves a trial's state in the experiment's only once the trial is
        # marked: without both, a population stopped before the member ran again resumed it
        # with its own checkpoint and the new values, or with its old values (Ray 2.60).
        trial.run_metadata.invalidate_cache()
        tune_controller._mark_trial_to_checkpoint(trial)
        event = log_event(
            self.run_dir,
            {
                "event": "exploit",
                "source": _number(str(trial_to_clone)),
                "target": _number(str(trial)),
                "frames": (target.last_result or {}).get("frames"),
                "source_frames": (source.last_result or {}).get("frames"),
                "source_fitness": source.last_score,
                "target_fitness": target.last_score,
                "old": old,
                "new": dict(trial.config["explore"]),
            },
        )
        print(
            f"podracer pbt: member {event['target']} (fitness {event['target_fitness']:.3g}) "
            f"takes member {event['source']}'s checkpoint (fitness "
            f"{event['source_fitness']:.3g}), now {_values_text(event['new'])}",
            flush=True,
        )


class _Log(tune.Callback):
    """Each member's interval (and a restart after a failure) as a line of DIR/pbt.jsonl and
    one line on the console."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        event = log_event(
            self.run_dir,
            {
                "event": "interval",
                "member": _number(str(trial)),
                "frames": result["frames"],
                "updates": result.get("updates"),
                "fitness": result["fitness"],
                # The values it trained with (an exploit decided at this result has changed
                # the trial's config already).
                "values": dict(result.get("config", trial.config)["explore"]),
                "pid": result.get("pid"),
                "node": result.get("node_ip"),
                **({"diverged": True} if result.get("diverged") else {}),
            },
        )
        diverged = ", diverged: back to its newest whole checkpoint" if "diverged" in event else ""
        print(
            f"podracer pbt: member {event['member']} at {event['frames']:,} frames: fitness "
            f"{event['fitness']:.4g} ({_values_text(event['values'])}){diverged}",
            flush=True,
        )

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info):
        member = _number(str(trial))
        log_event(self.run_dir, {"event": "restart", "member": member})
        print(f"podracer pbt: member {member} failed; restarted from its checkpoint", flush=True)


def _diverged(state: Any) -> bool:
    """Whether a member's last report was of an interval that diverged."""
    return bool((state.last_result or {}).get("diverged"))


def _number(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def _values_text(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3g}" for k, v in values.items())


def _member(
    tune_config: dict,
    settings: PopulationSettings | None = None,
    run_dir: str = "",
    make_evaluator: Callable | None = None,
    gpu_share: float = 0.0,
    plot: bool = True,
) -> None:
    """A member's trial: one interval after another until `max_frames`, each reported to Tune
    with its fitness and a pointer to the checkpoint it ended with. Started again (after an
    exploit, a pause, its process's failure or the population's resume) it goes on from the
    checkpoint Tune gives it; an interval it finished whose report Tune never had (the population
    stopped meanwhile) is reported first, without training it again. With `plot`, its learning
    curves at its end."""
    assert settings is not None
    if 0 < gpu_share < 1:  # members sharing a GPU: each its share of its memory, not JAX's 75%
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 * gpu_share:.2f}")
    from selfplay.collector import collector_paused, quiet_garbage_collector

    with collector_paused():
        from selfplay.checkpoints import Checkpointer
        from selfplay.lifetime import Diverged
        from selfplay.metrics import read_metrics
        from selfplay.run import LIMITS, RunTotals
        from selfplay.train import enable_compilation_cache, train

    enable_compilation_cache()
    quiet_garbage_collector()
    member = _number(tune.get_context().get_trial_name())
    root = pathlib.Path(run_dir)
    own = member_dir(root, member)
    values = {k: settings.explore_value(k, v) for k, v in tune_config["explore"].items()}
    own.mkdir(parents=True, exist_ok=True)
    node = ray.util.get_node_ip_address()
    (own / PROCESS_FILE).write_text(  # which process trains the member now
        json.dumps({"pid": os.getpid(), "node": node, "since": time.time()})
    )
    reported = 0  # the frames of the last interval Tune has (where this interval began)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            pointer = json.loads((pathlib.Path(folder) / POINTER_FILE).read_text())
        if pointer["member"] != member:  # an exploit: go on from the source's parameters
            adopt(member_dir(root, pointer["member"]), pointer["step"], own)
        reported = int(pointer["frames"])

    def saved() -> tuple[int, int]:
        """The newest checkpoint's step and frames ((0, 0) where there is none)."""
        if not (own / "checkpoints").is_dir():
            return 0, 0
        checkpoints = Checkpointer(own / "checkpoints", max_to_keep=None, read_only=True)
        try:
            step = checkpoints.latest_step()
            if step is None:
                return 0, 0
            return step, RunTotals.from_metadata(checkpoints.restore_metadata(step)).frames
        finally:
            checkpoints.close()

    def report(step: int, frames: int, diverged: bool = False) -> None:
        if diverged:  # ranked last: the interval it was in counts as finished, at -inf
            fitness = -math.inf
            interval = min(settings.intervals_done(frames) + 1, settings.intervals)
        else:
            fitness = fitness_of(interval_records(read_metrics(own), reported), settings.two_player)
            interval = settings.intervals_done(frames)
        with tempfile.TemporaryDirectory() as folder:
            pointer = {"member": member, "step": step, "frames": frames}
            (pathlib.Path(folder) / POINTER_FILE).write_text(json.dumps(pointer))
            tune.report(
                {
                    "fitness": fitness,
                    "frames": frames,
                    "updates": step,
                    INTERVAL: interval,
                    **({"diverged": True} if diverged else {}),
                },
                checkpoint=tune.Checkpoint.from_directory(folder),
            )

    step, frames = saved()
    if settings.intervals_done(frames) > settings.intervals_done(reported):  # never reported
        report(step, frames)
        reported = frames
    diverged_from = None  # the checkpoint a diverged interval went back to
    while frames < settings.max_frames:
        config = interval_config(settings, member, values, frames)
        # The learning curves once, at the end (drawing them takes seconds).
        last = settings.interval_end(frames) >= settings.max_frames
        try:
            result = train(
                config, own, progress=False, make_evaluator=make_evaluator, plot=plot and last
            )
        except Diverged:
            # Its values diverge (a learning rate too high): reported at -inf, the member ranks
            # last and takes over a better member's checkpoint with new values once the
            # population decides. Diverging again from the same checkpoint (where it was not
            # exploited: every member diverged) fails the trial, as any error does.
            step, frames = saved()
            if diverged_from == step:
                raise
            diverged_from = step
            report(step, frames, diverged=True)
            reported = frames
            continue
        if result.stopped_by not in LIMITS:
            raise RuntimeError(f"member {member} stopped early: {result.stopped_by}")
        step, frames = result.updates, result.frames
        report(step, frames)
        reported = frames


_ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")


def error_line(error: BaseException) -> str:
    """The first line of a failed member's own exception: Ray wraps it in a RayTaskError whose
    first line is the worker's (`ray::ImplicitFunc.train() (pid=..., ip=...)`, in color)."""
    cause = getattr(error, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else error)
    lines = [_ANSI_COLOR.sub("", line).strip() for line in text.splitlines()]
    return next((line for line in lines if line), type(error).__name__)


def start_local_ray(**options) -> None:
    """`ray.init` of a Ray on this machine for a population (`options`: ray.init's, e.g.
    `num_cpus`). Its workers run at this process's niceness: Ray starts them 15 above it
    (its `worker_niceness`, for small tasks beside a driver), but a member is a whole training
    run, which at 15 gets only what every other process on the machine leaves (a seed run beside
    it, another test). `RAY_worker_niceness` set in the environment still decides."""
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(include_dashboard=False, **options)


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """One line (a UsageError) where a Ray cluster's `HOST:PORT` (or `ray://HOST:PORT`) takes no
    connection within `timeout_s`: Ray itself retries such an address for minutes, logging each
    try. "auto" is left to Ray, which finds the local cluster or says there is none."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        reason = (
            f"no answer within {timeout_s:g} s"
            if isinstance(error, TimeoutError)
            else (error.strerror or str(error))
        )
        raise UsageError(
            f"cannot reach the Ray cluster at {address} ({reason}): start it there "
            "(`ray start --head`) or give the address it printed"
        ) from None


def run_population(
    settings: PopulationSettings,
    run_dir: str | os.PathLike,
    *,
    address: str | None = None,
    make_evaluator: Callable | None = None,
    resources: dict[str, float] | None = None,
    plot: bool = True,
) -> PopulationResult:
    """Trains the population of `settings` in `run_dir` (its `pbt.json`, `pbt.jsonl`,
    `member_<i>/` and Tune's `tune/`), or resumes the one there. Ray: the session already
    started in this process, else `ray.init(address)` (None: a local one with this machine's
    cores and GPUs). `resources`: each member's, by default its share (`member_resources`).
    Two-player games need `make_evaluator` (e.g. `arena.RunEvaluator`): their fitness is the
    evaluation against the bots. With `plot`, each member draws its learning curves at its end."""
    if settings.two_player and make_evaluator is None:
        raise UsageError("a two-player game's fitness is its evaluation: give make_evaluator")
    root = pathlib.Path(run_dir).absolute()
    started_ray = not ray.is_initialized()
    if started_ray:
        if address:
            check_reachable(address)
            try:
                ray.init(address=address)
            except ConnectionError as error:  # "auto" with no cluster on this node, say
                reason = str(error).strip().splitlines()[0]
                raise UsageError(f"no Ray cluster at {address}: {reason}") from None
        else:
            start_local_ray()
    try:
        cluster = ray.cluster_resources()
        share = resources or member_resources(
            settings.population, cluster.get("CPU", 1.0), cluster.get("GPU", 0.0)
        )
        trainable = tune.with_resources(
            tune.with_parameters(
                _member,
                settings=settings,
                run_dir=str(root),
                make_evaluator=make_evaluator,
                gpu_share=share.get("gpu", 0.0),
                plot=plot,
            ),
            share,
        )
        experiment = root / TUNE_DIR
        if tune.Tuner.can_restore(str(experiment)):
            log_event(root, {"event": "resume", "members": settings.population})
            tuner = tune.Tuner.restore(
                str(experiment), trainable, resume_unfinished=True, resume_errored=True
            )
        else:
            write_settings(root, settings)
            log_event(
                root,
                {
                    "event": "start",
                    "population": settings.population,
                    "interval_frames": settings.interval_frames,
                    "max_frames": settings.max_frames,
                    "explore": [e._asdict() for e in settings.explore],
                    "config": settings.config.name,
                    "resources_per_member": share,
                },
            )
            tuner = _new_tuner(settings, root, trainable)
        grid = tuner.fit()
    finally:
        if started_ray:
            ray.shutdown()
    members = []
    for result in grid:
        metrics = result.metrics or {}
        trial_name = pathlib.Path(result.path).name
        members.append(
            MemberResult(
                member=_number(trial_name),
                frames=int(metrics.get("frames", 0)),
                fitness=float(metrics.get("fitness", math.nan)),
                values=dict((result.config or {}).get("explore", {})),
                error=None if result.error is None else error_line(result.error),
            )
        )
    members.sort(key=lambda m: m.member)
    finished = all(m.error is None and m.frames >= settings.max_frames for m in members)
    log_event(
        root,
        {
            "event": "end" if finished else "stopped",
            "members": [
                {"member": m.member, "frames": m.frames, "fitness": m.fitness, "error": m.error}
                for m in members
            ],
        },
    )
    return PopulationResult(members, finished)


def _new_tuner(settings: PopulationSettings, root: pathlib.Path, trainable: Any) -> tune.Tuner:
    def domain(explore) -> Any:
        return (tune.loguniform if explore.log else tune.uniform)(explore.low, explore.high)

    mutations = {"explore": {e.key: domain(e) for e in settings.explore}}
    scheduler = _Scheduler(
        str(root),
        settings.max_frames,
        metric="fitness",
        mode="max",
        hyperparam_mutations=mutations,
        custom_explore_fn=_clipper(settings),
        quantile_fraction=0.25,
        resample_probability=0.25,
        log_config=False,
    )
    return tune.Tuner(
        trainable,
        param_space={"explore": {e.key: domain(e) for e in settings.explore}},
        tune_config=tune.TuneConfig(
            scheduler=scheduler,
            num_samples=settings.population,
            reuse_actors=True,  # a member restarted after an exploit keeps its warm process
            trial_name_creator=_member_name,
            trial_dirname_creator=_member_name,
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            storage_path=str(root),
            failure_config=tune.FailureConfig(max_failures=settings.max_failures),
            callbacks=[_Log(str(root))],
            verbose=0,
        ),
    )
