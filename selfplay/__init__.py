"""The runtimes: self-play and learning, from a config to a run directory.

    train.train(config, run_dir)   a whole experiment (what `podracer train` calls)
    run          one run loop for both runtimes: run directory, resume, limits, signals, logs,
                 checkpoints, plot
    sebulba      actor threads + a replicated learner fed from a store
    learner_input  Sebulba's prefetching input thread and the updates left in flight
    actors       Sebulba's actor threads (sync, envpool async, the fused pgx act+step, a
                 segment per device call on JAX environments)
    device_replay  Sebulba's replay on the learner's device (search agents, JAX environments)
    rollout      moves of JAX environments in one jitted scan (Anakin's and Sebulba's actors)
    anakin       acting and learning in one jitted iteration per device (pgx games)
    agent        what depends on the mode (MuZero, AlphaZero, V-trace), as pure functions
    programs     a run's jitted programs, built once a process for each config (a resume or a
                 PBT member's next interval in the same process compiles nothing again)
    replay       the stores between actors and learner (prioritized windows; a FIFO queue)
    params, checkpoints, metrics, lifetime, evaluation: the parts they are built from
    collector    Python's garbage collector paused over a command's imports, quieter after

The environments they step are `envs`'. The pieces are public for other runtimes: the stores, the
parameter server, checkpoints, metrics and the thread lifetime.
"""

import importlib
from typing import Any

# The public names, each from its module, imported when first asked for: the package itself
# loads nothing (a job's supervisor, `selfplay.launch`, runs without JAX).
_FROM = {
    "ActOutput": "agent",
    "Agent": "agent",
    "make_agent": "agent",
    "Checkpointer": "checkpoints",
    "config_differences": "checkpoints",
    "restore_params": "checkpoints",
    "StopSignal": "lifetime",
    "ThreadFailure": "lifetime",
    "ThreadGroup": "lifetime",
    "handle_signals": "lifetime",
    "MetricsLogger": "metrics",
    "StageTimer": "metrics",
    "Throughput": "metrics",
    "Timer": "metrics",
    "plot_learning_curves": "metrics",
    "read_metrics": "metrics",
    "ParameterServer": "params",
    "ParamsSnapshot": "params",
    "FifoQueue": "replay",
    "RateLimiter": "replay",
    "ReplaySample": "replay",
    "SequenceReplay": "replay",
    "Store": "replay",
}
__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module 'selfplay' has no attribute {name!r}")
    return getattr(importlib.import_module(f"selfplay.{_FROM[name]}"), name)
