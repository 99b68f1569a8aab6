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
from envs import EnvSpec
from selfplay.lifetime import StopSignal
from selfplay.run import Evaluator, RunResult, run, split_cpu

__all__ = ["RunResult", "enable_compilation_cache", "train"]


def train(
    config: ExperimentConfig,
    run_dir: str | os.PathLike,
    *,
    progress: bool = True,
    stop: StopSignal | None = None,
    make_evaluator: Callable[[ExperimentConfig, EnvSpec], Evaluator] | None = None,
    plot: bool = True,
) -> RunResult:
    """Trains `config` in `run_dir`, resuming from its newest checkpoint if there is one. With
    `make_evaluator` (e.g. `arena.RunEvaluator`) and `evaluation.every_s` > 0, the newest
    parameters are evaluated every that many seconds. With `plot`, the run's learning curves
    are drawn at its end (`learning_curves.png`)."""
    split_cpu(config.devices.cpu_devices)
    # The runtimes are imported after `split_cpu`: importing pgx (Anakin's games) starts JAX's
    # backend, after which the CPU can no longer be split into devices.
    if config.runtime == "anakin":
        from selfplay.anakin import AnakinRuntime as make_runtime
    else:
        from selfplay.sebulba import SebulbaRuntime as make_runtime
    return run(
        config,
        run_dir,
        make_runtime,
        progress=progress,
        stop=stop,
        make_evaluator=make_evaluator,
        plot=plot,
    )


def enable_compilation_cache() -> None:
    """Reuse compiled searches and updates across runs (a restart compiles nothing new, nor does
    a population member's next interval where its values did not change): JAX's persistent
    cache in $XDG_CACHE_HOME/podracer/jax (~/.cache), unless JAX_COMPILATION_CACHE_DIR or the
    caller set one."""
    import pathlib

    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    jax.config.update("jax_compilation_cache_dir", str(cache / "podracer" / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
