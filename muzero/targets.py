"""Training targets from time-major trajectories: n-step values, rewards, policies, priorities.

Conventions (DESIGN.md): a value is from the view of the player to move; `reward[t]` goes to the
player who acted at t. In a two-player alternating game the player to move flips every ply, so the
discount between plies is `-1 * env discount`: each later reward and the bootstrap value change
sign when seen from the player to move at t. `discount[t] == 0` ends the episode after step t;
states after it (auto-reset has started the next episode) are absorbing for a window that began
before it: value 0, reward 0, uniform policy masked out of the policy loss.
"""

import chex
import jax
import jax.numpy as jnp

from muzero.types import AlphaZeroBatch, MuZeroBatch, Trajectory

__all__ = [
    "ply_discount",
    "turn_discount",
    "n_step_values",
    "bootstrap_truncations",
    "value_priorities",
    "value_prefix_targets",
    "decayed_td_steps",
    "sequence_priorities",
    "muzero_batch",
    "alphazero_batch",
]


def ply_discount(env_discount: chex.Array, discount: float, two_player: bool) -> chex.Array:
    """The discount between consecutive states, from the view of the player to move.

    `env_discount [...]` (0 at episode ends) times the learning `discount`, negated between the
    plies of a two-player alternating game.
    """
    return env_discount * (-discount if two_player else discount)


def turn_discount(env_discount: chex.Array, to_play: chex.Array, discount: float) -> chex.Array:
    """The discount between consecutive states of a two-player game whose mover may move again
    (backgammon: one move per die), from the view of the player to move.

    `env_discount [T, B]` (0 at episode ends) times `discount`, negated where the player to move
    changes from step t to t + 1 (`to_play [T, B]`). The last step's sign is unknown (its next
    state lies outside the window); only whether it is 0 is ever read (see `n_step_values`).
    """
    chex.assert_equal_shape([env_discount, to_play])
    same = jnp.concatenate([to_play[1:] == to_play[:-1], jnp.zeros_like(to_play[:1], bool)])
    return env_discount * jnp.where(same, discount, -discount)


def _step_discount(window: Trajectory, discount: float, two_player: bool, alternating: bool):
    env_discount = window.discount.astype(jnp.float32)
    if two_player and not alternating:
        return turn_discount(env_discount, window.to_play, discount)
    return ply_discount(env_discount, discount, two_player)


def n_step_values(
    reward_t: chex.Array,
    ply_discount_t: chex.Array,
    value_t: chex.Array,
    td_steps: int,
    column_td_steps: chex.Array | None = None,
) -> chex.Array:
    """`z_t = sum_{i<n} (prod_{j<i} d_{t+j}) r_{t+i} + (prod_{j<n} d_{t+j}) v_{t+n}`, per step.

    Args:
      reward_t: [T, B] reward after acting at t.
      ply_discount_t: [T, B] discount from state t to t+1 (see `ply_discount`).
      value_t: [T, B] bootstrap value of state t (e.g. the stored search value).
      td_steps: n >= 1. Near the end of the sequence, where t + n > T - 1, the sum stops at the
        last state T - 1: it adds that state's reward if the episode ends there, and otherwise
        bootstraps from its value (n shrinks to T - 1 - t).
      column_td_steps: optional [B] int, a shorter n for each column (clipped to [1, td_steps]).

    Returns:
      [T, B] value targets.
    """
    chex.assert_rank([reward_t, ply_discount_t, value_t], 2)
    chex.assert_equal_shape([reward_t, ply_discount_t, value_t])
    if td_steps < 1:
        raise ValueError(f"td_steps must be >= 1, got {td_steps}")
    # The target of the last state: its reward at an episode end, else its own value.
    last = jnp.where(ply_discount_t[-1:] == 0, reward_t[-1:], value_t[-1:])
    # After j rounds z_t is the j-step return, cut at T - 1 where the chain reads `last`.
    # z starts at the values, so an exact n-step target bootstraps from v_{t+n}; rounds past
    # T change nothing.
    rounds = min(td_steps, reward_t.shape[0])
    if column_td_steps is not None:
        chex.assert_shape(column_td_steps, reward_t.shape[1:])
        column_td_steps = jnp.clip(column_td_steps, 1, rounds)[None, :]  # [1, B]
    z = chosen = value_t
    for j in range(1, rounds + 1):
        z = jnp.concatenate([reward_t[:-1] + ply_discount_t[:-1] * z[1:], last], axis=0)
        if column_td_steps is not None:
            chosen = jnp.where(column_td_steps == j, z, chosen)
    return z if column_td_steps is None else chosen


