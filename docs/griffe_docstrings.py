"""A griffe extension for the API reference: comments as attribute docs, and no public name of
`search` or `envs` left without a docstring.

The project documents a field or a type alias with the `#` comment above it (or beside it, with
deeper-indented continuation lines), not a string after it; this reads those comments into the
attribute's docstring, so that `SearchConfig`'s fields and `SearchOutput`'s shapes show on the
page. Then every name in the package's `__all__` (and each public method or attribute of a
public class) must have a docstring: a missing one is a warning, which `mkdocs build --strict`
turns into a failed build.
"""

from __future__ import annotations

import logging

import griffe

_logger = logging.getLogger("mkdocs.plugins.griffe_docstrings")
# The packages with an API page of their own (docs/reference/).
API_PAGES = ("search", "envs")


class PublicNamesHaveDocstrings(griffe.Extension):
    """Attribute comments become docstrings; a public name without one is a warning."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path not in API_PAGES:  # loaded only to resolve names these re-export
            return
        for name in pkg.exports or ():
            member = pkg.members.get(name) if isinstance(name, str) else None
            if member is None:
                _logger.warning("%s.__all__ names %s, which griffe cannot find", pkg.path, name)
                continue
            target = member.final_target if member.is_alias else member
            _document(target, f"{pkg.path}.{name}")


def _document(obj, shown_as: str) -> None:
    """Fills `obj`'s docstring from its comments where it has none; warns if still none."""
    if obj.is_attribute and obj.docstring is None:
        text = _comment_of(obj)
        if text:
            obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
    if obj.docstring is None or not obj.docstring.value.strip():
        _logger.warning("%s has no docstring (a public name of the API reference)", shown_as)
    if obj.is_class:
        for member in obj.members.values():
            if member.is_alias or member.name.startswith("_") or member.is_class:
                continue
            _document(member, f"{shown_as}.{member.name}")


def _comment_of(obj) -> str:
    """The `#` lines just above `obj`'s first line, or its trailing comment and the deeper
    indented comment lines that continue it."""
    lines = obj.lines_collection[obj.filepath]
    first = obj.lineno - 1  # 0-based
    above = []
    row = first - 1
    while row >= 0 and lines[row].strip().startswith("#"):
        above.insert(0, lines[row].strip().lstrip("#").strip())
        row -= 1
    if above:
        return " ".join(above)
    code, _, inline = lines[first].partition("  #")
    if not inline:
        return ""
    parts = [inline.strip()]
    indent = len(code) - len(code.lstrip())
    for line in lines[first + 1 :]:
        stripped = line.lstrip()
        if not stripped.startswith("#") or len(line) - len(stripped) <= indent:
            break
        parts.append(stripped.lstrip("#").strip())
    return " ".join(parts)
