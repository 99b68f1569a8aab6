"""Sampled MuZero's search (`SearchConfig(algorithm="sampled_muzero")`, `search.sampled`).

What the paper's method promises, checked: drawing every action of a discrete space once makes
the search MuZero's (both engines); on a one-step continuous bandit more simulations move the
improved policy toward the optimum; the corrected prior (beta_hat / beta) * pi estimates pi
however different the proposal beta is, better as K grows; repeats are one child; and a
`sample_fn`'s bad output is refused in one line naming the rows.
"""

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

import search
from search import sampled
from tests import fakes

NUM_ACTIONS = 6


def _categorical_sample_fn(recurrent_fn, replace: bool):
    """The random model's policy as a `sample_fn`: its prediction head at a latent."""

    def sample_fn(params, rng_key, latent, num_samples):
        logits, _ = fakes._predict(params, latent)
        return search.sample_categorical(rng_key, logits, num_samples, replace=replace)

    return sample_fn


@pytest.mark.parametrize("engine", ["podracer", "mctx"])
def test_drawing_every_action_once_is_muzeros_search(engine):
    """K = A without replacement: the children are the actions in order with prior pi, so the
    tree, the visits, the action and the policy target are MuZero's from the same key
    (Dirichlet noise and the tie-break noise included)."""
    params, root, recurrent_fn = fakes.random_model(jax.random.PRNGKey(3), 5, NUM_ACTIONS)
    config = search.SearchConfig(num_simulations=24, engine=engine)
    sample_fn = _categorical_sample_fn(recurrent_fn, replace=False)
    key = jax.random.PRNGKey(11)

    @jax.jit
    def both(params, key, root):
        reference = search.run(params, key, root, recurrent_fn, config)
        ours = search.run(
            params,
            key,
            root.replace(prior_logits=None),
            recurrent_fn,
            config.replace(algorithm="sampled_muzero", num_samples=NUM_ACTIONS),
            sample_fn=sample_fn,
        )
        return reference, ours

    reference, ours = both(params, key, root)
    np.testing.assert_array_equal(ours.sampled_actions, np.tile(np.arange(NUM_ACTIONS), (5, 1)))
    np.testing.assert_array_equal(ours.action, reference.action)
    np.testing.assert_array_equal(ours.action_slot, reference.action)
    np.testing.assert_array_equal(ours.visit_counts, reference.visit_counts)
    np.testing.assert_array_equal(ours.tree.children_index, reference.tree.children_index)
    for name in ("action_weights", "root_value", "q_values"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(reference, name), rtol=1e-5, atol=1e-6, err_msg=name
        )
    assert reference.sampled_actions is None and reference.action_slot is None


OPTIMUM = 0.6


def _bandit(batch_size: int):
    """A one-step continuous bandit: reward -(a - 0.6)^2 summed over 2 dimensions, then the
    episode ends (discount 0); the proposal is N(0, 0.7^2) per dimension."""

    def recurrent_fn(params, rng_key, action, latent):  # action [B, 2]
        reward = -jnp.sum((action - OPTIMUM) ** 2, axis=-1)
        zeros = jnp.zeros_like(reward)
        output = mctx.RecurrentFnOutput(
            reward=reward, discount=zeros, prior_logits=None, value=zeros
        )
        return output, latent

    def sample_fn(params, rng_key, latent, num_samples):
        actions = 0.7 * jax.random.normal(rng_key, (latent.shape[0], num_samples, 2))
        log_probs = jnp.sum(jax.scipy.stats.norm.logpdf(actions, scale=0.7), axis=-1)
        return jnp.clip(actions, -2.0, 2.0), log_probs

    root = mctx.RootFnOutput(
        prior_logits=None, value=jnp.zeros(batch_size), embedding=jnp.zeros((batch_size, 1))
    )
    return root, recurrent_fn, sample_fn


