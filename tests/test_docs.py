"""The docs site's generated and checked parts: the config reference is the code's, and the
`search` and `envs` API pages show every public name (mkdocs build --strict in CI checks their
docstrings)."""

import dataclasses
import pathlib
import typing

import envs
import search
from configs import reference
from configs.experiment import ExperimentConfig
from configs.loading import _field_comments
from search.config import SearchConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_config_reference_page_is_what_the_code_writes():
    assert reference.PAGE.read_text() == reference.page(), (
        "docs/reference/config.md differs from the config dataclasses and presets: "
        "run `python -m configs.reference` and commit the page"
    )


def test_every_config_field_has_a_description():
    def undescribed(cls, prefix=""):
        comments = _field_comments(cls)
        for field in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[field.name]
            if dataclasses.is_dataclass(hint):
                yield from undescribed(hint, f"{field.name}.")
            elif not comments.get(field.name):
                yield prefix + field.name

    assert list(undescribed(ExperimentConfig)) == []


def test_the_reference_states_what_the_validators_enforce_and_what_presets_change():
    assert reference.allowed_values(SearchConfig, "num_simulations", int) == ["an integer >= 1"]
    assert reference.allowed_values(SearchConfig, "max_depth", int | None) == [
        "an integer >= 1",
        "None",
    ]
    text = reference.page()
    entry = text.split("### `search.num_simulations`")[1].split("###")[0]
    assert "default `32`" in entry and "`pong_muzero_small` (`8`)" in entry
    assert "`tic_tac_toe_muzero`" not in entry  # it keeps the default


def test_every_public_name_of_envs_is_on_its_api_page():
    page = (ROOT / "docs" / "reference" / "envs.md").read_text()
    missing = [name for name in envs.__all__ if f"::: envs.{name}\n" not in page]
    assert not missing, f"public names of envs not on docs/reference/envs.md: {missing}"


def test_every_public_name_of_search_is_on_the_api_page():
    page = (ROOT / "docs" / "reference" / "search.md").read_text()
    missing = [name for name in search.__all__ if f"::: search.{name}\n" not in page]
    assert not missing, f"public names of search not on docs/reference/search.md: {missing}"


def test_the_results_page_says_what_each_one_player_presets_returns_measure():
    from arena.progress import preset_protocols

    page = (ROOT / "docs" / "results.md").read_text()
    missing = [line for line in preset_protocols() if line not in page]
    assert not missing, (
        "docs/results.md lacks these presets' evaluation protocols (as they are now): run "
        "`python -m arena.progress` and paste its lines under 'What the returns measure':\n"
        + "\n".join(missing)
    )
