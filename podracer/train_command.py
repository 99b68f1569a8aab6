"""`podracer train`: train an agent by self-play from a preset or a config file."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import threading
import time
import traceback
from typing import NoReturn

import configs
from configs import UsageError
from podracer import extras
from podracer.cli import OneLineParser

__all__ = ["make_parser", "run", "warn_if_sized_for_an_accelerator"]

_EXAMPLES = """examples:
  podracer train                                    # the default: tic-tac-toe, AlphaZero, CPU
  podracer train --config connect_four_alphazero --run-dir runs/c4
  podracer train --run-dir runs/c4                  # again: resumes, with the run's config
  podracer train search.num_simulations=64 learner.max_updates=500
  podracer train --config connect_four_alphazero runtime=anakin  # acting + learning jitted
  podracer train --local-processes 2 --run-dir runs/two  # one job of 2 processes, this machine
  srun podracer train --distributed --run-dir /shared/runs/big   # one process per task
  mpirun -np 4 podracer train --distributed --run-dir /shared/r  # kill -USR1: stop, checkpoint
"""


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="podracer train",
        description=(
            "Train by self-play. Runs in --run-dir (config.json, metrics.jsonl, "
            "TensorBoard events, checkpoints/, learning_curves.png); running again "
            "with the same --run-dir resumes from the newest checkpoint, with the run's own "
            "config.json and the overrides given (frames, episodes and the time limit count "
            "on from where the run stopped)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=lambda: (  # type: ignore[arg-type]  # built only for --help
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
        "--no-plot",
        action="store_true",
        help="no learning_curves.png at the end (metrics.jsonl and TensorBoard hold the curves)",
    )
    job = parser.add_argument_group(
        "several processes (jax.distributed; every process gets the same config and --run-dir)"
    )
    job.add_argument(
        "--distributed",
        action="store_true",
        help="join a job JAX detects (SLURM srun, MPI mpirun, a TPU pod slice)",
    )
    job.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address")
    job.add_argument("--num-processes", type=int, metavar="N", help="processes in the job")
    job.add_argument("--process-id", type=int, metavar="I", help="this process, 0..N-1")
    job.add_argument(
        "--connect-timeout",
        type=int,
        default=300,
        metavar="S",
        help="seconds to wait for the job's processes to connect (default 300)",
    )
    job.add_argument(
        "--collectives-interface",
        metavar="NAME",
        help="the network interface (e.g. eth1) whose address the CPU collectives (gloo) use "
        "(default: the address of the route to the coordinator)",
    )
    job.add_argument(
        "--local-processes",
        type=int,
        metavar="N",
        help="start N processes of this command on this machine, splitting its cores or GPUs",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.path=value",
        help="override config fields, e.g. search.num_simulations=64 (before or after the options)",
    )
    return parser


def run(args) -> int:
    if args.run_dir is not None and not args.run_dir.strip():
        # Taken as the current folder, it read a config.json there as the run's own.
        raise UsageError("--run-dir is empty: give a folder, or leave it out for a new one")
    spec = _config_spec(args)
    config = configs.load_config(spec, args.overrides, saved=spec is not None and not args.config)
    run_dir = args.run_dir or f"runs/{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    extras.require("train", "podracer train")
    explicit = [args.coordinator, args.num_processes, args.process_id]
    joins = args.distributed or any(x is not None for x in explicit)
    from selfplay.launch import (  # no JAX: loaded lazily
        JOB_PROCESS,
        check_job_flags,
        launch_local,
        supervise,
    )

    if args.local_processes is not None:
        if joins:
            raise UsageError(
                "--local-processes starts its own job: leave out --distributed, --coordinator, "
                "--num-processes and --process-id"
            )
        if args.local_processes < 1:
            raise UsageError(f"--local-processes must be at least 1, got {args.local_processes}")
        return launch_local(_passed_on(args, run_dir), args.local_processes)
    check_job_flags(*explicit)
    if joins and not os.environ.get(JOB_PROCESS):
        # JAX aborts a process whose job lost its coordinator: the run goes in a child, watched.
        job = ["--distributed"] if args.distributed else []
        for flag, value in [
            ("--coordinator", args.coordinator),
            ("--num-processes", args.num_processes),
            ("--process-id", args.process_id),
            ("--collectives-interface", args.collectives_interface),
        ]:
            job += [flag, str(value)] if value is not None else []
        command = [sys.executable, "-m", "podracer", "train", *job, *_passed_on(args, run_dir)]
        return supervise(command, _who_before_joining(args))
    # Heavy imports only once the input is known to be good.
    from selfplay.collector import collector_paused, quiet_garbage_collector

    make_evaluator = None
    with collector_paused():
        evaluation = config.evaluation
        if evaluation.every_s > 0 or evaluation.at_frames:  # the arena's players and match code
            extras.require("openspiel", "evaluation during training (or set evaluation.every_s=0)")
            from arena import RunEvaluator as make_evaluator
        from selfplay.files import WriteFailed
        from selfplay.processes import (
            CollectivesUnreachable,
            PeerLost,
            initialize,
            peer_lost,
            watch_peers,
        )
        from selfplay.run import LIMITS, split_cpu
        from selfplay.train import enable_compilation_cache, train

    split_cpu(config.devices.cpu_devices)  # before anything starts JAX's backend
    if joins:
        initialize(
            *explicit,
            timeout_s=args.connect_timeout,
            collectives_interface=args.collectives_interface,
        )
    enable_compilation_cache()
    quiet_garbage_collector()
    warn_if_sized_for_an_accelerator(config)
    runtime = ", anakin" if config.runtime == "anakin" else ""
    who, watch = "", None
    if joins:
        import jax

        who = f" [process {jax.process_index()} of {jax.process_count()}]"
        watch = watch_peers(lambda lost: _leave(f"podracer train{who}: run stopped: {lost}"))
    print(
        f"podracer train{who}: {config.name} ({config.mode} on {config.env.name}{runtime}) "
        f"-> {run_dir}",
        flush=True,
    )
    try:
        result = train(
            config,
            run_dir,
            progress=not args.quiet,
            make_evaluator=make_evaluator,
            plot=not args.no_plot,
        )
    except UsageError:
        raise
    except WriteFailed as error:  # a full disk, a file-size limit: the file and the error
        print(
            f"podracer train{who}: run stopped: {error}; the checkpoints saved before it are "
            "whole: run again to resume once the run directory can be written",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except Exception as error:  # a failed thread or learner: its message, then a non-zero exit
        if isinstance(error, PeerLost) or (joins and _from_a_lost_peer(error)):
            lost = error if isinstance(error, PeerLost) else peer_lost(error)
            if isinstance(lost, CollectivesUnreachable):  # the job cannot start: a usage error
                if watch is not None:
                    watch.close(stop_job=str(lost))  # the others stop with this line
                _leave(f"podracer train{who}: error: {lost}", code=2)
            _leave(f"podracer train{who}: run stopped: {lost}")
        traceback.print_exc()
        print(
            f"podracer train{who}: run stopped by an error: {type(error).__name__}: {error}",
            file=sys.stderr,
        )
        return 1
    resumed = (
        f", resumed from update {result.resumed_from}" if result.resumed_from is not None else ""
    )
    curves = result.run_dir / "learning_curves.png"
    lines = [
        f"podracer train{who}: stopped ({result.stopped_by}) at update {result.updates}, "
        f"{result.frames:,} frames in {result.seconds:.0f} s{resumed}.",
        f"  run directory: {result.run_dir}",
    ]
    if curves.is_file():
        lines.append(f"  learning curves: {curves}")
    if (
        result.resumed_from is not None
        and result.updates == result.resumed_from
        and (result.stopped_by in LIMITS)
    ):
        lines.append(
            f"  no update in this invocation: the run reached learner.{result.stopped_by}, which "
            f"counts from the run's start; raise it (learner.{result.stopped_by}=...) to train on"
        )
    elif result.updates == (result.resumed_from or 0):
        have, need = result.replay_fill
        lines.append(
            f"  no update was made: the replay held {have:,} of the {need:,} the learner waits "
            f"for; run longer, or lower replay.min_size (the README's preset table says what "
            f"each preset needs)"
        )
    print("\n".join(lines), flush=True)
    if result.stopped_by in LIMITS:
        return 0
    return 130 if "received SIG" in result.stopped_by else 1  # a signal; a failure (elsewhere)


def _config_spec(args) -> str | None:
    """What the config comes from: --config; else, for a run directory that holds a run, that
    run's own config.json (a resume goes on with the run's config and the overrides given);
    else None, the default preset."""
    if args.config is not None or args.run_dir is None:
        return args.config
    saved = pathlib.Path(args.run_dir) / "config.json"
    return str(saved) if saved.is_file() else None


def _passed_on(args, run_dir: str) -> list[str]:
    """The options and overrides a process this command starts gets, the run directory named."""
    passed = ["--run-dir", run_dir, "--connect-timeout", str(args.connect_timeout)]
    passed += ["--config", args.config] if args.config else []
    passed += ["--quiet"] if args.quiet else []
    passed += ["--no-plot"] if args.no_plot else []
    return passed + list(args.overrides)


def _who_before_joining(args) -> str:
    """This process as " [process I of N]", from the flags or what srun or mpirun set, or ""."""
    index, count = args.process_id, args.num_processes
    for rank, size in [
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
    ]:
        if index is None and rank in os.environ and size in os.environ:
            index, count = os.environ[rank], os.environ[size]
    return f" [process {index} of {count}]" if index is not None and count is not None else ""


def _leave(line: str, code: int = 1) -> NoReturn:
    """Ends a process of a job whose peer is lost: `line`, then exit `code` at once. JAX's own
    shutdown would wait on the lost process, then abort; the saved checkpoints are whole (each
    is written apart and renamed into place)."""
    _leaving.acquire()  # one line: a second thread that finds a lost peer waits for the exit
    say_whole(line)
    sys.stdout.flush()
    os._exit(code)


def say_whole(line: str) -> None:
    """Writes `line` to stderr in one system call. `print` writes a line and its newline apart
    when Python runs unbuffered, and JAX's C++ logging, which writes to the same descriptor from
    its own threads as a peer is lost, has landed between the two (seen in the two hosts' tests)."""
    sys.stderr.flush()
    os.write(sys.stderr.fileno(), f"{line}\n".encode())


_leaving = threading.Lock()


def _from_a_lost_peer(error: BaseException) -> bool:
    """Whether an error of a job's process is what a collective (gloo) or a barrier (orbax's,
    JAX's coordination service) raises when another process is gone."""
    text = str(error).lower()
    return any(marker in text for marker in ("gloo", "barrier", "coordination service"))


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
