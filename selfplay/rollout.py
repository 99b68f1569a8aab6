"""Acting in JAX environments inside one jit: T moves of B environments in a `lax.scan`.

    rollout(params, version, env_state, timestep, key)
        T times: the agent's act (search, or V-trace's policy) -> the environment's pure step,
                 with auto-reset -> one [B] step of the trajectory
        -> (env_state, timestep, key, trajectory [T, B], EpisodeEnds [T, B])

The same moves serve both runtimes: Anakin's iteration plays them before it learns
(`selfplay.anakin`), and Sebulba's actors on a JAX environment play a whole segment per device
call with them (`selfplay.actors.segment_actor_loop`) instead of one round trip per move. The
steps are what Sebulba's per-move actor records (`selfplay.actors.acting_fields` and
`outcome_fields`), with the same keys: step t acts with the t-th split of the key it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import muzero
from envs import TimeStep
from selfplay.agent import Agent
from selfplay.programs import built_once

__all__ = ["EpisodeEnds", "Rollout", "episode_sums", "jitted_rollout", "make_rollout"]


class EpisodeEnds(NamedTuple):
    """Which episodes ended in a rollout, with their return and length."""

    ended: jax.Array  # [T, B] bool: an episode ended at this step
    episode_return: jax.Array  # [T, B] float32, valid where ended
    episode_length: jax.Array  # [T, B] int32, valid where ended


# (params, version, env_state, timestep, key) -> (env_state, timestep, key, trajectory, ends)
Rollout = Callable[..., tuple[Any, TimeStep, jax.Array, muzero.Trajectory, EpisodeEnds]]


def make_rollout(
    agent: Agent,
    functions: Any,
    games: int,
    moves: int,
    *,
    greedy_after_moves: int = 0,
    keep_states: bool = False,
) -> Rollout:
    """The pure rollout of `moves` (T) moves in `games` (B) environments stepped by `functions`
    (`envs.jax_env_functions`). `version` is recorded as each step's policy version;
    from move `greedy_after_moves` of an episode on (0: never) the agent acts greedily; with
    `keep_states` each step keeps the game's state (AlphaZero's reanalyse searches from it)."""

    def rollout(params, version, env_state, timestep, key):
        def move(carry, _):
            env_state, timestep, key = carry
            key, act_key = jax.random.split(key)
            observation = timestep.observation.astype(jnp.float32)  # [B, ...]
            legal = timestep.legal_mask  # [B, A]
            greedy = (
                env_state.episode_length >= greedy_after_moves
                if greedy_after_moves
                else jnp.zeros(games, bool)
            )  # [B]
            exact = env_state.game if agent.uses_env_state else None  # AlphaZero's pgx rules
            out = agent.act_inside_jit(params, act_key, observation, legal, greedy, exact)
            record_state = env_state.game if keep_states else None
            env_state, next_timestep = functions.step(env_state, out.action)
            record = muzero.Trajectory(
                # Boolean planes (MinAtar's, pgx's) stay bool: 4x less memory in a replay than
                # float32; the networks cast them.
                observation=(
                    timestep.observation if timestep.observation.dtype == jnp.bool_ else observation
                ),
                action=out.action.astype(
                    jnp.float32 if jnp.issubdtype(out.action.dtype, jnp.floating) else jnp.int32
                ),
                reward=next_timestep.reward.astype(jnp.float32),
                discount=jnp.where(next_timestep.done, 0.0, 1.0),
                search_policy=out.search_policy.astype(jnp.float32),
                search_value=out.search_value.astype(jnp.float32),
                legal_mask=legal,
                to_play=timestep.to_play.astype(jnp.int32),
                behaviour_logits=out.behaviour_logits.astype(jnp.float32),
                policy_version=jnp.full(games, version, jnp.int32),
                truncated=next_timestep.truncated.astype(jnp.float32),
                state=record_state,
                sampled_actions=out.sampled_actions,
            )
            ends = EpisodeEnds(
                next_timestep.episode_end.astype(bool),
                next_timestep.episode_return.astype(jnp.float32),
                next_timestep.episode_length.astype(jnp.int32),
            )
            return (env_state, next_timestep, key), (record, ends)

        (env_state, timestep, key), (trajectory, ends) = jax.lax.scan(
            move, (env_state, timestep, key), None, length=moves
        )
        return env_state, timestep, key, trajectory, ends  # [T, B] steps and ends

    return rollout


def episode_sums(ends: EpisodeEnds) -> jax.Array:
    """[3]: the episodes that ended, the sum of their returns, the sum of their lengths."""
    ended = ends.ended.astype(jnp.float32)  # [T, B]
    per_move = jnp.stack(
        [
            jnp.sum(ended, axis=1),
            jnp.sum(ends.episode_return * ended, axis=1),
            jnp.sum(ends.episode_length * ended, axis=1),
        ],
        axis=1,
    )  # [T, 3]
    return per_move.sum(axis=0)


@built_once(maxsize=8)  # one jitted rollout, so one compilation, for all actor threads
def jitted_rollout(
    agent: Agent, functions: Any, games: int, moves: int, greedy_after_moves: int
) -> tuple[Callable, Callable]:
    """`(reset, rollout)` jitted for Sebulba's actor threads: `reset(key) -> (env_state,
    timestep)` and `make_rollout`'s rollout, which donates the environments' state."""
    rollout = make_rollout(agent, functions, games, moves, greedy_after_moves=greedy_after_moves)
    options = dict(agent.compiler_options)
    return (
        jax.jit(functions.reset),
        jax.jit(rollout, donate_argnums=(2, 3, 4), compiler_options=options),
    )
