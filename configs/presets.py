"""Named experiment configs: `podracer train --config NAME`.

Each preset is one function registered once, by `@preset(hardware, reaches, on_cpu)`: what it is
sized for (a 2-core CPU, or an accelerator), what it reaches there and, for an accelerator
preset, how to try it on a CPU. `names()`, `INFO`, `describe()` and `__all__` all derive from
those registrations. A comment in a preset gives the reason for a choice; the measurements
behind it are in the docs (Results).

Board-game presets use discount 1, two-player signs and value targets that reach the end of the
game (td_steps >= the longest game), except where a preset says why not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal, NamedTuple, TypedDict

from configs.experiment import (
    ActorConfig,
    DevicesConfig,
    EnvConfig,
    EvaluationConfig,
    ExperimentConfig,
    LearnerConfig,
    ReplayConfig,
)
from muzero.config import (
    LossConfig,
    NetworkConfig,
    OptimizerConfig,
    ReanalyseConfig,
    StochasticConfig,
)
from search.config import SearchConfig

HARDWARE = ("cpu", "accelerator")


class PresetInfo(NamedTuple):
    """What a preset is sized for and what it reaches there (the figures: the docs' Results)."""

    hardware: str  # "cpu" (a 2-core laptop is enough) or "accelerator" (a GPU or TPU)
    reaches: str  # what a run reaches on that hardware, measured, or what is not yet measured
    on_cpu: str = ""  # for an accelerator preset: how to try it on a CPU


# Every preset's function under its name (and its earlier names), and what INFO says of it.
_PRESETS: dict[str, Callable[[], ExperimentConfig]] = {}
INFO: dict[str, PresetInfo] = {}


def preset(
    hardware: Literal["cpu", "accelerator"],
    reaches: str,
    *,
    on_cpu: str = "",
    earlier_names: tuple[str, ...] = (),
) -> Callable[[Callable[[], ExperimentConfig]], Callable[[], ExperimentConfig]]:
    """Registers the decorated function as the preset of its name (and of `earlier_names`, which
    still load): sized for `hardware`, where it `reaches` what it says; an accelerator preset
    says `on_cpu` which overrides try it on a CPU."""
    if hardware not in HARDWARE:
        raise ValueError(f"preset hardware must be one of {HARDWARE}, got {hardware!r}")
    if hardware == "accelerator" and not on_cpu:
        raise ValueError("an accelerator preset says how to try it on a CPU (on_cpu=...)")

    def register(build: Callable[[], ExperimentConfig]) -> Callable[[], ExperimentConfig]:
        name = build.__name__
        if name in _PRESETS or any(alias in _PRESETS for alias in earlier_names):
            raise ValueError(f"preset {name} is registered twice")
        _PRESETS[name] = build
        INFO[name] = PresetInfo(hardware, reaches, on_cpu)
        for alias in earlier_names:
            _PRESETS[alias] = build
            INFO[alias] = PresetInfo(hardware, f"{name}'s earlier name", on_cpu)
        return build

    return register


DEFAULT = "tic_tac_toe_alphazero"


class _NetworkChoices(TypedDict, total=False):
    latent_scaling: Literal["min_max", "none"]
    dynamics_residual: bool
    zero_init_heads: bool | None


# The network's defaults before 2026-12-07 (the MuZero paper's min-max latents, an MLP dynamics
# that replaces the latent, heads initialised as any layer). The presets measured with them keep
# them, written out, until they are measured again: their figures stand as they were measured.
EARLIER_NETWORK: _NetworkChoices = {
    "latent_scaling": "min_max",
    "dynamics_residual": False,
    "zero_init_heads": False,
}


def _board_game(
    name: str,
    mode: str,
    env: str,
    *,
    simulations: int,
    longest_game: int,
    channels: int,
    blocks: int,
    updates: int,
    batch: int,
    envs: int,
    learning_rate: float = 2e-3,
) -> ExperimentConfig:
    return ExperimentConfig(
        name=name,
        mode=mode,
        env=EnvConfig(name=env),
        search=SearchConfig(
            num_simulations=simulations,
            dirichlet_alpha=0.5,
            dirichlet_fraction=0.25,
            temperature=1.0,
            qtransform="by_min_max",
        ),
        network=NetworkConfig(
            channels=channels,
            representation_blocks=blocks,
            dynamics_blocks=blocks,
            prediction_blocks=1,
            head_channels=2,
            head_hidden=32,
            value_support=0,
            reward_support=0,
            **(EARLIER_NETWORK if mode == "muzero" else _NetworkChoices()),
        ),
        loss=LossConfig(
            unroll_steps=3,
            td_steps=longest_game,
            discount=1.0,
            two_player=True,
            value_loss_weight=1.0,
        ),
        optimizer=OptimizerConfig(
            learning_rate=learning_rate, max_grad_norm=5.0, weight_decay=1e-4
        ),
        actors=ActorConfig(
            threads_per_device=2,
            envs_per_thread=envs,
            unroll_length=16,
            greedy_after_moves=max(2, longest_game // 3),
        ),
        replay=ReplayConfig(
            capacity=50_000,
            min_size=2_000,
            samples_per_insert=4.0,
            priority_alpha=0.5,
            priority_beta=1.0,
        ),
        learner=LearnerConfig(batch_size=batch, max_updates=updates, checkpoint_every=250),
    )


@preset("cpu", "perfect play (every opponent line, both seats) after 5 minutes on 2 cores")
def tic_tac_toe_muzero() -> ExperimentConfig:
    """MuZero's learned model on OpenSpiel's tic-tac-toe. Perfect play needs the reward of a
    winning move in positions self-play rarely reaches (every opponent blunder): the choices
    below are for those."""
    config = _board_game(
        "tic_tac_toe_muzero",
        "muzero",
        "openspiel:tic_tac_toe",
        simulations=32,
        longest_game=9,
        channels=32,
        blocks=1,
        updates=1_500,
        batch=128,
        envs=32,
    )
    return config.replace(
        # Raw latents and plain blocks learn a winning move's reward several times faster.
        network=dataclasses.replace(config.network, latent_scaling="none", block_norm="none"),
        # That reward is what the model finds hardest; 5 unrolled moves keep deep values right.
        loss=dataclasses.replace(config.loss, reward_loss_weight=3.0, unroll_steps=5),
        # Stronger root noise keeps blunders, and what follows them, in the data.
        search=config.search.replace(qtransform="by_parent_and_siblings", dirichlet_fraction=0.5),
        # Decayed to a tenth by the end of a 5-minute run: at a constant rate the agent became
        # perfect and then lost lines again between checkpoints.
        optimizer=dataclasses.replace(
            config.optimizer, schedule="linear", decay_steps=7_000, final_learning_rate=2e-4
        ),
        actors=ActorConfig(
            threads_per_device=2,
            envs_per_thread=32,
            unroll_length=16,
            greedy_after_moves=0,
            random_move_prob=0.25,  # the blunders' positions, as the root noise
        ),
        replay=ReplayConfig(
            capacity=10_000,
            min_size=1_000,
            samples_per_insert=4.0,
            priority_alpha=0.5,
            priority_beta=1.0,
        ),
        # The default run: 5 minutes from the learner's start, whatever the machine's speed.
        learner=LearnerConfig(
            batch_size=128,
            max_updates=0,
            max_seconds=300.0,
            checkpoint_every=250,
            augment_symmetries=True,  # the 8 symmetries multiply the rarely reached positions
        ),
    )


@preset("cpu", "perfect play after 1-2 minutes on 2 cores (5-minute run)")
def tic_tac_toe_alphazero() -> ExperimentConfig:
    """AlphaZero on pgx's tic-tac-toe: 64 simulations of the real rules."""
    config = _board_game(
        "tic_tac_toe_alphazero",
        "alphazero",
        "pgx:tic_tac_toe",
        simulations=64,
        longest_game=9,
        channels=32,
        blocks=1,
        updates=1_000,
        batch=128,
        envs=32,
    )
    return config.replace(
        # Sampling at every move keeps the opponents' mistakes in the data (greedy self-play
        # drifted to draws only and forgot them).
        actors=ActorConfig(
            threads_per_device=2, envs_per_thread=32, unroll_length=16, greedy_after_moves=0
        ),
        learner=LearnerConfig(
            batch_size=128, max_updates=0, max_seconds=300.0, checkpoint_every=250
        ),
    )


@preset(
    "cpu",
    "after 30 minutes on 2 cores beats random and mcts:20, not yet mcts:100 or mcts:1000 "
    "(hours, not minutes, on a CPU)",
)
def connect_four_muzero() -> ExperimentConfig:
    """MuZero on OpenSpiel's connect four, sized for 2 CPU cores with what made the other board
    presets learn there: connect_four_alphazero's network, simulations, targets, random moves,
    mirror and schedule, and tic_tac_toe_muzero's model settings (raw latents, plain blocks, 5
    unrolled moves, the reward loss weighed 3x)."""
    config = _board_game(
        "connect_four_muzero",
        "muzero",
        "openspiel:connect_four",
        simulations=32,
        longest_game=42,
        channels=32,
        blocks=2,
        updates=20_000,
        batch=128,
        envs=64,
        learning_rate=1e-3,
    )
    return config.replace(
        network=dataclasses.replace(config.network, latent_scaling="none", block_norm="none"),
        loss=dataclasses.replace(config.loss, td_steps=10, unroll_steps=5, reward_loss_weight=3.0),
        optimizer=dataclasses.replace(
            config.optimizer, schedule="linear", decay_steps=16_000, final_learning_rate=1e-4
        ),
        actors=dataclasses.replace(config.actors, random_move_prob=0.1),
        learner=dataclasses.replace(config.learner, augment_symmetries=True),
    )


@preset(
    "cpu",
    "after 30 minutes on 2 cores wins 65-68% / 80% / 90-95% against mcts:1000 at 32 / 256 / 800 "
    "simulations",
)
def connect_four_alphazero() -> ExperimentConfig:
    """AlphaZero on pgx's connect four, 32 simulations of the real rules, for 2 CPU cores."""
    config = _board_game(
        "connect_four_alphazero",
        "alphazero",
        "pgx:connect_four",
        simulations=32,
        longest_game=42,
        channels=32,
        blocks=2,
        updates=20_000,
        batch=256,
        envs=128,
        learning_rate=1e-3,
    )
    return config.replace(
        # Bootstrapped from the search's value 10 plies on: outcomes past random moves are noisy.
        loss=dataclasses.replace(config.loss, td_steps=10),
        # Decayed to a tenth over about a 30-minute run's updates on a 2-core CPU.
        optimizer=dataclasses.replace(
            config.optimizer, schedule="linear", decay_steps=16_000, final_learning_rate=1e-4
        ),
        # A random move in 10% of moves and the mirror: more positions, blunders among them.
        actors=dataclasses.replace(config.actors, random_move_prob=0.1),
        learner=dataclasses.replace(config.learner, augment_symmetries=True),
    )


@preset(
    "accelerator",
    "not yet measured (200k updates of a 4-block, 64-channel network: days on a CPU)",
    on_cpu="search.num_simulations=16 network.channels=32 network.representation_blocks=2 "
    "network.dynamics_blocks=2 learner.batch_size=64 actors.envs_per_thread=16",
)
def go9_muzero() -> ExperimentConfig:
    """MuZero on OpenSpiel's 9x9 go (komi 7.5), for an accelerator."""
    config = _board_game(
        "go9_muzero",
        "muzero",
        "openspiel:go(board_size=9,komi=7.5)",
        simulations=50,
        longest_game=200,
        channels=64,
        blocks=4,
        updates=200_000,
        batch=256,
        envs=64,
        learning_rate=1e-3,
    )
    return config.replace(
        loss=LossConfig(
            unroll_steps=5, td_steps=200, discount=1.0, two_player=True, value_loss_weight=1.0
        )
    )


@preset("cpu", "a mean return of 475 (of 500) after 35 s on 2 cores, 500 at 10 minutes")
def cartpole_vtrace() -> ExperimentConfig:
    """V-trace (IMPALA) on envpool's CartPole (Sebulba)."""
    return ExperimentConfig(
        name="cartpole_vtrace",
        mode="vtrace",
        env=EnvConfig(name="envpool:CartPole-v1"),
        network=NetworkConfig(mlp_sizes=(64, 64), value_support=0, reward_support=0),
        loss=LossConfig(discount=0.99, entropy_cost=0.01, baseline_cost=0.5),
        # Annealed to 0 over the 10-minute run's ~6,000 updates on 2 CPU cores, as purejaxrl
        # anneals: at a constant rate the policy collapsed now and then, even at the 500 cap.
        optimizer=OptimizerConfig(
            learning_rate=1e-3, max_grad_norm=40.0, schedule="linear", decay_steps=6_000
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=16, unroll_length=32),
        replay=ReplayConfig(queue_size=8),
        learner=LearnerConfig(
            batch_size=2, max_updates=20_000, max_seconds=600.0, checkpoint_every=1_000
        ),
    )


@preset(
    "cpu",
    "CartPole at 200 steps: a greedy 195 after a median 3,008 environment steps (LightZero's "
    "own config: 4,705), 187 s on 2 cores",
)
def cartpole_muzero() -> ExperimentConfig:
    """MuZero learning CartPole from its rewards (envpool, Sebulba): a learned reward model, the
    categorical value transform and n-step targets with a discount, as on Atari; and what makes it
    learn as much from each environment step as LightZero's MuZero (benchmarks/peers.py): about
    150 windows learned per step taken (8 environments, batches of 256, learning from the first
    256 steps), near-greedy acting (temperature 0.25), uniform replay, value bootstraps from a
    target network, 5-step targets, EfficientZero's consistency loss, wide supports and a
    constant learning rate."""
    return ExperimentConfig(
        name="cartpole_muzero",
        mode="muzero",
        env=EnvConfig(name="envpool:CartPole-v1"),
        search=SearchConfig(
            num_simulations=25, dirichlet_alpha=0.3, dirichlet_fraction=0.25, temperature=0.25
        ),
        network=NetworkConfig(
            mlp_sizes=(64, 64),
            latent_size=128,
            head_hidden=64,
            value_support=300,
            reward_support=300,
            latent_scaling="none",
            dynamics_residual=True,
            zero_init_heads=True,
        ),
        loss=LossConfig(
            unroll_steps=5,
            td_steps=5,
            discount=0.997,
            value_loss_weight=0.25,
            consistency_weight=2.0,
        ),
        optimizer=OptimizerConfig(learning_rate=3e-3, max_grad_norm=5.0),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=4, unroll_length=16),
        replay=ReplayConfig(
            capacity=50_000, min_size=256, samples_per_insert=150.0, priority_alpha=0.0
        ),
        reanalyse=ReanalyseConfig(value="target_network"),
        learner=LearnerConfig(
            batch_size=256,
            max_updates=0,
            max_seconds=600.0,
            checkpoint_every=500,
            target_update_every=100,
        ),
        evaluation=EvaluationConfig(every_s=60.0, games=8),
    )


@preset("cpu", "Anakin on gymnax: 475 (of 500) after 25 s on 2 cores, 496 at 10 minutes")
def gymnax_cartpole_vtrace() -> ExperimentConfig:
    """`cartpole_vtrace` on gymnax's CartPole, in the Anakin runtime: each iteration steps 16
    environments per device 32 times, then takes one update per 8 of its trajectories."""
    config = cartpole_vtrace()
    return config.replace(
        name="gymnax_cartpole_vtrace",
        runtime="anakin",
        env=EnvConfig(name="gymnax:CartPole-v1"),
        # Annealed over the 10-minute run's ~120,000 updates on 2 CPU cores (see cartpole_vtrace).
        optimizer=dataclasses.replace(config.optimizer, decay_steps=120_000),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=16, unroll_length=32),
        learner=dataclasses.replace(config.learner, batch_size=16, max_updates=0),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset("cpu", "Anakin on gymnax: 475 (of 500) after 113 s on 2 cores, 499 at 10 minutes")
def gymnax_cartpole_muzero() -> ExperimentConfig:
    """MuZero on gymnax's CartPole in the Anakin runtime (both cores of a CPU), set for return
    per second rather than per step: 32 environments, 2 windows learned per step taken, learning
    from 1,000 steps on, a prioritised replay and search values as bootstraps (what
    `cartpole_muzero` used before it was set to learn as much from each step as LightZero)."""
    return ExperimentConfig(
        name="gymnax_cartpole_muzero",
        mode="muzero",
        runtime="anakin",
        env=EnvConfig(name="gymnax:CartPole-v1"),
        search=SearchConfig(
            num_simulations=25, dirichlet_alpha=0.25, dirichlet_fraction=0.25, temperature=1.0
        ),
        network=NetworkConfig(
            mlp_sizes=(64, 64),
            latent_size=64,
            head_hidden=64,
            value_support=25,
            reward_support=5,
            **EARLIER_NETWORK,
        ),
        loss=LossConfig(unroll_steps=5, td_steps=10, discount=0.997, value_loss_weight=0.25),
        optimizer=OptimizerConfig(
            learning_rate=3e-3,
            max_grad_norm=5.0,
            schedule="linear",
            decay_steps=6_000,
            final_learning_rate=3e-4,
        ),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=16, unroll_length=16),
        replay=ReplayConfig(
            capacity=50_000,
            min_size=1_000,
            samples_per_insert=2.0,
            priority_alpha=1.0,
            priority_beta=1.0,
        ),
        learner=LearnerConfig(
            batch_size=128, max_updates=0, max_seconds=600.0, checkpoint_every=500
        ),
        evaluation=EvaluationConfig(every_s=60.0, games=8),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset("cpu", "Pendulum: -1,072 over the last 10% of 200k steps (three seeds), 8 s a run")
def pendulum_vtrace() -> ExperimentConfig:
    """V-trace with a squashed Gaussian policy (`muzero.BoxPolicy`) on gymnax's Pendulum-v1, in
    the Anakin runtime on both cores of a CPU: the model-free baseline of
    `pendulum_sampled_muzero`, at the same frames."""
    return ExperimentConfig(
        name="pendulum_vtrace",
        mode="vtrace",
        runtime="anakin",
        env=EnvConfig(name="gymnax:Pendulum-v1"),
        network=NetworkConfig(mlp_sizes=(64, 64), value_support=0, reward_support=0),
        # Rewards scaled by 0.01 (Pendulum's are -16..0 a step): the best of a sweep of scale,
        # learning rate, baseline and entropy costs at 200k frames (BENCHMARKS.md)
        loss=LossConfig(discount=0.99, entropy_cost=1e-3, baseline_cost=0.5, reward_scale=0.01),
        optimizer=OptimizerConfig(
            learning_rate=1e-3, max_grad_norm=40.0, schedule="linear", decay_steps=6_000
        ),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=16, unroll_length=32),
        learner=LearnerConfig(
            batch_size=16,
            max_updates=0,
            max_frames=200_000,
            max_seconds=3_600.0,
            checkpoint_every=1_000,
        ),
        evaluation=EvaluationConfig(every_s=60.0, games=8),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset(
    "cpu",
    "Pendulum: -171 over the last 10% of 200k steps (three seeds), 6.5 minutes a run on 2 cores",
)
def pendulum_sampled_muzero() -> ExperimentConfig:
    """Sampled MuZero on gymnax's Pendulum-v1 (a box of one torque in [-2, 2]) in the Anakin
    runtime on both cores of a CPU: each node of the search draws K = 20 torques from the
    network's squashed Gaussian (the paper's and LightZero's Pendulum setting), searches them
    with PUCT over the corrected prior, and the policy learns the search's visits over them with
    an entropy bonus; EfficientZero's consistency loss, a target network's value bootstraps and
    32 windows learned per step taken, as `cartpole_muzero` learns CartPole."""
    return ExperimentConfig(
        name="pendulum_sampled_muzero",
        mode="muzero",
        runtime="anakin",
        env=EnvConfig(name="gymnax:Pendulum-v1"),
        search=SearchConfig(
            algorithm="sampled_muzero",
            num_samples=20,
            num_simulations=25,
            dirichlet_alpha=0.3,
            dirichlet_fraction=0.25,
            temperature=1.0,
        ),
        network=NetworkConfig(
            mlp_sizes=(64, 64),
            latent_size=64,
            head_hidden=64,
            value_support=50,
            reward_support=10,
            latent_scaling="none",
            dynamics_residual=True,
            zero_init_heads=True,
        ),
        loss=LossConfig(
            unroll_steps=5,
            td_steps=5,
            discount=0.99,
            value_loss_weight=0.25,
            consistency_weight=2.0,
            entropy_cost=5e-3,
        ),
        optimizer=OptimizerConfig(learning_rate=3e-3, max_grad_norm=5.0),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=8, unroll_length=16),
        # 32 windows learned per step taken (4: -235 over the last 10% of 200k steps, 16: -192,
        # 32: -181, seed 0; a run's wall 75 s, 205 s, 393 s on 2 cores): per step, not per second
        replay=ReplayConfig(
            capacity=100_000, min_size=1_000, samples_per_insert=32.0, priority_alpha=0.0
        ),
        reanalyse=ReanalyseConfig(value="target_network"),
        learner=LearnerConfig(
            batch_size=128,
            max_updates=0,
            max_frames=200_000,
            max_seconds=3_600.0,
            checkpoint_every=500,
            target_update_every=100,
        ),
        evaluation=EvaluationConfig(every_s=60.0, games=8),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset("cpu", "Anakin on MinAtar Breakout: above 10 after 10 minutes on 2 cores, 15.4 at 30")
def minatar_breakout_vtrace() -> ExperimentConfig:
    """V-trace on MinAtar's Breakout (gymnax, Anakin): a small residual network on the 10x10
    planes, 64 environments per device."""
    return ExperimentConfig(
        name="minatar_breakout_vtrace",
        mode="vtrace",
        runtime="anakin",
        env=EnvConfig(name="gymnax:Breakout-MinAtar"),
        network=NetworkConfig(
            torso="resnet",
            channels=16,
            representation_blocks=1,
            head_channels=2,
            head_hidden=64,
            value_support=0,
            reward_support=0,
        ),
        loss=LossConfig(discount=0.99, entropy_cost=0.01, baseline_cost=0.5),
        optimizer=OptimizerConfig(learning_rate=5e-4, max_grad_norm=40.0),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=64, unroll_length=20),
        learner=LearnerConfig(
            batch_size=32, max_updates=0, max_seconds=1_800.0, checkpoint_every=2_000
        ),
        evaluation=EvaluationConfig(every_s=120.0, games=16),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset(
    "cpu",
    "Anakin on MinAtar (any of its games): Breakout 8.29 at 500k frames, 1.50x V-trace "
    "at equal frames",
    earlier_names=("minatar_breakout_muzero",),  # its name before it took any MinAtar game
)
def minatar_muzero() -> ExperimentConfig:
    """MuZero on MinAtar (gymnax, Anakin; `env.name=gymnax:SpaceInvaders-MinAtar` picks a
    game): a dense model of the flattened 10x10 planes (each of the search's simulations costs
    about a fifteenth of the conv model's on a CPU), 16-simulation Gumbel MuZero, 8 samples per
    inserted frame. The plain agent: `minatar_efficientzero` adds a conv representation,
    reanalyse, a target network and EfficientZero's losses to exactly these settings."""
    return ExperimentConfig(
        name="minatar_muzero",
        mode="muzero",
        runtime="anakin",
        env=EnvConfig(name="gymnax:Breakout-MinAtar"),
        search=SearchConfig(
            algorithm="gumbel_muzero",
            num_simulations=16,
            max_num_considered_actions=6,
            dirichlet_alpha=0.25,
            dirichlet_fraction=0.25,
            temperature=1.0,
        ),
        network=NetworkConfig(
            torso="mlp",
            mlp_sizes=(256, 256),
            latent_size=128,
            head_hidden=64,
            value_support=10,
            reward_support=2,
            projection_hidden=128,
            projection_size=128,
            predictor_hidden=64,
            value_prefix_hidden=64,
            **EARLIER_NETWORK,
        ),
        loss=LossConfig(unroll_steps=5, td_steps=5, discount=0.99, value_loss_weight=0.25),
        optimizer=OptimizerConfig(learning_rate=1e-3, max_grad_norm=5.0),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=32, unroll_length=16),
        replay=ReplayConfig(
            capacity=100_000, min_size=2_000, samples_per_insert=8.0, priority_alpha=0.0
        ),
        learner=LearnerConfig(
            batch_size=128,
            max_updates=0,
            max_frames=500_000,
            checkpoint_every=5_000,
            log_every_s=10.0,
        ),
        evaluation=EvaluationConfig(every_s=300.0, games=16),
        # One CPU device, not two: XLA's all-reduce between two CPU devices can deadlock with
        # this dense model on a busy 2-core machine (its large matmuls run in Eigen's thread
        # pool, which the device waiting at the all-reduce holds).
        devices=DevicesConfig(cpu_devices=1),
    )


