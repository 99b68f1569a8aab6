"""Networks: shapes for each torso, the scaled latent, mctx's root/recurrent fns, config checks."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from muzero import (
    NetworkConfig,
    make_actor_critic_networks,
    make_alphazero_networks,
    make_muzero_networks,
    make_recurrent_fn,
    make_root_fn,
)

TINY = NetworkConfig(
    channels=8,
    representation_blocks=1,
    dynamics_blocks=1,
    prediction_blocks=1,
    head_channels=2,
    head_hidden=16,
    mlp_sizes=(16,),
    latent_size=16,
    value_support=5,
    reward_support=3,
    # These tests read the scaled latent's range and need predictions that differ from the start.
    latent_scaling="min_max",
    zero_init_heads=False,
)
MLP_TINY = dataclasses.replace(TINY, torso="mlp")
ATARI_TINY = NetworkConfig(
    channels=8,
    representation_blocks=0,
    dynamics_blocks=1,
    prediction_blocks=0,
    downsample=True,
    head_hidden=16,
    latent_scaling="min_max",
)
B, A = 3, 4
# Threefry's random bits take seconds to compile on a busy 2-core CPU; rbg keys compile fast.
KEY = jax.random.key(0, impl="rbg")


def observations(shape, dtype=jnp.float32, seed=0):
    # numpy data: eager jax.random would compile a threefry kernel per shape (seconds each).
    x = np.random.default_rng(seed).uniform(0, 255, size=(B,) + shape)
    return jnp.asarray(x.astype(dtype))


@pytest.mark.parametrize(
    "config, obs_shape, dtype, latent_shape",
    [
        (TINY, (6, 7, 3), jnp.float32, (6, 7, 8)),  # board planes (connect four)
        (TINY, (3, 3), jnp.float32, (3, 3, 8)),  # planes without a channel axis
        (ATARI_TINY, (84, 84, 4), jnp.uint8, (6, 6, 8)),  # stacked Atari frames, downsampled
        (TINY, (5,), jnp.float32, (16,)),  # a vector: the MLP torso
        (MLP_TINY, (10, 10, 4), jnp.float32, (16,)),  # planes, flattened into the MLP torso
        # planes through the resnet, its features flattened into a vector latent
        (dataclasses.replace(TINY, torso="resnet_mlp"), (10, 10, 4), jnp.float32, (16,)),
    ],
)
def test_muzero_shapes_and_latent_range(config, obs_shape, dtype, latent_shape):
    nets = make_muzero_networks(config, obs_shape, A)

    @jax.jit  # one compiled call: eager flax dispatches op by op, slow on a busy CPU
    def run(obs):
        params = nets.init(KEY)
        latent = nets.represent(params, obs)
        reward_logits, next_latent = nets.dynamics(params, latent, jnp.array([0, 1, 3]))
        _, other_latent = nets.dynamics(params, latent, jnp.array([2, 2, 2]))
        as_float = nets.represent(params, obs.astype(jnp.float32) / 255.0)
        return (
            latent,
            reward_logits,
            next_latent,
            nets.predict(params, next_latent),
            other_latent,
            as_float,
        )

    obs = observations(obs_shape, dtype)
    latent, reward_logits, next_latent, (policy_logits, value_logits), other, as_float = run(obs)
    assert latent.shape == (B,) + latent_shape
    assert reward_logits.shape == (B, config.reward_transform().num_bins)
    assert next_latent.shape == latent.shape
    assert policy_logits.shape == (B, A)
    assert value_logits.shape == (B, config.value_transform().num_bins)
    for x in (latent, next_latent):
        flat = np.asarray(x).reshape(B, -1)
        # Min-max scaled per example: each example spans exactly [0, 1].
        np.testing.assert_allclose(flat.min(axis=1), 0.0, atol=1e-6)
        np.testing.assert_allclose(flat.max(axis=1), 1.0, atol=1e-5)
    assert not np.allclose(next_latent, other)  # the action matters
    if dtype == jnp.uint8:  # frames are scaled by 1/255 inside the network
        np.testing.assert_allclose(latent, as_float, atol=1e-5)


def test_root_and_recurrent_fn_run_inside_mctx():
    # An MLP model: mctx compiles quickly around it; the conv model's shapes are checked above.
    nets = make_muzero_networks(TINY, (5,), A)
    root_fn = make_root_fn(nets)
    recurrent_fn = make_recurrent_fn(nets, two_player=True)
    one_player_fn = make_recurrent_fn(nets, discount=0.99)
    obs = observations((5,))

    @jax.jit
    def run(obs):
        params = nets.init(KEY)
        root = root_fn(params, obs)
        action = jnp.zeros((B,), jnp.int32)
        step = recurrent_fn(params, jax.random.key(1, impl="rbg"), action, root.embedding)
        one_player = one_player_fn(params, jax.random.key(1, impl="rbg"), action, root.embedding)[0]
        policy = mctx.muzero_policy(
            params, jax.random.key(2, impl="rbg"), root, recurrent_fn, num_simulations=4
        )
        return root, step, one_player, policy

    root, (output, embedding), one_player, policy = run(obs)
    assert root.value.shape == (B,) and root.prior_logits.shape == (B, A)
    np.testing.assert_array_equal(output.discount, -np.ones(B))
    assert output.reward.shape == (B,) and embedding.shape == root.embedding.shape
    np.testing.assert_allclose(one_player.discount, 0.99)
    assert policy.action.shape == (B,)
    np.testing.assert_allclose(policy.action_weights.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("obs_shape, dtype", [((6, 7, 3), jnp.float32), ((5,), jnp.float32)])
def test_alphazero_shapes(obs_shape, dtype):
    categorical = make_alphazero_networks(TINY, obs_shape, A)
    scalar = make_alphazero_networks(
        NetworkConfig(channels=8, representation_blocks=1, value_support=0), obs_shape, A
    )

    @jax.jit
    def run(obs):
        return [nets.predict(nets.init(KEY), obs) for nets in (categorical, scalar)]

    (policy_logits, value_logits), (_, value) = run(observations(obs_shape, dtype))
    assert policy_logits.shape == (B, A) and value_logits.shape == (B, 11)
    assert value.shape == (B, 1) and scalar.value_transform.decode_logits(value).shape == (B,)


@pytest.mark.parametrize(
    "config, obs_shape, dtype",
    [
        (
            NetworkConfig(torso="impala", impala_channels=(4, 8, 8), impala_dense=16),
            (84, 84, 4),
            jnp.uint8,
        ),
        (TINY, (6, 7, 3), jnp.float32),
        (TINY, (5,), jnp.float32),
    ],
)
def test_actor_critic_shapes(config, obs_shape, dtype):
    nets = make_actor_critic_networks(config, obs_shape, A)
    policy_logits, value = jax.jit(lambda obs: nets.apply(nets.init(KEY), obs))(
        observations(obs_shape, dtype)
    )
    assert policy_logits.shape == (B, A) and value.shape == (B,)


def test_paper_sizes_are_available():
    config = NetworkConfig.atari_muzero()
    assert (config.channels, config.representation_blocks, config.value_support) == (256, 16, 300)
    nets = make_muzero_networks(config, (84, 84, 4), 18)
    params = jax.eval_shape(nets.init, jax.random.key(0))  # shapes only: no compute
    latent = jax.eval_shape(nets.represent, params, jax.ShapeDtypeStruct((2, 84, 84, 4), jnp.uint8))
    assert latent.shape == (2, 6, 6, 256)
    impala = NetworkConfig.atari_impala()
    assert impala.impala_channels == (16, 32, 32) and impala.impala_dense == 256


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"torso": "transformer"}, "torso"),
        ({"channels": 0}, "channels"),
        ({"mlp_sizes": (16, -1)}, "mlp_sizes"),
        ({"value_support": -1}, "value_support"),
        ({"transform_eps": 0.0}, "transform_eps"),
        ({"latent_scaling": "tanh"}, "latent_scaling"),
        ({"block_norm": "batch"}, "block_norm"),
        ({"dynamics_residual": 1}, "dynamics_residual"),
        ({"zero_init_heads": "yes"}, "zero_init_heads"),
    ],
)
def test_bad_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"NetworkConfig.{field}"):
        NetworkConfig(**overrides)


def test_observation_shape_mismatch_is_a_clear_error():
    nets = make_muzero_networks(TINY, (6, 7, 3), A)
    params = jax.eval_shape(nets.init, KEY)
    with pytest.raises(ValueError, match="expected observations of shape"):
        nets.represent(params, jnp.zeros((B, 7, 6, 3)))
    with pytest.raises(ValueError, match="torso"):
        make_muzero_networks(NetworkConfig(torso="resnet"), (5,), A)
    with pytest.raises(ValueError, match="impala"):
        make_muzero_networks(NetworkConfig(torso="impala"), (84, 84, 4), A)


def test_board_actions_mark_the_cell_or_column_played():
    """A conv dynamics must see *where* a move was played: constant planes cannot say it."""
    from muzero.networks import _action_planes

    # One program a call, read back in NumPy (eager jnp ops compile one program apiece).
    @functools.partial(jax.jit, static_argnums=(1, 2, 3))
    def action_planes(actions, num_actions, shape, mode):
        return _action_planes(actions, jax.nn.one_hot(actions, num_actions), shape, mode)

    planes = np.asarray(action_planes(np.array([4, 9]), 10, (2, 3, 3), "auto"))  # 3x3 + a pass
    assert planes.shape == (2, 3, 3, 2)
    expected = np.zeros((3, 3))
    expected[1, 1] = 1.0
    assert np.array_equal(planes[0, :, :, 0], expected) and not planes[0, :, :, 1].any()
    assert not planes[1, :, :, 0].any() and planes[1, :, :, 1].all()  # the pass
    columns = np.asarray(action_planes(np.array([2]), 7, (1, 6, 7), "auto"))
    assert columns.shape == (1, 6, 7, 1)
    assert columns[0, :, 2, 0].all() and columns[0].sum() == 6  # connect four: the column
    # Pong: 6 actions over a 6x6 downsampled latent; the network asks for constant planes there.
    atari = np.asarray(action_planes(np.array([3]), 6, (1, 6, 6), "constant"))
    assert atari.shape == (1, 6, 6, 6) and atari[0, :, :, 3].all() and atari.sum() == 36
    with pytest.raises(ValueError, match="action_planes 'board'"):
        action_planes(np.array([3]), 5, (1, 6, 6), "board")


def test_latent_scaling_and_block_norm_options():
    """ "min_max" keeps every latent in [0, 1] with its extremes reached; "none" leaves the raw
    latent (here outside [0, 1]); block_norm "none" drops every LayerNorm."""
    obs = jax.random.normal(KEY, (B, 6, 7, 3)) * 3.0
    actions = jnp.arange(B) % A
    for scaling in ("min_max", "none"):
        config = dataclasses.replace(TINY, latent_scaling=scaling)
        nets = make_muzero_networks(config, (6, 7, 3), A)
        params = jax.jit(nets.init)(KEY)  # jitted: op by op, each small op compiles on its own
        latent = jax.jit(nets.represent)(params, obs)
        _, next_latent = jax.jit(nets.dynamics)(params, latent, actions)
        for x in (latent, next_latent):
            x = np.asarray(x)
            low, high = x.min(axis=(1, 2, 3)), x.max(axis=(1, 2, 3))
            if scaling == "min_max":
                assert np.allclose(low, 0.0) and np.allclose(high, 1.0, atol=1e-5)
            else:
                assert (low < 0).any() or (high > 1).any()
    with_norm = jax.jit(make_muzero_networks(TINY, (6, 7, 3), A).init)(KEY)
    without_nets = make_muzero_networks(dataclasses.replace(TINY, block_norm="none"), (6, 7, 3), A)
    without = jax.jit(without_nets.init)(KEY)
    paths = lambda p: [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(p)]
    assert any("LayerNorm" in k for k in paths(with_norm))
    assert not any("LayerNorm" in k for k in paths(without))
    assert len(paths(without)) < len(paths(with_norm))


def test_zero_initialised_heads_and_a_residual_dynamics():
    """zero_init_heads: every head's first prediction is uniform (value and reward 0);
    dynamics_residual: the MLP dynamics' next latent is the latent plus what it adds, so with
    the added part's weights at zero the latent passes through unchanged."""
    config = dataclasses.replace(
        TINY, torso="mlp", latent_scaling="none", zero_init_heads=True, dynamics_residual=True
    )
    nets = make_muzero_networks(config, (5,), A)
    params = jax.jit(nets.init)(KEY)
    obs = jax.random.normal(KEY, (B, 5))
    actions = jnp.arange(B) % A
    latent = jax.jit(nets.represent)(params, obs)
    reward_logits, next_latent = jax.jit(nets.dynamics)(params, latent, actions)
    policy_logits, value_logits = jax.jit(nets.predict)(params, latent)
    for logits in (reward_logits, policy_logits, value_logits):
        assert not np.asarray(logits).any()
    np.testing.assert_allclose(config.value_transform().decode_logits(value_logits), 0.0, atol=1e-5)
    assert not np.allclose(next_latent, latent)  # the dynamics adds something at init
    zeroed = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "dynamics_out" in jax.tree_util.keystr(path) else x,
        params,
    )
    _, passed = jax.jit(nets.dynamics)(zeroed, latent, actions)
    np.testing.assert_allclose(passed, latent, rtol=1e-6)
    plain = make_muzero_networks(dataclasses.replace(config, dynamics_residual=False), (5,), A)
    _, replaced = jax.jit(plain.dynamics)(zeroed, latent, actions)
    assert not np.asarray(replaced).any()  # without the residual: only the (zero) output


def test_heads_start_at_zero_by_default_for_muzero_only():
    """zero_init_heads=None (the default): MuZero's heads start at zero, AlphaZero's and the
    actor-critic's as any layer (measured for MuZero only; Stochastic MuZero's as those)."""
    default = dataclasses.replace(TINY, torso="mlp", zero_init_heads=None)
    assert NetworkConfig().zero_init_heads is None
    model = make_muzero_networks(default, (5,), A)
    policy_value = make_alphazero_networks(default, (5,), A)
    actor_critic = make_actor_critic_networks(default, (5,), A)

    @jax.jit
    def first_predictions(obs):
        latent = model.represent(model.init(KEY), obs)
        return (
            model.predict(model.init(KEY), latent),
            policy_value.predict(policy_value.init(KEY), obs),
            actor_critic.apply(actor_critic.init(KEY), obs)[0],
        )

    (policy, value), alphazero, actor_critic_logits = first_predictions(jnp.ones((B, 5)))
    assert not np.asarray(policy).any() and not np.asarray(value).any()
    assert np.asarray(alphazero[0]).any() and np.asarray(actor_critic_logits).any()


def test_a_bfloat16_network_has_the_same_parameters_and_searches_like_the_float32_one():
    # The same float32 parameters either way (so checkpoints do not change), computed in bf16:
    # the outputs the losses and the search use stay float32 and close to the float32 network's.
    import search
    from selfplay.checkpoints import config_differences

    nets = {
        dtype: make_muzero_networks(dataclasses.replace(TINY, compute_dtype=dtype), (6, 7, 3), A)
        for dtype in ("float32", "bfloat16")
    }
    params = {dtype: jax.jit(n.init)(KEY) for dtype, n in nets.items()}
    assert jax.tree.structure(params["float32"]) == jax.tree.structure(params["bfloat16"])
    for x, y in zip(*map(jax.tree.leaves, params.values()), strict=True):
        assert x.dtype == y.dtype == jnp.float32
        np.testing.assert_array_equal(x, y)
    saved = {"network": dataclasses.asdict(TINY)}
    resumed = {"network": {**saved["network"], "compute_dtype": "bfloat16"}}
    assert config_differences(saved, resumed, ("network",)) == []  # a run resumes either way

    obs = jax.random.normal(KEY, (16, 6, 7, 3))
    config = search.SearchConfig(num_simulations=16, dirichlet_fraction=0.0, temperature=0.0)

    @functools.partial(jax.jit, static_argnums=0)
    def searched(dtype):
        root = make_root_fn(nets[dtype])(params["float32"], obs)
        recurrent_fn = make_recurrent_fn(nets[dtype], discount=0.99)
        out = search.run(params["float32"], KEY, root, recurrent_fn, config)
        return root, out

    (root32, out32), (root16, out16) = searched("float32"), searched("bfloat16")
    assert root16.embedding.dtype == jnp.bfloat16 and root32.embedding.dtype == jnp.float32
    for value in (root16.prior_logits, root16.value, out16.root_value, out16.action_weights):
        assert value.dtype == jnp.float32
    np.testing.assert_allclose(root16.value, root32.value, atol=0.05)
    np.testing.assert_allclose(root16.prior_logits, root32.prior_logits, atol=0.05)
    # A near-tie of two children may break the other way and send a row's simulations down
    # another path: the search's outputs agree on average, each row within a looser bound.
    value_error = np.abs(out16.root_value - out32.root_value)  # [B]
    assert value_error.mean() < 0.03 and value_error.max() < 0.15, value_error
    assert np.abs(out16.action_weights - out32.action_weights).sum(-1).mean() < 0.2


