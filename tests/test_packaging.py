"""Installs: a plain install is the search library alone; a missing extra is named in one line."""

import importlib.util
import subprocess
import sys

import pytest

from envs import make_env
from podracer import cli

# Everything the extras install; a plain `pip install podracer` has none of them.
EXTRA_MODULES = (
    "flax",
    "optax",
    "orbax",
    "tensorboardX",
    "matplotlib",
    "tqdm",
    "pyspiel",
    "open_spiel",
    "pgx",
    "gymnax",
    "envpool",
    "wandb",
)

_PLAIN = f"""
import sys
for name in {EXTRA_MODULES!r}:
    sys.modules[name] = None  # as if not installed: importing it fails
import jax, jax.numpy as jnp, mctx
import configs, search

config = configs.load_config(None, [])  # the configs need no extra either
def recurrent_fn(params, key, action, embedding):  # a bandit: action 2 pays 1
    reward = (action == 2).astype(jnp.float32)
    out = mctx.RecurrentFnOutput(reward=reward, discount=jnp.zeros_like(reward),
                                 prior_logits=jnp.zeros((4, 3)), value=jnp.zeros(4))
    return out, embedding
root = mctx.RootFnOutput(prior_logits=jnp.zeros((4, 3)), value=jnp.zeros(4),
                         embedding=jnp.zeros((4, 1)))
out = search.run(None, jax.random.PRNGKey(0), root, recurrent_fn,
                 search.SearchConfig(num_simulations=12, temperature=0.0))
print("actions", out.action.tolist(), config.name)
"""


def test_a_plain_install_imports_search_and_runs_a_search():
    done = subprocess.run(
        [sys.executable, "-c", _PLAIN], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "actions [2, 2, 2, 2] tic_tac_toe_alphazero" in done.stdout


@pytest.fixture
def without(monkeypatch):
    """Makes `importlib.util.find_spec` report the given top-level modules as not installed."""
    real = importlib.util.find_spec

    def remove(*names):
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *args: None if name.split(".")[0] in names else real(name, *args),
        )

    return remove


@pytest.mark.parametrize(
    "argv, missing, extra",
    [
        (["train", "--config", "cartpole_vtrace"], ("flax",), "podracer[train]"),
        (["train", "--config", "tic_tac_toe_muzero"], ("pyspiel",), "podracer[openspiel]"),
        (
            ["arena", "--game", "tic_tac_toe", "--players", "random,random"],
            ("pyspiel",),
            "podracer[openspiel]",
        ),
    ],
)
def test_a_command_without_its_extra_names_it_in_one_line(
    argv, missing, extra, without, capsys, tmp_path
):
    without(*missing)
    code = cli.main([*argv, *(["--run-dir", str(tmp_path / "run")] if argv[0] == "train" else [])])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and extra in lines[0] and missing[0] in lines[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "name, library, extra",
    [
        ("gymnax:CartPole-v1", "gymnax", "podracer[gymnax]"),
        ("envpool:Pong-v5", "envpool", "podracer[envpool]"),
        ("pgx:tic_tac_toe", "pgx", "podracer[pgx]"),
        ("openspiel:tic_tac_toe", "pyspiel", "podracer[openspiel]"),
    ],
)
def test_an_environment_family_without_its_extra_names_it(name, library, extra, without):
    without(library)
    with pytest.raises(Exception, match=extra.replace("[", r"\[").replace("]", r"\]")) as info:
        make_env(name, 1)
    assert type(info.value).__name__ == "UsageError"