@preset(
    "cpu",
    "Anakin on MinAtar at 500k frames (a 21-23 minute run on 2 cores): 2.08x V-trace's return "
    "on SpaceInvaders, 2.63x on Breakout, 2.84x on Asterix, 1.21x on Freeway",
)
def minatar_efficientzero() -> ExperimentConfig:
    """`minatar_muzero` with what makes EfficientZero learn more from each frame: a conv
    representation (one 3x3 conv of 16 channels over the planes, flattened into the dense
    latent: the search stays dense), value targets bootstrapped from a target network copied
    every 200 updates, the consistency loss (weight 2), the value prefix (an LSTM reset every
    5 steps), the off-policy correction, a quarter of each batch's policy targets searched
    again (8 simulations) with the target network, and a prioritised replay (alpha 0.8,
    between EfficientZero's 0.6 and MuZero's 1) whose windows' losses are not reweighted.

    Not EfficientZero's 99% reanalysed with the newest parameters: Gumbel MuZero's improved
    policy searched again with the newest parameters after every update collapsed the policy
    on MinAtar, and every target searched again with the target network learned less per frame
    than no reanalyse, at a fifth of the frames/s."""
    config = minatar_muzero()
    return config.replace(
        name="minatar_efficientzero",
        # Conv features of the planes learn more per frame than the flattened planes.
        network=dataclasses.replace(
            config.network, torso="resnet_mlp", channels=16, representation_blocks=0
        ),
        loss=dataclasses.replace(
            config.loss, consistency_weight=2.0, value_prefix_horizon=5, td_steps_decay_every=5_000
        ),
        reanalyse=ReanalyseConfig(
            fraction=0.25, value="target_network", num_simulations=8, network="target"
        ),
        learner=dataclasses.replace(config.learner, target_update_every=200),
        # Prioritised windows learn more per frame than uniform ones at the same frames/s;
        # importance weights (beta > 0) cost return on MinAtar.
        replay=dataclasses.replace(config.replay, priority_alpha=0.8, priority_beta=0.0),
    )


