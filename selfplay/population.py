"""Population Based Training in one program (Anakin): the members' train states, environments,
replay rings and keys stacked on a leading axis and stepped by one jitted iteration, their
explored hyperparameters arrays in it (Flajolet et al. 2022, "Fast Population-Based
Reinforcement Learning on a Single Machine"). The population compiles once, whatever its values.

    DIR/pbt.json            the population's settings (`selfplay.pbt`), as a Ray population's
    DIR/pbt.jsonl           start, each member's interval, exploit, resume, end or stopped
    DIR/checkpoints/        one checkpoint holds the population: every member's train state, its
                            values and counts (orbax, atomic; a damaged one is set aside)
    DIR/member_<i>/         metrics.jsonl (with the values it trained with), TensorBoard events

How the values are data: each member's config is the population's with the explored fields
replaced by that member's entries of a [N, K] array (`with_values`), and the agent, its loss and
its update are built from it inside the vmapped iteration (`make_population_program`). The
learning rate is the train state's own (`TrainState.learning_rate`). `IN_PROGRAM_FIELDS` are the
fields read as numbers this way; those that shape the program (updates per iteration, the
reanalysed share) or that the search's tree takes as settings stay Ray Tune's (`podracer pbt
--ray`).

Exploit and explore are Ray Tune's PBT's (`selfplay.pbt_tune`), decided in this process after
each interval: the bottom quarter (at most half) of the members by fitness each take a random
top member's train state and replay ring (their environments and keys stay their own) and
perturb its values (x0.8 or x1.2, or with probability 1/4 drawn again, clipped to the bounds).
With `exploit=False` the same program is random search: N independent runs of values drawn from
the same windows.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import configs
import muzero
from configs import ExperimentConfig
from envs import env_spec, jax_env_functions
from envs.base import check_rewards
from selfplay import run as selfplay_run
from selfplay.agent import accelerator_paths, build_agent, make_agent
from selfplay.anakin import (
    AnakinPlan,
    avoid_shardy_crash,
    learn_in_jit,
    make_anakin_iteration,
    plan_anakin,
)
from selfplay.checkpoints import Checkpointer
from selfplay.lifetime import StopSignal, handle_signals
from selfplay.metrics import MetricsLogger
from selfplay.pbt import (
    IN_PROGRAM_FIELDS,
    PopulationSettings,
    check_in_program,
    log_event,
    member_dir,
    read_events,
    read_settings,
    write_settings,
)
from selfplay.programs import ProgramCache, program_key
from selfplay.run import _fresh_state, _optimizer, saved_state

__all__ = [
    "IN_PROGRAM_FIELDS",
    "PopulationProgram",
    "PopulationResult",
    "check_in_program",
    "draw_values",
    "exploit_pairs",
    "explore_values",
    "make_population_program",
    "run_in_program",
    "with_values",
]

LEARNING_RATE = "optimizer.learning_rate"  # the train state's own array, not the config's
CHECKPOINT_DIR = "checkpoints"
QUANTILE = 0.25  # Ray Tune's PBT's quantile_fraction, as `selfplay.pbt_tune` runs it
RESAMPLE = 0.25  # Ray's resample_probability
PERTURBATIONS = (0.8, 1.2)  # Ray's perturbation_factors


def with_values(config: ExperimentConfig, values: Mapping[str, Any]) -> ExperimentConfig:
    """`config` with the dotted fields of `values` replaced, unchecked: the values may be traced
    arrays (a member's own, inside the population's program). The learning rate is left out:
    the train state carries it."""
    for key, value in values.items():
        if key == LEARNING_RATE:
            continue
        section_name, field = key.split(".")
        section = copy.copy(getattr(config, section_name))
        object.__setattr__(section, field, value)
        config = copy.copy(config)
        object.__setattr__(config, section_name, section)
    return config


def draw_values(settings: PopulationSettings, rng: np.random.Generator) -> np.ndarray:
    """[N, K] values, each drawn uniformly (or log-uniformly) within its window."""
    columns = []
    for e in settings.explore:
        if e.log:
            column = np.exp(rng.uniform(np.log(e.low), np.log(e.high), settings.population))
        else:
            column = rng.uniform(e.low, e.high, settings.population)
        columns.append(column)
    return np.stack(columns, axis=1).astype(np.float64)


def explore_values(
    settings: PopulationSettings, values: Sequence[float], rng: np.random.Generator
) -> np.ndarray:
    """Ray Tune's PBT's explore of one member's [K] values: each drawn again with probability
    `RESAMPLE`, else multiplied by 0.8 or 1.2; clipped to its window."""
    new = []
    for e, value in zip(settings.explore, values, strict=True):
        if rng.random() < RESAMPLE:
            low, high = (np.log(e.low), np.log(e.high)) if e.log else (e.low, e.high)
            drawn = rng.uniform(low, high)
            value = float(np.exp(drawn)) if e.log else float(drawn)
        else:
            value = float(value) * PERTURBATIONS[int(rng.integers(2))]
        new.append(e.clip(value))
    return np.asarray(new)


def exploit_pairs(fitness: Sequence[float], rng: np.random.Generator) -> list[tuple[int, int]]:
    """(target, source) pairs of one decision, as Ray Tune's PBT ranks: the bottom `QUANTILE`
    of the members (at least one, at most half) each take a member of the top as many, drawn at
    random. NaN or -inf fitness (no episode ended, or a diverged member) ranks last; where every
    top member is such, no one exploits."""
    scores = np.asarray(fitness, dtype=np.float64)
    ranked = np.where(np.isnan(scores), -np.inf, scores)
    count = len(ranked)
    quantile = min(max(1, math.ceil(count * QUANTILE)), count // 2)
    order = np.argsort(ranked, kind="stable")  # worst first
    bottom, top = order[:quantile], order[-quantile:]
    top = [int(t) for t in top if np.isfinite(ranked[t])]
    if not top:
        return []
    return [(int(b), top[int(rng.integers(len(top)))]) for b in bottom if int(b) not in top]


class PopulationProgram(NamedTuple):
    """The parts of a population in one program, for a config and explored fields."""

    plan: AnakinPlan  # each member's (one device's) sizes
    mesh: Any  # the members split over its devices
    init: Any  # jitted (values [N, K], keys [N]) -> (states [N], carries [N])
    iterate: Any  # jitted (values, states, index, carries) -> (states, carries, metrics [N])
    learn: Any  # jitted (values, states, index, u, carries) -> (states, priorities, metrics)
    inside: bool  # whether `iterate` takes the updates too (else `learn` one by one)
    spec: Any


def _devices(config: ExperimentConfig) -> list[jax.Device]:
    ids = config.devices.learner_devices or None
    local = jax.local_devices()
    return [local[i] for i in ids] if ids else list(local)


# Built once a process for each config, explored fields and size (`selfplay.programs`): a
# resume, or random search beside PBT, takes the same programs, compiled.
_PROGRAMS = ProgramCache()


def make_population_program(
    config: ExperimentConfig, keys: Sequence[str], population: int, batched: bool | None = None
) -> PopulationProgram:
    """The population's jitted programs: each member the Anakin iteration of `config` with the
    `keys` fields its own row of a [N, K] values array, on one device of the mesh (the members
    split over as many of `devices.learner_devices`, all local devices by default, as divide
    them evenly), its block of members vmapped there or side by side (`_over_members`; None:
    vmapped on accelerators and for MLP networks)."""
    return _PROGRAMS.get(
        (program_key(config), tuple(keys), population, batched),
        lambda: _make_population_program(config, tuple(keys), population, batched),
    )


def _make_population_program(
    config: ExperimentConfig, keys: tuple[str, ...], population: int, batched: bool | None
) -> PopulationProgram:
    devices = _devices(config)
    # Each device holds whole members: as many devices as divide the population evenly.
    devices = devices[: max(d for d in range(1, len(devices) + 1) if population % d == 0)]
    avoid_shardy_crash(devices)
    mesh = muzero.make_mesh(devices)
    spec = env_spec(config.env.name, seed=config.seed, **config.env.options)
    template = make_agent(config, spec)  # the structure every member shares
    plan = plan_anakin(config, template, 1)
    functions = jax_env_functions(config.env.name, plan.games, **config.env.options)
    optimizer = _optimizer(config.optimizer)

    def member_parts(values):  # values [K]: this member's
        chosen = {key: values[i] for i, key in enumerate(keys)}
        member_config = with_values(config, chosen)
        agent = build_agent(member_config, spec)
        update = muzero.make_update(agent.loss_fn, optimizer, target=agent.target)
        return make_anakin_iteration(member_config, agent, plan, functions, update, axis_name=None)

    def with_rate(state, values):
        if LEARNING_RATE in keys:
            return state._replace(
                learning_rate=values[keys.index(LEARNING_RATE)].astype(jnp.float32)
            )
        return state

    def init_member(values, key):
        init_key, state_key, carry_key = jax.random.split(key, 3)
        state = _fresh_state(template, optimizer)(init_key, state_key)
        state = state._replace(learning_rate=jnp.float32(config.optimizer.learning_rate))
        state = with_rate(state, values)
        init_carry = member_parts(values)[0]
        return state, init_carry(state.params, carry_key)

    def iterate_member(values, state, index, carry, learn):
        iteration = member_parts(values)[1]
        return iteration(with_rate(state, values), index, carry, learn=learn)

    def learn_member(values, state, index, u, carry):
        learn_step = member_parts(values)[2]
        return learn_step(with_rate(state, values), index, u, carry)

    members = P(muzero.AXIS)

    def split(fn, in_specs, out_specs):
        return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    inside = learn_in_jit(config, devices)
    options = dict(template.compiler_options)  # devices.cpu_convolutions, as a run's programs
    if batched is None:
        batched = accelerator_paths(config, devices) or not _convolutional(config, spec)
    init = jax.jit(
        split(_over_members(init_member, (0, 0), batched), (members, members), (members, members)),
        compiler_options=options,
    )
    iterate = jax.jit(
        split(
            _over_members(
                functools.partial(iterate_member, learn=inside), (0, 0, None, 0), batched
            ),
            (members, members, P(), members),
            (members, members, members),
        ),
        donate_argnums=(1, 3),
        compiler_options=options,
    )
    learn = jax.jit(
        split(
            _over_members(learn_member, (0, 0, None, None, 0), batched),
            (members, members, P(), P(), members),
            (members, members, members),
        ),
        donate_argnums=(1,),
        compiler_options=options,
    )
    return PopulationProgram(plan, mesh, init, iterate, learn, inside, spec)


def _row(m: int, x: jax.Array) -> jax.Array:
    return x[m]


def _convolutional(config: ExperimentConfig, spec) -> bool:
    """Whether the agent's network convolves (every torso but the MLP, which "auto" picks for
    vector observations)."""
    torso = config.network.torso
    return not (torso == "mlp" or (torso == "auto" and len(spec.observation_shape) == 1))


def _over_members(fn, in_axes: tuple[int | None, ...], batched: bool):
    """`fn` of one member made a function of a device's block of members (the arguments with
    axis 0 gain a leading [m] axis, as do the outputs): vmapped where `batched` (accelerators,
    and MLP networks on a CPU: one batched program), else the m members' programs side by side
    in the one program. On XLA:CPU a vmapped member's convolutions with their own weights become
    grouped convolutions, which ran at a third of the frames/s of the members' own (8 MinAtar
    V-trace members on 2 CPU devices: 3,550 frames/s against 10,360); its batched matmuls are
    faster than the members' own (the same members with an MLP torso: 335k against 288k;
    CartPole: 656k against 444k), and `lax.map` is a loop, slower than either. Convolutions
    written as shifted slices and one matmul (members batched as matmuls) made 6,163."""
    if batched:
        return jax.vmap(fn, in_axes=in_axes)

    def block(*args):
        blocked = [a for a, axis in zip(args, in_axes, strict=True) if axis == 0]
        count = jax.tree.leaves(blocked[0])[0].shape[0]

        def member(m: int):
            return fn(
                *[
                    jax.tree.map(functools.partial(_row, m), a) if axis == 0 else a
                    for a, axis in zip(args, in_axes, strict=True)
                ]
            )

        outputs = [member(m) for m in range(count)]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *outputs)

    return block


class PopulationResult(NamedTuple):
    frames: int  # each member's
    fitness: np.ndarray  # [N] the last interval's
    values: np.ndarray  # [N, K] the last values
    finished: bool
    stopped_by: str | None


def _member_sharding(program: PopulationProgram) -> NamedSharding:
    return NamedSharding(program.mesh, P(muzero.AXIS))


def run_in_program(
    settings: PopulationSettings,
    run_dir: str | pathlib.Path,
    *,
    exploit: bool = True,
    progress: bool = True,
    stop: StopSignal | None = None,
    plot: bool = True,
) -> PopulationResult:
    """Trains (or resumes) the population of `settings` in `run_dir` as one program; with
    `exploit=False`, random search (the members never take each other's states). Stops at
    `max_frames`, or on `stop` (SIGINT, SIGTERM) after saving the population. With `progress`,
    a line per interval: each member's fitness. With `plot`, a finished population draws each
    member's learning curves in its folder, as a member on Ray Tune does."""
    check_in_program(settings)
    root = pathlib.Path(run_dir)
    config, n = settings.config, settings.population
    keys = [e.key for e in settings.explore]
    program = make_population_program(config, keys, n)
    plan, sharding = program.plan, _member_sharding(program)
    frames_per_iteration = plan.moves * plan.games  # each member's
    stop = stop if stop is not None else StopSignal()
    rng = np.random.default_rng(config.seed)
    values = draw_values(settings, rng)  # [N, K]
    member_keys = jax.random.split(jax.random.PRNGKey(config.seed), n)
    states, carries = program.init(
        jax.device_put(values.astype(np.float32), sharding), jax.device_put(member_keys, sharding)
    )
    checkpointer = Checkpointer(root / CHECKPOINT_DIR, config.learner.keep_checkpoints)
    frames = index = 0
    extended_from = None  # the budget a resume raised
    config_dict = configs.to_dict(config)
    shapes = {"states": saved_state(jax.eval_shape(lambda s: s, states))}
    found = checkpointer.newest_whole(
        {**shapes, "values": values.astype(np.float32), "rng": _rng_state(rng)},
        config_dict,
        set_aside_in=root,
    )
    for damaged, moved in found.damaged:
        print(
            f"podracer pbt: checkpoint {damaged.step} is damaged ({damaged.why}); set aside in "
            f"{moved}; resuming from an older one",
            flush=True,
        )
    if found.step is not None:
        restored = found.state
        values = np.asarray(restored["values"], np.float64)
        rng.bit_generator.state = _rng_from(restored["rng"], rng)
        states = muzero.TrainState(*restored["states"])._replace(learning_rate=states.learning_rate)
        states = jax.device_put(states, sharding)
        frames = int(found.metadata["frames"])
        index = int(found.metadata["index"])
        log_event(root, {"event": "resume", "members": n, "frames": frames})
        budget = read_settings(root)
        if budget is not None and budget.max_frames != settings.max_frames:
            # A larger budget (`--max-frames` on a resume): pbt.json holds it once a checkpoint
            # past this one is saved, so a run stopped before then resumes as it was.
            extended_from = budget.max_frames
            log_event(
                root,
                {"event": "extend", "max_frames": settings.max_frames, "from": extended_from},
            )
    else:
        write_settings(root, settings)
        log_event(
            root,
            {
                "event": "start",
                "population": n,
                "interval_frames": settings.interval_frames,
                "max_frames": settings.max_frames,
                "explore": [e._asdict() for e in settings.explore],
                "config": config.name,
                "in_program": True,
                "exploit": exploit,
                "values": _values_dicts(keys, values),
            },
        )
    loggers = [
        MetricsLogger(member_dir(root, i), tensorboard=False, progress=False) for i in range(n)
    ]
    episodes = np.zeros((n, 3))  # since the last interval: count, return sum, length sum
    learned: dict[str, np.ndarray] = {}
    start = time.monotonic()
    stopped_by = None
    # A resumed population's fitness until an interval ends: the last it logged (a new one: NaN).
    fitness = _logged_fitness(root, frames, n)
    # The first iterations only fill the ring; a resumed population starts its rings afresh.
    fill = 0
    device_values = None
    decide = functools.partial(_exploit, settings, root, keys, rng=rng, sharding=sharding)
    if exploit and extended_from is not None and frames >= extended_from:
        # The population had finished, its last interval's decision skipped: taken now, from
        # the fitness it logged then (`frames` is that interval's end).
        states, carries, values = decide(states, carries, values, fitness, frames)
    try:
        with handle_signals(stop):
            while frames < settings.max_frames:
                if stop:
                    stopped_by = stop.reason
                    break
                if device_values is None:  # the values changed: at the start, after an exploit
                    device_values = jax.device_put(values.astype(np.float32), sharding)
                learning = fill >= plan.min_iterations
                states, carries, out = program.iterate(
                    device_values, states, np.int32(fill), carries
                )
                out = jax.device_get(out)
                if learning and not program.inside:
                    for u in range(plan.updates):
                        states, priorities, learned_now = program.learn(
                            device_values, states, np.int32(fill), np.int32(u), carries
                        )
                        carries = carries._replace(priorities=priorities)
                    out = {**out, **jax.device_get(learned_now)}
                check_rewards(program.spec.name, float(np.sum(out.pop("reward_sum"))))
                episodes += np.stack(
                    [
                        out.pop("episodes"),
                        out.pop("episode_return_sum"),
                        out.pop("episode_length_sum"),
                    ],
                    axis=1,
                )
                if learning:
                    learned = {k: np.asarray(v) for k, v in out.items()}
                fill += 1
                index += 1
                frames += frames_per_iteration
                if frames >= settings.interval_end(frames - frames_per_iteration):
                    fitness = _interval_end(
                        settings,
                        root,
                        loggers,
                        keys,
                        values,
                        episodes,
                        learned,
                        frames,
                        np.asarray(jax.device_get(states.step)),
                        time.monotonic() - start,
                    )
                    episodes[:] = 0
                    if progress:
                        _print_interval(frames, fitness, time.monotonic() - start)
                    if exploit and frames < settings.max_frames:
                        states, carries, values = decide(states, carries, values, fitness, frames)
                        device_values = None
                    saved = _save(checkpointer, states, values, rng, frames, index, config_dict)
                    if saved and extended_from is not None:
                        write_settings(root, settings)
                        extended_from = None
    finally:
        for logger in loggers:
            logger.close()
    if stopped_by is not None:
        saved = _save(checkpointer, states, values, rng, frames, index, config_dict)
        if saved and extended_from is not None:
            write_settings(root, settings)
    checkpointer.close()
    finished = frames >= settings.max_frames
    log_event(
        root,
        {
            "event": "end" if finished else "stopped",
            "frames": frames,
            "members": [
                {"member": i, "frames": frames, "fitness": float(fitness[i])} for i in range(n)
            ],
        },
    )
    if finished and plot:
        for i in range(n):  # a run's plot_run, looked up where the tests replace it
            selfplay_run.plot_run(member_dir(root, i))
    return PopulationResult(frames, fitness, values, finished, stopped_by)


def _print_interval(frames: int, fitness: np.ndarray, seconds: float) -> None:
    ranked = np.where(np.isnan(fitness), -np.inf, fitness)
    best = int(np.argmax(ranked))
    print(
        f"podracer pbt: {frames:,} frames per member after {seconds:,.0f} s: fitness "
        + " ".join(f"{f:.3g}" for f in fitness)
        + f" (best: member {best})",
        flush=True,
    )


def _values_dicts(keys: Sequence[str], values: np.ndarray) -> list[dict[str, float]]:
    return [dict(zip(keys, map(float, row), strict=True)) for row in values]


def _interval_end(settings, root, loggers, keys, values, episodes, learned, frames, steps, seconds):
    """Each member's metrics line and `interval` event; returns the fitness [N]: the mean return
    of the episodes that ended in the interval (NaN where none did; -inf where its loss is not
    finite)."""
    n = settings.population
    count, returns, lengths = episodes[:, 0], episodes[:, 1], episodes[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        fitness = np.where(count > 0, returns / np.maximum(count, 1), np.nan)
    loss = learned.get("loss")
    for i in range(n):
        diverged = loss is not None and not np.isfinite(loss[i])
        if diverged:
            fitness[i] = -np.inf
        record: dict[str, Any] = {
            "frames": frames,
            "time": seconds,
            **{f"explore/{k}": float(v) for k, v in zip(keys, values[i], strict=True)},
            **{k: float(v[i]) for k, v in learned.items()},
        }
        if count[i]:
            record.update(
                episode_return=float(returns[i] / count[i]),
                episode_length=float(lengths[i] / count[i]),
                episodes=int(count[i]),
            )
        loggers[i].log(int(steps[i]), record)
        log_event(
            root,
            {
                "event": "interval",
                "member": i,
                "frames": frames,
                "updates": int(steps[i]),
                "fitness": float(fitness[i]),
                "values": dict(zip(keys, map(float, values[i]), strict=True)),
                **({"diverged": True} if diverged else {}),
            },
        )
    return fitness


@jax.jit
def _take_members(tree, members: jax.Array):
    """Each leaf's rows `members` [N]: one program (leaf by leaf, each leaf's gather compiled a
    program of its own, about 40 for a V-trace member)."""
    return jax.tree.map(lambda x: x[members], tree)


def _exploit(settings, root, keys, states, carries, values, fitness, frames, rng, sharding):
    """The decision at an interval's end: each (target, source) of `exploit_pairs` copies the
    source's train state and replay ring into the target and explores its values."""
    pairs = exploit_pairs(fitness, rng)
    if not pairs:
        return states, carries, values
    targets = np.arange(settings.population)
    for target, source in pairs:
        targets[target] = source
    states, ring = _take_members((states, (carries.ring, carries.priorities)), targets)
    states = jax.device_put(states, sharding)
    carries = jax.device_put(carries._replace(ring=ring[0], priorities=ring[1]), sharding)
    values = values.copy()
    for target, source in pairs:
        old = dict(zip(keys, map(float, values[target]), strict=True))
        values[target] = explore_values(settings, values[source], rng)
        event = log_event(
            root,
            {
                "event": "exploit",
                "source": source,
                "target": target,
                "frames": frames,
                "source_frames": frames,
                "source_fitness": float(fitness[source]),
                "target_fitness": float(fitness[target]),
                "old": old,
                "new": dict(zip(keys, map(float, values[target]), strict=True)),
            },
        )
        print(
            f"podracer pbt: member {target} (fitness {event['target_fitness']:.3g}) takes "
            f"member {source}'s state (fitness {event['source_fitness']:.3g}), now "
            + ", ".join(f"{k}={v:.3g}" for k, v in event["new"].items()),
            flush=True,
        )
    return states, carries, values


def _rng_state(rng: np.random.Generator) -> np.ndarray:
    """The explore generator's state as arrays a checkpoint holds (PCG64: two 128-bit words)."""
    state = rng.bit_generator.state["state"]
    words = [state["state"], state["inc"]]
    return np.asarray([[(w >> s) & 0xFFFFFFFF for s in (96, 64, 32, 0)] for w in words], np.uint32)


def _rng_from(saved: Any, rng: np.random.Generator) -> dict:
    words = [
        sum(int(part) << s for part, s in zip(row, (96, 64, 32, 0), strict=True))
        for row in np.asarray(saved)
    ]
    state = dict(rng.bit_generator.state)
    state["state"] = {"state": words[0], "inc": words[1]}
    state["has_uint32"], state["uinteger"] = 0, 0
    return state


def _logged_fitness(root: pathlib.Path, frames: int, population: int) -> np.ndarray:
    """Each member's fitness [N] as pbt.jsonl's newest `interval` event at or before `frames`
    logged it (NaN where there is none)."""
    fitness = np.full(population, np.nan)
    for event in read_events(root):
        if event.get("event") == "interval" and event.get("frames", math.inf) <= frames:
            fitness[int(event["member"])] = float(event["fitness"])
    return fitness


def _save(checkpointer, states, values, rng, frames, index, config_dict) -> bool:
    """Saves the population at `index`; False where that index was saved already."""
    state = {
        "states": saved_state(jax.device_get(states)),
        "values": values.astype(np.float32),
        "rng": _rng_state(rng),
    }
    return checkpointer.save(
        index, state, config_dict, {"frames": frames, "index": index, "time": time.time()}
    )
