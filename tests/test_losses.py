"""MuZero and AlphaZero losses: they fit a fixed batch, respect weights and masks, check configs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from muzero import (
    AlphaZeroBatch,
    LossConfig,
    NetworkConfig,
    Trajectory,
    make_alphazero_loss,
    make_alphazero_networks,
    make_muzero_loss,
    make_muzero_networks,
    make_muzero_priority_fn,
    muzero_batch,
    scale_gradient,
)

KEY = jax.random.key(0, impl="rbg")  # rbg keys compile much faster than threefry on CPU
A, D, N = 3, 6, 8
MLP = dict(mlp_sizes=(32,), latent_size=32, head_hidden=32)


def random_window(config: LossConfig, seed=0, one_hot_policy=True):
    """N random windows of length K + n + 1 with an episode end inside some of them."""
    length = config.window_length
    # numpy data: eager jax.random would compile a threefry kernel per shape (seconds each).
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(length, N, A)) * 3
    policy = (
        np.eye(A)[logits.argmax(-1)]
        if one_hot_policy
        else np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    )
    return jax.device_put(  # device_put: jnp.asarray compiles a program per shape
        Trajectory(
            observation=rng.normal(size=(length, N, D)).astype(np.float32),
            action=rng.integers(0, A, (length, N)).astype(np.int32),
            reward=rng.integers(-2, 3, (length, N)).astype(np.float32),
            discount=np.where(rng.uniform(size=(length, N)) < 0.15, 0.0, 1.0).astype(np.float32),
            search_policy=policy.astype(np.float32),
            search_value=(rng.normal(size=(length, N)) * 2).astype(np.float32),
            legal_mask=np.ones((length, N, A), bool),
            to_play=np.zeros((length, N), np.int32),
            behaviour_logits=np.zeros((length, N, A), np.float32),
            policy_version=np.zeros((length, N), np.int32),
        ),
    )


# One program: eager jnp ops compile one program apiece.
batch_of = jax.jit(
    muzero_batch,
    static_argnames=(
        "unroll_steps",
        "td_steps",
        "discount",
        "two_player",
        "unroll_observations",
        "value_prefix_horizon",
    ),
)


def fit(loss_fn, params, batch, steps, learning_rate=3e-3):
    """Adam on one fixed batch; returns the losses before and after."""
    optimizer = optax.adam(learning_rate)

    @jax.jit
    def train(params):
        def step(carry, _):
            params, opt_state = carry
            (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, KEY)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), loss

        _, losses = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
        return losses

    losses = np.asarray(train(params))
    return float(losses[0]), float(losses[-1])


def entropy(p):
    return -jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), axis=-1)


@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16"])
def test_muzero_loss_fits_a_fixed_batch_with_scalar_heads(compute_dtype):
    config = LossConfig(unroll_steps=3, td_steps=2, discount=0.9, value_loss_weight=1.0)
    network = NetworkConfig(value_support=0, reward_support=0, compute_dtype=compute_dtype, **MLP)
    nets = make_muzero_networks(network, (D,), A)
    batch = batch_of(
        random_window(config),
        jnp.ones((N,)),
        unroll_steps=3,
        td_steps=2,
        discount=0.9,
        two_player=False,
    )
    start, end = fit(make_muzero_loss(nets, config), jax.jit(nets.init)(KEY), batch, 250)
    # One-hot policies and squared errors: the optimum is 0.
    assert end < 0.02 * start, (start, end)


def test_muzero_loss_fits_a_fixed_batch_with_categorical_heads():
    config = LossConfig(unroll_steps=2, td_steps=3, discount=1.0, two_player=True)
    nets = make_muzero_networks(NetworkConfig(value_support=4, reward_support=3, **MLP), (D,), A)
    batch = batch_of(
        random_window(config, seed=1, one_hot_policy=False),
        jnp.ones((N,)),
        unroll_steps=2,
        td_steps=3,
        discount=1.0,
        two_player=True,
    )
    # Cross-entropies bottom out at the entropies of the targets, not at 0.
    k = config.unroll_steps

    @jax.jit
    def floor_of(batch):
        step_scale = jnp.array([1.0] + [1.0 / k] * k)
        return jnp.mean(
            jnp.sum(
                step_scale
                * (
                    config.value_loss_weight
                    * entropy(nets.value_transform.encode(batch.value_target))
                    + config.reward_loss_weight
                    * entropy(nets.reward_transform.encode(batch.reward_target))
                    * (jnp.arange(k + 1) > 0)
                    + config.policy_loss_weight * entropy(batch.policy_target) * batch.policy_mask
                ),
                -1,
            )
        )

    floor = np.asarray(floor_of(batch))  # a float32 scalar, as before
    start, end = fit(make_muzero_loss(nets, config), jax.jit(nets.init)(KEY), batch, 250)
    assert end - floor < 0.05 * (start - floor), (start, end, float(floor))


def test_muzero_loss_on_a_conv_network_gives_finite_gradients():
    config = LossConfig(unroll_steps=2, td_steps=1)
    nets = make_muzero_networks(
        NetworkConfig(
            channels=4,
            representation_blocks=0,
            dynamics_blocks=1,
            prediction_blocks=0,
            head_channels=1,
            head_hidden=8,
        ),
        (3, 3, 2),
        A,
    )
    window = random_window(config)._replace(
        observation=jax.device_put(
            np.random.default_rng(3)
            .uniform(size=(config.window_length, N, 3, 3, 2))
            .astype(np.float32)
        )
    )
    batch = batch_of(
        window, jnp.ones((N,)), unroll_steps=2, td_steps=1, discount=0.997, two_player=False
    )
    loss_fn = make_muzero_loss(nets, config)
    grads, metrics = jax.jit(jax.grad(loss_fn, has_aux=True))(jax.jit(nets.init)(KEY), batch, KEY)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    assert set(metrics) >= {"loss", "value_loss", "reward_loss", "policy_loss"}
    assert all(np.ndim(v) == 0 for v in metrics.values())


def test_importance_weights_and_policy_mask():
    config = LossConfig(unroll_steps=2, td_steps=2)
    nets = make_muzero_networks(NetworkConfig(**MLP), (D,), A)
    params = jax.jit(nets.init)(KEY)
    loss_fn = jax.jit(make_muzero_loss(nets, config))
    batch = batch_of(
        random_window(config),
        jnp.ones((N,)),
        unroll_steps=2,
        td_steps=2,
        discount=0.997,
        two_player=False,
    )

    def loss(b):
        return float(loss_fn(params, b, KEY)[0])

    @jax.jit
    def variants(params, batch):  # the batches compared below, in one program
        # A zero weight removes an example: the loss is the weighted mean over the batch.
        copies_of_first = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), batch)
        only_first = batch._replace(importance_weight=jnp.zeros((N,)).at[0].set(1.0))
        # Policy targets of masked (absorbing) steps do not count.
        masked = batch._replace(policy_mask=batch.policy_mask.at[:, 1:].set(0.0))
        scrambled = masked._replace(
            policy_target=masked.policy_target.at[:, 1:].set(
                jax.nn.one_hot(jnp.zeros((N, 2), jnp.int32), A)
            )
        )
        # New priorities: the current value's distance to the first value target, per window.
        root_value = nets.value_transform.decode_logits(
            nets.predict(params, nets.represent(params, batch.observation))[1]
        )
        offset = jnp.linspace(-2.0, 2.0, N)
        shifted = batch._replace(value_target=batch.value_target.at[:, 0].set(root_value + offset))
        return copies_of_first, only_first, masked, scrambled, offset, shifted

    copies_of_first, only_first, masked, scrambled, offset, shifted = variants(params, batch)
    np.testing.assert_allclose(loss(only_first), loss(copies_of_first) / N, rtol=1e-5)
    np.testing.assert_allclose(loss(masked), loss(scrambled), rtol=1e-6)
    priorities = jax.jit(make_muzero_priority_fn(nets))(params, shifted)
    np.testing.assert_allclose(priorities, np.abs(np.asarray(offset)), rtol=1e-4, atol=1e-5)


def test_wrong_unroll_length_is_rejected():
    nets = make_muzero_networks(NetworkConfig(**MLP), (D,), A)
    batch = batch_of(
        random_window(LossConfig(unroll_steps=2, td_steps=2)),
        jnp.ones((N,)),
        unroll_steps=2,
        td_steps=2,
        discount=1.0,
        two_player=False,
    )
    loss_fn = make_muzero_loss(nets, LossConfig(unroll_steps=3, td_steps=2))
    with pytest.raises(AssertionError):
        loss_fn(jax.eval_shape(nets.init, KEY), batch, KEY)


def test_scale_gradient_scales_only_the_gradient():
    x = np.array([2.0, -1.0], np.float32)
    np.testing.assert_allclose(jax.jit(scale_gradient, static_argnums=1)(x, 0.5), x)
    np.testing.assert_allclose(
        jax.jit(jax.grad(lambda x: scale_gradient(x, 0.5).sum()))(x), [0.5, 0.5]
    )


@pytest.mark.parametrize(
    "value_support, compute_dtype", [(0, "float32"), (5, "float32"), (5, "bfloat16")]
)
def test_alphazero_loss_fits_a_fixed_batch(value_support, compute_dtype):
    network = NetworkConfig(value_support=value_support, compute_dtype=compute_dtype, **MLP)
    nets = make_alphazero_networks(network, (D,), A)
    rng = np.random.default_rng(4)
    batch = jax.device_put(
        AlphaZeroBatch(
            observation=rng.normal(size=(N, D)).astype(np.float32),
            policy_target=np.eye(A, dtype=np.float32)[rng.integers(0, A, N)],
            value_target=rng.choice([-1.0, 1.0], N).astype(np.float32),  # game outcomes
            mask=np.array([1.0] * (N - 1) + [0.0], np.float32),
            importance_weight=np.ones((N,), np.float32),
        ),
    )
    config = LossConfig(value_loss_weight=1.0)
    # With the last state masked, the rest fits to the floor given by the value targets.

    @jax.jit
    def value_floor(batch):
        return jnp.mean(batch.mask * entropy(nets.value_transform.encode(batch.value_target)))

    floor = float(value_floor(batch))
    if value_support == 0:
        floor = 0.0
    start, end = fit(make_alphazero_loss(nets, config), jax.jit(nets.init)(KEY), batch, 300)
    assert end - floor < 0.05 * (start - floor), (start, end, floor)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"unroll_steps": 0}, "unroll_steps"),
        ({"td_steps": 2.5}, "td_steps"),
        ({"discount": 1.5}, "discount"),
        ({"value_loss_weight": -1.0}, "value_loss_weight"),
        ({"dynamics_gradient_scale": 2.0}, "dynamics_gradient_scale"),
        ({"clip_rho_threshold": 0.0}, "clip_rho_threshold"),
    ],
)
def test_bad_loss_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"LossConfig.{field}"):
        LossConfig(**overrides)


def test_consistency_loss_falls_on_a_fixed_batch():
    # EfficientZero's consistency term alone: the dynamics' predicted projections move towards
    # the projections of the real next observations (a cosine of 1 is the loss's -1 floor).
    config = LossConfig(
        unroll_steps=2,
        td_steps=2,
        consistency_weight=1.0,
        value_loss_weight=0.0,
        reward_loss_weight=0.0,
        policy_loss_weight=0.0,
    )
    network = NetworkConfig(projection_hidden=16, projection_size=8, predictor_hidden=8, **MLP)
    nets = make_muzero_networks(network, (D,), A, projection=True)
    batch = batch_of(
        random_window(config, seed=3),
        jnp.ones((N,)),
        unroll_steps=2,
        td_steps=2,
        discount=0.9,
        two_player=False,
        unroll_observations=True,
    )
    assert batch.unroll_observation.shape == (N, 2, D)
    loss_fn = make_muzero_loss(nets, config)
    params = jax.jit(nets.init)(KEY)
    _, metrics = jax.jit(loss_fn)(params, batch, KEY)
    assert -1.0 <= float(metrics["consistency_loss"]) <= 1.0
    start, end = fit(loss_fn, params, batch, 150)
    # Per example at most -(1 + 1/2) (both steps inside the episode: -1 each, weighted 1/K).
    assert end < start - 0.2 and end < -0.5, (start, end)
    with pytest.raises(ValueError, match="projection=True"):
        make_muzero_loss(make_muzero_networks(network, (D,), A), config)
    without = batch._replace(unroll_observation=None)
    with pytest.raises(ValueError, match="unroll_observation"):  # at trace time
        jax.jit(loss_fn)(params, without, KEY)


def test_value_prefix_loss_fits_the_summed_rewards_of_a_fixed_batch():
    # The LSTM head fits the value-prefix targets (rewards summed since its reset every 2 steps)
    # of a 4-step unroll; with scalar heads the optimum of the reward term is 0.
    config = LossConfig(
        unroll_steps=4,
        td_steps=2,
        discount=0.9,
        value_prefix_horizon=2,
        value_loss_weight=0.0,
        policy_loss_weight=0.0,
    )
    network = NetworkConfig(value_support=0, reward_support=0, value_prefix_hidden=16, **MLP)
    nets = make_muzero_networks(network, (D,), A, value_prefix=True)
    window = random_window(config, seed=4)
    batch = batch_of(
        window,
        jnp.ones((N,)),
        unroll_steps=4,
        td_steps=2,
        discount=0.9,
        two_player=False,
        value_prefix_horizon=2,
    )
    loss_fn = make_muzero_loss(nets, config)
    start, end = fit(loss_fn, jax.jit(nets.init)(KEY), batch, 300)
    assert end < 0.05 * start, (start, end)
    with pytest.raises(ValueError, match="value_prefix_horizon"):
        make_muzero_loss(make_muzero_networks(network, (D,), A), config)
