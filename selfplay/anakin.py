"""Anakin (Podracer): acting and learning in one jitted step, for JAX-native environments (pgx
games, gymnax's classic control and MinAtar).

Every device of the mesh (`devices.learner_devices`, all local devices of every host by default)
owns B = `actors.envs_per_thread` environments, the data its updates draw from and a replica of
the train state. One iteration, one `jit` (a `shard_map` over the same 1-D mesh as the Sebulba
learner), per device:

    1. play     T = actors.unroll_length steps in all B environments: the agent's act (search,
                or V-trace's policy) and the environment's pure step with auto-reset, in a
                `lax.scan` (`selfplay.rollout`, as Sebulba's actors play JAX environments);
                nothing leaves the device
    2. data     search agents (MuZero, AlphaZero): the T steps overwrite the oldest in a ring of
                S steps per environment (the device's share of `replay.capacity`), kept as the
                actors recorded them; every step with L - 1 steps after it in the ring starts
                one window (L = agent.window_length). V-trace: the B trajectories of T + 1
                steps (the previous iteration's last step first, which the last one bootstraps
                from), learned from once, in order.
    3. learn    U updates, gradients averaged over the mesh (`pmean`): search agents take
                samples_per_insert * (T * B * devices) / batch_size minibatches of batch_size /
                devices windows drawn from the ring, once it holds `replay.min_size` windows,
                and build their targets then (the agent's `make_batch`: n-step values, the
                unroll's targets, and reanalyse's fresh searches). With `replay.priority_alpha`
                > 0 a window is drawn with probability priority ** alpha, as Sebulba's replay
                draws them (new steps get the largest priority yet; each update writes back
                its windows' |search value - value target|, and weights their loss by
                (windows * P) ** -beta over the minibatch's largest, beta annealed by
                `replay.priority_beta_anneal_updates`); with 0, uniformly;
                V-trace takes its trajectories in (B * devices) / batch_size slices of batch_size /
                devices (the later ones a little off-policy, which V-trace corrects).

The first iterations only fill the ring up to one window (ceil(L / T) - 1 iterations), one for
V-trace's overlap.
`AnakinRuntime` runs one iteration per step of the run loop (`selfplay.run`), which checks the
stop conditions, logs and saves checkpoints between iterations (on a CPU it also calls the updates
one by one: `learn_in_jit`); a checkpoint holds the train state, as a Sebulba run's does, so
either runtime resumes the other's runs (the environments and the data start afresh).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import muzero
from configs import ExperimentConfig, UsageError
from envs import EnvSpec, TimeStep, env_spec, jax_env_functions
from envs.base import check_rewards
from selfplay.agent import Agent, accelerator_paths, make_agent
from selfplay.lifetime import StopSignal
from selfplay.metrics import StageTimer
from selfplay.programs import ProgramCache, built_once, program_key
from selfplay.rollout import episode_sums, make_rollout
from selfplay.run import ReplicatedState

__all__ = [
    "AnakinCarry",
    "AnakinPlan",
    "AnakinProgram",
    "AnakinRuntime",
    "RingPriorities",
    "anakin_devices",
    "avoid_shardy_crash",
    "initial_carries",
    "learn_from_ring",
    "learn_in_jit",
    "make_anakin_iteration",
    "make_anakin_program",
    "plan_anakin",
    "sharded",
    "write_ring",
]


class AnakinCarry(NamedTuple):
    """What one device carries from one iteration to the next (besides the train state)."""

    env: Any  # its B environments' state (PgxEnvState, GymnaxEnvState)
    timestep: TimeStep  # [B] the environments' current TimeStep: what the agent acts on next
    tail: muzero.Trajectory  # [tail, B] V-trace: the previous iteration's last step; else empty
    # Search agents: the ring of recorded steps, a `Trajectory` with leaves [S, B, ...] (step t
    # of the run at row t mod S). None for V-trace.
    ring: Any
    # V-trace: this iteration's batch (the agent's `make_batch` of its [T + 1, B] trajectories),
    # learned from in slices. None for search agents.
    batch: Any
    key: jax.Array  # this device's PRNG key for the next iteration's acting
    sample_key: jax.Array  # this device's key for this iteration's minibatches
    priorities: RingPriorities  # of the windows starting at each ring row (search agents)


class RingPriorities(NamedTuple):
    """Prioritised replay's state for one device's ring (used where `replay.priority_alpha` >
    0): the priority of the window starting at each row of each game, and the largest priority
    given yet, which new steps start with (as `selfplay.replay.SequenceReplay`'s)."""

    window: jax.Array  # [S, B] float32; rows never written hold 0
    largest: jax.Array  # [] float32, starts at 1


class AnakinPlan(NamedTuple):
    """The sizes of an Anakin run, derived from the config and the number of devices."""

    devices: int  # D, devices in the mesh (all hosts)
    games: int  # B, environments per device
    moves: int  # T, steps per environment per iteration
    window: int  # L, steps per training example (a window; V-trace: a trajectory, T + 1)
    tail: int  # steps carried into the next iteration: V-trace's overlap (1); else 0
    examples: int  # N, new examples per device per iteration: T * B windows, or B trajectories
    ring: int  # S, steps each environment's ring holds (a multiple of T; V-trace: unused, T)
    minibatch: int  # examples per device per update (batch_size / D)
    updates: int  # U, updates per iteration
    fill_iterations: int  # iterations 0 .. this - 1 only fill the ring up to one window
    min_iterations: int  # learning starts at this iteration (0-based)
    replay: bool = True  # search agents: windows from the ring; V-trace: trajectories, once

    def written(self, index):
        """Examples each device's updates can draw from after iteration `index` (0-based; int or
        array): windows whose L steps are all in the ring, over its B games (V-trace: the
        iteration's B trajectories, once the first iteration filled the tail)."""
        if not self.replay:
            return jnp.where(index >= self.fill_iterations, self.examples, 0)
        steps = jnp.minimum((index + 1) * self.moves, self.ring)
        return jnp.maximum(steps - self.window + 1, 0) * self.games

    def sample_windows(self, key: jax.Array, index: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`minibatch` windows drawn uniformly from the ring after iteration `index`: their
        rows `[L, minibatch]` (ring rows of each window's L steps) and games `[minibatch]`."""
        written, starts = self._recorded(index)
        start_key, game_key = jax.random.split(key)
        # The newest window starts L steps before the newest step; older ones further back.
        back = jax.random.randint(start_key, (self.minibatch,), 0, jnp.maximum(starts, 1))
        first = written - self.window - back  # [minibatch] the run's step each window starts at
        games = jax.random.randint(game_key, (self.minibatch,), 0, self.games)
        return self._window_rows(first), games

    def _recorded(self, index):
        """Steps recorded per game after iteration `index`, and the complete windows per game
        the ring holds then."""
        written = (index + 1) * self.moves
        return written, jnp.minimum(written, self.ring) - self.window + 1

    def _window_rows(self, first):
        """The ring rows `[L, N]` of the windows starting at steps (or rows) `first` `[N]`."""
        return (first[None, :] + jnp.arange(self.window)[:, None]) % self.ring

    def sample_prioritised(
        self,
        key: jax.Array,
        index: jax.Array,
        priorities: jax.Array,
        alpha: float,
        beta: float | jax.Array,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """`minibatch` windows of the ring after iteration `index` drawn with probability
        priority ** alpha (`priorities` [S, B]), stratified as `SequenceReplay.sample` draws:
        their rows `[L, minibatch]`, games `[minibatch]` and importance weights `[minibatch]`,
        (windows * P) ** -beta over the minibatch's largest."""
        written, _ = self._recorded(index)
        return self.sample_prioritised_from(key, written, priorities, alpha, beta)

    def sample_prioritised_from(
        self,
        key: jax.Array,
        recorded: jax.Array,
        priorities: jax.Array,
        alpha: float,
        beta: float | jax.Array,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """`sample_prioritised` after `recorded` steps written to each game's rows (step t at
        row t mod S): [] when every game has as many (Anakin), or [B] (Sebulba's device replay,
        whose actor threads each write their own games' columns at their own pace). With alpha
        0 every whole window is as likely (stratified uniform, as `SequenceReplay`'s)."""
        chex.assert_shape(priorities, (self.ring, self.games))
        recorded = jnp.broadcast_to(recorded, (self.games,))  # [B]
        starts = jnp.minimum(recorded, self.ring) - self.window + 1  # [B] whole windows per game
        # Row r holds the newest step t <= recorded - 1 with t = r (mod S); the window starting
        # there is `back` windows older than the newest, and whole iff 0 <= back < starts.
        rows = jnp.arange(self.ring)[:, None]  # [S, 1]
        back = (recorded[None, :] - 1 - rows) % self.ring + 1 - self.window  # [S, B]
        whole = (back >= 0) & (back < starts[None, :])  # [S, B]
        # Floored as SequenceReplay's min_priority: a window fitted exactly stays drawable.
        mass = jnp.where(whole, jnp.maximum(priorities, 1e-6) ** alpha, 0.0)  # [S, B]
        cumulative = jnp.cumsum(mass.reshape(-1))  # [S * B]
        total = cumulative[-1]
        uniform = jax.random.uniform(key, (self.minibatch,))
        targets = (jnp.arange(self.minibatch) + uniform) * (total / self.minibatch)
        targets = jnp.minimum(targets, jnp.nextafter(total, 0.0))
        # side="right": a window of mass 0 (its cumulative sum equals the one before) is never hit
        flat = jnp.searchsorted(cumulative, targets, side="right")  # [minibatch]
        flat = jnp.minimum(flat, self.ring * self.games - 1)
        first, games = flat // self.games, flat % self.games
        probability = mass.reshape(-1)[flat] / total  # [minibatch]
        windows = jnp.sum(jnp.maximum(starts, 0))  # every whole window of every game
        weights = (windows * probability) ** -beta
        return self._window_rows(first), games, weights / jnp.max(weights)


def plan_anakin(config: ExperimentConfig, agent: Agent, devices: int) -> AnakinPlan:
    """The run's sizes, or UsageError naming the config field that cannot work."""
    games, moves = config.actors.envs_per_thread, config.actors.unroll_length
    batch = config.learner.batch_size
    if batch % devices:
        raise UsageError(f"learner.batch_size {batch} must divide evenly over {devices} devices")
    minibatch = batch // devices
    if not agent.uses_replay:  # whole trajectories, each learned from once (V-trace)
        if games % minibatch:
            raise UsageError(
                f"learner.batch_size {batch} must divide one iteration's trajectories: "
                f"actors.envs_per_thread {games} x {devices} device(s)"
            )
        tail = agent.segment_overlap
        fill = -(-tail // moves)
        return AnakinPlan(
            devices,
            games,
            moves,
            agent.window_length,
            tail,
            games,
            games,
            minibatch,
            games // minibatch,
            fill,
            fill,
            replay=False,
        )
    examples = games * moves
    window = agent.window_length
    # Each game's ring holds whole iterations, and at least one window beside the newest steps.
    ring = config.replay.capacity // devices // games // moves * moves
    if ring < window + moves:
        least = (-(-(window + moves) // moves) * moves) * games * devices
        raise UsageError(
            f"replay.capacity {config.replay.capacity} must hold a window of {window} steps "
            f"and an iteration's {moves} for each of the {games} games of {devices} "
            f"device(s): >= {least}"
        )
    spi = config.replay.samples_per_insert
    if spi <= 0:
        raise UsageError(
            "replay.samples_per_insert must be > 0 with runtime=anakin: it sets "
            "the updates per iteration (samples_per_insert x new examples / "
            "batch_size)"
        )
    most = (ring - window + 1) * games * devices
    if config.replay.min_size > most:
        raise UsageError(
            f"replay.min_size {config.replay.min_size} is more than the replay "
            f"holds ({most} windows): lower it or raise replay.capacity"
        )
    updates = max(1, round(spi * examples * devices / batch))
    # A window reads L - 1 steps after its first: the first iterations' steps only fill the
    # ring up to the first whole window.
    fill = -(-window // moves) - 1
    plan = AnakinPlan(
        devices, games, moves, window, 0, examples, ring, minibatch, updates, fill, fill
    )
    min_iterations = fill
    while int(plan.written(min_iterations)) * devices < config.replay.min_size:
        min_iterations += 1
    return plan._replace(min_iterations=min_iterations)


def write_ring(
    ring: Any,
    priorities: RingPriorities,
    trajectory: muzero.Trajectory,
    row: jax.Array,
    column: jax.Array | int,
    prioritised: bool,
) -> tuple[Any, RingPriorities]:
    """`trajectory` ([T, b] steps of b games) written over rows row .. row + T - 1 of the ring's
    columns column .. column + b - 1 (a ring of S rows, S a multiple of T, so the steps never
    wrap), and, where `prioritised`, the windows starting at the new steps given the largest
    priority yet, so that they are drawn soon."""
    ring = jax.tree.map(
        lambda r, t: jax.lax.dynamic_update_slice(r, t, (row, column) + (0,) * (r.ndim - 2)),
        ring,
        trajectory,
    )
    if prioritised:
        fresh = jnp.full(trajectory.reward.shape, priorities.largest)  # [T, b]
        window = jax.lax.dynamic_update_slice(priorities.window, fresh, (row, column))
        priorities = priorities._replace(window=window)
    return ring, priorities


def learn_from_ring(
    agent: Agent,
    update: muzero.UpdateFn,
    state: muzero.TrainState,
    ring: Any,
    priorities: RingPriorities,
    key: jax.Array,
    draw: Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]],
    prioritised: bool,
) -> tuple[muzero.TrainState, RingPriorities, dict]:
    """One update on windows of a device's ring: `(state, priorities, metrics)`.

    `draw(key) -> (rows [L, N], games [N], importance weights [N])` picks the windows
    (`AnakinPlan.sample_windows` or `sample_prioritised*`); their targets are built now
    (`agent.make_batch`, its reanalyse reading the state's own parameters), and where
    `prioritised` their new priorities are written back before the update."""
    sample_key, context_key = jax.random.split(key)
    rows, games, weights = draw(sample_key)
    window = jax.tree.map(lambda x: x[rows, games[None, :]], ring)  # [L, N, ...]
    context = muzero.BatchContext(state.params, state.target_params, context_key, state.step)
    minibatch, new = agent.make_batch(window, weights, context)  # new: [N]
    if prioritised:
        new = new.astype(jnp.float32)
        priorities = RingPriorities(
            priorities.window.at[rows[0], games].set(new),
            jnp.maximum(priorities.largest, jnp.max(new)),
        )
    state, metrics = update(state, minibatch)
    return state, priorities, metrics


class _RingData(NamedTuple):
    """Search agents' data on a device: each iteration's steps written into the ring, windows of
    it drawn for each update (by priority where `replay.priority_alpha` > 0) and their targets
    built then."""

    agent: Agent
    plan: AnakinPlan
    update: muzero.UpdateFn
    alpha: float  # replay.priority_alpha (0: uniform windows)
    beta: float  # replay.priority_beta, annealed over `anneal_updates`
    anneal_updates: int

    def empty(self, example: muzero.Trajectory) -> tuple[Any, None]:
        """`(ring, batch)` before the first iteration, for steps shaped as `example` [T, B]."""
        ring = jax.tree.map(lambda x: jnp.zeros((self.plan.ring,) + x.shape[1:], x.dtype), example)
        return ring, None

    def record(self, carry: AnakinCarry, trajectory: muzero.Trajectory, index) -> AnakinCarry:
        # Iteration i's T steps go to rows i * T .. i * T + T - 1 of the ring (mod S, a multiple
        # of T): the oldest go first.
        slot = (index * self.plan.moves) % self.plan.ring
        ring, priorities = write_ring(
            carry.ring, carry.priorities, trajectory, slot, 0, muzero.switched_on(self.alpha)
        )
        return carry._replace(ring=ring, priorities=priorities)

    def learn_step(self, state: muzero.TrainState, index, update_index, carry: AnakinCarry):
        """Update `update_index` of iteration `index` on windows of the ring: `(state,
        priorities, metrics)`, this minibatch's priorities written back where prioritised."""
        plan, priorities = self.plan, carry.priorities

        def draw(sample_key):
            if muzero.switched_on(self.alpha):
                beta = muzero.annealed_beta(self.beta, self.anneal_updates, state.step)
                return plan.sample_prioritised(
                    sample_key, index, priorities.window, self.alpha, beta
                )
            rows, games = plan.sample_windows(sample_key, index)
            return rows, games, jnp.ones(plan.minibatch)

        key = jax.random.fold_in(carry.sample_key, update_index)
        return learn_from_ring(
            self.agent,
            self.update,
            state,
            carry.ring,
            priorities,
            key,
            draw,
            muzero.switched_on(self.alpha),
        )


class _BatchData(NamedTuple):
    """V-trace's data on a device: each iteration's trajectories, with the previous iteration's
    last step first (which its last step bootstraps from), are the batch its updates take in
    slices, once."""

    agent: Agent
    plan: AnakinPlan
    update: muzero.UpdateFn

    def _batch(self, tail: muzero.Trajectory, trajectory: muzero.Trajectory) -> Any:
        whole = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), tail, trajectory)  # [T+1, B]
        return self.agent.make_batch(whole, None, None)[0]

    def empty(self, example: muzero.Trajectory) -> tuple[None, Any]:
        tail = _tail_of(example, self.plan.tail)
        batch = jax.eval_shape(self._batch, tail, example)
        return None, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), batch)

    def record(self, carry: AnakinCarry, trajectory: muzero.Trajectory, index) -> AnakinCarry:
        # Unused until the tail holds a real step (the plan's first iteration only fills it).
        whole = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), carry.tail, trajectory)
        tail = jax.tree.map(lambda x: x[-self.plan.tail :], whole)
        return carry._replace(batch=self._batch(carry.tail, trajectory), tail=tail)

    def learn_step(self, state: muzero.TrainState, index, update_index, carry: AnakinCarry):
        """Update `update_index` on its slice of the iteration's batch: `(state, priorities
        as they were, metrics)`."""
        start = update_index * self.plan.minibatch
        minibatch = jax.tree.map(
            lambda x: jax.lax.dynamic_slice_in_dim(
                x, start, self.plan.minibatch, self.agent.batch_axis
            ),
            carry.batch,
        )
        state, metrics = self.update(state, minibatch)
        return state, carry.priorities, metrics


def _tail_of(example: muzero.Trajectory, length: int) -> muzero.Trajectory:
    """Zeros shaped as `length` steps of `example` [T, B, ...]: [length, B, ...]."""
    return jax.tree.map(lambda x: jnp.zeros((length,) + x.shape[1:], x.dtype), example)


def _episode_metrics(ends, rewards: jax.Array, axis_name: str | None) -> dict[str, jax.Array]:
    """The number, returns and lengths of the episodes that ended, and the sum of the rewards
    [T, B] (not finite where one is not: the host checks it), summed over the mesh (over
    `axis_name`; None: this device's own)."""
    sums = jnp.concatenate([episode_sums(ends), rewards.sum()[None].astype(jnp.float32)])
    if axis_name is not None:
        sums = jax.lax.psum(sums, axis_name)
    return {
        "episodes": sums[0],
        "episode_return_sum": sums[1],
        "episode_length_sum": sums[2],
        "reward_sum": sums[3],
    }


def _learn_once_filled(learn_step, plan: AnakinPlan, state, index, carry: AnakinCarry):
    """The iteration's U updates (a `lax.scan` of `learn_step`, each update's priorities passed
    to the next) from iteration `plan.min_iterations` on, before it none: `(state, priorities,
    the last update's metrics or zeros)`."""

    def learn_all(state, priorities):
        def one(state_and_priorities, u):
            state, priorities = state_and_priorities
            state, priorities, metrics = learn_step(
                state, index, u, carry._replace(priorities=priorities)
            )
            return (state, priorities), metrics

        (state, priorities), learned = jax.lax.scan(
            one, (state, priorities), jnp.arange(plan.updates)
        )
        return state, priorities, jax.tree.map(lambda m: m[-1], learned)

    skipped = jax.eval_shape(learn_all, state, carry.priorities)[2]
    return jax.lax.cond(
        index >= plan.min_iterations,
        learn_all,
        lambda state, priorities: (
            state,
            priorities,
            jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), skipped),
        ),
        state,
        carry.priorities,
    )


