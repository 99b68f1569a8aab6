"""The config reference (docs/reference/config.md), written from the dataclasses themselves.

    python -m configs.reference            # writes docs/reference/config.md
    python -m configs.reference --check    # exit 1 where the page differs from the code

Every field of `ExperimentConfig` with its type, default, allowed values, description and the
presets that change it. The allowed values are the `Literal` choices, or what the field's own
validator answers to values outside its range (so they are the validators' words, never a copy);
the description is the comment above the field; the presets are those whose value differs from
the default. tests/test_docs.py fails when the committed page differs from this.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import types
import typing
from typing import Any

from configs import presets
from configs.experiment import ExperimentConfig
from configs.loading import _field_comments

__all__ = ["PAGE", "allowed_values", "page"]

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reference" / "config.md"

_HEADER = """# Config reference

Every field of a run's config: `podracer train --config PRESET section.field=value` sets one
(see `podracer train --help`), and a run directory's `config.json` holds them all. Each field
says its type and default, the values it accepts, what it does, and which presets change it.

This page is generated from the dataclasses (`configs/experiment.py`, `search/config.py`,
`muzero/config.py`) by `python -m configs.reference`; a test fails when it differs from them.
"""

# Values outside a field's range, by type, and then values of the wrong type (asked only where
# the range probes found no limit): the validators' answers name what is allowed.
_PROBES: dict[Any, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    int: ((-(10**9), 10**12), ("?",)),
    float: ((-1e18, 1e18), ("?",)),
    str: (("", "?not a choice?"), (0,)),
    bool: ((), ("?",)),
    tuple: ((("?",), (-1,)), ()),
    dict: ((), ("?",)),
}
# An interval says all that a bound does ("in [0, 1]" after "a number >= 0.0").
_INTERVALS = ("in [", "in (", "between ")


def page() -> str:
    """The whole page, as `python -m configs.reference` writes it."""
    defaults = ExperimentConfig()
    configs_by_preset = _presets()
    parts = [_HEADER]
    hints = typing.get_type_hints(ExperimentConfig)
    # (its key, its dataclass, its defaults): the run's own fields, then each section's.
    sections: list[tuple[str, Any, Any]] = [("", ExperimentConfig, defaults)] + [
        (field.name, hints[field.name], getattr(defaults, field.name))
        for field in dataclasses.fields(ExperimentConfig)
        if dataclasses.is_dataclass(hints[field.name])
    ]
    for section, cls, section_defaults in sections:
        title = section or "The run"
        parts.append(f"## {title} {{#{section or 'run'}}}\n")
        parts.append(f"`{cls.__name__}` ({cls.__module__}): {_first_line(cls.__doc__)}\n")
        comments = _field_comments(cls)
        for field in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[field.name]
            if dataclasses.is_dataclass(hint):
                continue  # a section of its own
            key = f"{section}.{field.name}" if section else field.name
            default = getattr(section_defaults, field.name)
            changed = [
                (name, value)
                for name, config in configs_by_preset.items()
                if (value := _get(config, key)) != default
            ]
            parts.append(
                _field_entry(key, hint, default, allowed_values(cls, field.name, hint), comments)
                + _presets_line(changed)
            )
    return "\n".join(parts)


def allowed_values(cls, name: str, hint) -> list[str]:
    """What `cls` accepts for its field `name`: the `Literal` choices, else what its validator
    says of values outside its range ("an integer >= 1", "in [0, 1]", ...), one per distinct
    answer; [] where any value of the type is accepted."""
    base, args = _base_type(hint)
    if typing.get_origin(base) is typing.Literal:
        return ["one of " + ", ".join(f"`{arg!r}`" for arg in typing.get_args(base))]
    range_probes, type_probes = _PROBES.get(typing.get_origin(base) or base, ((), ()))
    answers = _answers(cls, name, range_probes) or _answers(cls, name, type_probes)
    if any(answer.startswith(_INTERVALS) for answer in answers):
        answers = [a for a in answers if a.startswith(_INTERVALS) or ">" not in a]
    if type(None) in args and not any("None" in answer for answer in answers):
        answers.append("None")
    return answers


def _answers(cls, name: str, probes: tuple[Any, ...]) -> list[str]:
    """The distinct answers of `cls`'s validator for its field `name` to each probe."""
    answers: list[str] = []
    for probe in probes:
        try:
            cls(**{name: probe})
        except (ValueError, TypeError) as error:
            answer = _answer(str(error), cls.__name__, name)
            if answer and answer not in answers:
                answers.append(answer)
    return answers


def _answer(message: str, class_name: str, name: str) -> str:
    """`Section.field must be X, got V` -> `X`; "" for another field's message."""
    prefix = f"{class_name}.{name} must be "
    if not message.startswith(prefix):
        return ""
    return message[len(prefix) :].rsplit(", got ", 1)[0]


def _field_entry(key: str, hint, default, allowed: list[str], comments: dict) -> str:
    name = key.rsplit(".", 1)[-1]
    lines = [f"### `{key}` {{#{key}}}\n"]
    description = comments.get(name, "")
    if description:
        lines.append(description + "\n")
    facts = f"- Type `{_type_name(hint)}`, default `{repr(default)}`"
    lines.append(facts)
    if allowed:
        lines.append("- Allowed: " + "; ".join(allowed))
    return "\n".join(lines)


def _presets_line(changed: list[tuple[str, Any]]) -> str:
    if not changed:
        return "\n"
    if all(value == name for name, value in changed):
        return "\n- Presets: each sets its own name\n"
    shown = ", ".join(f"`{name}` (`{repr(value)}`)" for name, value in changed)
    return f"\n- Presets that change it: {shown}\n"


def _presets() -> dict[str, ExperimentConfig]:
    """Each preset's config under its own name (not its earlier names)."""
    own = {}
    for name in presets.names():
        config = presets.get(name)
        if config.name == name:
            own[name] = config
    return own


def _get(config: ExperimentConfig, key: str):
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _base_type(hint) -> tuple[Any, tuple]:
    """The type of a field without its `| None`, and the union's arguments."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [arg for arg in args if arg is not type(None)]
        return inner[0], args
    return hint, args


def _type_name(hint) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return type(typing.get_args(hint)[0]).__name__
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _first_line(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Writes (or checks) the config reference page.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not current")
    args = parser.parse_args(argv)
    text = page()
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is not current: run `python -m configs.reference`", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
