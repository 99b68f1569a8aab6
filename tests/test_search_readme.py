"""search/README.md: its Python examples run as written and their asserts hold."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "search" / "README.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_readme_examples_run():
    blocks = _python_blocks(README.read_text())
    assert len(blocks) >= 3  # own model, AlphaZero on tic-tac-toe, subtree reuse
    namespace: dict = {"__name__": "search_readme"}
    # The blocks run in order in one namespace: the reuse example continues the AlphaZero one.
    for index, block in enumerate(blocks):
        exec(compile(block, f"{README}:python-block-{index}", "exec"), namespace)