def make_anakin_iteration(
    config: ExperimentConfig,
    agent: Agent,
    plan: AnakinPlan,
    functions,
    update: muzero.UpdateFn,
    axis_name: str | None = muzero.AXIS,
):
    """`(init_carry, iteration, learn_step)`, pure, for one device in a named-axis context.

    `functions` are the environment's pure `reset(key) -> (state, TimeStep)` and `step(state,
    actions) -> (state, TimeStep)` for B environments (`envs.jax_env_functions`).
    `init_carry(params, key) -> AnakinCarry` starts B environments and empty data.
    `iteration(state, index, carry, learn=True) -> (state, carry, metrics)`: `index` is the
    iteration's number (0-based, the same on every device); it plays, records the data (search
    agents: `_RingData`; V-trace: `_BatchData`) and, from iteration `plan.min_iterations` on,
    takes the U updates. The metrics are the last update's (zeros before learning starts) and
    the sums over the mesh of the number, returns and lengths of the episodes that ended. With
    `learn=False` it stops before the updates, and the caller runs `learn_step(state, index, u,
    carry) -> (state, priorities, metrics)` for u = 0 .. U - 1 itself, putting each update's
    `priorities` into the carry the next one takes: the same updates, in separate calls (see
    `learn_in_jit`). `update` is the pure update with `axis_name` (its `pmean` keeps the
    replicas equal); with `axis_name` None the iteration is one learner's alone, outside any
    named-axis context (a member of a population, `selfplay.population`), as its update is.
    """
    replay = config.replay
    data: _RingData | _BatchData = (
        _RingData(
            agent,
            plan,
            update,
            replay.priority_alpha,
            replay.priority_beta,
            replay.priority_beta_anneal_updates,
        )
        if agent.uses_replay
        else _BatchData(agent, plan, update)
    )
    rollout = make_rollout(
        agent,
        functions,
        plan.games,
        plan.moves,
        greedy_after_moves=config.actors.greedy_after_moves,
        # AlphaZero's reanalyse searches again from the recorded game states.
        keep_states=agent.uses_env_state and config.reanalyse.searches,
    )

    def init_carry(params, key):
        env_key, key = jax.random.split(key)
        env_state, timestep = functions.reset(env_key)
        example = jax.eval_shape(
            lambda s, t: rollout(params, 0, s, t, key)[3], env_state, timestep
        )  # [T, B]
        ring, batch = data.empty(example)
        priorities = RingPriorities(
            jnp.zeros((plan.ring, plan.games), jnp.float32), jnp.ones((), jnp.float32)
        )
        tail = _tail_of(example, plan.tail)
        return AnakinCarry(env_state, timestep, tail, ring, batch, key, key, priorities)

    def iteration(
        state: muzero.TrainState, index: jax.Array, carry: AnakinCarry, *, learn: bool = True
    ):
        chex.assert_rank(index, 0)
        key, sample_key = jax.random.split(carry.key)
        env_state, timestep, key, trajectory, ends = rollout(
            state.params, state.step, carry.env, carry.timestep, key
        )
        carry = data.record(carry, trajectory, index)._replace(
            env=env_state, timestep=timestep, key=key, sample_key=sample_key
        )
        metrics = _episode_metrics(ends, trajectory.reward, axis_name)
        if not learn:
            return state, carry, metrics
        state, priorities, learned = _learn_once_filled(data.learn_step, plan, state, index, carry)
        return state, carry._replace(priorities=priorities), {**learned, **metrics}

    return init_carry, iteration, data.learn_step


