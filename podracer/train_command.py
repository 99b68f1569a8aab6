"""`podracer train`: train an agent by self-play from a preset or a config file."""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import configs
from configs import UsageError
from podracer import extras

__all__ = ["make_parser", "run", "warn_if_sized_for_an_accelerator"]

_EXAMPLES = """examples:
  podracer train                                    # the default: tic-tac-toe, AlphaZero, CPU
  podracer train --config connect_four_alphazero --run-dir runs/c4
  podracer train --run-dir runs/c4                  # again: resumes from the newest checkpoint
  podracer train search.num_simulations=64 learner.max_updates=500
  podracer train --config connect_four_alphazero runtime=anakin  # acting + learning jitted
"""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer train",
        description=(
            "Train by self-play. Runs in --run-dir (config.json, metrics.jsonl, "
            "TensorBoard events, checkpoints/, learning_curves.png); running again "
            "with the same --run-dir resumes from the newest checkpoint."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"presets (default {configs.presets.DEFAULT}), [the hardware each is sized for] and "
            f"what it reaches there:\n" + "\n".join(configs.presets.describe()) + "\n\n"
            f"{_EXAMPLES}\nfields (section.field = default  description):\n"
            + "\n".join(configs.describe_fields())
        ),
    )
    parser.add_argument(
        "--config",
        metavar="NAME|PATH",
        help=f"a preset name or a config .json (default {configs.presets.DEFAULT})",
    )
    parser.add_argument(
        "--run-dir", metavar="DIR", help="where the run goes (default runs/<preset>-<time>)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.path=value",
        help="override config fields, e.g. search.num_simulations=64 (before or after the options)",
    )
    return parser


def run(args) -> int:
    config = configs.load_config(args.config, args.overrides)
    run_dir = args.run_dir or f"runs/{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    extras.require("train", "podracer train")
    make_evaluator = None
    if config.evaluation.every_s > 0:  # the arena's players and match code
        extras.require("openspiel", "evaluation during training (or set evaluation.every_s=0)")
        from arena import RunEvaluator as make_evaluator
    # Heavy imports only once the input is known to be good.
    from selfplay.run import LIMITS, split_cpu
    from selfplay.train import train

    split_cpu(config.devices.cpu_devices)  # before anything starts JAX's backend
    _enable_compilation_cache()
    warn_if_sized_for_an_accelerator(config)
    runtime = ", anakin" if config.runtime == "anakin" else ""
    print(
        f"podracer train: {config.name} ({config.mode} on {config.env.name}{runtime}) -> {run_dir}",
        flush=True,
    )
    try:
        result = train(config, run_dir, progress=not args.quiet, make_evaluator=make_evaluator)
    except UsageError:
        raise
    except Exception as error:  # a failed thread or learner: its message, then a non-zero exit
        traceback.print_exc()
        print(
            f"podracer train: run stopped by an error: {type(error).__name__}: {error}",
            file=sys.stderr,
        )
        return 1
    resumed = f", resumed from update {result.resumed_from}" if result.resumed_from else ""
    curves = result.run_dir / "learning_curves.png"
    lines = [
        f"podracer train: stopped ({result.stopped_by}) at update {result.updates}, "
        f"{result.frames:,} frames in {result.seconds:.0f} s{resumed}.",
        f"  run directory: {result.run_dir}",
    ]
    if curves.is_file():
        lines.append(f"  learning curves: {curves}")
    if result.updates == (result.resumed_from or 0):
        have, need = result.replay_fill
        lines.append(
            f"  no update was made: the replay held {have:,} of the {need:,} the learner waits "
            f"for; run longer, or lower replay.min_size (the README's preset table says what "
            f"each preset needs)"
        )
    print("\n".join(lines), flush=True)
    return 0 if result.stopped_by in LIMITS else 130


def warn_if_sized_for_an_accelerator(config: configs.ExperimentConfig) -> None:
    """One line when a preset sized for an accelerator starts on a CPU, and how to scale it."""
    info = configs.presets.INFO.get(config.name)
    if info is None or info.hardware != "accelerator":
        return
    import jax

    if jax.default_backend() != "cpu":
        return
    print(
        f"podracer train: {config.name} is sized for an accelerator and this machine has only a "
        f"CPU: it will run, very slowly; to try it here: {info.on_cpu}",
        file=sys.stderr,
        flush=True,
    )


def _enable_compilation_cache() -> None:
    """Reuse compiled searches and updates across runs (a restart compiles nothing new)."""
    import os
    import pathlib

    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    jax.config.update("jax_compilation_cache_dir", str(cache / "podracer" / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
