"""`podracer train`: train an agent by self-play from a preset or a config file."""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import configs
from configs import UsageError

__all__ = ["make_parser", "run"]

_EXAMPLES = """examples:
  podracer train                                    # the default: tic-tac-toe, AlphaZero, CPU
  podracer train --config connect_four_alphazero --run-dir runs/c4
  podracer train --run-dir runs/c4                  # again: resumes from the newest checkpoint
  podracer train search.num_simulations=64 learner.max_updates=500
  podracer train --config connect_four_alphazero runtime=anakin  # acting + learning jitted
"""


def make_parser() -> argparse.ArgumentParser:
    presets = ", ".join(configs.presets.names())
    parser = argparse.ArgumentParser(
        prog="podracer train",
        description=(
            "Train by self-play. Runs in --run-dir (config.json, metrics.jsonl, "
            "TensorBoard events, checkpoints/, learning_curves.png); running again "
            "with the same --run-dir resumes from the newest checkpoint."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"presets: {presets} (default: {configs.presets.DEFAULT})\n\n"
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
    from selfplay.train import train  # heavy imports only once the input is known to be good

    _enable_compilation_cache()
    runtime = ", anakin" if config.runtime == "anakin" else ""
    print(
        f"podracer train: {config.name} ({config.mode} on {config.env.name}{runtime}) -> {run_dir}",
        flush=True,
    )
    try:
        result = train(config, run_dir, progress=not args.quiet)
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
    print(
        f"podracer train: stopped ({result.stopped_by}) at update {result.updates}, "
        f"{result.frames} frames in {result.seconds:.0f} s{resumed}.\n"
        f"  run directory: {result.run_dir}\n"
        f"  learning curves: {result.run_dir / 'learning_curves.png'}",
        flush=True,
    )
    return 0 if result.stopped_by in ("max_updates", "max_seconds", "max_frames") else 130


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
