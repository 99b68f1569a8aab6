"""`train(config, run_dir)`: a whole experiment on the runtime its config names (what
`podracer train` calls).

    runtime="sebulba"  actor threads + a replicated learner (selfplay.sebulba, selfplay.actors)
    runtime="anakin"   acting and learning in one jitted iteration per device (selfplay.anakin)

Both run in the one run loop of `selfplay.run`, which owns the run directory, resume, the stop
limits and signals, logging, checkpoints and the plot.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from configs import ExperimentConfig
from selfplay.envs import EnvSpec
from selfplay.lifetime import StopSignal
from selfplay.run import Evaluator, RunResult, run, split_cpu

__all__ = ["RunResult", "train"]


def train(
    config: ExperimentConfig,
    run_dir: str | os.PathLike,
    *,
    progress: bool = True,
    stop: StopSignal | None = None,
    make_evaluator: Callable[[ExperimentConfig, EnvSpec], Evaluator] | None = None,
) -> RunResult:
    """Trains `config` in `run_dir`, resuming from its newest checkpoint if there is one. With
    `make_evaluator` (e.g. `arena.RunEvaluator`) and `evaluation.every_s` > 0, the newest
    parameters are evaluated every that many seconds."""
    split_cpu(config.devices.cpu_devices)
    # The runtimes are imported after `split_cpu`: importing pgx (Anakin's games) starts JAX's
    # backend, after which the CPU can no longer be split into devices.
    if config.runtime == "anakin":
        from selfplay.anakin import AnakinRuntime as make_runtime
    else:
        from selfplay.sebulba import SebulbaRuntime as make_runtime
    return run(
        config, run_dir, make_runtime, progress=progress, stop=stop, make_evaluator=make_evaluator
    )
