"""The examples in examples/ run as written, and do what they say."""

import json
import pathlib
import runpy

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_the_search_example_walks_towards_the_goal_from_either_side():
    moves = runpy.run_path(str(EXAMPLES / "search_your_model.py"))["main"]()
    assert moves == [1, 1, 1, 0, 0]  # right from cells 0-2, left from 5 and 6 (the goal: 3)


def test_the_custom_environment_example_trains_through_podracer_train(tmp_path):
    # Untrained, the walker steps right half the time; the goal is to the right.
    main = runpy.run_path(str(EXAMPLES / "custom_environment.py"))["main"]
    result = main(run_dir=str(tmp_path / "walk"))
    assert result["right_after"] > 0.8
    config = json.loads((pathlib.Path(result["run_dir"]) / "config.json").read_text())
    assert config["env"]["name"] == "py:custom_environment:make"
