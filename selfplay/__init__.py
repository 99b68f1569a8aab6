"""The runtimes: self-play and learning, from a config to a run directory.

    train.train(config, run_dir)   a whole experiment (what `podracer train` calls)
    run          one run loop for both runtimes: run directory, resume, limits, signals, logs,
                 checkpoints, plot
    sebulba      actor threads + a replicated learner fed from a store
    learner_input  Sebulba's prefetching input thread and the updates left in flight
    actors       Sebulba's actor threads (sync, envpool async, the fused pgx act+step)
    anakin       acting and learning in one jitted iteration per device (pgx games)
    agent        what depends on the mode (MuZero, AlphaZero, V-trace), as pure functions
    replay       the stores between actors and learner (prioritized windows; a FIFO queue)
    envs, params, checkpoints, metrics, lifetime, evaluation: the parts they are built from

The pieces are public for other runtimes: environment adapters (`make_env`), the stores, the
parameter server, checkpoints, metrics and the thread lifetime.
"""

from selfplay.agent import ActOutput, Agent, make_agent
from selfplay.checkpoints import Checkpointer, config_differences, restore_params
from selfplay.envs import BatchedEnv, EnvSpec, TimeStep, make_env
from selfplay.lifetime import StopSignal, ThreadFailure, ThreadGroup, handle_signals
from selfplay.metrics import (
    MetricsLogger,
    StageTimer,
    Throughput,
    Timer,
    plot_learning_curves,
    read_metrics,
)
from selfplay.params import ParameterServer, ParamsSnapshot
from selfplay.replay import FifoQueue, RateLimiter, ReplaySample, SequenceReplay, Store

__all__ = [
    "ActOutput",
    "Agent",
    "BatchedEnv",
    "Checkpointer",
    "EnvSpec",
    "FifoQueue",
    "MetricsLogger",
    "ParameterServer",
    "ParamsSnapshot",
    "RateLimiter",
    "ReplaySample",
    "SequenceReplay",
    "Store",
    "StageTimer",
    "StopSignal",
    "ThreadFailure",
    "ThreadGroup",
    "Throughput",
    "Timer",
    "TimeStep",
    "config_differences",
    "handle_signals",
    "make_agent",
    "make_env",
    "plot_learning_curves",
    "read_metrics",
    "restore_params",
]
