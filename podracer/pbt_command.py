"""`podracer pbt`: Population Based Training, the members of an Anakin preset in one program
(`selfplay.population`), or on Ray Tune with each member an ordinary run (`selfplay.pbt_tune`)."""

from __future__ import annotations

import argparse
import math
import pathlib
import time

import configs
from configs import UsageError
from podracer import extras

__all__ = ["make_parser", "run"]

_EXAMPLES = """examples:
  podracer pbt --config minatar_breakout_vtrace --population 8 --interval-frames 100000 \\
      --max-frames 2000000 --explore optimizer.learning_rate=1e-5:1e-2:log \\
      --explore loss.entropy_cost=1e-4:1e-1:log --run-dir runs/pbt
                                                    # an Anakin preset: one program (--in-process)
  podracer pbt --run-dir runs/pbt                   # again: resumes the whole population
  podracer pbt --run-dir runs/pbt --max-frames 2000000   # resumes it with a larger budget
  podracer pbt --random-search --config ...         # the same first draws, never exploiting
  podracer pbt --ray --config cartpole_vtrace ...   # Ray Tune, each member its own run
  podracer pbt --address auto ...                   # on the Ray cluster this node belongs to
"""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer pbt",
        description=(
            "Population Based Training: --population members of --config train "
            "--interval-frames at a time; after each interval the bottom quarter take over a "
            "top member's parameters and perturb the --explore fields (x0.8 or x1.2, or drawn "
            "again, within the bounds), as Ray Tune's PBT does. An Anakin preset on one "
            "machine runs as one program (--in-process, the default there: the members stacked "
            "in one jit, their explored fields arrays, one checkpoint in DIR/checkpoints); "
            "otherwise each member is an ordinary run in DIR/member_<i> on Ray Tune (--ray). "
            "Fitness: the self-play return (one player), the in-run evaluation against the "
            "bots (two players, --ray). Every decision is a line of DIR/pbt.jsonl."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXAMPLES
        + "\nfields --explore may name (a run resumes with another value of these):\n  "
        + ", ".join(sorted(configs.MUTABLE)),
    )
    parser.add_argument("--config", metavar="NAME|PATH", help="the members' preset or config")
    parser.add_argument("--population", type=int, metavar="N", help="members (at least 2)")
    parser.add_argument(
        "--interval-frames",
        type=int,
        metavar="F",
        help="frames each member trains between two decisions",
    )
    parser.add_argument(
        "--max-frames",
        type=int,
        metavar="M",
        help="each member's frames; on a resume (one program): a larger budget to go on to",
    )
    parser.add_argument(
        "--explore",
        action="append",
        default=[],
        metavar="KEY=LOW:HIGH[:log]",
        help="a field to explore within [LOW, HIGH] (log: in log scale); repeat for several",
    )
    parser.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where the population goes (default runs/pbt-<preset>-<time>); again: resumes",
    )
    parser.add_argument(
        "--address",
        metavar="ADDRESS",
        help="an existing Ray cluster ('auto', or HOST:PORT); DIR must be on storage every "
        "node sees (default: Ray on this machine alone)",
    )
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument(
        "--in-process",
        dest="engine",
        action="store_const",
        const="in_process",
        help="the members in one program on this machine (Anakin presets; the default there)",
    )
    engine.add_argument(
        "--ray",
        dest="engine",
        action="store_const",
        const="ray",
        help="each member an ordinary run on Ray Tune (the default for Sebulba presets, "
        "two-player games and --address)",
    )
    parser.add_argument(
        "--random-search",
        action="store_true",
        help="no exploits: each member trains on its first draw from the --explore windows, "
        "on its own (what PBT should beat, from the same draws; in one program)",
    )
    parser.add_argument(
        "--no-plot",
        action="store_true",
        help="no learning_curves.png in each member's folder at its end (its metrics.jsonl "
        "holds the curves)",
    )
    parser.add_argument(
        "--max-failures",
        type=int,
        default=3,
        metavar="K",
        help="restarts of a member whose process fails, from its checkpoint (default 3)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.path=value",
        help="override the members' config fields, e.g. replay.priority_alpha=0",
    )
    return parser


def run(args) -> int:
    settings, run_dir = _settings(args)
    extras.require("train", "podracer pbt")
    started = _start_line(run_dir)
    if _engine(args, settings, started) == "in_process":
        # A resumed population exploits as its start line says; a new one unless --random-search.
        exploit = bool(started.get("exploit", True)) if started else not args.random_search
        return _run_in_process(settings, run_dir, exploit=exploit, plot=not args.no_plot)
    if started and settings.max_frames != started.get("max_frames", settings.max_frames):
        raise UsageError(
            f"{run_dir} holds a population on Ray Tune, whose members keep the budget they "
            f"started with ({started['max_frames']:,} frames): resume it without --max-frames"
        )
    extras.require("pbt", "podracer pbt")
    make_evaluator = None
    if settings.two_player:  # the fitness is the evaluation against the bots
        extras.require("openspiel", "podracer pbt on a two-player game (its fitness)")
        from arena import RunEvaluator as make_evaluator
    from selfplay.pbt_tune import run_population  # Ray, only once the input is good

    print(
        f"podracer pbt: {settings.population} members of {settings.config.name} "
        f"({settings.config.mode} on {settings.config.env.name}), "
        f"{settings.interval_frames:,} frame{'s' * (settings.interval_frames != 1)} per "
        f"interval, {settings.max_frames:,} each "
        f"-> {run_dir}",
        flush=True,
    )
    result = run_population(
        settings,
        run_dir,
        address=args.address,
        make_evaluator=make_evaluator,
        plot=not args.no_plot,
    )
    best = max(result.members, key=lambda m: m.fitness if m.fitness == m.fitness else -1e300)
    lines = [
        f"podracer pbt: {'finished' if result.finished else 'stopped'}; best member "
        f"{best.member}: fitness {best.fitness:.4g} at {best.frames:,} frames "
        f"({', '.join(f'{k}={v:.3g}' for k, v in best.values.items())})",
        f"  members: {run_dir}/member_<i>; decisions: {run_dir}/pbt.jsonl",
    ]
    failed = [m for m in result.members if m.error]
    lines += [f"  member {m.member} failed: {m.error}" for m in failed]
    if not result.finished and not failed:
        lines.append(f"  resume with: podracer pbt --run-dir {run_dir}")
    print("\n".join(lines), flush=True)
    return 0 if result.finished else (1 if failed else 130)


