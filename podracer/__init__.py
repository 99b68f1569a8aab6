"""The `podracer` command line (`podracer train`, `podracer arena`): see `podracer.cli`.

The library lives in `search`, `muzero`, `configs`, `selfplay` and `arena`; this package only
parses commands and calls them, importing each subcommand's heavy parts once its input is checked.
"""

from podracer.cli import main

# The version (semantic, 0.x): pyproject.toml reads it from here; CHANGELOG.md says what changed.
__version__ = "0.2.0"

__all__ = ["__version__", "main"]
