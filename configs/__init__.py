"""The experiment's typed, frozen, validated config and its named presets."""

from configs.errors import UsageError

__all__ = ["UsageError"]