def learn_in_jit(config: ExperimentConfig, devices) -> bool:
    """Whether the updates run inside the iteration's jit. Not on CPUs unless
    `devices.accelerator_paths=on`: XLA's CPU backend runs a network's gradient inside a loop
    (`lax.scan`, and `lax.cond`) about 10x slower than the same update jitted alone
    (BENCHMARKS.md), so there each update is its own call, on the data already on the device."""
    return accelerator_paths(config, devices)


def shardy_crashes(devices) -> bool:
    """Whether XLA's Shardy partitioner is known to crash compiling Anakin's iteration over
    `devices`: jax 0.11's, over two or more CPU devices (a segmentation fault in its SPMD
    pipeline while compiling a search agent's first iteration; found with 0.11.2 on 2026-11-26).
    GSPMD compiles the same program, as do jax 0.10.2 and one device."""
    major_minor = tuple(int(part) for part in jax.__version__.split(".")[:2])
    return major_minor >= (0, 11) and len(devices) > 1 and devices[0].platform == "cpu"


def avoid_shardy_crash(devices) -> None:
    """Switches JAX, for the whole process, to the GSPMD partitioner where `shardy_crashes` on
    `devices`: a global setting, so the runtime's construction (the entry point of every Anakin
    run) makes it, not the functions that build the programs."""
    if shardy_crashes(devices) and jax.config.jax_use_shardy_partitioner:
        jax.config.update("jax_use_shardy_partitioner", False)


