"""muzero.stochastic: the chance code, the targets, the loss and the model the search sees."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import muzero
from muzero import LossConfig, NetworkConfig, StochasticConfig

OBS, ACTIONS, CODES, K = 6, 2, 4, 2


def test_chance_code_is_one_hot_with_the_softmax_gradient():
    logits = np.array([[0.3, 2.0, -1.0, 0.5], [1.0, 1.0, 3.0, 0.0]], np.float32)
    weights = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0]], np.float32)

    @jax.jit  # one program: eager jnp ops compile one program apiece
    def codes_and_gradients(logits, weights):
        straight = jax.grad(lambda x: jnp.sum(muzero.chance_code(x)[0] * weights))(logits)
        through_softmax = jax.grad(lambda x: jnp.sum(jax.nn.softmax(x) * weights))(logits)
        return muzero.chance_code(logits), jax.nn.softmax(logits), straight, through_softmax

    (code, one_hot, probs), softmax, straight, through_softmax = codes_and_gradients(
        logits, weights
    )
    np.testing.assert_array_equal(code, [[0, 1, 0, 0], [0, 0, 1, 0]])  # the codebook's entry
    np.testing.assert_array_equal(one_hot, code)
    np.testing.assert_allclose(probs, softmax, rtol=1e-6)
    np.testing.assert_allclose(straight, through_softmax, rtol=1e-6)
    assert np.all(np.abs(straight) > 0)


@functools.partial(jax.jit, static_argnums=1)
def _coin_windows(key, n):
    """Windows of a one-player world with chance: state s in {0, 1, 2} (a one-hot observation,
    plus noise-free padding); any action leads to state 1 or 2 with probability 1/2 each, and
    the reward is 1 in state 1, 0 in state 2. Leaves [L = K + 2, N, ...]; td_steps 1."""
    length = K + 2
    keys = jax.random.split(key, 2)
    states = jnp.concatenate(
        [jnp.zeros((1, n), jnp.int32), 1 + jax.random.bernoulli(keys[0], 0.5, (length - 1, n))]
    ).astype(jnp.int32)  # [L, N]
    observation = jax.nn.one_hot(states, OBS)  # [L, N, OBS]
    reward = jnp.concatenate([(states[1:] == 1).astype(jnp.float32), jnp.zeros((1, n))])
    return muzero.Trajectory(
        observation=observation,
        action=jax.random.randint(keys[1], (length, n), 0, ACTIONS),
        reward=reward,
        discount=jnp.ones((length, n)),
        search_policy=jnp.full((length, n, ACTIONS), 1.0 / ACTIONS),
        search_value=jnp.full((length, n), 0.5),
        legal_mask=jnp.ones((length, n, ACTIONS), bool),
        to_play=jnp.zeros((length, n), jnp.int32),
        behaviour_logits=jnp.zeros((length, n, ACTIONS)),
        policy_version=jnp.zeros((length, n), jnp.int32),
    )


@jax.jit
def _stochastic_batch(window):
    n = window.reward.shape[1]
    return muzero.stochastic_batch(
        window, jnp.ones(n), unroll_steps=K, td_steps=1, discount=1.0, two_player=False
    )


@pytest.fixture(scope="module")
def coin():
    network = NetworkConfig(mlp_sizes=(32,), latent_size=16, head_hidden=16, value_support=0)
    # Min-max latents, as the Stochastic MuZero presets: the first reward is far from the coin's.
    network = dataclasses.replace(network, reward_support=0, latent_scaling="min_max")
    networks = muzero.make_stochastic_networks(network, (OBS,), ACTIONS, CODES)
    loss_config = LossConfig(unroll_steps=K, td_steps=1, discount=1.0, value_loss_weight=1.0)
    stochastic = StochasticConfig(num_chance_codes=CODES)
    loss_fn = muzero.make_stochastic_loss(networks, loss_config, stochastic)
    batch = _stochastic_batch(_coin_windows(jax.random.PRNGKey(0), 128))
    optimizer = optax.adam(3e-3)

    @jax.jit
    def train(params):
        def step(carry, _):
            params, opt_state = carry
            (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, None)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), metrics

        (params, _), metrics = jax.lax.scan(step, (params, optimizer.init(params)), None, 200)
        return params, metrics

    params = jax.jit(networks.init)(jax.random.PRNGKey(1))
    trained, metrics = train(params)
    return networks, loss_fn, batch, params, trained, metrics


def test_the_encoders_gradient_comes_through_the_dynamics(coin):
    """The reward after the chance event reaches the encoder only through the straight-through
    code: its gradient there is not zero."""
    networks, _, batch, params, _, _ = coin

    def reward_loss(params):
        latent = networks.represent(params, batch.observation[:, 0])
        afterstate = networks.afterstate_dynamics(params, latent, batch.action[:, 0])
        logits = networks.encode(params, batch.observation[:, 0], batch.observation[:, 1])
        code, _, _ = muzero.chance_code(logits)
        reward_logits, _, _ = networks.dynamics(params, afterstate, code)
        return jnp.mean(networks.reward_transform.loss(reward_logits, batch.reward_target[:, 1]))

    grads = jax.jit(jax.grad(reward_loss))(params)  # one program, not hundreds of single ops
    encoder = [
        g for path, g in jax.tree_util.tree_leaves_with_path(grads) if "encoder" in str(path)
    ]
    assert encoder and max(float(np.max(np.abs(g))) for g in jax.device_get(encoder)) > 0


def test_the_loss_falls_and_the_model_learns_the_coin(coin):
    """After training on the coin world, the encoder tells the two outcomes apart with two
    codes, the afterstate's chance distribution gives each about 1/2, and the rewards follow."""
    networks, loss_fn, batch, _, trained, metrics = coin
    losses = np.asarray(metrics["loss"])
    assert losses[-20:].mean() < 0.35 * losses[0]
    # The reward after the coin is predictable only given the chance code: it is learned.
    rewards = np.asarray(metrics["reward_loss"])
    assert rewards[0] > 0.5 and rewards[-20:].mean() < 0.02
    _, end = jax.jit(loss_fn)(trained, batch, None)
    assert float(end["codes_used"]) > 1.7
    assert float(end["commitment_loss"]) < 0.05
    np.testing.assert_allclose(float(end["chance_loss"]), np.log(2), atol=0.05)  # a fair coin

    @jax.jit  # one program, not hundreds of single operations
    def afterstates_and_codes(params, batch):
        observation, action = batch.observation[:, 0], batch.action[:, 0]
        next_observation = batch.observation[:, 1]
        latent = networks.represent(params, observation)
        afterstate = networks.afterstate_dynamics(params, latent, action)
        chance_logits, _ = networks.afterstate_predict(params, afterstate)
        codes = jnp.argmax(networks.encode(params, observation, next_observation), axis=-1)
        return afterstate, jax.nn.softmax(chance_logits), codes

    afterstate, chance_probs, codes = jax.device_get(afterstates_and_codes(trained, batch))
    heads = np.asarray(batch.reward_target)[:, 1] > 0  # [N] the coin came up state 1
    code_of = {int(np.bincount(codes[m], minlength=CODES).argmax()) for m in (heads, ~heads)}
    assert len(code_of) == 2  # one code per outcome
    probs = chance_probs.mean(axis=0)
    np.testing.assert_allclose(probs[sorted(code_of)], [0.5, 0.5], atol=0.12)

    @jax.jit
    def rewards_after(params, afterstate, code):
        reward_logits, _, _ = networks.dynamics(params, afterstate, code)
        return networks.reward_transform.decode_logits(reward_logits)

    for outcome, reward in ((heads, 1.0), (~heads, 0.0)):
        code = np.eye(CODES, dtype=np.float32)[np.full(int(outcome.sum()), codes[outcome][0])]
        predicted = rewards_after(trained, afterstate[outcome], code)
        np.testing.assert_allclose(predicted, reward, atol=0.15)


