"""IMPALA's max pool: the same values and gradient as flax's `max_pool`, ties included."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muzero.pooling import max_pool_3x3_stride2


def reference(x):
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")


def vjp(fn, x, cotangent):
    return jax.vjp(fn, x)[1](cotangent)[0]


# Even sizes pad one row at the end, odd sizes one at each side; the torso sees 84, 42 and 21.
SHAPES = [
    (2, 84, 84, 3),
    (2, 42, 42, 2),
    (3, 21, 21, 2),
    (1, 11, 11, 1),
    (2, 5, 8, 3),
    (1, 1, 1, 1),
    (1, 2, 3, 1),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_values_and_gradient_match_flax(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)  # NumPy: no XLA program to convert
    out = jax.jit(max_pool_3x3_stride2)(x)
    np.testing.assert_array_equal(out, reference(x))
    cotangent = rng.normal(size=out.shape).astype(np.float32)
    np.testing.assert_allclose(
        jax.jit(lambda x, g: vjp(max_pool_3x3_stride2, x, g))(x, cotangent),
        vjp(reference, x, cotangent),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("shape", [(2, 12, 12, 2), (2, 9, 7, 2)])
def test_ties_send_the_gradient_to_the_first_maximum(shape):
    # Few distinct values (ReLU'd activations are often 0): most windows hold their maximum twice.
    rng = np.random.default_rng(1)
    # Converted in NumPy and put on the device as they are: no XLA program for either.
    x = jax.device_put(rng.integers(0, 3, size=shape).astype(np.float32))
    cotangent = rng.normal(size=jax.eval_shape(reference, x).shape)
    cotangent = jax.device_put(cotangent.astype(np.float32))
    pool_vjp = jax.jit(vjp, static_argnums=0)
    ours, theirs = pool_vjp(max_pool_3x3_stride2, x, cotangent), pool_vjp(reference, x, cotangent)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    # Each output's gradient lands once: the total is conserved, not copied to every tie.
    np.testing.assert_allclose(ours.sum(), cotangent.sum(), rtol=1e-5)


def test_gradient_through_a_conv_matches_flax():
    # The pool inside a loss: gradients w.r.t. the input of a conv before it agree with flax.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 10, 10, 2)).astype(np.float32)
    w = rng.normal(size=(3, 3, 2, 4)).astype(np.float32)

    def loss(w, pool):
        y = jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return jnp.sum(jnp.tanh(pool(y)))

    grad = jax.jit(jax.grad(loss), static_argnums=1)  # one program: eager ops compile one apiece
    np.testing.assert_allclose(
        grad(w, max_pool_3x3_stride2), grad(w, reference), rtol=1e-5, atol=1e-5
    )