def anakin_devices(config: ExperimentConfig) -> list[jax.Device]:
    """The mesh: `devices.learner_devices` (local indices) of every host, or all devices."""
    ids = config.devices.learner_devices or None
    local = len(jax.local_devices())
    for i in ids or ():
        if i >= local:
            raise UsageError(
                f"devices.learner_devices names device {i} but this host has {local} device(s)"
            )
    return muzero.global_devices(ids)


def sharded(iteration, learn_step, mesh) -> tuple[Callable, Callable]:
    """The per-device functions over the mesh, unjitted: `(iteration(state, index, carry,
    learn), learn_step(state, index, u, carry))`; carry leaves (and learn_step's priorities)
    gain a leading [devices] axis."""
    first = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731

    def per_device(state, index, carry, learn):
        state, carry, metrics = iteration(state, index, first(carry), learn=learn)
        return state, jax.tree.map(lambda x: x[None], carry), metrics

    # mctx's loops start from constants that the search makes per-device: it cannot be typed
    # with varying manual axes, so the replicas' agreement rests on the update's pmean.
    def iterate(state, index, carry, learn: bool = True):
        return jax.shard_map(
            functools.partial(per_device, learn=learn),
            mesh=mesh,
            in_specs=(P(), P(), P(muzero.AXIS)),
            out_specs=(P(), P(muzero.AXIS), P()),
            check_vma=False,
        )(state, index, carry)

    def learn_per_device(state, index, u, carry):
        state, priorities, metrics = learn_step(state, index, u, first(carry))
        return state, jax.tree.map(lambda x: x[None], priorities), metrics

    learn = jax.shard_map(
        learn_per_device,
        mesh=mesh,
        in_specs=(P(), P(), P(), P(muzero.AXIS)),
        out_specs=(P(), P(muzero.AXIS), P()),
        check_vma=False,
    )
    return iterate, learn


