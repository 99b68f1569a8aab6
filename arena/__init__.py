"""Arena: players, matches, tournaments and ratings (`podracer arena`)."""

__all__: list[str] = []