def _start_line(run_dir: pathlib.Path) -> dict | None:
    """The start line of the population in `run_dir`'s pbt.jsonl; None for a new one."""
    from selfplay.pbt import read_events

    return next((e for e in read_events(run_dir) if e.get("event") == "start"), None)


def _engine(args, settings, started: dict | None) -> str:
    """ "in_process" or "ray": a resumed population's own (its start line says), else the flag,
    else one program wherever it can run as one."""
    from selfplay.pbt import check_in_program

    if args.random_search and (args.engine == "ray" or args.address):
        raise UsageError(
            "--random-search runs in one program on this machine: drop --ray and --address"
        )
    if started:
        saved = "in_process" if started.get("in_program") else "ray"
        if args.engine not in (None, saved):
            where = "in one process" if saved == "in_process" else "on Ray"
            raise UsageError(
                f"{args.run_dir} holds a population run {where}: resume it without "
                f"--{args.engine.replace('_', '-')}"
            )
        return saved
    if args.engine == "in_process":
        if args.address:
            raise UsageError("--in-process runs on this machine: drop --address, or use --ray")
        check_in_program(settings)
        return "in_process"
    if args.engine == "ray" or args.address:
        return "ray"
    try:
        check_in_program(settings)
    except UsageError:
        if args.random_search:
            raise
        return "ray"
    return "in_process"


def _run_in_process(
    settings, run_dir: pathlib.Path, exploit: bool = True, plot: bool = True
) -> int:
    from selfplay.run import split_cpu

    split_cpu(settings.config.devices.cpu_devices)  # before JAX starts
    from selfplay.population import run_in_program
    from selfplay.train import enable_compilation_cache

    enable_compilation_cache()
    print(
        f"podracer pbt: {settings.population} members of {settings.config.name} "
        f"({settings.config.mode} on {settings.config.env.name}) in one program"
        f"{'' if exploit else ', random search (no exploits)'}, "
        f"{settings.interval_frames:,} frames per interval, {settings.max_frames:,} each "
        f"-> {run_dir}",
        flush=True,
    )
    result = run_in_program(settings, run_dir, exploit=exploit, plot=plot)
    scores = [f if f == f else -math.inf for f in result.fitness]
    best = max(range(settings.population), key=lambda i: scores[i])
    values = ", ".join(
        f"{e.key}={v:.3g}" for e, v in zip(settings.explore, result.values[best], strict=True)
    )
    lines = [
        f"podracer pbt: {'finished' if result.finished else 'stopped'} at {result.frames:,} "
        f"frames per member; best member {best}: fitness {result.fitness[best]:.4g} ({values})",
        f"  members: {run_dir}/member_<i>; decisions: {run_dir}/pbt.jsonl; the population's "
        f"checkpoints: {run_dir}/checkpoints",
    ]
    if not result.finished:
        lines.append(f"  resume with: podracer pbt --run-dir {run_dir}")
    print("\n".join(lines), flush=True)
    return 0 if result.finished else 130


def _settings(args):
    """The population's settings: those saved in --run-dir (a resume), else the options'."""
    from selfplay.pbt import PopulationSettings, check_settings, parse_explore, read_settings

    run_dir = pathlib.Path(args.run_dir) if args.run_dir else None
    saved = read_settings(run_dir) if run_dir is not None else None
    if saved is not None:
        given = [
            flag
            for flag, value in [
                ("--config", args.config),
                ("--population", args.population),
                ("--interval-frames", args.interval_frames),
                ("--explore", args.explore),
                ("--random-search", args.random_search or None),
                ("overrides", args.overrides),
            ]
            if value not in (None, [])  # 0 is given: refused below, not taken as absent
        ]
        if given:
            raise UsageError(
                f"{run_dir} holds a population already: resume it with --run-dir alone (and "
                f"--address), without {', '.join(given)}; or choose another --run-dir"
            )
        if args.max_frames is not None and args.max_frames < saved.max_frames:
            raise UsageError(
                f"--max-frames {args.max_frames}: {run_dir}'s members train "
                f"{saved.max_frames:,} frames each; a resume may raise that budget, not lower it"
            )
        max_frames = saved.max_frames if args.max_frames is None else args.max_frames
        return saved._replace(max_failures=args.max_failures, max_frames=max_frames), run_dir
    missing = [
        flag
        for flag, value in [
            ("--population", args.population),
            ("--interval-frames", args.interval_frames),
            ("--max-frames", args.max_frames),
            ("--explore", args.explore),
        ]
        if value in (None, [])
    ]
    if missing:
        raise UsageError(f"a new population needs {', '.join(missing)}")
    config = configs.load_config(args.config, args.overrides)
    settings = PopulationSettings(
        config=config,
        population=args.population,
        interval_frames=args.interval_frames,
        max_frames=args.max_frames,
        explore=tuple(parse_explore(spec, config) for spec in args.explore),
        max_failures=args.max_failures,
    )
    check_settings(settings)
    if run_dir is None:
        run_dir = pathlib.Path(f"runs/pbt-{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return settings, run_dir