def initial_carries(init_carry, params, mesh, key: jax.Array):
    """Each of this host's devices' initial carry, stacked on a leading axis, as global arrays."""
    devices = list(mesh.devices.flat)
    local = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
    keys = jnp.stack([jax.random.fold_in(key, i) for i in local])
    carries = _jitted_init_carries(init_carry)(params, keys)
    return muzero.from_process_local(carries, NamedSharding(mesh, P(muzero.AXIS)))


class AnakinProgram(NamedTuple):
    """An Anakin run's parts for a config and a mesh (see `make_anakin_program`)."""

    agent: Agent
    spec: EnvSpec  # of the game
    plan: AnakinPlan
    mesh: Any  # the 1-D device mesh (muzero.make_mesh)
    init_carry: Callable  # (params, key) -> one device's AnakinCarry
    iterate: Callable  # sharded iteration (state, index, carry, learn) -> (state, carry, metrics)
    # sharded learn_step (state, index, u, carry) -> (state, priorities, metrics)
    learn: Callable


@built_once(maxsize=4)  # compiled once a process for each program (selfplay.programs)
def _jitted_init_carries(init_carry: Callable) -> Callable:
    return jax.jit(jax.vmap(init_carry, in_axes=(None, 0)))


# Built once a process for each config, devices and optimizer (`selfplay.programs`): a resume or
# a second run of the config in the process takes the same programs, compiled.
_PROGRAMS = ProgramCache()


