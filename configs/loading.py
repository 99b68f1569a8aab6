"""Configs from presets, JSON files and `key.path=value` overrides; and back to JSON.

Everything the user types goes through here, so every error is a `UsageError` with one line that
names the field and what would be accepted.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import types
import typing
from collections.abc import Sequence
from typing import Any

from configs.errors import UsageError
from configs.experiment import ExperimentConfig

__all__ = [
    "apply_overrides",
    "describe_fields",
    "from_dict",
    "load_config",
    "to_dict",
    "with_predated_fields",
]


def to_dict(config) -> dict:
    """A JSON-ready nested dict of a config dataclass (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


# Fields added after runs had saved configs without them, and whose defaults have changed since:
# the value a run that saved its config before the field existed was trained with.
PREDATED_FIELDS = {"network": {"dynamics_residual": False, "zero_init_heads": False}}


def with_predated_fields(data: dict) -> dict:
    """A config a run saved (a dict) with every field added since filled in: the value in
    `PREDATED_FIELDS` (what the run was trained with), else the field's default (which the run
    behaved as). Such a run resumes, and is rebuilt, as it was trained."""
    earlier = to_dict(ExperimentConfig())
    for section, values in PREDATED_FIELDS.items():
        earlier[section].update(values)
    return {  # each section's fields; a field's own value (env.options) is the run's as it is
        key: {**earlier[key], **value}
        if isinstance(earlier.get(key), dict) and isinstance(value, dict)
        else value
        for key, value in data.items()
    }


def from_dict(data: dict, cls=ExperimentConfig, path: str = "", *, saved: bool = False):
    """Builds `cls` from a nested dict; unknown keys and bad values are `UsageError`s. `saved`:
    the dict is a config a run saved (its config.json), so a field it predates takes the value
    the run was trained with (`PREDATED_FIELDS`), not today's default."""
    if not isinstance(data, dict):
        raise UsageError(f"config{' ' + path if path else ''}: expected a mapping, got {data!r}")
    if saved:
        data = with_predated_fields(data)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key not in names:
            raise UsageError(f"unknown config field '{where}'; {_fields_line(cls, path)}")
        kwargs[key] = _coerce(value, hints[key], where)
    return _construct(cls, kwargs)


def apply_overrides(config: ExperimentConfig, overrides: list[str]) -> ExperimentConfig:
    """Applies `section.field=value` (or `field=value` for top-level fields) overrides in order."""
    data = to_dict(config)
    for override in overrides:
        if "=" not in override:
            raise UsageError(
                f"override '{override}' is not key.path=value "
                f"(for example search.num_simulations=64)"
            )
        key, raw = override.split("=", 1)
        parts = key.strip().split(".")
        cls: Any = ExperimentConfig  # the dataclass of the section `node` holds
        node = data
        for depth, part in enumerate(parts):
            names = [f.name for f in dataclasses.fields(cls)]
            where = ".".join(parts[: depth + 1])
            if part not in names:
                raise UsageError(
                    f"unknown config field '{where}'; {_fields_line(cls, '.'.join(parts[:depth]))}"
                )
            hint = typing.get_type_hints(cls)[part]
            if depth == len(parts) - 1:
                if dataclasses.is_dataclass(hint):
                    raise UsageError(
                        f"'{where}' is a section; set one of its fields, e.g. "
                        f"{where}.{dataclasses.fields(hint)[0].name}=..."
                    )
                node[part] = _parse_value(raw, hint, where)
            else:
                if not dataclasses.is_dataclass(hint):
                    raise UsageError(f"'{where}' is a value, not a section")
                cls, node = hint, node[part]
    return from_dict(data)


def load_config(
    spec: str | None, overrides: Sequence[str] = (), *, saved: bool = False
) -> ExperimentConfig:
    """The config named by a preset name or a JSON file path (None: the default), overridden.
    `saved`: the file is a run's own config.json (`from_dict`'s `saved`)."""
    from configs import presets

    if spec is None:
        config = presets.get(presets.DEFAULT)
    elif spec in presets.names():
        config = presets.get(spec)
    elif spec.endswith(".json") or pathlib.Path(spec).is_file():
        path = pathlib.Path(spec)
        if not path.is_file():
            raise UsageError(f"config file '{spec}' does not exist")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise UsageError(f"config file '{spec}' is not valid JSON: {error}") from None
        config = from_dict(data, saved=saved)
    else:
        raise UsageError(
            f"unknown preset '{spec}'; presets: {', '.join(presets.names())} "
            f"(or a path to a config .json)"
        )
    return apply_overrides(config, list(overrides))


def describe_fields(cls=ExperimentConfig, prefix: str = "") -> list[str]:
    """One line per leaf field: `section.field (type, default): description`."""
    lines = []
    defaults = cls()
    comments = _field_comments(cls)
    for field in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[field.name]
        name = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(hint):
            lines.extend(describe_fields(hint, name + "."))
        else:
            default = getattr(defaults, field.name)
            lines.append(f"  {name} = {default!r}  {comments.get(field.name, '')}".rstrip())
    return lines


def _field_comments(cls) -> dict:
    """The `# ...` comment lines just above (or beside) each field in the class source."""
    import inspect

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments, pending = {}, []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# ").strip())
            continue
        head = stripped.split(":", 1)[0]
        if head.isidentifier() and ":" in stripped and not stripped.startswith(("def ", "class ")):
            inline = stripped.split("#", 1)[1].strip() if "#" in stripped else ""
            comments[head] = " ".join(pending) or inline
        pending = []
    return comments


def _fields_line(cls, path: str) -> str:
    names = ", ".join(f.name for f in dataclasses.fields(cls))
    return f"fields of {path or 'the config'}: {names}"


def _construct(cls, kwargs):
    try:
        return cls(**kwargs)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _coerce(value: Any, hint, where: str):
    """A JSON value converted to the field's type (nested sections, tuples, None)."""
    if dataclasses.is_dataclass(hint):
        return from_dict(value, hint, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise UsageError(f"{where} must be a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(_coerce(v, item, where) for v in value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if origin is typing.Literal:
        if value not in args:
            raise UsageError(f"{where} must be one of {list(args)}, got {value!r}")
        return value
    if hint in (int, float, str, bool) and not isinstance(value, hint):
        raise UsageError(f"{where} must be {hint.__name__}, got {value!r}")
    if hint is int and isinstance(value, bool):
        raise UsageError(f"{where} must be int, got {value!r}")
    return value


def _parse_value(raw: str, hint, where: str):
    """Command-line text to a JSON value of the field's type."""
    raw = raw.strip()
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() in ("none", "null"):
            return None
        hint = [a for a in args if a is not type(None)][0]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is str or origin is typing.Literal:
        return raw
    if hint is bool:
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise UsageError(f"{where} must be true or false, got '{raw}'")
    if hint is int:
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            raise UsageError(f"{where} must be an integer, got '{raw}'") from None
    if hint is float:
        try:
            return float(raw)
        except ValueError:
            raise UsageError(f"{where} must be a number, got '{raw}'") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if origin is tuple:
            items = [x for x in raw.strip("()[]").split(",") if x.strip()]
            return [_parse_value(x, args[0] if args else str, where) for x in items]
        raise UsageError(f"{where} must be JSON here (a list or mapping), got {raw!r}") from None
