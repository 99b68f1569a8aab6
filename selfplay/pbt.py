"""Population Based Training's parts that need no Ray: what a population is asked to do, the
fields it explores, each member's config for an interval, its fitness, and how a member takes
over another's checkpoint. `selfplay.pbt_tune` runs the population on Ray Tune with them.

    DIR/pbt.json          the population's settings (a resume reads them back)
    DIR/pbt.jsonl         one line per event: start, each interval's fitness, exploit, restart
    DIR/member_<i>/       an ordinary run directory (config.json, metrics.jsonl, checkpoints/)
    DIR/tune/             Ray Tune's experiment (its state; each trial's checkpoints are pointers
                          to a member's checkpoint, a few bytes each)

A member trains one interval at a time: `train()` with `learner.max_frames` set to the next
multiple of the interval past its frames (`interval_config`), resuming from its own newest
checkpoint. An exploit makes the member a copy of the source's checkpoint (`adopt`): parameters,
optimizer state, step, and the source's counts of frames, episodes and time, so that a member's
frames always count the experience behind its parameters and every member's budget
(`max_frames`) means the same; the member's own metrics.jsonl, TensorBoard events and config.json
stay (its frames may jump there at an exploit).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import shutil
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import configs
from configs import MUTABLE, ExperimentConfig, UsageError

__all__ = [
    "EXPLORE_SYNTAX",
    "IN_PROGRAM_FIELDS",
    "check_in_program",
    "Explore",
    "PopulationSettings",
    "adopt",
    "check_settings",
    "fitness_of",
    "interval_config",
    "interval_records",
    "log_event",
    "member_dir",
    "parse_explore",
    "read_events",
    "read_settings",
    "write_settings",
]

# The `configs.MUTABLE` fields a population in one program explores as arrays: every one Anakin
# reads as a number. Not: `replay.samples_per_insert` (the updates per iteration) and
# `reanalyse.fraction` (how many windows are searched again), which shape the program; the
# search's tree settings (Dirichlet noise, PUCT's constant, Gumbel's scale), which the search
# takes as constants of its program.
IN_PROGRAM_FIELDS = frozenset(configs.MUTABLE) - {
    "replay.samples_per_insert",
    "reanalyse.fraction",
    "search.dirichlet_alpha",
    "search.dirichlet_fraction",
    "search.pb_c_init",
    "search.gumbel_scale",
}
# Fields whose 0 builds another program (the consistency loss's projector, prioritised windows):
# explored in one program only within > 0, from a config that has them on.
_ON_ONLY = ("loss.consistency_weight", "replay.priority_alpha")
EXPLORE_SYNTAX = "KEY=LOW:HIGH or KEY=LOW:HIGH:log (e.g. optimizer.learning_rate=1e-4:3e-3:log)"
SETTINGS_FILE = "pbt.json"
LOG_FILE = "pbt.jsonl"
ADOPTED_FILE = "adopted.json"  # in a member's folder: the checkpoint it took over last


class Explore(NamedTuple):
    """One explored field: values are drawn (and perturbed, then clipped) within [low, high],
    uniformly or, with `log`, uniformly in log scale."""

    key: str  # a field of `configs.MUTABLE`, e.g. "optimizer.learning_rate"
    low: float
    high: float
    log: bool = False

    def clip(self, value: float) -> float:
        return min(max(float(value), self.low), self.high)


class PopulationSettings(NamedTuple):
    """What a population is asked to do. `config` is the members' shared starting config (each
    member's seed is `config.seed + i`)."""

    config: ExperimentConfig
    population: int
    interval_frames: int  # each member reports its fitness (and PBT decides) every this many
    max_frames: int  # each member's budget: the frames behind its final parameters
    explore: tuple[Explore, ...]
    max_failures: int = 3  # restarts of a failed member (its process killed) before it fails

    @property
    def two_player(self) -> bool:
        """Whether the fitness is the evaluation against bots (else the self-play return)."""
        return self.config.loss.two_player

    @property
    def intervals(self) -> int:
        """Each member's intervals (the last one shorter where `max_frames` is not a multiple)."""
        return -(-self.max_frames // self.interval_frames)

    def interval_end(self, frames: int) -> int:
        """Where the interval a member is in at `frames` ends: the next multiple of
        `interval_frames` past it, or `max_frames`."""
        return min((frames // self.interval_frames + 1) * self.interval_frames, self.max_frames)

    def intervals_done(self, frames: int) -> int:
        """The intervals a member has finished at `frames`: what it reports to PBT as its time,
        the same whole number for every member at the same point (frames run a little past an
        interval's end, by how much differs)."""
        if frames >= self.max_frames:
            return self.intervals
        return frames // self.interval_frames

    def explore_value(self, key: str, value: float) -> float:
        """An explored value clipped to its bounds (Ray's perturbations multiply a value by
        0.8 or 1.2 and do not clip)."""
        bounds = {e.key: e for e in self.explore}
        return bounds[key].clip(value) if key in bounds else float(value)


def parse_explore(spec: str, config: ExperimentConfig) -> Explore:
    """`KEY=LOW:HIGH[:log]` checked against `config`: a mutable number with bounds its field
    accepts. UsageError, one line, naming what is wrong."""
    key, sep, bounds = spec.partition("=")
    key = key.strip()
    parts = bounds.split(":")
    if not sep or not key or len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
        raise UsageError(f"--explore '{spec}' is not {EXPLORE_SYNTAX}")
    try:
        configs.apply_overrides(config, [f"{key}={_field_value(config, key)}"])
    except UsageError as error:  # an unknown field or section: the loader's own line
        raise UsageError(f"--explore {key}: {error}") from None
    if key not in MUTABLE:
        raise UsageError(
            f"--explore {key}: not a field a run may change when it resumes; mutable fields: "
            f"{', '.join(sorted(MUTABLE))}"
        )
    if not isinstance(_field_value(config, key), float):
        raise UsageError(f"--explore {key}: not a number ({_field_value(config, key)!r})")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise UsageError(f"--explore '{spec}': bounds must be numbers ({EXPLORE_SYNTAX})") from None
    log = len(parts) == 3
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise UsageError(f"--explore {key}: needs finite bounds with LOW < HIGH, got {low}:{high}")
    if log and low <= 0:
        raise UsageError(f"--explore {key}: a log scale needs LOW > 0, got {low}")
    if MUTABLE[key] and low <= 0 < _field_value(config, key):
        raise UsageError(
            f"--explore {key}: needs LOW > 0 (0 turns off a part of the network that the "
            f"run's {_field_value(config, key)} has on), got {low}"
        )
    for bound in (low, high):  # the field's own check, with the rest of the config
        try:
            configs.apply_overrides(config, [f"{key}={bound!r}"])
        except UsageError as error:
            raise UsageError(f"--explore {key}: bound {bound} is out of range: {error}") from None
    return Explore(key, low, high, log)


def _field_value(config: ExperimentConfig, key: str) -> Any:
    """The value at a dotted key (None where there is no such field: the loader names it)."""
    node: Any = config
    for part in key.split("."):
        if not dataclasses.is_dataclass(node) or not hasattr(node, part):
            return None
        node = getattr(node, part)
    return node


def check_settings(settings: PopulationSettings) -> None:
    """UsageError, one line, for a population that cannot run as asked."""
    if settings.population < 2:
        raise UsageError(f"--population must be at least 2, got {settings.population}")
    if settings.interval_frames < 1:
        raise UsageError(f"--interval-frames must be at least 1, got {settings.interval_frames}")
    if settings.max_frames < settings.interval_frames:
        raise UsageError(
            f"--max-frames ({settings.max_frames}) must be at least --interval-frames "
            f"({settings.interval_frames})"
        )
    if not settings.explore:
        raise UsageError(f"give at least one --explore {EXPLORE_SYNTAX}")
    keys = [e.key for e in settings.explore]
    if len(set(keys)) != len(keys):
        raise UsageError(f"--explore names a field twice: {', '.join(keys)}")
    if settings.max_failures < 0:
        raise UsageError(f"--max-failures must be >= 0, got {settings.max_failures}")


def check_in_program(settings: PopulationSettings) -> None:
    """UsageError, one line, where a population cannot run as one program."""
    config = settings.config
    if config.runtime != "anakin":
        raise UsageError(
            f"--in-process runs Anakin presets; {config.name} runs on {config.runtime}: use --ray"
        )
    if settings.two_player:
        raise UsageError(
            f"--in-process ranks members by their self-play return; {config.env.name} is a "
            f"two-player game, whose fitness is the evaluation against the bots: use --ray"
        )
    for explore in settings.explore:
        if explore.key not in IN_PROGRAM_FIELDS:
            raise UsageError(
                f"--explore {explore.key} shapes the program (or the search's tree) and cannot "
                f"differ between the members of one program: use --ray, or explore one of "
                f"{', '.join(sorted(IN_PROGRAM_FIELDS))}"
            )
        if explore.key in _ON_ONLY and (explore.low <= 0 or _field_value(config, explore.key) <= 0):
            raise UsageError(
                f"--explore {explore.key}: in one program it needs LOW > 0 and a config with it "
                f"on (0 builds another program), got {explore.low}:{explore.high} from "
                f"{_field_value(config, explore.key)}"
            )


def interval_config(
    settings: PopulationSettings, member: int, values: dict[str, float], frames: int
) -> ExperimentConfig:
    """Member `member`'s config for the interval it is in at `frames`: the explored `values`,
    its own seed, and the run's budget set to the interval's end, the next multiple of
    `interval_frames` (a member restarted mid-interval finishes the same interval). For two
    players the in-run evaluation plays the bots once, at the interval's end (the fitness)."""
    end = settings.interval_end(frames)
    overrides = [f"{key}={settings.explore_value(key, value)!r}" for key, value in values.items()]
    overrides += [
        f"seed={(settings.config.seed + member) % (configs.MAX_SEED + 1)}",
        "learner.max_updates=0",
        "learner.max_seconds=0",
        f"learner.max_frames={end}",
        "evaluation.every_s=0",
        f"evaluation.at_frames=[{end}]" if settings.two_player else "evaluation.at_frames=[]",
    ]
    return configs.apply_overrides(settings.config, overrides)


def fitness_of(records: Sequence[dict[str, Any]], two_player: bool) -> float:
    """An interval's fitness from the metrics lines it logged: one player, the mean return of
    the episodes that ended in it (each line weighted by its episodes); two players, the mean
    over the bots of the last evaluation's score (1 a win, 0.5 a draw). NaN where there is none
    (Ray's PBT then leaves the member out of its ranking)."""
    if two_player:
        for record in reversed(records):
            scores = [v for k, v in record.items() if re.fullmatch(r"eval/.+/score", k)]
            if scores:
                return float(sum(scores) / len(scores))
        return math.nan
    total = count = 0.0
    for record in records:
        if "episode_return" in record:
            weight = float(record.get("episodes", 1)) or 1.0
            total += weight * float(record["episode_return"])
            count += weight
    return total / count if count else math.nan


def interval_records(records: Sequence[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """The metrics lines of the interval that began at `start` frames: those after the last
    line where a `train()` began (its "compiling" line) at or before `start`. A member killed
    mid-interval and restarted from a later checkpoint keeps its interval's earlier lines."""
    begun = 0
    for i, record in enumerate(records):
        if record.get("status") == "compiling" and record.get("frames", 0) <= start:
            begun = i
    return list(records[begun:])


def log_event(run_dir: str | os.PathLike, event: dict[str, Any]) -> dict[str, Any]:
    """Appends one line to DIR/pbt.jsonl (the driver's process writes them all)."""
    record = {"time": time.time(), **event}
    with open(pathlib.Path(run_dir) / LOG_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return record


def read_events(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines of DIR/pbt.jsonl (none where there is no file)."""
    path = pathlib.Path(run_dir) / LOG_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def member_dir(run_dir: str | os.PathLike, member: int) -> pathlib.Path:
    return pathlib.Path(run_dir) / f"member_{member}"


def _steps(checkpoints: pathlib.Path) -> list[int]:
    """The step folders of a checkpoint directory (orbax names them by step; its temporary
    folders and ours have other names)."""
    if not checkpoints.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit() and p.is_dir())


def adopt(source: pathlib.Path, step: int, target: pathlib.Path) -> int:
    """Makes run `target` go on from run `source`'s checkpoint `step` (its newest, if `step` was
    rotated out since the decision): the checkpoint, and the replay saved with it if any,
    replace the target's own. Returns the step adopted. Done again after an interruption, it
    finishes the copy; a copy already done (`adopted.json`, and the target's oldest checkpoint
    the adopted one) is not redone.

    The step folder is copied under a name orbax does not list and renamed into place after the
    target's own steps are removed, so the folder never holds a half-copied checkpoint."""
    source_steps = _steps(source / "checkpoints")
    if not source_steps:
        raise RuntimeError(f"{source} has no checkpoint to copy")
    if step not in source_steps:
        step = source_steps[-1]
    marker = target / ADOPTED_FILE
    done = {"source": str(source.name), "step": step}
    if marker.is_file() and json.loads(marker.read_text()) == done:
        # Done: the target may have trained on from it since (its next interval, cut short or
        # finished while the population stopped), which it goes on from.
        if _steps(target / "checkpoints")[:1] == [step]:
            return step
    checkpoints = target / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    staging = checkpoints / ".adopting"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source / "checkpoints" / str(step), staging)
    replays = sorted((source / "replay").glob(f"process_*-step_{step}.npz"))
    for own in _steps(checkpoints):
        shutil.rmtree(checkpoints / str(own))
    for old in (target / "replay").glob("process_*-step_*.npz"):
        old.unlink()
    staging.rename(checkpoints / str(step))
    if replays:
        (target / "replay").mkdir(exist_ok=True)
        for replay in replays:
            tmp = target / "replay" / f".{replay.name}.tmp"
            shutil.copyfile(replay, tmp)
            tmp.rename(target / "replay" / replay.name)
    tmp_marker = marker.with_suffix(".tmp")
    tmp_marker.write_text(json.dumps(done))
    tmp_marker.replace(marker)
    return step


def write_settings(run_dir: pathlib.Path, settings: PopulationSettings) -> None:
    """DIR/pbt.json, atomically: what `podracer pbt --run-dir DIR` resumes with."""
    data = {
        "config": configs.to_dict(settings.config),
        "population": settings.population,
        "interval_frames": settings.interval_frames,
        "max_frames": settings.max_frames,
        "explore": [e._asdict() for e in settings.explore],
        "max_failures": settings.max_failures,
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{SETTINGS_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(run_dir / SETTINGS_FILE)


def read_settings(run_dir: pathlib.Path) -> PopulationSettings | None:
    """The settings a population in `run_dir` was started with; None where there is none."""
    path = run_dir / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return PopulationSettings(
            config=configs.from_dict(data["config"]),
            population=int(data["population"]),
            interval_frames=int(data["interval_frames"]),
            max_frames=int(data["max_frames"]),
            explore=tuple(Explore(**e) for e in data["explore"]),
            max_failures=int(data["max_failures"]),
        )
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise UsageError(f"{path} is not a readable population ({error})") from None
