"""The `podracer` command: one entry point, a subcommand per job.

    podracer train [options] [key.path=value ...]     train by self-play (podracer.train_command)
    podracer arena --game G --players A,B,...         rate players (podracer.arena_command)
    podracer pbt --population N --explore K=LO:HI ... Population Based Training on Ray Tune
                                                      (podracer.pbt_command)
    podracer --version

Only the chosen subcommand's module is imported, and each imports its heavy parts (JAX, flax,
OpenSpiel's bots, orbax) only once its input is checked: `podracer train --help` and a bad config
value answer in a fraction of a second. A subcommand module has `make_parser() -> ArgumentParser`
and `run(args) -> int`. Options and `key=value` overrides may be given in any order.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from configs.errors import UsageError

__all__ = ["COMMANDS", "OneLineParser", "main"]

# Subcommand -> (its module, one line for `podracer --help`).
COMMANDS = {
    "train": (
        "podracer.train_command",
        "train an agent by self-play (Sebulba: actor threads + replicated learner; Anakin "
        "for pgx games)",
    ),
    "arena": (
        "podracer.arena_command",
        "rate players (bots, checkpoints, you) against each other in a two-player game",
    ),
    "pbt": (
        "podracer.pbt_command",
        "Population Based Training on Ray Tune: a population of runs that copy the best and "
        "perturb their hyperparameters",
    ),
}


class OneLineParser(argparse.ArgumentParser):
    """A subcommand's parser: a bad option is one line and exit 2, as every other bad input
    (argparse's own error prints the whole usage first, several lines for our commands). The
    epilog may be a function, called only when the help is shown (`podracer train`'s lists
    every config field, which takes half a second to build)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer",
        description="Search-based reinforcement learning at scale (MuZero, AlphaZero, V-trace).",
        epilog="commands:\n"
        + "\n".join(f"  {name:<8}{text}" for name, (_, text) in COMMANDS.items())
        + "\n\n`podracer COMMAND --help` describes each.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from podracer import __version__

    parser.add_argument("--version", action="version", version=f"podracer {__version__}")
    parser.add_argument(
        "command", metavar="COMMAND", choices=list(COMMANDS), help=f"one of: {', '.join(COMMANDS)}"
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        _top_parser().parse_args(argv)  # prints the help, or one usage error (exit 2)
        return 2
    name = argv[0]
    try:
        command = importlib.import_module(COMMANDS[name][0])
        # Intermixed: `podracer train runtime=anakin --run-dir D learner.max_seconds=180` parses.
        args = command.make_parser().parse_intermixed_args(argv[1:])
        return int(command.run(args) or 0)
    except UsageError as error:
        # Bad input: one clear line, exit 2. Programming errors keep their traceback.
        print(f"podracer {name}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