# Atari preprocessing for MuZero (paper appendix): up to 30 no-ops at the start, no sticky actions,
# whole games (no life loss ends), raw rewards (the value transform h copes with their scale).
_MUZERO_ATARI_OPTIONS = {
    "episodic_life": False,
    "reward_clip": False,
    "noop_max": 30,
    "repeat_action_probability": 0.0,
    "max_episode_steps": 27_000,
}


@preset(
    "accelerator",
    "not yet measured (no GPU has run it)",
    on_cpu="actors.envs_per_thread=4 search.num_simulations=16 learner.batch_size=64 "
    "replay.min_size=500 (2,000 frames in 23 s on 2 cores, compiling included)",
)
def halfcheetah_sampled_muzero() -> ExperimentConfig:
    """Sampled MuZero on MuJoCo's HalfCheetah-v5 (gymnasium, Sebulba; `pip install
    podracer[mujoco]`): a box of 6 torques in [-1, 1], K = 20 draws per node and 50 simulations
    (LightZero's Sampled EfficientZero on MuJoCo), `pendulum_sampled_muzero`'s agent with
    networks of 256 units and wider supports; two actor threads of 16 environments feeding
    batches of 256."""
    config = pendulum_sampled_muzero()
    return config.replace(
        name="halfcheetah_sampled_muzero",
        runtime="sebulba",
        env=EnvConfig(name="gymnasium:HalfCheetah-v5"),
        search=config.search.replace(num_simulations=50),
        network=dataclasses.replace(
            config.network,
            mlp_sizes=(256, 256),
            latent_size=256,
            head_hidden=256,
            value_support=300,
            reward_support=50,
        ),
        optimizer=dataclasses.replace(config.optimizer, learning_rate=3e-4),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=16, unroll_length=16),
        replay=dataclasses.replace(config.replay, capacity=1_000_000, min_size=5_000),
        learner=dataclasses.replace(
            config.learner,
            batch_size=256,
            max_frames=1_000_000,
            max_seconds=0.0,
            checkpoint_every=1_000,
            target_update_every=200,
        ),
        evaluation=EvaluationConfig(every_s=300.0, games=8),
        devices=DevicesConfig(),
    )