def test_more_simulations_move_the_improved_policy_toward_the_bandits_optimum():
    batch_size = 16
    root, recurrent_fn, sample_fn = _bandit(batch_size)

    @functools.partial(jax.jit, static_argnums=0)
    def distance(num_simulations, key):
        config = search.SearchConfig(
            algorithm="sampled_muzero",
            num_samples=16,
            num_simulations=num_simulations,
            dirichlet_fraction=0.0,
            temperature=0.0,
        )
        out = search.run(None, key, root, recurrent_fn, config, sample_fn=sample_fn)
        to_optimum = jnp.linalg.norm(out.sampled_actions - OPTIMUM, axis=-1)  # [B, K]
        improved = jnp.mean(jnp.sum(out.action_weights * to_optimum, axis=-1))
        proposal = jnp.mean(to_optimum)
        best = jnp.mean(jnp.min(to_optimum, axis=-1))
        return improved, proposal, best, out.action

    key = jax.random.PRNGKey(0)
    distances = [distance(n, key) for n in (8, 48, 384)]
    proposal, best = float(distances[0][1]), float(distances[0][2])
    # the share of the way from the proposal's mean distance to the best sample's
    gaps = [(float(d[0]) - best) / (proposal - best) for d in distances]
    assert gaps[0] > gaps[1] > gaps[2], gaps
    assert gaps[2] < 0.5, gaps
    assert distances[0][3].shape == (batch_size, 2) and distances[0][3].dtype == jnp.float32


def test_the_corrected_prior_estimates_pi_from_another_proposal_better_as_k_grows():
    """A Monte-Carlo check against the closed form: pi = softmax(logits) over 4 actions, draws
    from a uniform proposal; the mean over many draws of the corrected prior, scattered back to
    the 4 actions, approaches pi as K grows, where beta_hat alone stays at beta."""
    logits = jnp.log(jnp.array([0.6, 0.25, 0.1, 0.05]))
    policy = np.asarray(jax.nn.softmax(logits))
    num_sets = 4000

    @functools.partial(jax.jit, static_argnums=0)
    def mean_prior(num_samples, key):
        actions = jax.random.randint(key, (num_sets, num_samples), 0, 4)  # beta uniform
        log_probs = jnp.take(jax.nn.log_softmax(logits), actions)
        proposal = jnp.full(actions.shape, jnp.log(0.25))
        corrected, repeat = sampled.corrected_prior_logits(actions, log_probs, proposal)
        uncorrected, _ = sampled.corrected_prior_logits(actions, log_probs, log_probs)

        def scatter(prior_logits):
            probs = jnp.where(repeat, 0.0, jnp.exp(prior_logits))  # [S, K]
            return jnp.mean(jax.vmap(lambda a, p: jnp.zeros(4).at[a].add(p))(actions, probs), 0)

        return scatter(corrected), scatter(uncorrected)

    errors = {}
    for k in (2, 8, 64):
        corrected, uncorrected = mean_prior(k, jax.random.PRNGKey(k))
        errors[k] = float(np.abs(np.asarray(corrected) - policy).max())
        # without the correction, the draws' own frequencies: the proposal, not pi
        assert np.abs(np.asarray(uncorrected) - 0.25).max() < 0.03
    assert errors[2] > errors[8] > errors[64], errors
    assert errors[64] < 0.02, errors


