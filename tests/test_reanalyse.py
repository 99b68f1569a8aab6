"""Reanalyse, the target network and the off-policy correction: fresh targets equal a search run
by hand, nothing changes when they are off, the target network's schedule, and resume."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import optax
import pytest

import configs
import muzero
import search
from envs import env_spec, jax_env_functions, pgx_exact_step
from selfplay import anakin
from selfplay import train as train_module
from selfplay.agent import make_agent
from selfplay.checkpoints import Checkpointer

N = 6  # windows
KEY = jax.random.key(3, impl="rbg")
# A MuZero agent on MinAtar's planes, small enough to compile in seconds.
MINATAR = [
    "network.torso=mlp",
    "network.mlp_sizes=[16]",
    "network.latent_size=16",
    "network.head_hidden=8",
    "search.num_simulations=4",
    "loss.unroll_steps=2",
    "loss.td_steps=3",
]


def _minatar(*overrides):
    config = configs.load_config("minatar_breakout_muzero", [*MINATAR, *overrides])
    spec = env_spec(config.env.name)
    return config, spec, make_agent(config, spec)


def _window(spec, length, seed=0):
    """N random windows of `length` steps of MinAtar-shaped data, no episode end inside."""
    rng = np.random.default_rng(seed)
    a = spec.num_actions
    policy = rng.dirichlet(np.ones(a), size=(length, N)).astype(np.float32)
    return jax.device_put(
        muzero.Trajectory(
            observation=rng.uniform(size=(length, N, *spec.observation_shape)) < 0.2,
            action=rng.integers(0, a, (length, N)).astype(np.int32),
            reward=rng.integers(0, 2, (length, N)).astype(np.float32),
            discount=np.ones((length, N), np.float32),
            search_policy=policy,
            search_value=rng.normal(size=(length, N)).astype(np.float32),
            legal_mask=np.ones((length, N, a), bool),
            to_play=np.zeros((length, N), np.int32),
            behaviour_logits=np.zeros((length, N, a), np.float32),
            policy_version=np.zeros((length, N), np.int32),
        ),
    )


@jax.jit
def _split(key):  # one program: eager jnp ops compile one program apiece
    return tuple(jax.random.split(key))


def _context(params, target_params=None, step=0):
    return muzero.BatchContext(params, target_params, KEY, jnp.int32(step))


def _networks(config, spec):
    return muzero.make_muzero_networks(config.network, spec.observation_shape, spec.num_actions)


def test_reanalysed_targets_equal_a_search_run_by_hand():
    # Half of the windows searched again with the newest parameters at each unroll step; their
    # value targets bootstrap from fresh searches n steps on; the others keep what was stored.
    config, spec, agent = _minatar("reanalyse.fraction=0.5", "reanalyse.value=search")
    k, n = config.loss.unroll_steps, config.loss.td_steps
    window = _window(spec, config.loss.window_length)
    params = jax.jit(agent.init)(jax.random.key(0))
    batch = jax.device_get(agent.make_batch(window, jnp.ones(N), _context(params))[0])

    nets = _networks(config, spec)
    root_fn = muzero.make_root_fn(nets)
    recurrent_fn = muzero.make_recurrent_fn(nets, discount=config.loss.discount)
    policy_key, value_key = _split(KEY)
    m = N // 2

    @jax.jit
    def by_hand(observation, key):  # [S, M, ...] -> search policies and values [S, M]
        flat = observation.reshape((-1,) + observation.shape[2:]).astype(jnp.float32)
        out = search.run(params, key, root_fn(params, flat), recurrent_fn, config.search)
        shape = observation.shape[:2]
        return out.action_weights.reshape(shape + (-1,)), out.root_value.reshape(shape)

    @jax.jit
    def expected_batch(window, fresh_values):
        bootstrap = window.search_value.at[n : n + k + 1, :m].set(fresh_values)
        return muzero.muzero_batch(
            window,
            jnp.ones(N),
            unroll_steps=k,
            td_steps=n,
            discount=config.loss.discount,
            two_player=False,
            bootstrap_value=bootstrap,
        )

    observation, search_policy = np.asarray(window.observation), np.asarray(window.search_policy)
    policy, _ = by_hand(observation[: k + 1, :m], policy_key)
    _, fresh_values = by_hand(observation[n : n + k + 1, :m], value_key)
    np.testing.assert_allclose(
        batch.policy_target[:m], np.swapaxes(np.asarray(policy), 0, 1), atol=1e-6
    )
    np.testing.assert_array_equal(
        batch.policy_target[m:], np.swapaxes(search_policy[: k + 1, m:], 0, 1)
    )
    expected = jax.device_get(expected_batch(window, fresh_values))
    np.testing.assert_allclose(batch.value_target, expected.value_target, rtol=1e-5)
    assert not np.allclose(batch.value_target[:m], expected.value_target[:m] * 0 + 1e9)


def test_reanalyse_can_search_with_the_target_network():
    # EfficientZero's choice: the fresh searches run with the target network's parameters.
    config, spec, agent = _minatar(
        "reanalyse.fraction=1", "reanalyse.network=target", "learner.target_update_every=10"
    )
    k = config.loss.unroll_steps
    window = _window(spec, config.loss.window_length, seed=5)
    params = jax.jit(agent.init)(jax.random.key(0))
    target = jax.jit(agent.init)(jax.random.key(1))
    batch, _ = agent.make_batch(window, jnp.ones(N), _context(params, target))
    nets = _networks(config, spec)
    root_fn = muzero.make_root_fn(nets)
    recurrent_fn = muzero.make_recurrent_fn(nets, discount=config.loss.discount)

    @jax.jit
    def by_hand(target, observation):
        flat = observation[: k + 1].reshape((-1,) + spec.observation_shape)
        out = search.run(
            target,
            jax.random.split(KEY)[0],
            root_fn(target, flat.astype(jnp.float32)),
            recurrent_fn,
            config.search,
        )
        return jnp.swapaxes(out.action_weights.reshape(k + 1, N, -1), 0, 1)

    expected = by_hand(target, window.observation)
    np.testing.assert_allclose(batch.policy_target, expected, atol=1e-5)
    with pytest.raises(ValueError, match="target network"):
        agent.make_batch(window, jnp.ones(N), _context(params, None))


def test_without_reanalyse_the_targets_are_todays_bit_for_bit():
    # fraction 0, stored values, no off-policy correction: the context is not read and the batch
    # is the one muzero_batch built before reanalyse existed.
    config, spec, agent = _minatar()
    assert not agent.reads_context and not agent.target.enabled
    window = _window(spec, config.loss.window_length, seed=1)
    weights = jnp.linspace(0.5, 1.0, N)
    params = jax.jit(agent.init)(jax.random.key(0))
    with_context, priorities = agent.make_batch(window, weights, _context(params))
    without, _ = agent.make_batch(window, weights, None)

    @jax.jit
    def by_hand(window, weights):
        expected = muzero.muzero_batch(
            window,
            weights,
            unroll_steps=config.loss.unroll_steps,
            td_steps=config.loss.td_steps,
            discount=config.loss.discount,
            two_player=False,
        )
        return expected, muzero.value_priorities(
            window.search_value[0], expected.value_target[:, 0]
        )

    expected, expected_priorities = by_hand(window, weights)
    for got in (with_context, without):
        jax.tree.map(np.testing.assert_array_equal, got, expected)
    np.testing.assert_array_equal(priorities, expected_priorities)


def test_target_network_values_bootstrap_every_window():
    config, spec, agent = _minatar("reanalyse.value=target_network", "learner.target_ema=0.9")
    assert agent.reads_context and agent.target.enabled
    window = _window(spec, config.loss.window_length, seed=2)
    params = jax.jit(agent.init)(jax.random.key(0))
    target = jax.jit(agent.init)(jax.random.key(1))
    batch, _ = agent.make_batch(window, jnp.ones(N), _context(params, target))
    nets = _networks(config, spec)

    @jax.jit
    def by_hand(target, window):
        observation = window.observation.reshape((-1,) + spec.observation_shape)
        values = nets.value_transform.decode_logits(
            nets.predict(target, nets.represent(target, observation.astype(jnp.float32)))[1]
        ).reshape(window.search_value.shape)
        return muzero.muzero_batch(
            window,
            jnp.ones(N),
            unroll_steps=config.loss.unroll_steps,
            td_steps=config.loss.td_steps,
            discount=config.loss.discount,
            two_player=False,
            bootstrap_value=values,
        )

    expected = by_hand(target, window)
    np.testing.assert_allclose(batch.value_target, expected.value_target, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="target network"):
        agent.make_batch(window, jnp.ones(N), _context(params, None))


def test_alphazero_reanalyses_from_the_stored_game_states():
    # AlphaZero searches again from the recorded pgx states with the exact rules.
    config = configs.load_config(
        "tic_tac_toe_alphazero",
        ["reanalyse.fraction=1", "search.num_simulations=8", "network.channels=8"],
    )
    spec = env_spec(config.env.name)
    agent = make_agent(config, spec)
    length = config.loss.td_steps + 1
    functions = jax_env_functions(config.env.name, N)
    reset, step = jax.jit(functions.reset), jax.jit(functions.step)
    env_state, timestep = reset(jax.random.key(0))
    steps, rng = [], np.random.default_rng(0)
    for _ in range(length):
        legal = np.asarray(timestep.legal_mask)
        action = np.asarray([rng.choice(np.flatnonzero(row)) for row in legal], np.int32)
        steps.append((env_state.game, timestep, action))
        env_state, timestep = step(env_state, action)

    @jax.jit
    def record(steps):
        stack = lambda xs: jax.tree.map(lambda *x: jnp.stack(x), *xs)  # noqa: E731
        games, timesteps, actions = stack([s[0] for s in steps]), [s[1] for s in steps], steps
        return muzero.Trajectory(
            observation=jnp.stack([t.observation for t in timesteps]),
            action=jnp.stack([a[2] for a in actions]),
            reward=jnp.zeros((length, N)),
            discount=jnp.ones((length, N)),
            search_policy=jnp.full((length, N, spec.num_actions), 1.0 / spec.num_actions),
            search_value=jnp.zeros((length, N)),
            legal_mask=jnp.stack([t.legal_mask for t in timesteps]),
            to_play=jnp.zeros((length, N), jnp.int32),
            behaviour_logits=jnp.zeros((length, N, spec.num_actions)),
            policy_version=jnp.zeros((length, N), jnp.int32),
            state=games,
        )

    window = record(steps)
    params = jax.jit(agent.init)(jax.random.key(0))
    batch, _ = agent.make_batch(window, jnp.ones(N), _context(params))

    nets = muzero.make_alphazero_networks(config.network, spec.observation_shape, spec.num_actions)
    exact = pgx_exact_step(spec.env_id)

    def step_fn(state, action):
        result = exact(state, action)
        return result.state, result.reward, result.terminal, result.legal_mask

    def prediction_fn(params, state):
        logits, value_logits = nets.predict(params, state.observation.astype(jnp.float32))
        return logits, nets.value_transform.decode_logits(value_logits)

    recurrent_fn = search.make_exact_recurrent_fn(step_fn, prediction_fn, two_player=True)

    @jax.jit
    def by_hand(params, window):
        first = jax.tree.map(lambda x: x[0], window.state)
        logits, value = prediction_fn(params, first)
        return search.run(
            params,
            jax.random.split(KEY)[0],
            mctx.RootFnOutput(prior_logits=logits, value=value, embedding=first),
            recurrent_fn,
            config.search,
            invalid_actions=~window.legal_mask[0],
        )

    out = by_hand(params, window)
    np.testing.assert_allclose(batch.policy_target, out.action_weights, atol=1e-6)
    # Without the states there is nothing to search from: a clear error.
    with pytest.raises(ValueError, match="game states"):
        agent.make_batch(window._replace(state=None), jnp.ones(N), _context(params))


@pytest.mark.parametrize("schedule", ["every", "ema"])
def test_the_target_network_follows_its_schedule(schedule):
    target = (
        muzero.TargetSchedule(every=3) if schedule == "every" else muzero.TargetSchedule(ema=0.5)
    )

    def loss_fn(params, batch, key):
        del key
        return jnp.sum((params["w"] - batch) ** 2), {}

    optimizer = optax.sgd(0.1)
    update = jax.jit(muzero.make_update(loss_fn, optimizer, target=target))
    state = muzero.init_train_state({"w": jnp.zeros(2)}, optimizer, jax.random.key(0), target)
    expected = np.zeros(2)
    for step in range(1, 8):
        state, _ = update(state, jnp.ones(2))
        params = np.asarray(state.params["w"])
        if schedule == "every":
            expected = params if step % 3 == 0 else expected
        else:
            expected = 0.5 * expected + 0.5 * params
        np.testing.assert_allclose(state.target_params["w"], expected, rtol=1e-6)
    # Without a schedule the state keeps no target (and a checkpoint no copy).
    assert (
        muzero.init_train_state({"w": jnp.zeros(2)}, optimizer, jax.random.key(0)).target_params
        is None
    )


def test_anakin_trains_with_everything_on_and_resume_restores_the_target(tmp_path):
    # Reanalyse (half the windows, fresh-search values), the target network, the consistency
    # loss, the value prefix and the off-policy correction in one small Anakin run on CartPole;
    # a resumed run goes on from the saved target network, not from a copy of the parameters.
    overrides = [
        "network.mlp_sizes=[16]",
        "network.latent_size=16",
        "network.head_hidden=8",
        "network.projection_hidden=16",
        "network.projection_size=8",
        "network.predictor_hidden=8",
        "network.value_prefix_hidden=8",
        "search.num_simulations=4",
        "actors.envs_per_thread=8",
        "actors.unroll_length=8",
        "replay.min_size=64",
        "replay.capacity=1024",
        "learner.batch_size=16",
        "replay.samples_per_insert=0.125",  # one update an iteration: every step is saved
        "learner.target_update_every=4",
        "reanalyse.fraction=0.5",
        "reanalyse.value=target_network",
        "loss.consistency_weight=2",
        "loss.value_prefix_horizon=3",
        "loss.td_steps_decay_every=2",
        "learner.checkpoint_every=1",
        "learner.keep_checkpoints=10",
        "learner.log_every_s=0.01",
        "learner.max_updates=5",
        "learner.max_seconds=0",
        "evaluation.every_s=0",
        "devices.cpu_devices=0",
    ]
    config = configs.load_config("gymnax_cartpole_muzero", overrides)
    agent = make_agent(config, env_spec(config.env.name))
    assert anakin.plan_anakin(config, agent, len(anakin.anakin_devices(config))).updates == 1
    run_dir = tmp_path / "run"
    first = train_module.train(config, run_dir, progress=False)
    assert first.updates == 5
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    learned = [r for r in records if "loss" in r]
    assert learned and all(np.isfinite(r["loss"]) and "consistency_loss" in r for r in learned)

    checkpointer = Checkpointer(run_dir / "checkpoints", 10)
    saved = {step: checkpointer.restore(step) for step in checkpointer.all_steps()}
    assert sorted(saved) == [1, 2, 3, 4, 5]
    # The target holds the parameters of update 4 (copied every 4), not the newest.
    jax.tree.map(np.testing.assert_array_equal, saved[5]["target_params"], saved[4]["params"])
    leaves = lambda step: jax.tree.leaves(saved[step]["params"])  # noqa: E731
    assert not all(np.array_equal(a, b) for a, b in zip(leaves(5), leaves(4), strict=True))
    more = config.replace(learner=dataclasses.replace(config.learner, max_updates=7))
    again = train_module.train(more, run_dir, progress=False)
    assert again.resumed_from == 5 and again.updates == 7
    checkpointer.close()
    resumed = Checkpointer(run_dir / "checkpoints", 10).restore(7)
    # Updates 6 and 7 did not copy: the target is still update 4's, restored from the checkpoint.
    jax.tree.map(np.testing.assert_array_equal, resumed["target_params"], saved[4]["params"])
