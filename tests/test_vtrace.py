"""V-trace equals rlax's reference on random inputs; the IMPALA loss learns on a fixed batch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rlax

from muzero import (
    LossConfig,
    NetworkConfig,
    VTraceBatch,
    make_actor_critic_networks,
    make_vtrace_loss,
    vtrace,
    vtrace_td_error_and_advantage,
)

KEY = jax.random.key(0, impl="rbg")


# One program: eager jnp ops compile one program apiece.
@functools.partial(jax.jit, static_argnames=("t", "b"))
def random_inputs(seed, t=7, b=5):
    keys = jax.random.split(jax.random.key(seed), 6)
    v_tm1 = jax.random.normal(keys[0], (t, b))
    v_t = jax.random.normal(keys[1], (t, b))
    r_t = jax.random.normal(keys[2], (t, b))
    # Some episode ends (discount 0) among discounts in (0, 1].
    discount_t = jnp.where(
        jax.random.uniform(keys[3], (t, b)) < 0.2,
        0.0,
        jax.random.uniform(keys[4], (t, b), minval=0.5, maxval=1.0),
    )
    # Ratios on both sides of the clipping thresholds.
    rho_tm1 = jnp.exp(jax.random.normal(keys[5], (t, b)))
    return v_tm1, v_t, r_t, discount_t, rho_tm1


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("lambda_, clip_rho, clip_pg_rho", [(1.0, 1.0, 1.0), (0.9, 1.5, 0.8)])
def test_vtrace_equals_rlax(jit, lambda_, clip_rho, clip_pg_rho):
    inputs = random_inputs(seed=int(lambda_ * 10))
    ours = vtrace_td_error_and_advantage
    if jit:
        ours = jax.jit(ours, static_argnums=(5, 6, 7))
    out = ours(*inputs, lambda_, clip_rho, clip_pg_rho)
    # rlax works on one [T] sequence: map it over the batch axis 1.
    reference = jax.jit(
        jax.vmap(
            lambda *xs: rlax.vtrace_td_error_and_advantage(*xs, lambda_, clip_rho, clip_pg_rho),
            in_axes=1,
            out_axes=1,
        )
    )(*inputs)
    np.testing.assert_allclose(out.errors, reference.errors, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantage, reference.pg_advantage, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.q_estimate, reference.q_estimate, rtol=1e-5, atol=1e-5)
    errors = vtrace(*inputs, lambda_, clip_rho)
    np.testing.assert_allclose(errors, reference.errors, rtol=1e-5, atol=1e-5)


def test_vtrace_on_policy_is_the_n_step_return():
    # rho = 1, lambda = 1: v_s is the discounted return bootstrapped from the last v_t.
    t = 4
    v_tm1 = np.zeros((t, 1), np.float32)
    v_t = np.zeros((t, 1), np.float32)
    v_t[-1] = 10.0  # consistent with v_tm1: only the bootstrap
    r_t = np.ones((t, 1), np.float32)
    discount_t = np.full((t, 1), 0.5, np.float32)
    errors = jax.jit(vtrace)(v_tm1, v_t, r_t, discount_t, np.ones((t, 1), np.float32))
    # v_s at t=3: 1 + .5*10 = 6; t=2: 1 + .5*6 = 4; t=1: 3; t=0: 2.5.
    np.testing.assert_allclose(np.asarray(errors)[:, 0], [2.5, 3.0, 4.0, 6.0])


@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16"])
def test_vtrace_loss_learns_values_and_prefers_the_rewarded_action(compute_dtype):
    t, b, a, d = 6, 4, 3, 5
    network = NetworkConfig(
        mlp_sizes=(32,), latent_size=32, head_hidden=32, compute_dtype=compute_dtype
    )
    nets = make_actor_critic_networks(network, (d,), a)
    config = LossConfig(discount=0.9, entropy_cost=0.0)
    loss_fn = make_vtrace_loss(nets, config)

    @jax.jit
    def make_batch(key):
        keys = jax.random.split(key, 2)
        action = jax.random.randint(keys[0], (t, b), 0, a)
        return VTraceBatch(
            observation=jax.random.normal(keys[1], (t, b, d)),
            action=action,
            reward=(action == 0).astype(jnp.float32),  # only action 0 pays
            discount=jnp.ones((t, b)).at[2].set(0.0),  # an episode boundary inside
            behaviour_logits=jnp.zeros((t, b, a)),
        )

    batch = make_batch(jax.random.key(1))
    optimizer = optax.adam(3e-3)

    @jax.jit
    def train(params):
        def step(carry, _):
            params, opt_state = carry
            grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch, KEY)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), metrics["value_loss"]

        (params, _), value_losses = jax.lax.scan(
            step, (params, optimizer.init(params)), None, length=300
        )
        return params, value_losses

    params = jax.jit(nets.init)(KEY)
    apply = jax.jit(nets.apply)
    observation = np.asarray(batch.observation)[:-1].reshape(-1, d)
    start_logits, _ = apply(params, observation)
    params, value_losses = train(params)
    value_losses = np.asarray(value_losses)
    end_logits, values = apply(params, observation)
    assert end_logits.dtype == values.dtype == jnp.float32  # whatever the compute dtype
    assert value_losses[-1] < 0.05 * value_losses[0]
    rewarded = jax.jit(lambda logits: jax.nn.softmax(logits)[:, 0].mean())
    prob_rewarded = np.asarray(rewarded(end_logits))
    assert prob_rewarded > np.asarray(rewarded(start_logits)) + 0.2


def test_vtrace_loss_and_gradient_equal_the_loss_over_one_forward_pass():
    # The loss runs the network twice (the learned steps, then the bootstrap step without a
    # gradient); written here over one pass of all T steps with rlax, it must be the same.
    t, b, a, d = 5, 3, 4, 6
    nets = make_actor_critic_networks(
        NetworkConfig(mlp_sizes=(16,), latent_size=16, head_hidden=16), (d,), a
    )
    config = LossConfig(discount=0.95, entropy_cost=0.01, baseline_cost=0.5, vtrace_lambda=0.9)

    @jax.jit
    def inputs(key):  # the batch and the parameters, in one program
        keys = jax.random.split(key, 5)
        batch = VTraceBatch(
            observation=jax.random.normal(keys[0], (t, b, d)),
            action=jax.random.randint(keys[1], (t, b), 0, a),
            reward=jax.random.normal(keys[2], (t, b)),
            discount=jnp.ones((t, b)).at[1, 0].set(0.0),
            behaviour_logits=jax.random.normal(keys[3], (t, b, a)),
        )
        return batch, nets.init(keys[4])

    batch, params = inputs(jax.random.key(2))

    def reference_loss(params):
        logits, values = nets.apply(params, batch.observation.reshape(t * b, d))
        logits, values = logits.reshape(t, b, a), values.reshape(t, b)
        log_pi = jax.nn.log_softmax(logits[:-1])
        log_mu = jax.nn.log_softmax(batch.behaviour_logits[:-1])
        pick = lambda x: jnp.take_along_axis(x, batch.action[:-1, :, None], -1)[..., 0]  # noqa: E731
        rho = jnp.exp(jax.lax.stop_gradient(pick(log_pi)) - pick(log_mu))
        out = jax.vmap(
            lambda *xs: rlax.vtrace_td_error_and_advantage(*xs, lambda_=config.vtrace_lambda),
            in_axes=1,
            out_axes=1,
        )(
            values[:-1],
            jax.lax.stop_gradient(values[1:]),
            batch.reward[:-1],
            config.discount * batch.discount[:-1],
            rho,
        )
        entropy = jnp.mean(-jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1))
        advantage = jax.lax.stop_gradient(out.pg_advantage)  # rlax leaves this to the pg loss
        return (
            -jnp.mean(pick(log_pi) * advantage)
            + config.baseline_cost * 0.5 * jnp.mean(jnp.square(out.errors))
            - config.entropy_cost * entropy
        )

    # Jitted: op by op, each of the many small ops would compile on its own.
    (loss, _), grads = jax.jit(jax.value_and_grad(make_vtrace_loss(nets, config), has_aux=True))(
        params, batch, KEY
    )
    reference, reference_grads = jax.jit(jax.value_and_grad(reference_loss))(params)
    np.testing.assert_allclose(loss, reference, rtol=1e-5, atol=1e-6)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6), grads, reference_grads
    )


def test_vtrace_rejects_two_player_config():
    nets = make_actor_critic_networks(NetworkConfig(), (3,), 2)
    with pytest.raises(ValueError, match="two_player"):
        make_vtrace_loss(nets, LossConfig(two_player=True))


def test_a_time_limit_bootstraps_the_vtrace_target_from_the_cut_states_value():
    # One learned step per column, on-policy (rho = 1): its value target is the reward and, where
    # a time limit cut the episode there, the discounted value of that same state; where the
    # game ended, the reward alone.
    t, b, a, d = 2, 4, 3, 5
    nets = make_actor_critic_networks(NetworkConfig(mlp_sizes=(8,)), (d,), a)
    config = LossConfig(discount=0.9, entropy_cost=0.0, baseline_cost=1.0)

    @jax.jit
    def inputs(key):  # the parameters, the batch and its values, in one program
        keys = jax.random.split(key, 2)
        params = nets.init(keys[0])
        observation = jax.random.normal(keys[1], (t, b, d))
        logits, values = nets.apply(params, observation.reshape(t * b, d))
        batch = VTraceBatch(
            observation=observation,
            action=jnp.zeros((t, b), jnp.int32),
            reward=jnp.ones((t, b)),
            discount=jnp.zeros((t, b)),  # every learned step ends its episode ...
            behaviour_logits=logits.reshape(t, b, a),
            # ... by the clock in two columns
            truncated=jnp.array([[1.0, 1.0, 0.0, 0.0], [0.0] * 4]),
        )
        return params, batch, values

    @jax.jit
    def expected_value_loss(values, truncated):
        value_0 = values.reshape(t, b)[0]  # [B]
        errors = 1.0 + jnp.where(truncated[0] > 0, config.discount * value_0, 0.0) - value_0
        return 0.5 * jnp.mean(errors**2)

    params, batch, values = inputs(jax.random.key(3))
    _, metrics = jax.jit(make_vtrace_loss(nets, config))(params, batch, KEY)
    np.testing.assert_allclose(
        metrics["value_loss"], expected_value_loss(values, batch.truncated), rtol=1e-5
    )
