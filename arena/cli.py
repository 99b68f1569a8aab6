"""The `podracer` command: one entry point, a subcommand per job.

Each subcommand lives with the package that owns it (`selfplay` trains, `arena` rates) and exposes
`add_parser(subparsers)` and `run(args) -> int`. This module sits in `arena`, the outermost package,
so it may import all of them without breaking the direction of imports.
"""

from __future__ import annotations

import argparse
import sys

from arena import command as arena_command
from configs import UsageError
from selfplay import command as train_command

# Each module: add_parser(subparsers) registering `run` as the parser's default; run(args) -> int.
_COMMANDS: tuple = (train_command, arena_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer",
        description="Search-based reinforcement learning at scale (MuZero, AlphaZero, V-trace).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in _COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except UsageError as error:
        # Bad input: one clear line, exit 2. Programming errors keep their traceback.
        print(f"podracer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