def test_a_repeated_draw_is_one_child_with_the_prior_of_its_copies():
    # One program a shape (operation by operation, these checks compiled about 90).
    corrected = jax.jit(sampled.corrected_prior_logits)
    actions = np.array([[2, 0, 2, 2], [1, 3, 0, 2]])
    log_probs = np.log(np.full((2, 4), 0.25, np.float32))
    logits, repeat = jax.device_get(corrected(actions, log_probs, log_probs))
    np.testing.assert_array_equal(repeat, [[False, False, True, True], [False] * 4])
    np.testing.assert_allclose(np.exp(logits[0, :2]), [0.75, 0.25], rtol=1e-6)
    np.testing.assert_allclose(np.exp(logits[1]), [0.25] * 4, rtol=1e-6)
    assert float(logits[0, 2]) == float(np.finfo(np.float32).min)
    # a draw the policy gives no probability (a masked, illegal action) is never a child
    masked = np.array([[np.log(0.5), np.log(0.5), -np.inf]], np.float32)
    logits, unused = jax.device_get(
        corrected(np.array([[0, 1, 2]]), masked, np.zeros((1, 3), np.float32))
    )
    np.testing.assert_array_equal(unused, [[False, False, True]])
    np.testing.assert_allclose(np.exp(logits[0, :2]), [0.5, 0.5], rtol=1e-6)
    _, unused = corrected(
        np.array([[2, 2]]), np.full((1, 2), -np.inf, np.float32), np.zeros((1, 2), np.float32)
    )
    np.testing.assert_array_equal(unused, [[False, True]])  # a row keeps one child
    # and the search never visits a repeat's slot
    params, root, recurrent_fn = fakes.random_model(jax.random.PRNGKey(1), 4, 3)
    config = search.SearchConfig(algorithm="sampled_muzero", num_samples=6, num_simulations=12)
    sample_fn = _categorical_sample_fn(recurrent_fn, replace=True)
    out = jax.jit(
        lambda params, key, root: search.run(
            params, key, root, recurrent_fn, config, sample_fn=sample_fn
        )
    )(params, jax.random.PRNGKey(2), root)
    first = np.array(
        [[a not in row[:k] for k, a in enumerate(row)] for row in np.asarray(out.sampled_actions)]
    )
    assert np.all(np.asarray(out.visit_counts)[~first] == 0)
    assert np.all(np.asarray(out.visit_counts).sum(-1) == 12)
    np.testing.assert_array_equal(
        out.action,
        np.take_along_axis(np.asarray(out.sampled_actions), out.action_slot[:, None], 1)[:, 0],
    )


def test_a_sample_fns_bad_output_and_wrong_settings_get_one_line():
    root, recurrent_fn, sample_fn = _bandit(3)
    config = search.SearchConfig(algorithm="sampled_muzero", num_samples=4, num_simulations=4)
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="only it takes one; got algorithm 'sampled_muzero'"):
        search.run(None, key, root, recurrent_fn, config)
    with pytest.raises(ValueError, match="got algorithm 'muzero' with sample_fn given"):
        search.run(None, key, root, recurrent_fn, search.SearchConfig(), sample_fn=sample_fn)
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1, got 0"):
        search.SearchConfig(algorithm="sampled_muzero", num_samples=0)
    with pytest.raises(ValueError, match="5 samples without replacement from 4 actions"):
        search.sample_categorical(key, jnp.zeros((2, 4)), 5)

    def nan_rows(params, rng_key, latent, num_samples):
        actions, log_probs = sample_fn(params, rng_key, latent, num_samples)
        return actions.at[1, 2, 0].set(jnp.nan), log_probs

    with pytest.raises(ValueError, match=r"NaN or infinite actions .* in rows \[1\]"):
        search.run(None, key, root, recurrent_fn, config, sample_fn=nan_rows)
    with pytest.raises(ValueError, match=r"outside the bounds \[\[-1.0\], \[1.0\]\] in rows"):
        search.run(
            None,
            key,
            root,
            recurrent_fn,
            config,
            sample_fn=sample_fn,
            action_bounds=(np.array([-1.0]), np.array([1.0])),
        )
    with pytest.raises(ValueError, match=r"actions of shape \(3, 2\); expected \[B=3, K=4"):
        search.run(
            None,
            key,
            root,
            recurrent_fn,
            config,
            sample_fn=lambda p, k, e, n: (jnp.zeros((3, 2)), jnp.zeros((3, n))),
        )
