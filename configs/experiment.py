"""The experiment's config: `search`'s and `muzero`'s own configs composed with the runtime's.

Every dataclass here is frozen and validated on construction; a bad value raises `ValueError`
naming `Section.field`. `configs.loading` turns those into `UsageError`s for the command line.
"""

from __future__ import annotations

import dataclasses
import math

from muzero.config import (
    LossConfig,
    NetworkConfig,
    OptimizerConfig,
    ReanalyseConfig,
    StochasticConfig,
)
from search.config import SearchConfig

__all__ = [
    "MAX_SEED",
    "MODES",
    "MUTABLE",
    "RUNTIMES",
    "ActorConfig",
    "DevicesConfig",
    "EnvConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "LearnerConfig",
    "LoggingConfig",
    "ReplayConfig",
]

MODES = ("muzero", "alphazero", "vtrace", "stochastic_muzero")
RUNTIMES = ("sebulba", "anakin")
# Environment families written in JAX, which the Anakin runtime steps inside its jit.
JAX_FAMILIES = ("pgx", "gymnax", "jumanji", "brax")
# A user's own environment by import path, `py:<module>:<callable>`: which API it speaks (and so
# what it allows) is known once `envs` has built it, which checks the runtime and mode then.
USER_ENV_PREFIX = "py"
CPU_CONVOLUTIONS = ("xla", "eigen")
ACCELERATOR_PATHS = ("auto", "on", "off")
# Sebulba's paths for JAX environments (`ActorConfig.scan_moves`, `ReplayConfig.on_device`).
DEVICE_PATHS = ("auto", "on", "off")

# The fields that may change when a run resumes, worth changing mid-run: the train state's
# structure does not depend on them, so a run goes on from its checkpoint with another value.
# Population Based Training explores these (`podracer pbt --explore`). A resume still accepts
# changes to any field but `selfplay.run.MUST_MATCH` (limits, actors, devices...); these are the
# hyperparameters of learning and acting. Value: whether 0 switches off a part that holds
# parameters (the consistency loss's projector), so a value may move only within > 0.
MUTABLE: dict[str, bool] = {
    "optimizer.learning_rate": False,
    "loss.value_loss_weight": False,
    "loss.reward_loss_weight": False,
    "loss.policy_loss_weight": False,
    "loss.dynamics_gradient_scale": False,
    "loss.consistency_weight": True,
    "loss.baseline_cost": False,
    "loss.entropy_cost": False,
    "loss.clip_rho_threshold": False,
    "loss.clip_pg_rho_threshold": False,
    "loss.vtrace_lambda": False,
    "replay.priority_alpha": False,
    "replay.priority_beta": False,
    "replay.samples_per_insert": False,
    "reanalyse.fraction": False,
    "search.temperature": False,
    "search.dirichlet_alpha": False,
    "search.dirichlet_fraction": False,
    "search.pb_c_init": False,
    "search.gumbel_scale": False,
    "actors.random_move_prob": False,
    "stochastic.chance_loss_weight": False,
    "stochastic.commitment_loss_weight": False,
    "stochastic.afterstate_value_loss_weight": False,
    "stochastic.turn_loss_weight": False,
    "stochastic.consistency_loss_weight": False,
    "stochastic.code_information_weight": False,
}


MAX_SEED = 2**31 - 1  # a 32-bit signed seed, what every environment family takes


def _fail(section: str, field: str, expected: str, value) -> None:
    raise ValueError(f"{section}.{field} must be {expected}, got {value!r}")


def _int_at_least(obj, field: str, minimum: int) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(type(obj).__name__, field, f"an integer >= {minimum}", value)


