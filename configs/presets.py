"""Named experiment configs: `podracer train --config NAME`.

Board-game presets use discount 1, two-player signs and value targets that reach the end of the
game (td_steps >= the longest game), except where a preset says why not. `INFO` says what each is
sized for (a 2-core CPU, or an accelerator) and what it reaches there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

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

__all__ = [
    "DEFAULT",
    "INFO",
    "PresetInfo",
    "atari100k_efficientzero",
    "atari_muzero",
    "atari_vtrace",
    "cartpole_vtrace",
    "connect_four_alphazero",
    "connect_four_muzero",
    "describe",
    "get",
    "go9_muzero",
    "minatar_efficientzero",
    "minatar_muzero",
    "names",
    "pong_muzero_small",
    "tic_tac_toe_alphazero",
    "tic_tac_toe_muzero",
    "game2048_stochastic_muzero",
    "game2048_muzero",
    "backgammon_alphazero",
    "backgammon_stochastic_muzero",
]

DEFAULT = "tic_tac_toe_alphazero"


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


def tic_tac_toe_muzero() -> ExperimentConfig:
    # Measured with benchmarks/tictactoe_perfect.py on a 2-core CPU (BENCHMARKS.md). The learned
    # model must predict the reward of a winning move in positions self-play rarely reaches (the
    # exhaustive check plays every opponent blunder): raw latents and plain residual blocks
    # learned that reward several times faster than min-max latents with LayerNorm, the reward
    # loss weighs 3x, and stronger root noise (half the prior) and a random move in a quarter of
    # the moves keep blunders (and what follows them) in the data. The search unrolls the model
    # up to 6 moves deep: trained on 3, its deeper values misled the search into the last lost
    # lines; 5 steps and the 8 board symmetries (which multiply the rare positions) fixed them.
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
        network=dataclasses.replace(config.network, latent_scaling="none", block_norm="none"),
        loss=dataclasses.replace(config.loss, reward_loss_weight=3.0, unroll_steps=5),
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
            random_move_prob=0.25,
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
            augment_symmetries=True,
        ),
    )


def tic_tac_toe_alphazero() -> ExperimentConfig:
    # Perfect (benchmarks/tictactoe_perfect.py) after about 1000 updates on a loaded 2-core CPU,
    # and it stays so: 64 simulations of the exact model, and sampling at every move so that the
    # data keeps the opponents' mistakes (greedy self-play drifted to draws only and forgot them).
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
        actors=ActorConfig(
            threads_per_device=2, envs_per_thread=32, unroll_length=16, greedy_after_moves=0
        ),
        learner=LearnerConfig(
            batch_size=128, max_updates=0, max_seconds=300.0, checkpoint_every=250
        ),
    )


def connect_four_muzero() -> ExperimentConfig:
    # Sized for 2 CPU cores, with what made the other board presets learn there: the AlphaZero
    # preset's network, 32 simulations, value targets 10 plies on, a random move in 10% of
    # self-play moves, the mirror symmetry and a decaying learning rate; tic_tac_toe_muzero's
    # model settings (raw latents, plain residual blocks, 5 unrolled moves, the reward loss
    # weighed 3x: the reward of a winning move is what a learned model finds hardest).
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


def connect_four_alphazero() -> ExperimentConfig:
    # Against mcts:1000 after 29 minutes on 2 CPU cores (BENCHMARKS.md), 32 / 256 simulations:
    # a random move in 10% of self-play moves and the mirror symmetry took it from 27.5% / 57.5%
    # to 60% / 75%; value targets bootstrapped from the search's value 10 plies on (outcomes
    # past random moves are noisy) with a decaying learning rate, to 65% / 80% (90% at 800).
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
        loss=dataclasses.replace(config.loss, td_steps=10),
        # Decayed to a tenth over about a 30-minute run's updates on a 2-core CPU.
        optimizer=dataclasses.replace(
            config.optimizer, schedule="linear", decay_steps=16_000, final_learning_rate=1e-4
        ),
        actors=dataclasses.replace(config.actors, random_move_prob=0.1),
        learner=dataclasses.replace(config.learner, augment_symmetries=True),
    )


def go9_muzero() -> ExperimentConfig:
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


def cartpole_vtrace() -> ExperimentConfig:
    return ExperimentConfig(
        name="cartpole_vtrace",
        mode="vtrace",
        env=EnvConfig(name="envpool:CartPole-v1"),
        network=NetworkConfig(mlp_sizes=(64, 64), value_support=0, reward_support=0),
        loss=LossConfig(discount=0.99, entropy_cost=0.01, baseline_cost=0.5),
        # Annealed to 0 over the 10-minute run's ~6,000 updates on 2 CPU cores, as purejaxrl
        # anneals over its training: at a constant rate the policy collapsed for a few windows
        # every minute or two even after reaching the 500 cap (BENCHMARKS.md).
        optimizer=OptimizerConfig(
            learning_rate=1e-3, max_grad_norm=40.0, schedule="linear", decay_steps=6_000
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=16, unroll_length=32),
        replay=ReplayConfig(queue_size=8),
        learner=LearnerConfig(
            batch_size=2, max_updates=20_000, max_seconds=600.0, checkpoint_every=1_000
        ),
    )


def cartpole_muzero() -> ExperimentConfig:
    """MuZero learning CartPole from its rewards (envpool, Sebulba): a learned reward model, the
    categorical value transform and n-step targets with a discount, as on Atari."""
    return ExperimentConfig(
        name="cartpole_muzero",
        mode="muzero",
        env=EnvConfig(name="envpool:CartPole-v1"),
        search=SearchConfig(
            num_simulations=25, dirichlet_alpha=0.25, dirichlet_fraction=0.25, temperature=1.0
        ),
        network=NetworkConfig(
            mlp_sizes=(64, 64), latent_size=64, head_hidden=64, value_support=25, reward_support=5
        ),
        loss=LossConfig(unroll_steps=5, td_steps=10, discount=0.997, value_loss_weight=0.25),
        optimizer=OptimizerConfig(
            learning_rate=3e-3,
            max_grad_norm=5.0,
            schedule="linear",
            decay_steps=6_000,
            final_learning_rate=3e-4,
        ),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=16, unroll_length=16),
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
    )


def gymnax_cartpole_muzero() -> ExperimentConfig:
    """`cartpole_muzero` on gymnax's CartPole, in the Anakin runtime (both cores of a CPU)."""
    config = cartpole_muzero()
    return config.replace(
        name="gymnax_cartpole_muzero",
        runtime="anakin",
        env=EnvConfig(name="gymnax:CartPole-v1"),
        actors=ActorConfig(threads_per_device=1, envs_per_thread=16, unroll_length=16),
        devices=DevicesConfig(cpu_devices=2),
    )


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
        # One CPU device, not two: XLA's all-reduce between two CPU devices deadlocked twice
        # with this dense model on a busy 2-core machine (its large matmuls run in Eigen's
        # thread pool, which the device waiting at the all-reduce holds; BENCHMARKS.md).
        devices=DevicesConfig(cpu_devices=1),
    )