@preset(
    "accelerator",
    "not yet measured (no GPU has run it)",
    on_cpu="actors.envs_per_thread=8 search.num_simulations=8 learner.batch_size=64 "
    "replay.min_size=500 (runs on 2 cores, compiling brax's physics takes minutes)",
)
def brax_halfcheetah_sampled_muzero() -> ExperimentConfig:
    """Sampled MuZero on brax's halfcheetah (`pip install podracer[brax]`): the physics, the
    search and the update in one jitted Anakin iteration, 256 environments per device; the
    networks and search of `halfcheetah_sampled_muzero`."""
    config = halfcheetah_sampled_muzero()
    return config.replace(
        name="brax_halfcheetah_sampled_muzero",
        runtime="anakin",
        env=EnvConfig(name="brax:halfcheetah"),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=256, unroll_length=16),
        learner=dataclasses.replace(config.learner, batch_size=1024, max_frames=10_000_000),
    )


@preset(
    "accelerator",
    "the paper's network and settings; not yet measured here (no GPU has run it)",
    on_cpu="--config pong_muzero_small (the same agent, CPU-sized)",
)
def atari_muzero() -> ExperimentConfig:
    """MuZero's Atari settings, for an accelerator: `env.name=envpool:Breakout-v5` picks a game.

    The paper's network (16 blocks of 256 channels on 6x6, 601-bin supports), 50 simulations,
    K=5, n=10, discount 0.997, prioritized replay (alpha=beta=1) and SGD with momentum. The
    replay holds 500k transitions (14 GB of frames), not the paper's 125k games, to fit one host.
    """
    return ExperimentConfig(
        name="atari_muzero",
        mode="muzero",
        env=EnvConfig(name="envpool:Pong-v5", options=dict(_MUZERO_ATARI_OPTIONS)),
        search=SearchConfig(
            num_simulations=50, dirichlet_alpha=0.25, dirichlet_fraction=0.25, temperature=1.0
        ),
        network=NetworkConfig.atari_muzero(),
        loss=LossConfig(unroll_steps=5, td_steps=10, discount=0.997, value_loss_weight=0.25),
        optimizer=OptimizerConfig(
            optimizer="sgd",
            learning_rate=0.05,
            momentum=0.9,
            weight_decay=1e-4,
            schedule="linear",
            decay_steps=350_000,
            final_learning_rate=0.005,
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=128, unroll_length=200),
        replay=ReplayConfig(
            capacity=500_000,
            min_size=50_000,
            samples_per_insert=0.25,
            priority_alpha=1.0,
            priority_beta=1.0,
        ),
        learner=LearnerConfig(
            batch_size=1024, max_updates=1_000_000, checkpoint_every=5_000, log_every_s=30.0
        ),
    )


