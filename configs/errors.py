"""The one exception type for bad input from a user."""

__all__ = ["UsageError"]


class UsageError(Exception):
    """Bad input (config value, game name, checkpoint, path): printed as one line, exit code 2.

    Raise it with a message that names the problem and, where it helps, what would be accepted.
    Library code below `configs` (search, muzero) raises `ValueError`; the commands translate.
    """