def make_anakin_program(config: ExperimentConfig, optimizer, devices) -> AnakinProgram:
    """The agent, plan and sharded (unjitted) functions of `config` over `devices` (an entry
    point that compiles them over several CPU devices calls `avoid_shardy_crash` first), built
    once a process for each config (`selfplay.programs.program_key`), devices and optimizer."""
    return _PROGRAMS.get(
        (program_key(config), tuple(devices), optimizer),
        lambda: _make_anakin_program(config, optimizer, devices),
    )


def _make_anakin_program(config: ExperimentConfig, optimizer, devices) -> AnakinProgram:
    mesh = muzero.make_mesh(devices)
    spec = env_spec(config.env.name, seed=config.seed, **config.env.options)
    agent = make_agent(config, spec)
    plan = plan_anakin(config, agent, len(devices))
    functions = jax_env_functions(config.env.name, plan.games, **config.env.options)
    update = muzero.make_update(
        agent.loss_fn, optimizer, axis_name=muzero.AXIS, target=agent.target
    )
    init_carry, iteration, learn_step = make_anakin_iteration(
        config, agent, plan, functions, update
    )
    iterate, learn = sharded(iteration, learn_step, mesh)
    return AnakinProgram(agent, spec, plan, mesh, init_carry, iterate, learn)


