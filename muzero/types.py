"""The pytrees that cross `jit` between actors, replay and learner.

`Trajectory` is what actors produce (time-major); the batches are what the losses take. Every
leaf of a batch has the batch on one axis: axis 0 for `MuZeroBatch` and `AlphaZeroBatch`, axis 1
for the time-major `VTraceBatch`, so a replicated update can split any of them over devices.
"""

from typing import Any, NamedTuple

import chex

__all__ = ["AlphaZeroBatch", "MuZeroBatch", "Trajectory", "VTraceBatch"]


class Trajectory(NamedTuple):
    """T consecutive steps of B environments, time-major, as an actor records them.

    Step t holds what the actor saw (observation t), what it did (action t) and what followed
    (reward t, discount t). Environments reset automatically, so a trajectory may hold the end of
    one episode and the start of the next: `discount[t] == 0` marks the boundary after step t,
    and `truncated[t]` says the episode was cut there by a time limit (its value targets then
    bootstrap from the last state's value instead of reading the cut as the game's end).
    """

    observation: chex.Array  # [T, B, ...] float32 or uint8; observation before acting at t.
    action: chex.Array  # [T, B] int32 (a box: [T, B, D] float32); action taken at t.
    reward: chex.Array  # [T, B] float32; reward after action t, to the player who acted at t.
    discount: chex.Array  # [T, B] float32; 0 where the episode ended after step t, else env's.
    # [T, B, A] float32; search's policy target at t (visits/improved); Sampled MuZero: [T, B, K]
    # over the K actions its search drew at t (`sampled_actions`).
    search_policy: chex.Array
    search_value: chex.Array  # [T, B] float32; search's value of state t, for the player to move.
    legal_mask: chex.Array  # [T, B, A] bool; legal actions at t (all True for Atari).
    to_play: chex.Array  # [T, B] int32; player to move at t (0 in one-player games).
    behaviour_logits: chex.Array  # [T, B, A] float32; logits of the acting policy (for V-trace).
    policy_version: chex.Array  # [T, B] int32; version of the params that chose action t.
    # [T, B] float32; 1 where a time limit, not the game, ended the episode after step t (its
    # discount is 0 too: the next step is a new episode). None: no time limits.
    truncated: chex.Array | None = None
    # The game's state before acting at t, a pytree with leaves [T, B, ...] (pgx): what
    # AlphaZero's reanalyse searches from with the exact rules. None: not kept.
    state: Any = None
    # [T, B, K, ...] the K actions Sampled MuZero's search drew at t (the root's children),
    # which `search_policy` weighs. None: a search over every action.
    sampled_actions: chex.Array | None = None


class MuZeroBatch(NamedTuple):
    """N training windows with their targets for unroll steps 0..K; batch on axis 0.

    Built from sampled windows by `muzero.targets.muzero_batch`. Step k is the state k steps after
    the window's start; the model reaches it by unrolling `action[:, :k]` through dynamics.
    """

    observation: chex.Array  # [N, ...] observation at the window's start.
    action: chex.Array  # [N, K] int32 (a box: [N, K, D]); actions taken at steps 0..K-1.
    value_target: chex.Array  # [N, K+1] float32; n-step value target of step k (0 if absorbing).
    # [N, K+1] float32; reward of the transition into step k ([:, 0]: 0); with a value prefix,
    # the rewards summed since the prefix's last reset (muzero.targets.value_prefix_targets).
    reward_target: chex.Array
    policy_target: chex.Array  # [N, K+1, A] float32; search policy at k (uniform if absorbing).
    policy_mask: chex.Array  # [N, K+1] float32; 1 where step k lies inside the episode.
    importance_weight: chex.Array  # [N] float32; prioritized replay's correction, max 1.
    # [N, K, ...] the real observations at steps 1..K (the consistency loss's targets); None
    # where the loss does not use them.
    unroll_observation: chex.Array | None = None
    # [N, K+1, S, ...] Sampled MuZero: the S actions the search drew at step k, which
    # `policy_target` [N, K+1, S] weighs. None: the policy target is over every action.
    policy_actions: chex.Array | None = None


class AlphaZeroBatch(NamedTuple):
    """N real states with their policy and value targets; batch on axis 0."""

    observation: chex.Array  # [N, ...] observation of the state.
    policy_target: chex.Array  # [N, A] float32; search policy at the state.
    value_target: chex.Array  # [N] float32; outcome or n-step value, for the player to move.
    mask: chex.Array  # [N] float32; 1 for states to train on, 0 for padding.
    importance_weight: chex.Array  # [N] float32; prioritized replay's correction (1: uniform).


class VTraceBatch(NamedTuple):
    """A [T, B] trajectory for V-trace; batch on axis 1.

    Steps 0..T-2 are learned from; step T-1 only supplies the bootstrap value, so actors overlap
    consecutive trajectories by one step (as cleanba does) to learn from every transition.
    """

    observation: chex.Array  # [T, B, ...] observation before acting at t.
    action: chex.Array  # [T, B] int32; action taken at t.
    reward: chex.Array  # [T, B] float32; reward after action t.
    discount: chex.Array  # [T, B] float32; 0 where the episode ended after step t, else env's.
    behaviour_logits: chex.Array  # [T, B, A] float32; logits of the policy that acted.
    truncated: chex.Array | None = None  # [T, B] float32; 1 where a time limit cut the episode.

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory) -> "VTraceBatch":
        """The V-trace fields of an actor's `Trajectory`."""
        return cls(
            trajectory.observation,
            trajectory.action,
            trajectory.reward,
            trajectory.discount,
            trajectory.behaviour_logits,
            trajectory.truncated,
        )