def _number_at_least(obj, field: str, minimum: float, strict: bool = False) -> None:
    value = getattr(obj, field)
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > minimum if strict else value >= minimum)
    )
    if not ok:
        _fail(type(obj).__name__, field, f"a number {'>' if strict else '>='} {minimum}", value)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Which environment the actors play, and its options."""

    # Environment by family and name: "openspiel:connect_four", "pgx:tic_tac_toe",
    # "envpool:Pong-v5", "gymnax:CartPole-v1", "gymnasium:CartPole-v1", "jumanji:Snake-v1", or
    # your own by import path, "py:<module>:<callable>" (a gymnax, jumanji, pgx or Gymnasium
    # environment; docs/your-environment.md).
    name: str = "openspiel:tic_tac_toe"
    # Options passed to the adapter (envpool: episodic_life, repeat_action_probability, ...), or
    # for py: to your callable as keyword arguments.
    options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or ":" not in self.name:
            _fail(
                "EnvConfig",
                "name",
                "'family:game' (openspiel:, pgx:, envpool:, gymnax:, gymnasium:, jumanji:) or "
                "'py:<module>:<callable>'",
                self.name,
            )
        if not isinstance(self.options, dict):
            _fail("EnvConfig", "options", "a mapping of option names to values", self.options)
        reserved = sorted(set(self.options) & {"num_envs", "seed"})
        if reserved:  # the runtime passes them to every environment itself
            _fail(
                "EnvConfig",
                "options",
                "a mapping without num_envs or seed (set actors.envs_per_thread and seed)",
                self.options,
            )


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    """The actor threads: how many, how many environments each, how long a segment."""

    # Actor threads per actor device; each owns a batch of environments and runs the search.
    threads_per_device: int = 2
    # Environments one actor thread owns (the search's batch size unless envs_per_step is set).
    envs_per_thread: int = 32
    # Steps per trajectory segment pushed to the replay (T of [T, B]).
    unroll_length: int = 16
    # Act greedily (most visited action) from this move of an episode on; 0: never.
    greedy_after_moves: int = 0
    # Environments the actor acts on per step; 0 steps all envs_per_thread together. A smaller
    # number uses envpool's async mode: the actor acts on the first envs_per_step envs to finish
    # while the others keep stepping (the search's batch is then envs_per_step).
    envs_per_step: int = 0
    # Board games: the chance of playing a uniformly random legal move instead of the search's
    # (never where the actor acts greedily). The policy target stays the search's; the data then
    # holds the positions after blunders, which a learned model must also get right.
    random_move_prob: float = 0.0
    # JAX environments (pgx:, gymnax:) under Sebulba: "on" plays a whole segment (unroll_length
    # moves of every env, the search and the env's step) per device call, in one jitted scan,
    # instead of one device round trip per move; "auto" does on accelerators (devices.
    # accelerator_paths), "off" acts move by move. Other environments always act move by move.
    scan_moves: str = "auto"

    def __post_init__(self):
        _int_at_least(self, "threads_per_device", 1)
        if self.scan_moves not in DEVICE_PATHS:
            _fail(
                "ActorConfig", "scan_moves", " or ".join(map(repr, DEVICE_PATHS)), self.scan_moves
            )
        _int_at_least(self, "envs_per_thread", 1)
        _int_at_least(self, "unroll_length", 2)
        _int_at_least(self, "greedy_after_moves", 0)
        _int_at_least(self, "envs_per_step", 0)
        _number_at_least(self, "random_move_prob", 0.0)
        if self.random_move_prob > 1:
            _fail("ActorConfig", "random_move_prob", "in [0, 1]", self.random_move_prob)
        if self.envs_per_step > self.envs_per_thread:
            _fail(
                "ActorConfig",
                "envs_per_step",
                f"<= envs_per_thread ({self.envs_per_thread})",
                self.envs_per_step,
            )
        if 0 < self.envs_per_step < self.envs_per_thread < 2 * self.envs_per_step - 1:
            # Envs that ended wait for envpool's extra reset step; with fewer envs in flight than
            # this, a batch of envs_per_step could never fill.
            _fail(
                "ActorConfig",
                "envs_per_step",
                f"<= {(self.envs_per_thread + 1) // 2} with envs_per_thread="
                f"{self.envs_per_thread} (async envpool needs envs_per_thread >= "
                f"2 * envs_per_step - 1 so a batch can fill while ended envs wait for their "
                f"reset), or 0 or {self.envs_per_thread} to step all together",
                self.envs_per_step,
            )


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The replay between actors and learner: its size and how fast data is reused."""

    # Transitions held (MuZero/AlphaZero); the oldest are evicted first.
    capacity: int = 100_000
    # Transitions stored before the learner starts.
    min_size: int = 1_000
    # Samples learned from per transition produced (over several processes, the job's: each
    # process's limiter counts the mean of their inserts); 0 lets both sides run freely.
    samples_per_insert: float = 4.0
    # Prioritized replay exponent alpha (0: uniform).
    priority_alpha: float = 1.0
    # Importance-weight exponent beta.
    priority_beta: float = 1.0
    # Raise beta linearly from priority_beta to 1 over this many updates, then keep 1 (0: keep
    # priority_beta), as prioritized replay and EfficientZero anneal it over their runs.
    priority_beta_anneal_updates: int = 0
    # V-trace: trajectories the FIFO queue holds before actors block.
    queue_size: int = 16
    # Save each process's replay with every checkpoint (`<run_dir>/replay/`), so that a resumed
    # run goes on with the data it had instead of refilling; Sebulba's MuZero and AlphaZero only.
    # On disk: about the replay's memory (`capacity` transitions), twice (the last 2 kept).
    checkpoint: bool = False
    # Sebulba's MuZero and AlphaZero on a JAX environment (pgx:, gymnax:): "on" keeps the
    # replay on the learner's device, written by the actors' segments and sampled inside the
    # update's jit (selfplay/device_replay.py), and refuses where it cannot (several processes
    # or learner devices, checkpoint on); "auto" does so on accelerators (devices.
    # accelerator_paths) where it can (else one line says why not); "off" keeps the host
    # replay. Anakin's replay is always on its devices.
    on_device: str = "auto"

    def __post_init__(self):
        _int_at_least(self, "capacity", 1)
        if self.on_device not in DEVICE_PATHS:
            _fail("ReplayConfig", "on_device", " or ".join(map(repr, DEVICE_PATHS)), self.on_device)
        _int_at_least(self, "min_size", 1)
        if self.min_size > self.capacity:
            _fail("ReplayConfig", "min_size", f"<= capacity ({self.capacity})", self.min_size)
        _number_at_least(self, "samples_per_insert", 0.0)
        _number_at_least(self, "priority_alpha", 0.0)
        _number_at_least(self, "priority_beta", 0.0)
        _int_at_least(self, "priority_beta_anneal_updates", 0)
        _int_at_least(self, "queue_size", 1)
        if not isinstance(self.checkpoint, bool):
            _fail("ReplayConfig", "checkpoint", "true or false", self.checkpoint)


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """The learner loop: batch, how long to train, how often to publish, save and log."""

    # Global batch: windows (MuZero), states (AlphaZero) or trajectories (V-trace) per update.
    batch_size: int = 128
    # Stop after this many updates (0: no limit). Each limit counts the whole run, a resume's
    # earlier part included.
    max_updates: int = 2_000
    # Stop after this many seconds of training, over the run's invocations (0: no limit).
    max_seconds: float = 0.0
    # Stop after this many environment frames, over the run's invocations (0: no limit).
    max_frames: int = 0
    # Publish new parameters to the actors every this many updates.
    publish_every: int = 1
    # Save a checkpoint every this many updates (and at the end).
    checkpoint_every: int = 500
    # Checkpoints kept on disk (the newest).
    keep_checkpoints: int = 3
    # Seconds between metric lines (metrics.jsonl, TensorBoard, the progress line).
    log_every_s: float = 5.0
    # Stop the run (with its final checkpoint where it can still save one, exit 1) when its
    # frames or its updates have stopped advancing for this many seconds: a run stuck in a call
    # that never returns, unattended; counted from the first frame and the first update of each
    # invocation, so the compiling before them never counts; 0: never.
    stall_timeout_s: float = 1800.0
    # Board games (muzero, alphazero): train each example in a random one of the board's
    # symmetries (tic-tac-toe and go: 8 rotations/reflections; connect four: the mirror).
    augment_symmetries: bool = False
    # Write a JAX profiler trace (TensorBoard's profile plugin, or Perfetto) of this many updates
    # into profile_dir, actors and learner together, after the first updates compiled; 0: off.
    profile_updates: int = 0
    # Where the trace goes; empty: <run dir>/profile.
    profile_dir: str = ""
    # Sebulba: batches a thread samples and puts on the learner's device ahead of the update
    # (built there by the learner just before it), and updates left in flight on the devices;
    # 0: sample, update and wait in series.
    prefetch: int = 2
    # A target network for the value targets' bootstraps (reanalyse.value=target_network): its
    # parameters are the learner's, copied after every this many updates; 0: none.
    target_update_every: int = 0
    # Or an exponential moving average of the parameters, updated after every update with this
    # decay (e.g. 0.99); 0: none. At most one of the two.
    target_ema: float = 0.0

    def __post_init__(self):
        _int_at_least(self, "batch_size", 1)
        _int_at_least(self, "target_update_every", 0)
        _number_at_least(self, "target_ema", 0.0)
        if self.target_ema >= 1:
            _fail("LearnerConfig", "target_ema", "in [0, 1)", self.target_ema)
        if self.target_ema and self.target_update_every:
            _fail(
                "LearnerConfig",
                "target_ema",
                "0 when target_update_every is set (one target schedule)",
                self.target_ema,
            )
        _int_at_least(self, "prefetch", 0)
        _int_at_least(self, "profile_updates", 0)
        if not isinstance(self.profile_dir, str):
            _fail("LearnerConfig", "profile_dir", "a path", self.profile_dir)
        _int_at_least(self, "max_updates", 0)
        _number_at_least(self, "max_seconds", 0.0)
        _int_at_least(self, "max_frames", 0)
        _int_at_least(self, "publish_every", 1)
        _int_at_least(self, "checkpoint_every", 1)
        _int_at_least(self, "keep_checkpoints", 1)
        _number_at_least(self, "log_every_s", 0.0, strict=True)
        _number_at_least(self, "stall_timeout_s", 0.0)
        if not isinstance(self.augment_symmetries, bool):
            _fail("LearnerConfig", "augment_symmetries", "true or false", self.augment_symmetries)
        if not (self.max_updates or self.max_seconds or self.max_frames):
            _fail(
                "LearnerConfig",
                "max_updates",
                "> 0 unless max_seconds or max_frames sets an end",
                self.max_updates,
            )