@preset(
    "accelerator",
    "the Atari 100k protocol; not yet measured here (no GPU has run it)",
    on_cpu="search.num_simulations=8 network.channels=16 network.projection_hidden=64 "
    "network.projection_size=64 network.predictor_hidden=32 network.value_prefix_hidden=32 "
    "network.value_support=10 network.reward_support=2 learner.batch_size=32 "
    "replay.samples_per_insert=2 reanalyse.fraction=0.25 actors.envs_per_thread=4",
)
def atari100k_efficientzero() -> ExperimentConfig:
    """EfficientZero on the Atari 100k protocol, for an accelerator: 100k agent steps (400k
    frames at frame skip 4), `env.name=envpool:Breakout-v5` picks a game. Its settings where the
    project has them: a 64-channel downsampling network with one block per function, 601-bin
    supports, 50 simulations, K=5, n=5 with the off-policy correction, discount 0.997, 99% of
    each batch reanalysed, a target network copied every 200 updates, the consistency loss
    (weight 2, 1024-wide projections) and the value prefix (an LSTM of 512, reset every 5 steps),
    batches of 256 at about 300 samples per inserted step (120k updates), SGD with momentum.
    Differences: 84x84 grayscale frames stacked 4 (EfficientZero: 96x96 colour), prioritized
    replay at alpha 0.6, beta 0.4 as in its code, and raw latents with heads that start at zero
    (LightZero's choices, which learned more per step on CartPole and MinAtar here; EfficientZero
    min-max scales its latents)."""
    return ExperimentConfig(
        name="atari100k_efficientzero",
        mode="muzero",
        env=EnvConfig(
            name="envpool:Breakout-v5",
            options={
                **_MUZERO_ATARI_OPTIONS,
                "episodic_life": True,
                "reward_clip": True,
                "max_episode_steps": 27_000,
            },
        ),
        search=SearchConfig(
            num_simulations=50, dirichlet_alpha=0.3, dirichlet_fraction=0.25, temperature=1.0
        ),
        network=NetworkConfig(
            torso="resnet",
            downsample=True,
            channels=64,
            representation_blocks=1,
            dynamics_blocks=1,
            prediction_blocks=1,
            head_channels=16,
            head_hidden=32,
            value_support=300,
            reward_support=300,
            latent_scaling="none",
            zero_init_heads=True,
            projection_hidden=1024,
            projection_size=1024,
            predictor_hidden=512,
            value_prefix_hidden=512,
        ),
        loss=LossConfig(
            unroll_steps=5,
            td_steps=5,
            discount=0.997,
            value_loss_weight=0.25,
            consistency_weight=2.0,
            value_prefix_horizon=5,
            td_steps_decay_every=30_000,
        ),
        optimizer=OptimizerConfig(
            optimizer="sgd",
            learning_rate=0.2,
            momentum=0.9,
            weight_decay=1e-4,
            warmup_steps=1_000,
            schedule="linear",
            decay_steps=120_000,
            final_learning_rate=0.02,
            max_grad_norm=5.0,
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=8, unroll_length=50),
        replay=ReplayConfig(
            capacity=100_000,
            min_size=2_000,
            samples_per_insert=300.0,
            priority_alpha=0.6,
            priority_beta=0.4,
        ),
        learner=LearnerConfig(
            batch_size=256,
            max_updates=0,
            max_frames=100_000,
            target_update_every=200,
            checkpoint_every=5_000,
            log_every_s=30.0,
        ),
        reanalyse=ReanalyseConfig(fraction=0.99, value="target_network"),
        evaluation=EvaluationConfig(every_s=1_800.0, games=32),
    )


