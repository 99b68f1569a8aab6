"""The `podracer` command itself: light until its input is checked, options and overrides in any
order, one line for a bad command."""

import pathlib
import re
import subprocess
import sys

import pytest

import podracer
from podracer import cli, train_command
from podracer.train_command import make_parser

HEAVY = ("flax", "optax", "orbax", "pyspiel", "open_spiel", "pgx", "envpool", "tensorboardX")

# Runs `podracer ARGS` in a fresh interpreter and prints which heavy modules it had imported.
_PROBE = f"""
import sys
from podracer.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print("exit", code, file=sys.stderr)
print("imported:", *sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args, code",
    [
        (["train", "--help"], 0),
        (["--help"], 0),
        (["train", "learner.batch_size=-1"], 2),
        (["train", "--config", "no_such_preset"], 2),
        (["train", "runtime=anakin", "--run-dir", "/nonexistent/run", "learner.max_seconds=-3"], 2),
    ],
)
def test_help_and_bad_input_import_no_heavy_library(args, code):
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert f"exit {code}" in done.stderr, done.stderr[-2000:]
    imported = done.stderr.strip().splitlines()[-1]
    assert imported == "imported:", f"`podracer {' '.join(args)}` {imported}"


def test_overrides_stand_before_and_after_the_options():
    args = make_parser().parse_intermixed_args(
        ["runtime=anakin", "--run-dir", "D", "learner.max_seconds=180", "--quiet"]
    )
    assert args.run_dir == "D" and args.quiet
    assert args.overrides == ["runtime=anakin", "learner.max_seconds=180"]


def test_a_bad_override_after_the_options_is_the_configs_error(tmp_path, capsys):
    code = cli.main(
        ["train", "runtime=anakin", "--run-dir", str(tmp_path / "run"), "learner.max_seconds=-3"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "LearnerConfig.max_seconds must be a number >= 0" in err  # not "unrecognized"
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [[], ["bogus"], ["--version-of-nothing"]])
def test_a_missing_or_unknown_command_is_a_usage_error(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    assert "usage: podracer" in capsys.readouterr().err


def test_version_is_the_changelog_newest(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"podracer {podracer.__version__}"
    assert re.fullmatch(r"0\.\d+\.\d+", podracer.__version__)  # semantic, 0.x
    changelog = pathlib.Path(__file__).resolve().parent.parent / "CHANGELOG.md"
    # The newest numbered heading (an "Unreleased" one above it gathers what came since).
    newest = re.search(r"^## (\d\S*)", changelog.read_text(), re.MULTILINE)
    assert newest and newest.group(1) == podracer.__version__


def test_a_stop_line_goes_out_in_one_write_with_its_newline(monkeypatch):
    # JAX's C++ logging writes to the same descriptor from other threads; a line written in two
    # parts (print: the text, then its newline) has had a log line land between them.
    writes = []
    monkeypatch.setattr(train_command.os, "write", lambda fd, data: writes.append((fd, data)))
    train_command.say_whole("podracer train [process 1 of 2]: run stopped: a peer is lost")
    assert writes == [
        (sys.stderr.fileno(), b"podracer train [process 1 of 2]: run stopped: a peer is lost\n")
    ]
