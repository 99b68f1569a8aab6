"""The direction of imports: search <- muzero <- configs <- selfplay <- arena, read from source."""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ORDER = ["search", "muzero", "configs", "selfplay", "arena"]
SEARCH_MAY_IMPORT = {"jax", "chex", "numpy", "mctx"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ORDER)
def test_packages_import_only_to_their_left(package):
    allowed = set(ORDER[: ORDER.index(package) + 1])
    forbidden = set(ORDER) - allowed
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & forbidden
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"imports against the direction {' <- '.join(ORDER)}: {offenders}"


def test_search_imports_only_jax_chex_numpy_mctx():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted((ROOT / "search").rglob("*.py")):
        third_party = _imports(path) - stdlib - {"search"}
        assert third_party <= SEARCH_MAY_IMPORT, (path.name, third_party - SEARCH_MAY_IMPORT)


@pytest.mark.parametrize("package", ORDER)
def test_public_names_are_listed(package):
    module = __import__(package)
    assert isinstance(module.__all__, list | tuple) and module.__all__
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing
