"""Atari through the Sebulba runtime: smoke runs of V-trace and MuZero on Pong with tiny networks,
the preprocessing options reaching envpool, the presets' settings, and a bad game name."""

import json
import re

import jax
import numpy as np
import pytest

import configs
import muzero
import selfplay.agent as agent_module
from envs import env_spec, envpool_env
from podracer import cli
from selfplay.agent import _compiles_with, make_agent
from selfplay.train import train

SMALL_ACTORS = [
    "actors.threads_per_device=2",
    "actors.envs_per_thread=2",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=2",
    "learner.max_updates=3",
]


@pytest.fixture
def envpool_configs(monkeypatch):
    """The config of every envpool pool the run creates (the probe's and each actor's)."""
    seen = []
    new_pool = envpool_env.EnvPoolEnv._new_pool

    def recording_new_pool(self, seed):
        new_pool(self, seed)
        seen.append(dict(self._pool.config))

    monkeypatch.setattr(envpool_env.EnvPoolEnv, "_new_pool", recording_new_pool)
    return seen


def _check_run(result, run, updates):
    assert result.stopped_by == "max_updates"
    assert result.updates == updates
    assert result.frames > 0
    assert (run / "checkpoints" / str(updates)).is_dir()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in records)


def test_vtrace_smoke_run_plays_pong_with_the_configured_preprocessing(tmp_path, envpool_configs):
    options = {
        "episodic_life": False,
        "reward_clip": True,
        "noop_max": 7,
        "repeat_action_probability": 0.25,
        "max_episode_steps": 500,
    }
    config = configs.load_config(
        "atari_vtrace",
        [
            *SMALL_ACTORS,
            "actors.unroll_length=4",
            "learner.batch_size=2",
            "network.impala_channels=[4,8]",
            "network.impala_dense=16",
            f"env.options={json.dumps(options)}",
        ],
    )
    result = train(config, tmp_path / "run", progress=False)
    _check_run(result, tmp_path / "run", 3)
    actor_pools = [c for c in envpool_configs if c["num_envs"] == 2]
    assert len(actor_pools) >= 2  # one per actor thread
    for pool in envpool_configs:
        assert pool["task"] == "pong"
        assert {k: pool[k] for k in options} == options


def test_muzero_smoke_run_on_pong(tmp_path):
    config = configs.load_config(
        "pong_muzero_small",
        [
            *SMALL_ACTORS,
            "actors.unroll_length=8",
            "learner.batch_size=4",
            "replay.min_size=32",
            "replay.capacity=2000",
            "search.num_simulations=2",
            "network.channels=8",
            "network.head_hidden=8",
            "network.value_support=3",
            "network.reward_support=1",
            "loss.unroll_steps=2",
            "loss.td_steps=3",
        ],
    )
    result = train(config, tmp_path / "run", progress=False)
    _check_run(result, tmp_path / "run", 3)


def test_atari_presets_carry_the_papers_settings():
    muzero = configs.load_config("atari_muzero")
    assert muzero.mode == "muzero" and muzero.env.name == "envpool:Pong-v5"
    assert muzero.network.channels == 256 and muzero.network.downsample
    assert muzero.search.num_simulations == 50
    assert (muzero.loss.unroll_steps, muzero.loss.td_steps, muzero.loss.discount) == (5, 10, 0.997)
    assert muzero.replay.priority_alpha > 0 and muzero.replay.priority_beta > 0
    vtrace = configs.load_config("atari_vtrace", ["env.name=envpool:Breakout-v5"])
    assert vtrace.mode == "vtrace" and vtrace.network.torso == "impala"
    assert vtrace.env.name == "envpool:Breakout-v5"
    assert vtrace.env.options["episodic_life"] and vtrace.env.options["reward_clip"]
    small = configs.load_config("pong_muzero_small")
    assert small.network.channels <= 32 and small.search.num_simulations <= 16


