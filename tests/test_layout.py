"""The layout, read from source: the direction of imports (search <- muzero <- configs <-
envs <- selfplay <- arena <- podracer), no import cycles between modules, `__all__` everywhere."""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ORDER = ["search", "muzero", "configs", "envs", "selfplay", "arena", "podracer"]
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


def _modules() -> dict[str, pathlib.Path]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): path
        for package in ORDER
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py"
    }


def test_no_module_imports_one_that_imports_it_back():
    # Imports inside functions count too: a cycle hidden in a function is still a cycle.
    modules = _modules()
    edges = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        edges[name] = {m for m in found if m in modules and m != name}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(edges[current])
        return False

    cycles = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if reaches(b, a)})
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"


def test_every_module_with_public_names_lists_them_in_all():
    missing = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        public = [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        ]
        has_all = any(
            isinstance(node, ast.Assign | ast.AnnAssign)
            and "__all__" in ast.unparse(node).split("=")[0]
            for node in tree.body
        )
        if public and not has_all and not name.endswith("__main__"):
            missing.append(name)
    assert not missing, f"modules with public names and no __all__: {missing}"


def test_only_the_jax_internals_module_imports_jax_private_modules():
    """JAX's `_src` changes between versions: one module uses it and checks the version."""
    allowed = ROOT / "selfplay" / "_jax_internals.py"
    offenders = []
    for package in ORDER:
        for path in sorted((ROOT / package).rglob("*.py")):
            private = {
                name
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                for name in [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if name.startswith("jax._src")
            } | {
                alias.name
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Import)
                for alias in node.names
                if alias.name.startswith("jax._src")
            }
            if private and path != allowed:
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"import jax._src only in selfplay/_jax_internals.py: {offenders}"