def test_stochastic_batch_keeps_the_observations_and_who_moves():
    window = _coin_windows(jax.random.PRNGKey(3), 5)
    to_play = np.array([0, 0, 1, 1], np.int32)[:, None].repeat(5, axis=1)
    window = window._replace(to_play=jax.device_put(to_play))
    batch, host = jax.device_get((_stochastic_batch(window), window))
    assert batch.observation.shape == (5, K + 1, OBS)
    np.testing.assert_array_equal(batch.observation[:, 2], host.observation[2])
    np.testing.assert_array_equal(batch.same_player, [[1.0, 0.0]] * 5)
    np.testing.assert_allclose(batch.reward_target[:, 1:], host.reward[:K].T)
    with pytest.raises(ValueError, match="observations of steps 0..2"):
        muzero.stochastic_batch(
            window._replace(observation=window.observation[:1]),
            jnp.ones(5),
            unroll_steps=K,
            td_steps=1,
            discount=1.0,
            two_player=False,
        )


def test_turn_discount_signs_follow_who_moves():
    """Backgammon-like turns: players 0, 0, 1, 1, 1, 0; the game ends after step 4."""
    to_play = np.array([[0], [0], [1], [1], [1], [0]], np.int32)
    env_discount = np.array([[1.0], [1.0], [1.0], [1.0], [0.0], [1.0]], np.float32)
    # A win (+1 for player 1's move at step 3... reward after step 4) seen from step 0: player 1
    # won, so player 0 (to move at 0) gets -1 as the n-step target.
    reward = np.array([[0.0], [0.0], [0.0], [0.0], [1.0], [0.0]], np.float32)

    @jax.jit
    def discount_and_values(env_discount, to_play, reward):
        d = muzero.turn_discount(env_discount, to_play, 1.0)
        return d, muzero.n_step_values(reward, d, jnp.zeros_like(reward), td_steps=6)

    d, z = jax.device_get(discount_and_values(env_discount, to_play, reward))
    np.testing.assert_array_equal(d[:5, 0], [1.0, -1.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(z[:5, 0], [-1.0, -1.0, 1.0, 1.0, 1.0])


def test_learned_model_discount_signs():
    """The search sees -1 / +1 from the model's same-player logit where the mover may move
    again, and the constant -1 in alternating games."""

    def dynamics(params, afterstate, code):
        logit = jnp.where(code[:, 0] > 0, 3.0, -3.0)  # code 0: the same player moves again
        return jnp.zeros((2, 1)), afterstate, logit

    networks = muzero.StochasticNetworks(
        init=None,
        represent=None,
        predict=lambda params, latent: (jnp.zeros((2, ACTIONS)), jnp.zeros((2, 1))),
        afterstate_dynamics=None,
        afterstate_predict=None,
        dynamics=dynamics,
        encode=None,
        value_transform=NetworkConfig(value_support=0).value_transform(),
        reward_transform=NetworkConfig(reward_support=0).reward_transform(),
        num_codes=CODES,
    )
    outcome, afterstate = np.array([0, 1], np.int32), np.zeros((2, 3), np.float32)
    turns = muzero.make_stochastic_model(networks, two_player=True, alternating=False)
    plies = muzero.make_stochastic_model(networks, two_player=True)

    @jax.jit
    def discounts(outcome, afterstate):
        out, _ = turns.chance_fn(None, None, outcome, afterstate)
        return out.discount, plies.chance_fn(None, None, outcome, afterstate)[0].discount

    turn_discount, ply_discount = discounts(outcome, afterstate)
    np.testing.assert_array_equal(turn_discount, [1.0, -1.0])
    np.testing.assert_array_equal(ply_discount, -1)


@pytest.mark.parametrize(
    "field, value",
    [("num_chance_codes", 0), ("commitment_loss_weight", -1.0), ("turn_loss_weight", "x")],
)
def test_bad_stochastic_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"StochasticConfig.{field}"):
        StochasticConfig(**{field: value})
