"""The `podracer` command line (`podracer train`, `podracer arena`): see `podracer.cli`.

The library lives in `search`, `muzero`, `configs`, `selfplay` and `arena`; this package only
parses commands and calls them, importing each subcommand's heavy parts once its input is checked.
"""

from podracer.cli import main

__all__ = ["main"]