@preset(
    "cpu",
    "about 47 agent steps/s on 2 cores; the loss falls, Pong's return does not rise "
    "within 20 minutes (0.1% of MuZero's training frames)",
)
def pong_muzero_small() -> ExperimentConfig:
    """A MuZero on Pong that fits a 2-core CPU: a narrow Atari-stem network, 8-simulation Gumbel
    MuZero (which improves the policy with few simulations), small batches."""
    return ExperimentConfig(
        name="pong_muzero_small",
        mode="muzero",
        env=EnvConfig(
            name="envpool:Pong-v5", options={**_MUZERO_ATARI_OPTIONS, "reward_clip": True}
        ),
        search=SearchConfig(
            algorithm="gumbel_muzero", num_simulations=8, max_num_considered_actions=6
        ),
        network=NetworkConfig(
            torso="resnet",
            downsample=True,
            channels=32,
            representation_blocks=1,
            dynamics_blocks=1,
            prediction_blocks=0,
            head_channels=2,
            head_hidden=64,
            value_support=10,
            reward_support=2,
            **EARLIER_NETWORK,
        ),
        loss=LossConfig(unroll_steps=5, td_steps=10, discount=0.997, value_loss_weight=0.25),
        optimizer=OptimizerConfig(learning_rate=1e-3, max_grad_norm=5.0),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=8, unroll_length=32),
        replay=ReplayConfig(
            capacity=100_000,
            min_size=2_000,
            samples_per_insert=2.0,
            priority_alpha=1.0,
            priority_beta=1.0,
        ),
        learner=LearnerConfig(
            batch_size=32, max_updates=100_000, max_seconds=1_200.0, checkpoint_every=500
        ),
    )


