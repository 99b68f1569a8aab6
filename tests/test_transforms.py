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
    @jax.jit  # one program: eager jnp ops compile one program apiece
    def round_trips(x):
        return h_inverse(h_transform(x)), h_transform(h_inverse(x / 100))

    there_and_back, back_and_there = round_trips(WIDE)
    np.testing.assert_allclose(there_and_back, WIDE, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(back_and_there, WIDE / 100, rtol=1e-5, atol=1e-5)


def test_h_matches_its_formula():
    x = np.array([-4.0, 0.0, 3.0], np.float32)
    expected = np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + 1e-3 * x
    np.testing.assert_allclose(jax.jit(h_transform)(x), expected, rtol=1e-6)


def test_categorical_round_trip_over_a_wide_range():
    transform = categorical_transform(300)  # MuZero's Atari support covers |x| <= ~1e4.

    @jax.jit
    def encode_decode(x):
        target = transform.encode(x)
        # Logits equal to the log of the two-hot target decode back to the scalar.
        return target, transform.decode_logits(jnp.log(target))

    target, decoded = encode_decode(WIDE)
    assert target.shape == (WIDE.size, 601)
    np.testing.assert_allclose(decoded, WIDE, rtol=1e-5, atol=1e-5)


def test_two_hot_puts_mass_on_the_two_neighbouring_bins():
    @jax.jit
    def two_hot_and_back(x):
        probs = scalar_to_two_hot(x, support_size=3)
        return probs, two_hot_to_scalar(probs[:2], 3)

    probs, scalars = two_hot_and_back(np.array([1.25, -2.0, 7.5, -9.0], np.float32))
    probs = np.asarray(probs)
    np.testing.assert_allclose(probs[0], [0, 0, 0, 0, 0.75, 0.25, 0])
    np.testing.assert_allclose(probs[1], [0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(probs[2], [0, 0, 0, 0, 0, 0, 1])  # clipped to the top bin
    np.testing.assert_allclose(probs[3], [1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(scalars, [1.25, -2.0], rtol=1e-6)


def test_categorical_loss_is_smallest_at_the_target():
    transform = categorical_transform(5)

    @jax.jit
    def losses(target):
        best = transform.loss(jnp.log(transform.encode(target) + 1e-20), target)
        other = transform.loss(jax.random.normal(jax.random.key(0), (2, 11)), target)
        return best, other, transform.encode(target)

    best, other, encoded = losses(np.array([0.3, -2.0], np.float32))
    assert best.shape == (2,)
    assert np.all(np.asarray(other) > np.asarray(best))
    # Cross-entropy at the optimum is the entropy of the two-hot target.
    p = np.asarray(encoded)
    entropy = -np.sum(p * np.log(np.maximum(p, 1e-30)), axis=-1)
    np.testing.assert_allclose(best, entropy, rtol=1e-5, atol=1e-6)


def test_scalar_transform_is_squared_error():
    transform = scalar_transform()
    assert transform.num_bins == 1
    outputs = jax.jit(
        lambda logits, target, x: (
            transform.decode_logits(logits),
            transform.loss(logits, target),
            transform.encode(x),
        )
    )
    decoded, loss, encoded = outputs(
        np.array([[1.0], [-0.5]], np.float32),
        np.array([0.0, 0.5], np.float32),
        np.array([2.0], np.float32),
    )
    np.testing.assert_allclose(decoded, [1.0, -0.5])
    np.testing.assert_allclose(loss, [1.0, 1.0])
    np.testing.assert_allclose(encoded, [[2.0]])


def test_loss_gradient_does_not_flow_into_the_target():
    transform = categorical_transform(3)
    grad = np.asarray(
        jax.jit(jax.grad(lambda t: transform.loss(jnp.zeros((7,)), t)))(np.float32(1.5))
    )
    assert grad == 0


@pytest.mark.parametrize("support", [0, -1, 2.5])
def test_bad_support_is_a_clear_error(support):
    with pytest.raises(ValueError, match="support_size"):
        categorical_transform(support)
