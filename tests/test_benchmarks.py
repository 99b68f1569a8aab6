"""The benchmarks still name what exists: every name a benchmark imports from Podracer's packages,
reaches through one of their modules, or patches (`mock.patch("package.module.name")`) is there.
The suite does not run the benchmarks (they time runs of minutes, some on a GPU), so a function
moved or renamed would otherwise break one unseen until someone measured with it."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("search", "muzero", "configs", "envs", "selfplay", "arena", "podracer")
DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.\w+)+$")


def _resolve(dotted: str):
    """What `dotted` names, down to the first name that is not a module's (attributes of
    objects beyond it are the objects' business); AttributeError if a module lacks the name."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for part in parts[split:]:
            if not isinstance(value, types.ModuleType):
                break
            if not hasattr(value, part):
                try:  # a submodule its package does not import
                    value = importlib.import_module(f"{value.__name__}.{part}")
                    continue
                except ModuleNotFoundError:
                    pass
            value = getattr(value, part)
        return value
    raise AttributeError(dotted)


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else [*inner, node.attr]
    return None


def names_used(source: str) -> set[str]:
    """Dotted names of Podracer's packages that `source` relies on."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> module it is bound to
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    used.add(alias.name)
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    used.add(f"{node.module}.{alias.name}")
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if DOTTED.match(node.value):  # a patch target, say
                used.add(node.value)
    for node in ast.walk(tree):  # module.attribute..., where module is one of the packages'
        chain = _dotted(node) if isinstance(node, ast.Attribute) else None
        if chain and chain[0] in modules:
            used.add(".".join([modules[chain[0]], *chain[1:]]))
    return used


def test_the_check_finds_a_name_that_moved():
    source = (
        "import selfplay.train\nfrom unittest import mock\n"
        'mock.patch("podracer.train_command._enable_compilation_cache")\n'
        "selfplay.train.no_such_function()\n"
    )
    missing = []
    for name in sorted(names_used(source)):
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert missing == [
        "podracer.train_command._enable_compilation_cache",
        "selfplay.train.no_such_function",
    ]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda path: path.stem
)
def test_every_name_a_benchmark_uses_exists(path):
    missing = []
    for name in sorted(names_used(path.read_text())):
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"{path.name} uses names that do not exist: {missing}"