@preset("cpu", "about 130 agent steps/s (530 frames/s) on 2 cores; learning Pong takes hours")
def atari_vtrace() -> ExperimentConfig:
    """IMPALA (V-trace) on Atari with cleanba's settings: `env.name=envpool:Breakout-v5` picks
    a game. 2 actor threads x 8 envs, 20-step rollouts; each update learns from one thread's
    [21, 8] trajectory (cleanba splits the same 2 x 8-env rollout into 4 minibatches of 4 envs:
    the same gradient work per frame, in fewer and larger steps)."""
    return ExperimentConfig(
        name="atari_vtrace",
        mode="vtrace",
        env=EnvConfig(
            name="envpool:Pong-v5",
            options={
                "episodic_life": True,
                "reward_clip": True,
                "noop_max": 30,
                "repeat_action_probability": 0.0,
            },
        ),
        network=NetworkConfig.atari_impala(value_support=0, reward_support=0),
        loss=LossConfig(discount=0.99, entropy_cost=0.01, baseline_cost=0.5),
        optimizer=OptimizerConfig(
            learning_rate=6e-4,
            max_grad_norm=40.0,
            adam_eps=1e-5,
            schedule="linear",
            decay_steps=200_000,
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=8, unroll_length=20),
        replay=ReplayConfig(queue_size=4),
        learner=LearnerConfig(
            batch_size=1, max_updates=200_000, checkpoint_every=2_000, log_every_s=10.0
        ),
        # XLA's Eigen convolutions: the IMPALA network's update costs 1.5x less wall time on a
        # CPU than with YNNPACK; board networks are faster with YNNPACK.
        devices=DevicesConfig(cpu_convolutions="eigen"),
    )


