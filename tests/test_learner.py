"""The learner's pure update, its optimizer and config, and the one-device replication path."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from muzero.config import OptimizerConfig
from muzero.distributed import (
    global_devices,
    make_replicated_update,
    replicate,
    shard_batch,
    unreplicate,
)
from muzero.learner import (
    TrainState,
    init_train_state,
    make_optimizer,
    make_schedule,
    make_update,
    pmean_as_one,
)
from tests._regression import init_params, loss_fn, make_batch

# One program each: eager jnp ops compile one program apiece.
_init_params = jax.jit(init_params)
_make_batch = jax.jit(make_batch, static_argnums=(1, 2))
_init_train_state = jax.jit(init_train_state, static_argnums=1)  # the optimizer is static


def _train(config: OptimizerConfig, steps: int):
    optimizer = make_optimizer(config)
    update = jax.jit(make_update(loss_fn, optimizer))
    state = _init_train_state(_init_params(jax.random.key(0)), optimizer, jax.random.key(1))
    batch = _make_batch(jax.random.key(2), 64)
    history = []
    for _ in range(steps):
        state, metrics = update(state, batch)
        history.append(metrics)
    return state, history


@pytest.mark.parametrize(
    "config",
    [
        OptimizerConfig(learning_rate=1e-2),
        OptimizerConfig(optimizer="sgd", learning_rate=5e-2, max_grad_norm=1.0),
        OptimizerConfig(
            learning_rate=1e-2,
            schedule="linear",
            warmup_steps=5,
            decay_steps=100,
            weight_decay=1e-3,
        ),
    ],
    ids=["adam", "sgd-clipped", "adamw-warmup-linear"],
)
def test_update_reduces_the_loss(config):
    state, history = _train(config, steps=40)
    assert float(history[-1]["loss"]) < 0.5 * float(history[0]["loss"])
    assert int(state.step) == 40


def test_metrics_hold_loss_terms_grad_norm_and_learning_rate():
    config = OptimizerConfig(learning_rate=1e-2, schedule="cosine", warmup_steps=2, decay_steps=4)
    state, history = _train(config, steps=6)
    assert set(history[0]) == {"loss", "mse", "rmse", "grad_norm", "learning_rate"}
    schedule = make_schedule(config)
    np.testing.assert_allclose(
        [float(m["learning_rate"]) for m in history],
        [float(schedule(i)) for i in range(6)],
        rtol=1e-6,
    )
    params = _init_params(jax.random.key(0))

    @jax.jit
    def grad_norm(params):
        grads = jax.grad(lambda p: loss_fn(p, make_batch(jax.random.key(2), 64), None)[0])(params)
        return optax.global_norm(grads)

    np.testing.assert_allclose(history[0]["grad_norm"], grad_norm(params), rtol=1e-5)


def test_the_peak_rate_in_the_state_is_the_optimizers_own_at_that_rate_in_one_program():
    """`TrainState.learning_rate` (the peak rate as an input): the update is the one an
    optimizer built with that rate makes, warm-up and decay included, and one compiled update
    serves every rate."""
    config = OptimizerConfig(
        learning_rate=1e-2, schedule="cosine", warmup_steps=2, decay_steps=4, weight_decay=1e-3
    )
    optimizer = make_optimizer(config)
    update = jax.jit(make_update(loss_fn, optimizer))
    batch = _make_batch(jax.random.key(2), 64)
    for peak in (3e-3, 4e-2):
        own = make_optimizer(dataclasses.replace(config, learning_rate=peak))
        own_update = jax.jit(make_update(loss_fn, own))
        expected = _init_train_state(_init_params(jax.random.key(0)), own, jax.random.key(1))
        state = _init_train_state(_init_params(jax.random.key(0)), optimizer, jax.random.key(1))
        state = state._replace(learning_rate=jnp.float32(peak))
        for _ in range(5):  # through the warm-up into the decay
            state, metrics = update(state, batch)
            expected, expected_metrics = own_update(expected, batch)
            np.testing.assert_allclose(metrics["learning_rate"], expected_metrics["learning_rate"])
            chex.assert_trees_all_close(state.params, expected.params, rtol=1e-5, atol=1e-7)
        assert state.learning_rate == np.float32(peak)  # carried from update to update
    assert update._cache_size() == 1


def test_the_key_is_split_every_step():
    def keyed_loss(params, batch, key):
        loss, metrics = loss_fn(params, batch, key)
        return loss, {**metrics, "draw": jax.random.uniform(key)}

    optimizer = make_optimizer(OptimizerConfig())
    update = jax.jit(make_update(keyed_loss, optimizer))
    state = _init_train_state(_init_params(jax.random.key(0)), optimizer, jax.random.key(1))
    batch = _make_batch(jax.random.key(2), 8)
    keys, draws = [state.key], []
    for _ in range(3):
        state, metrics = update(state, batch)
        keys.append(state.key)
        draws.append(float(metrics["draw"]))
    assert len({tuple(np.asarray(jax.random.key_data(k)).tolist()) for k in keys}) == 4
    assert len(set(draws)) == 3  # the loss gets a fresh key every step


def test_schedules():
    warm = OptimizerConfig(
        learning_rate=1.0,
        schedule="cosine",
        warmup_steps=10,
        decay_steps=20,
        final_learning_rate=0.1,
    )
    s = make_schedule(warm)
    np.testing.assert_allclose(
        [s(0), s(5), s(10), s(20), s(30), s(100)],
        [0.0, 0.5, 1.0, 0.55, 0.1, 0.1],
        rtol=1e-5,
        atol=1e-6,
    )
    s = make_schedule(OptimizerConfig(learning_rate=1.0, schedule="linear", decay_steps=10))
    np.testing.assert_allclose([s(0), s(5), s(10), s(50)], [1.0, 0.5, 0.0, 0.0], atol=1e-6)
    s = make_schedule(OptimizerConfig(learning_rate=0.3))
    np.testing.assert_allclose([s(0), s(10**6)], [0.3, 0.3], rtol=1e-6)


def test_clipping_bounds_the_step():
    config = OptimizerConfig(optimizer="sgd", learning_rate=0.1, momentum=0.0, max_grad_norm=1e-3)
    state, history = _train(config, steps=1)
    assert float(history[0]["grad_norm"]) > 1e-3  # reported before clipping
    params = _init_params(jax.random.key(0))
    delta = jax.jit(lambda a, b: optax.global_norm(jax.tree.map(jnp.subtract, a, b)))(
        state.params, params
    )
    np.testing.assert_allclose(delta, 0.1 * 1e-3, rtol=1e-3)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_weight_decay_is_decoupled_and_spares_biases(optimizer):
    def zero_loss(params, batch, key):
        return 0.0 * loss_fn(params, batch, key)[0], {}

    config = OptimizerConfig(optimizer=optimizer, learning_rate=0.5, weight_decay=0.1)
    opt = make_optimizer(config)
    params = _init_params(jax.random.key(0))
    params = {**params, "b1": np.ones_like(params["b1"])}
    state = _init_train_state(params, opt, jax.random.key(1))
    state, _ = jax.jit(make_update(zero_loss, opt))(state, _make_batch(jax.random.key(2), 8))
    # Zero gradient: only the decay moves the kernels, by lr * wd, never the biases.
    np.testing.assert_allclose(state.params["w1"], params["w1"] * (1 - 0.5 * 0.1), rtol=1e-6)
    np.testing.assert_array_equal(state.params["b1"], params["b1"])


def test_a_loss_that_is_not_scalar_is_refused():
    def bad_loss(params, batch, key):
        loss, metrics = loss_fn(params, batch, key)
        return jnp.stack([loss, loss]), metrics

    optimizer = make_optimizer(OptimizerConfig())
    state = _init_train_state(_init_params(jax.random.key(0)), optimizer, jax.random.key(1))
    with pytest.raises((AssertionError, TypeError)):
        make_update(bad_loss, optimizer)(state, _make_batch(jax.random.key(2), 8))


@pytest.mark.parametrize(
    "field, value",
    [
        ("optimizer", "rmsprop"),
        ("schedule", "exponential"),
        ("learning_rate", 0.0),
        ("learning_rate", "1e-3"),
        ("warmup_steps", -1),
        ("warmup_steps", 2.5),
        ("decay_steps", 0),
        ("final_learning_rate", 1.0),
        ("max_grad_norm", -1.0),
        ("weight_decay", -0.1),
        ("adam_b1", 1.0),
        ("adam_b2", -0.1),
        ("adam_eps", 0.0),
        ("momentum", 1.0),
        ("nesterov", 1),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"OptimizerConfig\.{field} must be"):
        OptimizerConfig(**{field: value})


def test_config_is_frozen():
    config = OptimizerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.learning_rate = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("batch_axis, time", [(0, None), (1, 3)])
def test_replicated_update_on_one_device_matches_the_plain_update(batch_axis, time):
    devices = global_devices()[:1]
    optimizer = make_optimizer(OptimizerConfig(optimizer="sgd", learning_rate=0.1))
    state = _init_train_state(_init_params(jax.random.key(0)), optimizer, jax.random.key(1))
    batch = _make_batch(jax.random.key(2), 8, time)
    expected, expected_metrics = make_update(loss_fn, optimizer)(state, batch)  # without jit
    update = make_replicated_update(loss_fn, optimizer, devices, batch_axis=batch_axis)
    replicated = replicate(state, devices)
    new, metrics = update(replicated, shard_batch(batch, devices, batch_axis))
    assert isinstance(new, TrainState)
    chex.assert_trees_all_close(unreplicate(new.params), expected.params, rtol=1e-5)
    chex.assert_trees_all_close(metrics, expected_metrics, rtol=1e-5)
    # The update donates the replicated state, never the caller's arrays replicate copied.
    assert not any(x.is_deleted() for x in jax.tree.leaves(state))
    assert all(x.is_deleted() for x in jax.tree.leaves(replicated.params))


def test_shard_batch_names_a_leaf_without_the_batch_axis():
    batch = _make_batch(jax.random.key(2), 8)
    with pytest.raises(ValueError, match=r"\.y with shape \(8,\) needs a batch axis 1"):
        shard_batch(batch, global_devices()[:1], batch_axis=1)


def test_global_devices_rejects_a_missing_local_device():
    with pytest.raises(ValueError, match="local device index 99 out of range"):
        global_devices([99])


def test_pmean_as_one_matches_a_pmean_per_leaf():
    # Three shards under vmap's named axis; leaves of three dtypes and several shapes.
    tree = jax.jit(  # one program
        lambda: {
            "w": jnp.arange(3 * 2 * 3, dtype=jnp.float32).reshape(3, 2, 3),
            "b": jnp.array([1.0, 2.0, 4.0], jnp.bfloat16),
            "count": jnp.array([3, 6, 9], jnp.int32),
            "nested": (jnp.linspace(0.0, 1.0, 3 * 4).reshape(3, 4), jnp.array([0.5, 1.5, 2.5])),
        }
    )()
    ours = jax.jit(jax.vmap(lambda t: pmean_as_one(t, "shards"), axis_name="shards"))(tree)
    per_leaf = jax.jit(jax.vmap(lambda t: jax.lax.pmean(t, "shards"), axis_name="shards"))(tree)
    chex.assert_trees_all_equal_dtypes(ours, per_leaf)
    chex.assert_trees_all_close(ours, per_leaf)
    # Every shard holds the mean: the first row of `w` is the mean of its three rows.
    np.testing.assert_allclose(np.asarray(ours["w"])[0], np.mean(np.asarray(tree["w"]), axis=0))
