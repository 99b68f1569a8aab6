"""Targets on small hand-worked trajectories: n-step bootstrapping, episode ends, two players."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muzero import (
    Trajectory,
    alphazero_batch,
    annealed_beta,
    bootstrap_truncations,
    decayed_td_steps,
    muzero_batch,
    n_step_values,
    ply_discount,
    sequence_priorities,
    value_prefix_targets,
)

A = 3


def column(values):
    """A [T] list as a [T, 1] float32 array (one environment)."""
    return jax.device_put(np.asarray(values, np.float32)[:, None])


def trajectory(reward, discount, value, obs_steps=None):
    """A [T, 1] trajectory; search_policy[t] is one-hot on action t % A."""
    t = len(reward)
    policy = np.eye(A, dtype=np.float32)[np.arange(t) % A][:, None, :]
    return jax.device_put(
        Trajectory(
            observation=np.arange(obs_steps or t, dtype=np.float32)[:, None, None],
            action=(np.arange(t, dtype=np.int32) % A)[:, None],
            reward=column(reward),
            discount=column(discount),
            search_policy=policy,
            search_value=column(value),
            legal_mask=np.ones((t, 1, A), bool),
            to_play=np.zeros((t, 1), np.int32),
            behaviour_logits=np.zeros((t, 1, A), np.float32),
            policy_version=np.zeros((t, 1), np.int32),
        )
    )


# NumPy inputs and jitted targets: eager jnp ops compile one program apiece.
def jitted(fn, *static):
    """`fn` in one program (`static`: the names of its static arguments), read back in NumPy."""
    fn = jax.jit(fn, static_argnames=static)
    return lambda *args, **kwargs: jax.tree.map(np.asarray, fn(*args, **kwargs))


batch_of = jitted(
    muzero_batch, "unroll_steps", "td_steps", "discount", "two_player", "value_prefix_horizon"
)


@pytest.mark.parametrize("jit", [False, True])
def test_n_step_bootstraps_from_the_value_n_steps_ahead(jit):
    fn = jax.jit(n_step_values, static_argnums=3) if jit else n_step_values
    z = fn(column([1, 2, 3, 4, 5]), column([0.5] * 5), column([10, 20, 30, 40, 50]), 2)
    # z_0 = 1 + .5*2 + .25*30; near the end the sum stops at the last state and bootstraps there.
    np.testing.assert_allclose(z[:, 0], [9.5, 13.5, 17.5, 29.0, 50.0])


def test_n_step_stops_at_the_episode_end():
    z = n_step_values(
        column([1, 2, 3, 4, 5]), column([1, 0, 1, 1, 1]), column([10, 20, 30, 40, 50]), 3
    )
    # Steps 0 and 1 end with the episode (no bootstrap); step 2 starts the next episode.
    np.testing.assert_allclose(z[:, 0], [3.0, 2.0, 57.0, 54.0, 50.0])


def test_a_time_limit_is_not_the_games_end():
    # CartPole-like: reward 1 a step; a time limit cuts the episode after step 2 (discount 0
    # there, as at a real end), the next episode starts at step 3.
    reward, discount, value = column([1, 1, 1, 1, 1]), column([1, 1, 0, 1, 1]), column([7] * 5)
    truncated = column([0, 0, 1, 0, 0])
    rewards = bootstrap_truncations(reward, value, truncated)
    z = n_step_values(rewards, discount, value, 3)
    # The cut step bootstraps from its own value (7), not "reward 1, then nothing": the value
    # cannot see the clock, and reading the limit as the end would teach it a time it cannot know.
    np.testing.assert_allclose(z[:, 0], [9.0, 8.0, 7.0, 8.0, 7.0])
    ended = n_step_values(reward, discount, value, 3)  # a real end at step 2
    np.testing.assert_allclose(ended[:3, 0], [3.0, 2.0, 1.0])
    assert bootstrap_truncations(reward, value, None) is reward


def test_windows_with_a_time_limit_bootstrap_their_value_targets():
    window = trajectory([1, 1, 1, 1, 1], [1, 0, 1, 1, 1], [6, 6, 6, 6, 6])
    batch = batch_of(
        window._replace(truncated=column([0, 1, 0, 0, 0])),
        jnp.ones((1,)),
        unroll_steps=2,
        td_steps=2,
        discount=1.0,
        two_player=False,
    )
    # Step 0: 1 + (the cut step's value 6); step 1 is the cut step; step 2 is past the episode.
    np.testing.assert_allclose(batch.value_target[0], [7.0, 6.0, 0.0])
    np.testing.assert_allclose(batch.reward_target[0], [0.0, 1.0, 1.0])  # the rewards unchanged
    real_end = batch_of(
        window, jnp.ones((1,)), unroll_steps=2, td_steps=2, discount=1.0, two_player=False
    )
    np.testing.assert_allclose(real_end.value_target[0], [2.0, 1.0, 0.0])


def test_two_player_signs_are_from_the_view_of_the_player_to_move():
    # Players alternate; the player who moved at t = 2 (the same as at t = 0) wins with reward 1.
    d = ply_discount(column([1, 1, 0]), 1.0, two_player=True)
    z = n_step_values(column([0, 0, 1]), d, column([0, 0, 0]), 10)
    np.testing.assert_allclose(z[:, 0], [1.0, -1.0, 1.0])
    # The bootstrap value is negated once per ply: v_2 belongs to t = 0's player, v_1 does not.
    d = ply_discount(column([1, 1, 1]), 1.0, two_player=True)
    values = column([0.0, 0.3, 0.7])
    np.testing.assert_allclose(n_step_values(column([0, 0, 0]), d, values, 2)[0, 0], 0.7)
    np.testing.assert_allclose(n_step_values(column([0, 0, 0]), d, values, 1)[0, 0], -0.3)


def test_window_with_episode_end_gives_absorbing_targets():
    # K = 2, n = 2: the episode ends after step 1, so unroll step 2 is past its end.
    window = trajectory([1, 2, 3, 4, 5], [1, 0, 1, 1, 1], [10, 20, 30, 40, 50])
    batch = batch_of(
        window, jnp.ones((1,)), unroll_steps=2, td_steps=2, discount=1.0, two_player=False
    )
    np.testing.assert_allclose(batch.value_target[0], [3.0, 2.0, 0.0])
    np.testing.assert_allclose(batch.reward_target[0], [0.0, 1.0, 2.0])
    np.testing.assert_allclose(batch.policy_mask[0], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(
        batch.policy_target[0], [[1, 0, 0], [0, 1, 0], [1 / 3] * 3], rtol=1e-6
    )
    np.testing.assert_array_equal(batch.action[0], [0, 1])
    assert batch.observation.shape == (1, 1)


def test_window_ending_at_its_first_step():
    window = trajectory([1, 2, 3, 4, 5], [0, 1, 1, 1, 1], [10, 20, 30, 40, 50])
    batch = batch_of(
        window, jnp.ones((1,)), unroll_steps=2, td_steps=2, discount=1.0, two_player=False
    )
    np.testing.assert_allclose(batch.value_target[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(batch.reward_target[0], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(batch.policy_mask[0], [1.0, 0.0, 0.0])


def test_window_bootstraps_with_discount():
    window = trajectory([1, 2, 3, 4], [1, 1, 1, 1], [10, 20, 30, 40], obs_steps=1)
    batch = batch_of(
        window, jnp.full((1,), 0.5), unroll_steps=1, td_steps=2, discount=0.9, two_player=False
    )
    np.testing.assert_allclose(
        batch.value_target[0], [1 + 0.9 * 2 + 0.81 * 30, 2 + 0.9 * 3 + 0.81 * 40], rtol=1e-6
    )
    np.testing.assert_allclose(batch.importance_weight, [0.5])
    # Every leaf of the batch has the batch on axis 0.
    assert all(x.shape[0] == 1 for x in jax.tree.leaves(batch))


def test_two_player_window_signs():
    # Ply 2's mover (the player at step 0) wins; the episode then ends.
    window = trajectory([0, 0, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0])
    batch = batch_of(
        window, jnp.ones((1,)), unroll_steps=2, td_steps=1, discount=1.0, two_player=True
    )
    # n = 1: z_0 = r_0 - v_1 = 0, z_1 = r_1 - v_2 = 0, z_2 = r_2 = 1 (terminal).
    np.testing.assert_allclose(batch.value_target[0], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(batch.reward_target[0], [0.0, 0.0, 0.0])
    long = trajectory([0, 0, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 1, 1], [0] * 7)
    batch = batch_of(
        long, jnp.ones((1,)), unroll_steps=2, td_steps=4, discount=1.0, two_player=True
    )
    np.testing.assert_allclose(batch.value_target[0], [1.0, -1.0, 1.0])


def test_window_of_the_wrong_length_is_a_clear_error():
    window = trajectory([0] * 5, [1] * 5, [0] * 5)
    with pytest.raises(ValueError, match="unroll_steps \\+ td_steps \\+ 1 = 6"):
        muzero_batch(
            window, jnp.ones((1,)), unroll_steps=3, td_steps=2, discount=1.0, two_player=False
        )


def test_priorities_are_distance_of_search_value_to_target():
    traj = trajectory([1, 0, 0], [1, 1, 0], [0.5, 0.0, 2.0])
    priorities = jitted(sequence_priorities, "td_steps", "discount", "two_player")(
        traj, td_steps=1, discount=1.0, two_player=False
    )
    # z = [1 + 0, 0 + 2, 0 (the episode ends with reward 0)] against search values [0.5, 0, 2].
    np.testing.assert_allclose(priorities[:, 0], [0.5, 2.0, 2.0])


def test_alphazero_targets_are_outcomes_for_the_player_to_move():
    traj = trajectory([0, 0, -1, 0, 1, 0], [1, 1, 0, 1, 1, 1], [0, 0, 0, 0, 0.5, 0])
    n = 3  # windows of n + 1 = 4 steps start at steps 0, 1, 2
    window = jax.jit(
        lambda traj: jax.tree.map(
            lambda x: jnp.stack([x[t : t + n + 1, 0] for t in range(3)], axis=1), traj
        )
    )(traj)  # [4, 3]
    batch = jitted(alphazero_batch, "td_steps", "discount", "two_player")(
        window, jnp.full((3,), 0.5), td_steps=n, discount=1.0, two_player=True
    )
    # The first game: the mover at ply 2 loses (-1), so the movers at plies 0 and 1 get -1 and 1.
    np.testing.assert_allclose(batch.value_target, [-1.0, 1.0, -1.0])
    np.testing.assert_allclose(batch.mask, [1, 1, 1])
    np.testing.assert_allclose(batch.importance_weight, [0.5, 0.5, 0.5])
    assert batch.policy_target.shape == (3, A)
    assert batch.observation.shape == (3, 1)
    with pytest.raises(ValueError, match="td_steps \\+ 1 = 3"):
        alphazero_batch(window, jnp.ones((3,)), td_steps=2, discount=1.0, two_player=True)


def test_value_prefix_targets_sum_rewards_since_each_reset():
    # Rewards of the transitions into steps 1..5, a reset every 2 steps (before steps 1, 3, 5).
    rewards = column([0, 1, 2, 3, 4, 5])  # row 0: no transition into step 0
    prefix = value_prefix_targets(rewards, horizon=2)
    np.testing.assert_allclose(prefix[:, 0], [0, 1, 3, 3, 7, 5])
    # A horizon of the whole unroll: a running sum.
    np.testing.assert_allclose(value_prefix_targets(rewards, horizon=5)[:, 0], [0, 1, 3, 6, 10, 15])


def test_window_value_prefix_targets_stop_at_the_episode_end():
    # K = 3, n = 1: the transitions into steps 1 and 2 are real, the episode ends after step 1.
    window = trajectory([1, 2, 3, 4, 5], [1, 0, 1, 1, 1], [0] * 5)
    batch = batch_of(
        window,
        jnp.ones(1),
        unroll_steps=3,
        td_steps=1,
        discount=1.0,
        two_player=False,
        value_prefix_horizon=5,
    )
    np.testing.assert_allclose(batch.reward_target[0], [0, 1, 3, 3])


def test_a_shorter_horizon_per_window_bootstraps_sooner():
    # EfficientZero's off-policy correction: each column's n-step values equal the same
    # column computed alone at its own n.
    rng = np.random.default_rng(0)
    reward, value = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    reward, value = reward.astype(np.float32), value.astype(np.float32)
    discount = np.where(rng.uniform(size=(7, 3)) < 0.2, 0.0, 0.9).astype(np.float32)
    n = np.asarray([1, 3, 5], np.int32)
    n_step = jitted(n_step_values, "td_steps")
    z = n_step(reward, discount, value, 5, n)
    for b in range(3):
        alone = n_step(
            reward[:, b : b + 1],
            discount[:, b : b + 1],
            value[:, b : b + 1],
            int(n[b]),
        )
        np.testing.assert_allclose(z[:, b], alone[:, 0], rtol=1e-6)
    # The horizon shrinks by one step for every `decay_every` updates of age, to at least 1.
    versions = np.asarray([100, 90, 60, 0], np.int32)
    decayed = jitted(decayed_td_steps, "td_steps", "decay_every")
    np.testing.assert_array_equal(decayed(versions, 100, 5, 10), [5, 4, 1, 1])


def test_importance_exponent_rises_linearly_to_one_then_stays():
    # beta 0.4 over 100 updates: 0.4 at the start, halfway at 50, 1 from 100 on; traced too.
    steps = [0, 50, 100, 1000]
    np.testing.assert_allclose([annealed_beta(0.4, 100, s) for s in steps], [0.4, 0.7, 1, 1])
    traced = jax.jit(lambda s: annealed_beta(0.4, 100, s))(jnp.asarray(steps))
    np.testing.assert_allclose(traced, [0.4, 0.7, 1, 1], rtol=1e-6)
    assert annealed_beta(0.4, 0, 1000) == 0.4  # no annealing: beta throughout


def test_bootstrap_values_replace_the_stored_search_values():
    # A target network's (or a fresh search's) values: the n-step targets bootstrap from them.
    window = trajectory([1, 1, 1, 1, 1], [1] * 5, [0] * 5)
    fresh = column([10, 20, 30, 40, 50])
    batch = batch_of(
        window,
        jnp.ones(1),
        unroll_steps=2,
        td_steps=2,
        discount=0.5,
        two_player=False,
        bootstrap_value=fresh,
    )
    np.testing.assert_allclose(batch.value_target[0], [1 + 0.5 + 0.25 * 30, 1.5 + 10, 1.5 + 12.5])
