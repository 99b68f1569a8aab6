"""Value transforms: h and its inverse, two-hot projection, the categorical and scalar losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muzero import (
    categorical_transform,
    h_inverse,
    h_transform,
    scalar_to_two_hot,
    scalar_transform,
    two_hot_to_scalar,
)

# Wide range with fine coverage of small magnitudes, where cancellation would show.
WIDE = np.concatenate(
    [-np.logspace(-6, 4, 501), [0.0], np.logspace(-6, 4, 501), np.linspace(-1e4, 1e4, 1001)]
).astype(np.float32)


def test_h_inverse_undoes_h_over_a_wide_range():
    x = jnp.asarray(WIDE)
    np.testing.assert_allclose(h_inverse(h_transform(x)), WIDE, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h_transform(h_inverse(x / 100)), WIDE / 100, rtol=1e-5, atol=1e-5)


def test_h_matches_its_formula():
    x = jnp.array([-4.0, 0.0, 3.0])
    expected = np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + 1e-3 * np.asarray(x)
    np.testing.assert_allclose(h_transform(x), expected, rtol=1e-6)


def test_categorical_round_trip_over_a_wide_range():
    transform = categorical_transform(300)  # MuZero's Atari support covers |x| <= ~1e4.
    target = transform.encode(jnp.asarray(WIDE))
    assert target.shape == (WIDE.size, 601)
    # Logits equal to the log of the two-hot target decode back to the scalar.
    decoded = transform.decode_logits(jnp.log(target))
    np.testing.assert_allclose(decoded, WIDE, rtol=1e-5, atol=1e-5)


def test_two_hot_puts_mass_on_the_two_neighbouring_bins():
    probs = scalar_to_two_hot(jnp.array([1.25, -2.0, 7.5, -9.0]), support_size=3)
    np.testing.assert_allclose(probs[0], [0, 0, 0, 0, 0.75, 0.25, 0])
    np.testing.assert_allclose(probs[1], [0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(probs[2], [0, 0, 0, 0, 0, 0, 1])  # clipped to the top bin
    np.testing.assert_allclose(probs[3], [1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(two_hot_to_scalar(probs[:2], 3), [1.25, -2.0], rtol=1e-6)


def test_categorical_loss_is_smallest_at_the_target():
    transform = categorical_transform(5)
    target = jnp.array([0.3, -2.0])
    best = transform.loss(jnp.log(transform.encode(target) + 1e-20), target)
    other = transform.loss(jax.random.normal(jax.random.key(0), (2, 11)), target)
    assert best.shape == (2,)
    assert np.all(np.asarray(other) > np.asarray(best))
    # Cross-entropy at the optimum is the entropy of the two-hot target.
    p = np.asarray(transform.encode(target))
    entropy = -np.sum(p * np.log(np.maximum(p, 1e-30)), axis=-1)
    np.testing.assert_allclose(best, entropy, rtol=1e-5, atol=1e-6)


def test_scalar_transform_is_squared_error():
    transform = scalar_transform()
    assert transform.num_bins == 1
    logits = jnp.array([[1.0], [-0.5]])
    np.testing.assert_allclose(transform.decode_logits(logits), [1.0, -0.5])
    np.testing.assert_allclose(transform.loss(logits, jnp.array([0.0, 0.5])), [1.0, 1.0])
    np.testing.assert_allclose(transform.encode(jnp.array([2.0])), [[2.0]])


def test_loss_gradient_does_not_flow_into_the_target():
    transform = categorical_transform(3)
    grad = jax.grad(lambda t: transform.loss(jnp.zeros((7,)), t))(jnp.float32(1.5))
    assert grad == 0


@pytest.mark.parametrize("support", [0, -1, 2.5])
def test_bad_support_is_a_clear_error(support):
    with pytest.raises(ValueError, match="support_size"):
        categorical_transform(support)
