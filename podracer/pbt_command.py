"""`podracer pbt`: Population Based Training on Ray Tune, each member an ordinary run."""

from __future__ import annotations

import argparse
import pathlib
import time

import configs
from configs import UsageError
from podracer import extras

__all__ = ["make_parser", "run"]

_EXAMPLES = """examples:
  podracer pbt --config gymnax_cartpole_vtrace --population 4 --interval-frames 50000 \\
      --max-frames 500000 --explore optimizer.learning_rate=1e-4:3e-3:log \\
      --explore loss.entropy_cost=0.001:0.05:log --run-dir runs/pbt
  podracer pbt --run-dir runs/pbt                   # again: resumes the whole population
  podracer pbt --address auto ...                   # on the Ray cluster this node belongs to
"""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer pbt",
        description=(
            "Population Based Training on Ray Tune: --population runs of --config, each in "
            "DIR/member_<i>, train --interval-frames at a time; after each interval Ray Tune's "
            "PBT has a member of the bottom quarter take over a top member's checkpoint and "
            "perturb the --explore fields (x0.8 or x1.2, or drawn again, within the bounds). "
            "Fitness: the self-play return (one player), the in-run evaluation against the "
            "bots (two players). Every decision is a line of DIR/pbt.jsonl."
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
    parser.add_argument("--max-frames", type=int, metavar="M", help="each member's frames")
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
    result = run_population(settings, run_dir, address=args.address, make_evaluator=make_evaluator)
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
                ("--max-frames", args.max_frames),
                ("--explore", args.explore),
                ("overrides", args.overrides),
            ]
            if value not in (None, [])  # 0 is given: refused below, not taken as absent
        ]
        if given:
            raise UsageError(
                f"{run_dir} holds a population already: resume it with --run-dir alone (and "
                f"--address), without {', '.join(given)}; or choose another --run-dir"
            )
        return saved._replace(max_failures=args.max_failures), run_dir
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