def minatar_efficientzero() -> ExperimentConfig:
    """`minatar_muzero` with what makes EfficientZero learn more from each frame: a conv
    representation (one 3x3 conv of 16 channels over the planes, flattened into the dense
    latent: the search stays dense), value targets bootstrapped from a target network copied
    every 200 updates, the consistency loss (weight 2), the value prefix (an LSTM reset every
    5 steps), the off-policy correction, a quarter of each batch's policy targets searched
    again (8 simulations) with the target network, and a prioritised replay (alpha 0.8,
    between EfficientZero's 0.6 and MuZero's 1) whose windows' losses are not reweighted
    (beta 0: with EfficientZero's 0.4, SpaceInvaders made less on three of four seeds and
    Breakout on both).

    Not EfficientZero's 99% reanalysed with the newest parameters: on MinAtar Breakout, Gumbel
    MuZero's improved policy searched again with the newest parameters after every update
    collapsed the policy (entropy 0.005 within 8k frames), and every target searched again with
    the target network learned less by 100k frames than no reanalyse at a fifth of the frames/s
    (BENCHMARKS.md)."""
    config = minatar_muzero()
    return config.replace(
        name="minatar_efficientzero",
        # SpaceInvaders at 250k frames, seed 0: 29.2 against the flattened planes' 14.9.
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
        # A prioritised replay: SpaceInvaders at 500k frames over four seeds, 55.3 with
        # EfficientZero's alpha 0.6 against uniform windows' 39.9 (three seeds), at the same
        # frames/s; with alpha 0.8, 58.5 (alpha 1: 61.3 but Breakout 1.64x against 0.8's
        # 2.25x and 0.6's 2.32x). Importance weights cost return: beta 0.4 -> 58.5, beta
        # annealed to 1 halved two seeds, beta 0 (none) 71.4, 2.33x V-trace (2.08x over six
        # seeds; BENCHMARKS.md).
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


def atari100k_efficientzero() -> ExperimentConfig:
    """EfficientZero on the Atari 100k protocol, for an accelerator: 100k agent steps (400k
    frames at frame skip 4), `env.name=envpool:Breakout-v5` picks a game. Its settings where the
    project has them: a 64-channel downsampling network with one block per function, 601-bin
    supports, 50 simulations, K=5, n=5 with the off-policy correction, discount 0.997, 99% of
    each batch reanalysed, a target network copied every 200 updates, the consistency loss
    (weight 2, 1024-wide projections) and the value prefix (an LSTM of 512, reset every 5 steps),
    batches of 256 at about 300 samples per inserted step (120k updates), SGD with momentum.
    Differences: 84x84 grayscale frames stacked 4 (EfficientZero: 96x96 colour) and prioritized
    replay at alpha 0.6, beta 0.4 as in its code."""
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
        # CPU than with YNNPACK (BENCHMARKS.md); board networks are faster with YNNPACK.
        devices=DevicesConfig(cpu_convolutions="eigen"),
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
        # Without the consistency and code-information terms the encoder collapsed to one code
        # within the first minute (2048's reward comes before the tile: nothing else asked the
        # codes to differ); with them it used about 17 codes, each confidently (BENCHMARKS.md).
        stochastic=StochasticConfig(
            num_chance_codes=32, consistency_loss_weight=2.0, code_information_weight=0.5
        ),
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


def backgammon_alphazero() -> ExperimentConfig:
    """AlphaZero on pgx's backgammon (Anakin, both cores of a CPU): the real rules as the model,
    the dice at chance nodes expanded over the 21 rolls; an MLP on pgx's 34 numbers (the board
    from the mover's side, the dice to play). A move is one checker by one die (pgx), so the
    mover moves again within a turn; values are the game's score (1, 2 for a gammon, 3 for a
    backgammon), bootstrapped from the search's value 10 moves on. The decision nodes select
    as Gumbel MuZero's do: with PUCT's 16-simulation visits as its target the prior learned to
    play below random while the value learned well (BENCHMARKS.md)."""
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


def backgammon_stochastic_muzero() -> ExperimentConfig:
    """Stochastic MuZero on pgx's backgammon: `backgammon_alphazero`'s sizes with a learned model
    (afterstates, 32 chance codes for the 21 rolls and the moves without a roll, and whether the
    mover moves again): the paper's comparison with AlphaZero's true simulator, at this scale."""
    config = backgammon_alphazero()
    return config.replace(
        name="backgammon_stochastic_muzero",
        mode="stochastic_muzero",
        loss=dataclasses.replace(config.loss, unroll_steps=5, reward_loss_weight=1.0),
        stochastic=StochasticConfig(
            num_chance_codes=32, consistency_loss_weight=2.0, code_information_weight=0.5
        ),
    )


class PresetInfo(NamedTuple):
    """What a preset is sized for and what it reaches there (figures from BENCHMARKS.md)."""

    hardware: str  # "cpu" (a 2-core laptop is enough) or "accelerator" (a GPU or TPU)
    reaches: str  # what a run reaches on that hardware, measured, or what is not yet measured
    on_cpu: str = ""  # for an accelerator preset: how to try it on a CPU


INFO: dict[str, PresetInfo] = {
    "tic_tac_toe_muzero": PresetInfo(
        "cpu", "perfect play (every opponent line, both seats) after 5 minutes on 2 cores"
    ),
    "tic_tac_toe_alphazero": PresetInfo(
        "cpu", "perfect play after 2-3 minutes on 2 cores (5-minute run)"
    ),
    "connect_four_muzero": PresetInfo(
        "cpu",
        "after 30 minutes on 2 cores beats random 20-0 and mcts:20 16-4, loses to "
        "mcts:100 (2-18) and to mcts:1000 (0-40): hours, not minutes, on a CPU",
    ),
    "connect_four_alphazero": PresetInfo(
        "cpu",
        "after 30 minutes on 2 cores wins 65% / 80% / 90% against mcts:1000 at 32 / 256 / "
        "800 simulations",
    ),
    "go9_muzero": PresetInfo(
        "accelerator",
        "not yet measured (200k updates of a 4-block, 64-channel network: days on a CPU)",
        "search.num_simulations=16 network.channels=32 network.representation_blocks=2 "
        "network.dynamics_blocks=2 learner.batch_size=64 actors.envs_per_thread=16",
    ),
    "cartpole_vtrace": PresetInfo(
        "cpu", "a mean return of 475 (of 500) after 35 s on 2 cores, 500 at 10 minutes"
    ),
    "cartpole_muzero": PresetInfo(
        "cpu", "MuZero from rewards: 475 (of 500) after 97 s on 2 cores, 499 at 10 minutes"
    ),
    "gymnax_cartpole_vtrace": PresetInfo(
        "cpu", "Anakin on gymnax: 475 (of 500) after 25 s on 2 cores, 496 at 10 minutes"
    ),
    "gymnax_cartpole_muzero": PresetInfo(
        "cpu", "Anakin on gymnax: 475 (of 500) after 113 s on 2 cores, 499 at 10 minutes"
    ),
    "minatar_breakout_vtrace": PresetInfo(
        "cpu", "Anakin on MinAtar Breakout: above 10 after 10 minutes on 2 cores, 15.4 at 30"
    ),
    "minatar_muzero": PresetInfo(
        "cpu",
        "Anakin on MinAtar (any of its games): Breakout 8.29 at 500k frames, 1.50x V-trace "
        "at equal frames",
    ),
    "minatar_breakout_muzero": PresetInfo("cpu", "minatar_muzero's earlier name"),
    "minatar_efficientzero": PresetInfo(
        "cpu",
        "Anakin on MinAtar at 500k frames: SpaceInvaders 2.08x V-trace on the mean of six "
        "seeds (65.43 against 31.42), Breakout 11.44 / 17.41 on two (2.63x), Asterix "
        "1.42 (2.84x), Freeway 28.47 (1.21x); a 500k-frame run in 21-23 minutes",
    ),
    "atari100k_efficientzero": PresetInfo(
        "accelerator",
        "the Atari 100k protocol; not yet measured here (no GPU has run it)",
        "search.num_simulations=8 network.channels=16 network.projection_hidden=64 "
        "network.projection_size=64 network.predictor_hidden=32 network.value_prefix_hidden=32 "
        "network.value_support=10 network.reward_support=2 learner.batch_size=32 "
        "replay.samples_per_insert=2 reanalyse.fraction=0.25 actors.envs_per_thread=4",
    ),
    "atari_muzero": PresetInfo(
        "accelerator",
        "the paper's network and settings; not yet measured here (no GPU has run it)",
        "--config pong_muzero_small (the same agent, CPU-sized)",
    ),
    "pong_muzero_small": PresetInfo(
        "cpu",
        "about 47 agent steps/s on 2 cores; the loss falls, Pong's return does not rise "
        "within 20 minutes (0.1% of MuZero's training frames)",
    ),
    "atari_vtrace": PresetInfo(
        "cpu", "about 130 agent steps/s (530 frames/s) on 2 cores; learning Pong takes hours"
    ),
    "game2048_stochastic_muzero": PresetInfo(
        "cpu",
        "Anakin on pgx's 2048: a mean score of 3,587 on OpenSpiel's 2048 after 30 minutes "
        "(372k frames on a loaded machine), 1.81x game2048_muzero at equal frames",
    ),
    "game2048_muzero": PresetInfo(
        "cpu",
        "the control: MuZero's deterministic model on a game with chance (the wrong model); "
        "1,982 at 390k frames, 2,712 after 30 minutes (647k frames)",
    ),
    "backgammon_alphazero": PresetInfo(
        "cpu",
        "Anakin, the true rules: after 30 minutes on 2 cores (4.9M frames) 100 of 100 against "
        "random and 0.05 against pubeval in the arena; 0.95 against random from 1M frames",
    ),
    "backgammon_stochastic_muzero": PresetInfo(
        "cpu",
        "after 30 minutes on 2 cores (5.3M frames) 0.84 against random (AlphaZero with the "
        "true rules: 1.00) and 0.03 against pubeval in the arena",
    ),
}


def describe() -> list[str]:
    """One line per preset: its name, the hardware it is sized for, what it reaches there."""
    return [f"  {name:<30}[{INFO[name].hardware}] {INFO[name].reaches}" for name in _PRESETS]


_PRESETS: dict[str, Callable[[], ExperimentConfig]] = {
    "tic_tac_toe_muzero": tic_tac_toe_muzero,
    "tic_tac_toe_alphazero": tic_tac_toe_alphazero,
    "connect_four_muzero": connect_four_muzero,
    "connect_four_alphazero": connect_four_alphazero,
    "go9_muzero": go9_muzero,
    "cartpole_vtrace": cartpole_vtrace,
    "cartpole_muzero": cartpole_muzero,
    "gymnax_cartpole_vtrace": gymnax_cartpole_vtrace,
    "gymnax_cartpole_muzero": gymnax_cartpole_muzero,
    "minatar_breakout_vtrace": minatar_breakout_vtrace,
    "minatar_muzero": minatar_muzero,
    "minatar_breakout_muzero": minatar_muzero,  # its name before it took any MinAtar game
    "minatar_efficientzero": minatar_efficientzero,
    "atari_muzero": atari_muzero,
    "atari100k_efficientzero": atari100k_efficientzero,
    "pong_muzero_small": pong_muzero_small,
    "atari_vtrace": atari_vtrace,
    "game2048_stochastic_muzero": game2048_stochastic_muzero,
    "game2048_muzero": game2048_muzero,
    "backgammon_alphazero": backgammon_alphazero,
    "backgammon_stochastic_muzero": backgammon_stochastic_muzero,
}


def names() -> list[str]:
    return list(_PRESETS)


def get(name: str) -> ExperimentConfig:
    return _PRESETS[name]()