def test_value_prefix_search_rewards_are_prefix_differences_reset_every_horizon():
    # EfficientZero's value prefix in the search: a step's reward is its prefix minus its
    # parent's, and at depths 0, H, 2H the LSTM and the parent's prefix start from zero.
    nets = make_muzero_networks(TINY, (5,), A, value_prefix=True)
    horizon = 2
    root_fn = make_root_fn(nets, value_prefix_horizon=horizon)
    recurrent_fn = make_recurrent_fn(nets, discount=0.9, value_prefix_horizon=horizon)
    key = jax.random.key(1, impl="rbg")
    actions = [jnp.array([0, 1, 2]), jnp.array([1, 1, 0]), jnp.array([2, 0, 1])]

    @jax.jit
    def run(obs):
        params = nets.init(KEY)
        embedding = root_fn(params, obs).embedding
        rewards, prefixes = [], []
        for action in actions:
            output, embedding = recurrent_fn(params, key, action, embedding)
            rewards.append(output.reward)
            prefixes.append(embedding.prefix)
        # By hand: depth 0 -> 1 from a fresh carry, 1 -> 2 carried, 2 -> 3 fresh again.
        latent = nets.represent(params, obs)
        carry = nets.prefix_carry(B)
        by_hand = []
        for depth, action in enumerate(actions):
            if depth % horizon == 0:
                carry = nets.prefix_carry(B)
            latent = nets.transition(params, latent, action)
            logits, carry = nets.value_prefix(params, latent, carry)
            by_hand.append(nets.reward_transform.decode_logits(logits))
        return rewards, prefixes, by_hand, embedding.depth

    rewards, prefixes, by_hand, depth = run(observations((5,)))
    np.testing.assert_array_equal(depth, [3, 3, 3])
    for got, expected in zip(prefixes, by_hand, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rewards[0], by_hand[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rewards[1], by_hand[1] - by_hand[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rewards[2], by_hand[2], rtol=1e-5, atol=1e-6)  # after the reset
    with pytest.raises(ValueError, match="transition"):
        nets.dynamics(None, jnp.zeros((B, 16)), jnp.zeros((B,), jnp.int32))
    with pytest.raises(ValueError, match="value_prefix_horizon"):
        make_recurrent_fn(nets, value_prefix_horizon=0)