@built_once(maxsize=4)  # compiled once a process for each program (selfplay.programs)
def _jitted(program: AnakinProgram, inside: bool) -> tuple[Callable, Callable]:
    """The runtime's jitted `(iterate, update)`: the iteration (with its updates where `inside`)
    and one update; both donate the train state, the iteration its carry too."""
    options = dict(program.agent.compiler_options)
    # The outputs' shardings are given, not left to XLA: it makes a zero-size output (the search
    # agents' empty V-trace tail, [devices, 0, B, ...]) replicated, so over several devices the
    # second call met a carry sharded otherwise than the first and compiled the iteration again.
    replicated = NamedSharding(program.mesh, P())
    # (train state, carry or priorities, metrics)
    outputs = (replicated, NamedSharding(program.mesh, P(muzero.AXIS)), replicated)
    iterate = jax.jit(
        functools.partial(program.iterate, learn=inside),
        donate_argnums=(0, 2),
        out_shardings=outputs,
        compiler_options=options,
    )
    learn = jax.jit(
        program.learn,
        donate_argnums=(0,),
        out_shardings=outputs,
        compiler_options=options,
    )
    return iterate, learn


# The most updates dispatched ahead of the devices over several CPU devices (80 ran, 400 hung).
CPU_UPDATES_IN_FLIGHT = 8


