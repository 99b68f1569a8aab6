"""Named experiment configs: `podracer train --config NAME`.

Board-game presets use discount 1, two-player signs and value targets that reach the end of the
game (td_steps >= the longest game). Sizes are chosen for a 2-core CPU unless the name says
otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from configs.experiment import (
    ActorConfig,
    EnvConfig,
    ExperimentConfig,
    LearnerConfig,
    ReplayConfig,
)
from muzero import LossConfig, NetworkConfig, OptimizerConfig
from search import SearchConfig

DEFAULT = "tic_tac_toe_muzero"


def _board_game(name: str, mode: str, env: str, *, simulations: int, longest_game: int,
                channels: int, blocks: int, updates: int, batch: int, envs: int,
                learning_rate: float = 2e-3) -> ExperimentConfig:
    return ExperimentConfig(
        name=name,
        mode=mode,
        env=EnvConfig(name=env),
        search=SearchConfig(num_simulations=simulations, dirichlet_alpha=0.5,
                            dirichlet_fraction=0.25, temperature=1.0, qtransform="by_min_max"),
        network=NetworkConfig(channels=channels, representation_blocks=blocks,
                              dynamics_blocks=blocks, prediction_blocks=1, head_channels=2,
                              head_hidden=32, value_support=0, reward_support=0),
        loss=LossConfig(unroll_steps=3, td_steps=longest_game, discount=1.0, two_player=True,
                        value_loss_weight=1.0),
        optimizer=OptimizerConfig(learning_rate=learning_rate, max_grad_norm=5.0,
                                  weight_decay=1e-4),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=envs, unroll_length=16,
                           greedy_after_moves=max(2, longest_game // 3)),
        replay=ReplayConfig(capacity=50_000, min_size=2_000, samples_per_insert=4.0,
                            priority_alpha=0.5, priority_beta=1.0),
        learner=LearnerConfig(batch_size=batch, max_updates=updates, checkpoint_every=250),
    )


def tic_tac_toe_muzero() -> ExperimentConfig:
    return _board_game("tic_tac_toe_muzero", "muzero", "openspiel:tic_tac_toe", simulations=32,
                       longest_game=9, channels=32, blocks=1, updates=1_500, batch=128, envs=32)


def tic_tac_toe_alphazero() -> ExperimentConfig:
    return _board_game("tic_tac_toe_alphazero", "alphazero", "pgx:tic_tac_toe", simulations=32,
                       longest_game=9, channels=32, blocks=1, updates=1_000, batch=128, envs=32)


def connect_four_muzero() -> ExperimentConfig:
    return _board_game("connect_four_muzero", "muzero", "openspiel:connect_four",
                       simulations=64, longest_game=42, channels=64, blocks=2, updates=20_000,
                       batch=256, envs=64, learning_rate=1e-3)


def connect_four_alphazero() -> ExperimentConfig:
    return _board_game("connect_four_alphazero", "alphazero", "pgx:connect_four",
                       simulations=32, longest_game=42, channels=32, blocks=2, updates=20_000,
                       batch=256, envs=128, learning_rate=1e-3)


def go9_muzero() -> ExperimentConfig:
    config = _board_game("go9_muzero", "muzero", "openspiel:go(board_size=9,komi=7.5)",
                         simulations=50, longest_game=200, channels=64, blocks=4,
                         updates=200_000, batch=256, envs=64, learning_rate=1e-3)
    return config.replace(loss=LossConfig(unroll_steps=5, td_steps=200, discount=1.0,
                                          two_player=True, value_loss_weight=1.0))


def cartpole_vtrace() -> ExperimentConfig:
    return ExperimentConfig(
        name="cartpole_vtrace",
        mode="vtrace",
        env=EnvConfig(name="envpool:CartPole-v1"),
        network=NetworkConfig(mlp_sizes=(64, 64), value_support=0, reward_support=0),
        loss=LossConfig(discount=0.99, entropy_cost=0.01, baseline_cost=0.5),
        optimizer=OptimizerConfig(learning_rate=1e-3, max_grad_norm=40.0),
        actors=ActorConfig(threads_per_device=2, envs_per_thread=16, unroll_length=32),
        replay=ReplayConfig(queue_size=8),
        learner=LearnerConfig(batch_size=2, max_updates=20_000, max_seconds=600.0,
                              checkpoint_every=1_000),
    )


_PRESETS: dict[str, Callable[[], ExperimentConfig]] = {
    "tic_tac_toe_muzero": tic_tac_toe_muzero,
    "tic_tac_toe_alphazero": tic_tac_toe_alphazero,
    "connect_four_muzero": connect_four_muzero,
    "connect_four_alphazero": connect_four_alphazero,
    "go9_muzero": go9_muzero,
    "cartpole_vtrace": cartpole_vtrace,
}


def names() -> list[str]:
    return list(_PRESETS)


def get(name: str) -> ExperimentConfig:
    return _PRESETS[name]()
