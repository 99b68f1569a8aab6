"""The Sebulba self-play runtime: environments, actors, replay, learner loop, checkpoints.

`selfplay.train.train(config, run_dir)` runs a whole experiment (what `podracer train` calls).
The pieces it is built from are public for other runtimes: environment adapters (`make_env`), the
replay and queue, the parameter server, checkpoints, metrics and the thread lifetime.
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
from selfplay.replay import FifoQueue, RateLimiter, ReplaySample, SequenceReplay

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