def decayed_td_steps(
    policy_version: chex.Array, step: chex.Array, td_steps: int, decay_every: int
) -> chex.Array:
    """EfficientZero's off-policy correction: the bootstrap horizon of windows whose start was
    acted by the parameters of update `policy_version` ([N] int), as seen at update `step`:
    `td_steps - age // decay_every`, at least 1 ([N] int32)."""
    age = jnp.maximum(jnp.asarray(step, jnp.int32) - policy_version.astype(jnp.int32), 0)
    return jnp.clip(td_steps - age // decay_every, 1, td_steps).astype(jnp.int32)


def value_prefix_targets(reward_k: chex.Array, horizon: int) -> chex.Array:
    """EfficientZero's value-prefix targets of unroll steps 1..K from the rewards of the
    transitions into them (`reward_k`, [K+1, N], row 0 unused): the rewards summed since the
    last reset, which happens before steps 1, H + 1, 2H + 1, ... ([K+1, N], row 0 zero)."""
    chex.assert_rank(reward_k, 2)
    rows = [jnp.zeros_like(reward_k[0])]
    for k in range(1, reward_k.shape[0]):
        restart = (k - 1) % horizon == 0
        rows.append(reward_k[k] + (0.0 if restart else rows[-1]))
    return jnp.stack(rows)


def bootstrap_truncations(
    reward_t: chex.Array, value_t: chex.Array, truncated_t: chex.Array | None
) -> chex.Array:
    """The rewards the n-step value targets sum, where a step cut by a time limit
    (`truncated_t`, [T, B]) reads its own state's value instead of its reward: the target of a
    truncated step is then `value_t` (the n-step bootstrap at that state) and not `reward_t`
    followed by nothing, which would tell the value that time limits are the game's end (a value
    it cannot predict from the state). `reward_t` itself stays the reward model's target."""
    if truncated_t is None:
        return reward_t
    chex.assert_equal_shape([reward_t, value_t, truncated_t])
    return jnp.where(truncated_t > 0, value_t, reward_t)


def value_priorities(search_value: chex.Array, value_target: chex.Array) -> chex.Array:
    """Replay priorities `|search value - value target|`, elementwise."""
    chex.assert_equal_shape([search_value, value_target])
    return jnp.abs(search_value - value_target)


def annealed_beta(beta: float, anneal_updates: int, step) -> chex.Array | float:
    """Prioritized replay's importance-weight exponent after `step` updates (an int or a traced
    array): `beta` rising linearly to 1 over `anneal_updates` updates, then 1 (Schaul et al.,
    2016; EfficientZero's 0.4 -> 1 over its run); `beta` throughout where `anneal_updates` is 0."""
    if not anneal_updates:
        return beta
    if isinstance(step, int):  # Sebulba's learner thread: no device call between its updates
        progress: chex.Array | float = min(step / anneal_updates, 1.0)
    else:
        progress = jnp.minimum(jnp.asarray(step, jnp.float32) / anneal_updates, 1.0)
    return beta + (1.0 - beta) * progress


def sequence_priorities(
    trajectory: Trajectory, *, td_steps: int, discount: float, two_player: bool
) -> chex.Array:
    """Priorities `[T, B]` of the steps of a fresh trajectory, for insertion into the replay.

    Steps within n of the trajectory's end bootstrap earlier (see `n_step_values`).
    """
    d = ply_discount(trajectory.discount, discount, two_player)
    rewards = bootstrap_truncations(
        trajectory.reward, trajectory.search_value, trajectory.truncated
    )
    z = n_step_values(rewards, d, trajectory.search_value, td_steps)
    return value_priorities(trajectory.search_value, z)


def muzero_batch(
    window: Trajectory,
    importance_weight: chex.Array,
    *,
    unroll_steps: int,
    td_steps: int,
    discount: float,
    two_player: bool,
    bootstrap_value: chex.Array | None = None,
    window_td_steps: chex.Array | None = None,
    value_prefix_horizon: int = 0,
    unroll_observations: bool = False,
    alternating: bool = True,
) -> MuZeroBatch:
    """The targets of K + 1 unroll steps from windows of length L = K + n + 1.

    Args:
      window: a `Trajectory` with leaves [L, N, ...] starting at the sampled state. Only
        `observation[0]` is read unless `unroll_observations`, so the replay may store
        observations at the start only (observation [1, N, ...]); `behaviour_logits` and
        `policy_version` are not read. Padding after the end of stored data must follow a step
        with discount 0.
      importance_weight: [N] prioritized replay's weights.
      unroll_steps: K, the number of dynamics steps the loss unrolls.
      td_steps: n of the n-step value targets.
      discount: the learning discount (1 for board games).
      two_player: negate the discount between plies (alternating two-player games).
      bootstrap_value: [L, N] the values the n-step targets bootstrap from (a target network's,
        a fresh search's); None: the stored `search_value`.
      window_td_steps: [N] int, each window's own n (at most `td_steps`; the off-policy
        correction, `decayed_td_steps`); None: `td_steps` for all.
      value_prefix_horizon: H > 0 makes `reward_target` the value prefix of each step
        (`value_prefix_targets`).
      unroll_observations: keep `observation[1 .. K]` as the batch's `unroll_observation` (the
        consistency loss's targets).
      alternating: False for a two-player game whose mover may move again: the sign between two
        states then comes from `window.to_play` (`turn_discount`).

    Returns:
      A `MuZeroBatch` with the batch on axis 0.
    """
    k, n = unroll_steps, td_steps
    length = k + n + 1
    chex.assert_rank([window.reward, window.discount, window.search_value], 2)
    chex.assert_rank(window.search_policy, 3)
    chex.assert_equal_shape([window.reward, window.discount, window.search_value])
    chex.assert_equal_shape_prefix([window.action, window.reward], 2)  # a box's: [L, N, D]
    if window.action.shape[0] != length:
        raise ValueError(
            f"windows must have length unroll_steps + td_steps + 1 = {length}, got "
            f"{window.action.shape[0]}"
        )
    num_actions = window.search_policy.shape[-1]

    env_discount = window.discount.astype(jnp.float32)
    # alive[k] = 1 while state k is in the window's first episode: no episode end before it.
    ended = (env_discount == 0).astype(jnp.float32)
    alive = jnp.concatenate([jnp.ones_like(ended[:1]), jnp.cumprod(1.0 - ended[:-1], axis=0)])

    d = _step_discount(window, discount, two_player, alternating)
    if bootstrap_value is None:
        bootstrap_value = window.search_value
    chex.assert_equal_shape([bootstrap_value, window.search_value])
    bootstrap_value = bootstrap_value.astype(jnp.float32)
    rewards = bootstrap_truncations(
        window.reward.astype(jnp.float32), bootstrap_value, window.truncated
    )
    z = n_step_values(rewards, d, bootstrap_value, n, window_td_steps)
    value_target = z[: k + 1] * alive[: k + 1]  # [K+1, N]
    # The transition into step j (j >= 1) starts at state j - 1: a real one only if that is alive.
    reward_target = jnp.concatenate(
        [
            jnp.zeros_like(window.reward[:1], dtype=jnp.float32),
            window.reward[:k].astype(jnp.float32) * alive[:k],
        ],
        axis=0,
    )  # [K+1, N]
    if value_prefix_horizon:
        reward_target = value_prefix_targets(reward_target, value_prefix_horizon)
    uniform = jnp.full_like(window.search_policy[: k + 1], 1.0 / num_actions, dtype=jnp.float32)
    policy_target = jnp.where(
        alive[: k + 1, :, None] > 0, window.search_policy[: k + 1].astype(jnp.float32), uniform
    )

    def batch_major(x):
        return jnp.swapaxes(x, 0, 1)

    unroll_observation = None
    if unroll_observations:
        if window.observation.shape[0] < k + 1:
            raise ValueError(
                f"the consistency targets need the windows' first {k + 1} observations, got "
                f"{window.observation.shape[0]}"
            )
        unroll_observation = batch_major(window.observation[1 : k + 1])  # [N, K, ...]

    policy_actions = None
    if window.sampled_actions is not None:  # [L, N, S, ...] -> [N, K+1, S, ...]
        policy_actions = batch_major(window.sampled_actions[: k + 1])
    action = window.action[:k]
    return MuZeroBatch(
        observation=jax.tree.map(lambda o: o[0], window.observation),
        action=batch_major(
            action if jnp.issubdtype(action.dtype, jnp.floating) else action.astype(jnp.int32)
        ),
        value_target=batch_major(value_target),
        reward_target=batch_major(reward_target),
        policy_target=batch_major(policy_target),
        policy_mask=batch_major(alive[: k + 1]),
        importance_weight=jnp.asarray(importance_weight, jnp.float32),
        unroll_observation=unroll_observation,
        policy_actions=policy_actions,
    )


def alphazero_batch(
    window: Trajectory,
    importance_weight: chex.Array,
    *,
    td_steps: int,
    discount: float,
    two_player: bool,
    bootstrap_value: chex.Array | None = None,
    window_td_steps: chex.Array | None = None,
    alternating: bool = True,
) -> AlphaZeroBatch:
    """The first state of each window with its n-step value target (AlphaZero's training example).

    Args:
      window: a `Trajectory` with leaves [L, N, ...], L = td_steps + 1, starting at the sampled
        state. Only `observation[0]`, `search_policy[0]` and the rewards, discounts and search
        values are read (observation may be [1, N, ...]).
      importance_weight: [N] prioritized replay's weights.
      td_steps: n; with n past the game's end and `discount == 1` the target is the game's
        outcome for the player to move.
      discount: the learning discount (1 for board games).
      two_player: negate the discount between plies (alternating two-player games).
      bootstrap_value, window_td_steps: as for `muzero_batch`.
      alternating: False for a two-player game whose mover may move again (`turn_discount`).
    """
    chex.assert_rank([window.reward, window.discount, window.search_value], 2)
    if window.reward.shape[0] != td_steps + 1:
        raise ValueError(
            f"windows must have length td_steps + 1 = {td_steps + 1}, got {window.reward.shape[0]}"
        )
    d = _step_discount(window, discount, two_player, alternating)
    if bootstrap_value is None:
        bootstrap_value = window.search_value
    chex.assert_equal_shape([bootstrap_value, window.search_value])
    bootstrap_value = bootstrap_value.astype(jnp.float32)
    rewards = bootstrap_truncations(
        window.reward.astype(jnp.float32), bootstrap_value, window.truncated
    )
    z = n_step_values(rewards, d, bootstrap_value, td_steps, window_td_steps)  # [L, N]
    return AlphaZeroBatch(
        observation=jax.tree.map(lambda o: o[0].astype(jnp.float32), window.observation),
        policy_target=window.search_policy[0].astype(jnp.float32),
        value_target=z[0],
        mask=jnp.ones_like(z[0]),
        importance_weight=jnp.asarray(importance_weight, jnp.float32),
    )