@dataclasses.dataclass(frozen=True)
class DevicesConfig:
    """Which local devices act and which learn (Sebulba's split)."""

    # Local device indices for actor threads; empty: device 0.
    actor_devices: tuple[int, ...] = ()
    # Local device indices for the learner; empty: all but the actors' (all, with one device).
    learner_devices: tuple[int, ...] = ()
    # Convolutions on CPU devices: "xla" (XLA's choice; YNNPACK in jaxlib 0.10, the faster for
    # board networks) or "eigen" (XLA's own kernels: the IMPALA network's update on Atari frames
    # costs 1.5x less wall time; see BENCHMARKS.md). No effect on GPUs or TPUs.
    cpu_convolutions: str = "xla"
    # Split the host CPU into this many JAX devices (`jax_num_cpu_devices`; 0: JAX's default,
    # one). Anakin runs one shard of games per device, so 2 keeps both cores of a 2-core CPU
    # busy; Sebulba then acts on device 0 and learns on the others. Takes effect only where the
    # run starts JAX (`podracer train`); a process whose JAX is already running gets a warning.
    cpu_devices: int = 0
    # The paths built for accelerators: Sebulba's segments per device call and its replay on the
    # learner's device on JAX environments (where actors.scan_moves and replay.on_device say
    # "auto"), its actors' fused pgx act+step move by move, and Anakin's updates inside the
    # iteration's jit. "auto": on for GPUs and TPUs, off on CPUs (slower there, see
    # BENCHMARKS.md); "on" forces them on a CPU (how the tests exercise them).
    accelerator_paths: str = "auto"

    def __post_init__(self):
        for field in ("actor_devices", "learner_devices"):
            value = getattr(self, field)
            if not isinstance(value, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
            ):
                _fail("DevicesConfig", field, "a tuple of device indices >= 0", value)
        _int_at_least(self, "cpu_devices", 0)
        if self.accelerator_paths not in ACCELERATOR_PATHS:
            _fail(
                "DevicesConfig",
                "accelerator_paths",
                " or ".join(map(repr, ACCELERATOR_PATHS)),
                self.accelerator_paths,
            )
        if self.cpu_convolutions not in CPU_CONVOLUTIONS:
            _fail(
                "DevicesConfig",
                "cpu_convolutions",
                " or ".join(map(repr, CPU_CONVOLUTIONS)),
                self.cpu_convolutions,
            )


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Strength over time: the newest parameters, greedy, against fixed opponents while training."""

    # Seconds between evaluations (in a thread beside the learner); 0 turns them off.
    every_s: float = 60.0
    # Board games: arena player specs played with both colours; empty: `random` and an `mcts:N`
    # sized to the game (`podracer arena --help` lists the players).
    opponents: tuple[str, ...] = ()
    # Games against each opponent (half with each colour; rounded up to even); one-player
    # environments: episodes of the greedy agent.
    games: int = 10
    # Simulations of the agent's search when evaluated; 0: the run's own.
    num_simulations: int = 0
    # Also evaluate the parameters of the first update at or past each of these frame counts
    # (the environment frames of the run): return curves by frames that every agent shares
    # (benchmarks/sample_efficiency.py). Marks the run stops at are evaluated before it ends.
    at_frames: tuple[int, ...] = ()

    def __post_init__(self):
        _number_at_least(self, "every_s", 0.0)
        _int_at_least(self, "games", 1)
        _int_at_least(self, "num_simulations", 0)
        marks = self.at_frames
        if not isinstance(marks, tuple) or not all(
            isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in marks
        ):
            _fail("EvaluationConfig", "at_frames", "a list of frame counts > 0", marks)
        if not isinstance(self.opponents, tuple) or not all(
            isinstance(o, str) and o for o in self.opponents
        ):
            _fail("EvaluationConfig", "opponents", "a list of player specs", self.opponents)


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """Where the metrics go besides metrics.jsonl and TensorBoard."""

    # Also log to Weights & Biases (`pip install 'podracer[wandb]'`); offline (files under the
    # run directory's wandb/, for `wandb sync`) when its servers cannot be reached.
    wandb: bool = False
    # The W&B project the run is logged to.
    wandb_project: str = "podracer"

    def __post_init__(self):
        if not isinstance(self.wandb, bool):
            _fail("LoggingConfig", "wandb", "true or false", self.wandb)
        if not isinstance(self.wandb_project, str) or not self.wandb_project:
            _fail("LoggingConfig", "wandb_project", "a non-empty string", self.wandb_project)


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A whole training run: `podracer train` builds everything from this."""

    # Short name of the run's preset (for run directories and plots).
    name: str = "tic_tac_toe_muzero"
    # "muzero" (learned model), "alphazero" (exact simulator, pgx) or "vtrace" (no search), or
    # "stochastic_muzero" (a learned model with afterstates and chance codes, for games with
    # chance: pgx:2048, pgx:backgammon). muzero's learned model is deterministic: on a game with
    # chance it learns one next state per move, a blur of the tiles or dice that may come, the
    # wrong model (allowed, as the control of game2048_stochastic_muzero); alphazero searches
    # pgx's 2048 and backgammon with the real chance outcomes.
    mode: str = "muzero"
    # Seed of everything random: parameters, environments, search, replay (0 to 2**31 - 1).
    seed: int = 0
    # "sebulba": actor threads feed a learner through a replay (any environment). "anakin": for
    # JAX environments (pgx:, gymnax:), acting and learning in one jitted step per iteration on
    # every device (selfplay/anakin.py: each device steps actors.envs_per_thread environments
    # actors.unroll_length times, then learns: from a uniform replay held on the device, or,
    # V-trace, from those trajectories).
    runtime: str = "sebulba"
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    search: SearchConfig = dataclasses.field(default_factory=SearchConfig)
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    actors: ActorConfig = dataclasses.field(default_factory=ActorConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    reanalyse: ReanalyseConfig = dataclasses.field(default_factory=ReanalyseConfig)
    devices: DevicesConfig = dataclasses.field(default_factory=DevicesConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    stochastic: StochasticConfig = dataclasses.field(default_factory=StochasticConfig)

    def __post_init__(self):
        if self.mode not in MODES:
            _fail("ExperimentConfig", "mode", f"one of {MODES}", self.mode)
        if not isinstance(self.name, str) or not self.name:
            _fail("ExperimentConfig", "name", "a non-empty string", self.name)
        # Environments take 32-bit seeds (envpool asserts it): each actor's is derived from this
        # one within that range (`envs.env_seed`).
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed <= MAX_SEED
        ):
            _fail("ExperimentConfig", "seed", f"an integer from 0 to {MAX_SEED}", self.seed)
        family = self.env.name.split(":", 1)[0]
        if self.runtime not in RUNTIMES:
            _fail("ExperimentConfig", "runtime", " or ".join(map(repr, RUNTIMES)), self.runtime)
        # What a user's environment allows is known once `envs` has built it, which checks then.
        user = family == USER_ENV_PREFIX
        if self.runtime == "anakin" and family not in JAX_FAMILIES and not user:
            _fail(
                "ExperimentConfig",
                "runtime",
                "'sebulba' for a non-JAX environment (anakin steps the environment inside jit: "
                "pgx:..., gymnax:..., jumanji:... or py: in their APIs)",
                self.runtime,
            )
        if self.replay.checkpoint and (self.runtime == "anakin" or self.mode == "vtrace"):
            _fail(
                "ReplayConfig",
                "checkpoint",
                "false with runtime=anakin (its replay lives on the devices) or mode=vtrace (its "
                "queue holds a few trajectories in flight, no replay)",
                True,
            )
        self._check_device_paths(family in JAX_FAMILIES or user)
        self._check_sample_efficiency()
        algorithm = self.search.algorithm
        if self.mode == "stochastic_muzero" and algorithm != "stochastic_muzero":
            _fail(
                "SearchConfig",
                "algorithm",
                "'stochastic_muzero' with mode=stochastic_muzero (its model has afterstates and "
                "chance codes)",
                algorithm,
            )
        if algorithm == "stochastic_muzero" and self.mode not in ("stochastic_muzero", "alphazero"):
            _fail(
                "SearchConfig",
                "algorithm",
                f"'muzero' or 'gumbel_muzero' with mode={self.mode} ('stochastic_muzero' needs a "
                "model with chance: mode=stochastic_muzero, or alphazero on a game with chance)",
                algorithm,
            )
        if self.mode == "alphazero" and family != "pgx" and not user:
            _fail(
                "ExperimentConfig",
                "mode",
                "'muzero' or 'vtrace' for this environment (alphazero searches with the rules as "
                "its model: pgx:..., or py: in pgx's API)",
                self.mode,
            )

    def _check_device_paths(self, jax_env: bool) -> None:
        """Sebulba's paths for JAX environments, where forced on, need one (`jax_env`: the
        environment may be one)."""
        if self.actors.scan_moves == "on" and not jax_env:
            _fail(
                "ActorConfig",
                "scan_moves",
                "'auto' or 'off' for a non-JAX environment ('on' plays moves inside a jit: "
                "pgx:..., gymnax:..., jumanji:...)",
                "on",
            )
        if self.replay.on_device != "on":
            return
        if not jax_env or self.mode == "vtrace":
            _fail(
                "ReplayConfig",
                "on_device",
                "'auto' or 'off' unless a search agent (muzero, alphazero) plays a JAX "
                "environment (pgx:..., gymnax:..., jumanji:...): V-trace learns from a queue, and "
                "other "
                "environments' segments come from the host",
                "on",
            )
        if self.replay.checkpoint:
            _fail(
                "ReplayConfig",
                "on_device",
                "'auto' or 'off' with replay.checkpoint=true (the saved replay is the host's)",
                "on",
            )

    def _check_sample_efficiency(self) -> None:
        """Reanalyse, the target network and EfficientZero's additions: where each applies."""
        reanalyse, loss, learner = self.reanalyse, self.loss, self.learner
        target = learner.target_update_every > 0 or learner.target_ema > 0
        if self.mode == "vtrace":
            if reanalyse.fraction or reanalyse.value != "stored":
                _fail(
                    "ReanalyseConfig",
                    "fraction",
                    "0 (with value 'stored') for mode=vtrace: reanalyse recomputes search "
                    "targets, and V-trace has none",
                    reanalyse.fraction,
                )
            if loss.td_steps_decay_every:
                _fail(
                    "LossConfig",
                    "td_steps_decay_every",
                    "0 for mode=vtrace (V-trace corrects off-policy data itself)",
                    loss.td_steps_decay_every,
                )
        if self.mode == "stochastic_muzero":
            if reanalyse.fraction or reanalyse.value != "stored":
                _fail(
                    "ReanalyseConfig",
                    "fraction",
                    "0 (with value 'stored') for mode=stochastic_muzero: its targets do not take "
                    "reanalyse yet (stochastic.consistency_loss_weight is its consistency loss)",
                    reanalyse.fraction,
                )
            if loss.td_steps_decay_every:
                _fail(
                    "LossConfig",
                    "td_steps_decay_every",
                    "0 for mode=stochastic_muzero: its targets do not take the off-policy "
                    "correction yet",
                    loss.td_steps_decay_every,
                )
        if self.mode != "muzero":
            for name in ("consistency_weight", "value_prefix_horizon"):
                if getattr(loss, name):
                    _fail(
                        "LossConfig",
                        name,
                        f"0 for mode={self.mode}: it trains MuZero's learned model",
                        getattr(loss, name),
                    )
        uses_target = reanalyse.value == "target_network" or (
            reanalyse.network == "target" and reanalyse.searches
        )
        if uses_target != target:
            field = "target_ema" if learner.target_ema else "target_update_every"
            expected = (
                "> 0 (or target_ema > 0) for reanalyse.value=target_network or "
                "reanalyse.network=target"
                if not target
                else "0 (and target_ema 0) unless reanalyse.value=target_network or "
                "reanalyse.network=target uses the target network"
            )
            _fail("LearnerConfig", field, expected, getattr(learner, field))

    def replace(self, **changes) -> ExperimentConfig:
        return dataclasses.replace(self, **changes)