@preset(
    "cpu",
    "Anakin on pgx's 2048: a mean score of 3,587 after 30 minutes on 2 cores, 1.81x "
    "game2048_muzero's at equal frames",
)
def game2048_stochastic_muzero() -> ExperimentConfig:
    """Stochastic MuZero on pgx's 2048 (Anakin, both cores of a CPU): afterstates and 32 chance
    codes (a tile's cell and value), a small residual model of the 4x4 board's 31 planes (one per
    power of two), value and reward in MuZero's categorical h-transform (scores reach thousands)."""
    return ExperimentConfig(
        name="game2048_stochastic_muzero",
        mode="stochastic_muzero",
        runtime="anakin",
        env=EnvConfig(name="pgx:2048"),
        search=SearchConfig(
            algorithm="stochastic_muzero",
            num_simulations=16,
            dirichlet_alpha=0.25,
            dirichlet_fraction=0.25,
            temperature=1.0,
        ),
        network=NetworkConfig(
            torso="resnet",
            channels=32,
            representation_blocks=1,
            dynamics_blocks=1,
            prediction_blocks=0,
            head_channels=4,
            head_hidden=64,
            value_support=60,
            reward_support=30,
            # 2048's 4 moves slide the whole board: constant planes, not a marked column.
            action_planes="constant",
            **EARLIER_NETWORK,
        ),
        loss=LossConfig(unroll_steps=5, td_steps=10, discount=0.997, value_loss_weight=0.25),
        optimizer=OptimizerConfig(learning_rate=1e-3, max_grad_norm=5.0),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=32, unroll_length=16),
        replay=ReplayConfig(
            capacity=100_000, min_size=2_000, samples_per_insert=1.0, priority_alpha=0.0
        ),
        learner=LearnerConfig(
            batch_size=128,
            max_updates=0,
            max_seconds=1_800.0,
            checkpoint_every=500,
            keep_checkpoints=100,
        ),
        # 2048's episodes are long: evaluate saved checkpoints with the arena instead
        # (benchmarks/chance.py).
        evaluation=EvaluationConfig(every_s=0.0),
        devices=DevicesConfig(cpu_devices=2),
        # The consistency and code-information terms keep the encoder from collapsing onto one
        # code (2048's reward comes before the tile: nothing else asks the codes to differ).
        stochastic=StochasticConfig(
            num_chance_codes=32, consistency_loss_weight=2.0, code_information_weight=0.5
        ),
    )


@preset(
    "cpu",
    "the control: MuZero's deterministic model on a game with chance (the wrong model); "
    "2,712 after 30 minutes on 2 cores",
)
def game2048_muzero() -> ExperimentConfig:
    """The control of `game2048_stochastic_muzero`: the same network, simulations and training
    with MuZero's deterministic model, which learns one next state per move (a blur of the tiles
    that may come): the wrong model for a game with chance, on purpose."""
    config = game2048_stochastic_muzero()
    return config.replace(
        name="game2048_muzero",
        mode="muzero",
        search=config.search.replace(algorithm="muzero"),
    )


@preset(
    "cpu",
    "Anakin, the true rules: after 30 minutes on 2 cores wins every game against random, "
    "0.05 against pubeval in the arena",
)
def backgammon_alphazero() -> ExperimentConfig:
    """AlphaZero on pgx's backgammon (Anakin, both cores of a CPU): the real rules as the model,
    the dice at chance nodes expanded over the 21 rolls; an MLP on pgx's 34 numbers (the board
    from the mover's side, the dice to play). A move is one checker by one die (pgx), so the
    mover moves again within a turn; values are the game's score (1, 2 for a gammon, 3 for a
    backgammon), bootstrapped from the search's value 10 moves on. The decision nodes select
    as Gumbel MuZero's do: with PUCT's 16-simulation visits as its target the prior learned to
    play below random while the value learned well."""
    return ExperimentConfig(
        name="backgammon_alphazero",
        mode="alphazero",
        runtime="anakin",
        env=EnvConfig(name="pgx:backgammon"),
        search=SearchConfig(
            algorithm="stochastic_muzero",
            decision_selection="gumbel",
            num_simulations=16,
            max_num_considered_actions=16,
        ),
        network=NetworkConfig(
            torso="mlp",
            mlp_sizes=(128, 128),
            latent_size=128,
            head_hidden=64,
            value_support=0,
            reward_support=0,
        ),
        loss=LossConfig(
            td_steps=10, discount=1.0, two_player=True, value_loss_weight=1.0, unroll_steps=1
        ),
        optimizer=OptimizerConfig(learning_rate=1e-3, max_grad_norm=5.0, weight_decay=1e-4),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=64, unroll_length=16),
        replay=ReplayConfig(
            capacity=100_000, min_size=4_000, samples_per_insert=1.0, priority_alpha=0.0
        ),
        learner=LearnerConfig(
            batch_size=256,
            max_updates=0,
            max_seconds=1_800.0,
            checkpoint_every=500,
            keep_checkpoints=100,
        ),
        evaluation=EvaluationConfig(every_s=0.0),
        devices=DevicesConfig(cpu_devices=2),
    )


@preset(
    "cpu",
    "after 30 minutes on 2 cores 0.84 against random (AlphaZero with the true rules: 1.00) "
    "and 0.03 against pubeval in the arena",
)
def backgammon_stochastic_muzero() -> ExperimentConfig:
    """Stochastic MuZero on pgx's backgammon: `backgammon_alphazero`'s sizes with a learned model
    (afterstates, 32 chance codes for the 21 rolls and the moves without a roll, and whether the
    mover moves again): the paper's comparison with AlphaZero's true simulator, at this scale."""
    config = backgammon_alphazero()
    return config.replace(
        name="backgammon_stochastic_muzero",
        mode="stochastic_muzero",
        network=dataclasses.replace(config.network, **EARLIER_NETWORK),
        loss=dataclasses.replace(config.loss, unroll_steps=5, reward_loss_weight=1.0),
        stochastic=StochasticConfig(
            num_chance_codes=32, consistency_loss_weight=2.0, code_information_weight=0.5
        ),
    )


def names() -> list[str]:
    """Every preset's name (earlier names too), in the order they are defined."""
    return list(_PRESETS)


def get(name: str) -> ExperimentConfig:
    """The config of the preset `name` (KeyError for an unknown name)."""
    return _PRESETS[name]()


def describe() -> list[str]:
    """One line per preset: its name, the hardware it is sized for, what it reaches there."""
    return [f"  {name:<30}[{INFO[name].hardware}] {INFO[name].reaches}" for name in _PRESETS]


# The presets by their own names (not their earlier ones), which are this module's functions.
__all__ = [
    "DEFAULT",
    "HARDWARE",
    "INFO",
    "PresetInfo",
    "describe",
    "get",
    "names",
    "preset",
    *sorted({build.__name__ for build in _PRESETS.values()}),
]