@pytest.mark.parametrize("preset", ["atari_vtrace", "pong_muzero_small", "cartpole_vtrace"])
def test_a_bad_game_name_gets_one_line_and_exit_code_2(preset, tmp_path, capsys):
    code = cli.main(
        [
            "train",
            "--config",
            preset,
            "env.name=envpool:NoSuchGame-v5",
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert "unknown envpool task 'NoSuchGame-v5'" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def _library_convolutions(compiled_text: str) -> int:
    """How many convolutions of an optimised HLO module sit inside a YNNPACK fusion."""
    bodies = dict(re.findall(r"^%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}", compiled_text, re.S | re.M))
    called = re.findall(r"calls=%?([\w.\-]+)[^\n]*__ynn_fusion", compiled_text)
    return sum(" convolution(" in bodies.get(name, "") for name in called)


def _compiled_act_and_update(choice: str) -> tuple[str, str]:
    """The optimised HLO of the V-trace agent's act and update with one conv stack of 32
    channels (YNNPACK takes convolutions from 32 channels on)."""
    config = configs.load_config(
        "atari_vtrace",
        [
            f"devices.cpu_convolutions={choice}",
            "network.impala_channels=[32]",
            "network.impala_dense=8",
        ],
    )
    spec = env_spec(config.env.name, seed=0, **config.env.options)
    agent = make_agent(config, spec)
    assert bool(agent.compiler_options) == (choice == "eigen")
    key = jax.random.PRNGKey(0)
    params = jax.jit(agent.init)(key)
    obs = np.zeros((2, *spec.observation_shape), np.uint8)
    mask, greedy = np.ones((2, spec.num_actions), bool), np.zeros(2, bool)
    act = agent.act.lower(params, key, obs, mask, greedy, None).compile().as_text()
    optimizer = muzero.make_optimizer(config.optimizer)
    devices = jax.local_devices()[:1]
    update = muzero.make_replicated_update(
        agent.loss_fn,
        optimizer,
        devices,
        batch_axis=1,
        compiler_options=dict(agent.compiler_options),
    )
    state = muzero.replicate(muzero.init_train_state(params, optimizer, key), devices)
    t, b, a = 3, 2, spec.num_actions  # [T, B] zeros: only the shapes matter to the compiler
    trajectory = muzero.Trajectory(
        observation=np.zeros((t, b, *spec.observation_shape), np.uint8),
        action=np.zeros((t, b), np.int32),
        reward=np.zeros((t, b), np.float32),
        discount=np.ones((t, b), np.float32),
        search_policy=np.full((t, b, a), 1 / a, np.float32),
        search_value=np.zeros((t, b), np.float32),
        legal_mask=np.ones((t, b, a), bool),
        to_play=np.zeros((t, b), np.int32),
        behaviour_logits=np.zeros((t, b, a), np.float32),
        policy_version=np.zeros((t, b), np.int32),
    )
    batch, _ = agent.make_batch(trajectory, None, None)
    batch = muzero.shard_batch(batch, devices, agent.batch_axis)
    return act, update.lower(state, batch).compile().as_text()


def test_eigen_convolutions_keep_the_act_and_the_update_out_of_ynnpack():
    eigen_act, eigen_update = _compiled_act_and_update("eigen")
    assert " convolution(" in eigen_act and " convolution(" in eigen_update
    xla_act, xla_update = _compiled_act_and_update("xla")
    if not (_library_convolutions(xla_act) and _library_convolutions(xla_update)):
        pytest.skip("this jaxlib runs no convolution in YNNPACK: nothing to move out")
    assert _library_convolutions(eigen_act) == 0
    assert _library_convolutions(eigen_update) == 0


def test_an_option_this_jaxlib_lacks_warns_and_leaves_xla_defaults():
    with pytest.warns(UserWarning, match="has no effect with this jaxlib"):
        assert not _compiles_with((("xla_cpu_no_such_option", "1"),))


def test_cpu_convolution_options_are_left_out_on_an_accelerator(monkeypatch):
    config = configs.load_config("atari_vtrace")  # devices.cpu_convolutions="eigen"
    monkeypatch.setattr(agent_module.jax, "default_backend", lambda: "gpu")

    def tried(options):
        raise AssertionError(f"XLA:CPU options tried on an accelerator: {options}")

    monkeypatch.setattr(agent_module, "_compiles_with", tried)
    assert agent_module.compiler_options(config) == ()