class AnakinRuntime(ReplicatedState):
    """Anakin for the run loop (`selfplay.run.run`): each `learn` is one iteration on every
    device (play, targets, replay, and the updates once the rings hold `replay.min_size`)."""

    def __init__(self, config: ExperimentConfig, optimizer):
        self.devices = anakin_devices(config)
        avoid_shardy_crash(self.devices)
        self.program = make_anakin_program(config, optimizer, self.devices)
        self.agent, self.plan, self.spec = self.program.agent, self.program.plan, self.program.spec
        self.inside = learn_in_jit(config, self.devices)
        self._iterate, self._update = _jitted(self.program, self.inside)
        # Updates called one by one over several CPU devices wait for each other every few:
        # with hundreds dispatched at once (replay.samples_per_insert=100), XLA:CPU's all-reduce
        # waited forever for a device whose computation never started.
        several_cpus = len(self.devices) > 1 and self.devices[0].platform == "cpu"
        self._updates_in_flight = CPU_UPDATES_IN_FLIGHT if several_cpus else None
        # Of every device of every process: the iteration sums the episodes over the mesh too.
        self.frames_per_iteration = self.plan.moves * self.plan.games * len(self.devices)
        self.timer = StageTimer()
        self._step = self._frames = self._index = 0
        self._state: Any = None  # replicated over the mesh
        self._carry: Any = None
        self._metrics: dict[str, float] = {}  # the newest iteration's update's
        self._episodes = np.zeros(3)  # ended since the last log: count, return sum, length sum

    def start(self, state: muzero.TrainState, key: jax.Array) -> None:
        self._step = int(state.step)
        self._state = muzero.replicate(state, self.program.mesh)
        self._carry = initial_carries(self.program.init_carry, state.params, self.program.mesh, key)

    counts_local = False  # frames and episodes are the job's
    replay = None  # its ring lives on the devices: replay.checkpoint refuses runtime=anakin

    def running(self, stop: StopSignal) -> contextlib.AbstractContextManager[None]:
        del stop  # nothing runs beside the loop
        return contextlib.nullcontext()

    def ready(self) -> bool:
        return True  # its data comes from its own iteration

    @property
    def step(self) -> int:
        return self._step

    @property
    def frames(self) -> int:
        return self._frames

    def learn(self) -> bool:
        plan, index = self.plan, self._index
        learning = index >= plan.min_iterations
        # Where the time goes: "play" (moves, targets, replay) and "learn" (the updates) where
        # they are separate calls, else one "iteration" stage.
        with self.timer.stage("iteration" if self.inside else "play"):
            self._state, self._carry, out = self._iterate(self._state, np.int32(index), self._carry)
            out = jax.device_get(out)  # waits for the device: the clocks stay honest
        # Rewards made inside the jit, checked before an update learns from them (or, learned
        # inside it, before a checkpoint holds what it learned).
        check_rewards(self.spec.name, out.pop("reward_sum"))
        if learning and not self.inside:
            with self.timer.stage("learn"):
                for u in range(plan.updates):
                    self._state, priorities, learned = self._update(
                        self._state, np.int32(index), np.int32(u), self._carry
                    )
                    self._carry = self._carry._replace(priorities=priorities)
                    if self._updates_in_flight and (u + 1) % self._updates_in_flight == 0:
                        jax.block_until_ready(priorities)
                out = {**out, **jax.device_get(learned)}
        self._index += 1
        self._frames += self.frames_per_iteration
        self._step += plan.updates if learning else 0
        self._episodes += [
            out.pop("episodes"),
            out.pop("episode_return_sum"),
            out.pop("episode_length_sum"),
        ]
        if learning:
            self._metrics = {name: float(value) for name, value in out.items()}
        return True

    def log_values(self) -> dict[str, Any]:
        values: dict[str, Any] = dict(self._metrics)
        values["replay_size"] = int(self.plan.written(self._index - 1)) * self.plan.devices
        values.update(self.timer.summary("time/anakin/", reset=True))
        count, return_sum, length_sum = self._episodes
        if count:
            values.update(
                {
                    "episode_return": return_sum / count,
                    "episode_length": length_sum / count,
                    "episodes": int(count),
                }
            )
        self._episodes[:] = 0
        return values

    def fill_level(self) -> tuple[int, int]:
        """Examples written (all devices) against what learning starts with (at least
        `replay.min_size`; V-trace: one iteration's trajectories); the first iterations only
        fill the tail and write none."""
        plan = self.plan
        need = int(plan.written(plan.min_iterations)) * plan.devices
        return min(int(plan.written(self._index - 1)) * plan.devices, need), need
