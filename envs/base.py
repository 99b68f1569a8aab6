"""The one batched environment interface shared by every environment family.

Conventions every adapter follows (the conformance test checks them):

- **Batched, host-side numpy.** `reset` and `step` take and return numpy arrays with a leading
  batch axis `[B, ...]`. The pgx and gymnax adapters also offer the same `TimeStep` as JAX
  arrays on device.
- **Same-step auto-reset.** When a transition ends an episode (`done`), the `TimeStep` returned by
  that very `step` carries the reward, `done`, `truncated` and episode statistics of the episode
  that just ended, while `observation`, `legal_mask` and `to_play` already describe the first state
  of the next episode. The action passed for that env at the next `step` acts in the new episode.
  (envpool natively resets one call later; its adapter hides that.) The final observation of an
  episode is therefore never returned: at a terminal state it carries no information, and a
  truncated episode is bootstrapped from the value of the state before the last step.
- **Points of view.** `observation`, `legal_mask` and `to_play` describe the new state from the
  view of the player to move in it; `reward` is for the player who took the action just applied.
  In a two-player zero-sum game the winner's final move gets +1 and `episode_return` is player 0's.
- **Channels-last images.** Board planes and Atari frames are `[H, W, C]` (our conv nets are NHWC).
- **Async batches.** Every adapter has `send(actions, env_id)` / `recv()`. Synchronous adapters
  (`batch_size == num_envs`) only accept all env ids in order; envpool in async mode
  (`batch_size < num_envs`) returns whichever `batch_size` envs finished first and says which in
  `TimeStep.env_id`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from configs.experiment import JAX_FAMILIES  # the config checks runtimes against them

__all__ = [
    "ATARI_OPTIONS",
    "FAMILIES",
    "JAX_FAMILIES",
    "BatchedEnv",
    "EnvSpec",
    "SyncSendRecv",
    "TimeStep",
    "box_bounds",
    "check_actions",
    "check_rewards",
    "checked_time_limit",
    "step_input",
]

# The environment families `make_env` knows (envs.registry), by name prefix; a user's own
# environment (`py:<module>:<callable>`) is run by the adapter of the API it speaks, whose family
# its spec names.
FAMILIES = ("openspiel", "pgx", "envpool", "gymnax", "gymnasium", "jumanji", "brax")


# envpool's Atari options and defaults (envpool/atari/atari_env.h), which the presets pass.
ATARI_OPTIONS: dict[str, Any] = {
    "episodic_life": False,
    "reward_clip": False,
    "repeat_action_probability": 0.0,
    "noop_max": 30,
    "frame_skip": 4,
    "stack_num": 4,
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "use_fire_reset": True,
    "full_action_space": False,
    "max_episode_steps": 27_000,
}


class TimeStep(NamedTuple):
    """What `reset`, `step` and `recv` return: numpy on the host, or JAX arrays on device (pgx)."""

    observation: Any  # [B, *obs_shape] spec.observation_dtype, the new state, player to move's view
    reward: Any  # [B] float32, reward of the transition just taken, for the player who acted
    done: Any  # [B] bool, that transition ended the episode (terminated, truncated, or with
    #   Atari's episodic_life a lost life)
    truncated: Any  # [B] bool, ended by a time limit, not a terminal state (bootstrap allowed)
    legal_mask: Any  # [B, A] bool, legal actions in the new state (all True for envpool)
    to_play: Any  # [B] int32, player to move in the new state (0 in one-player envs)
    episode_return: Any  # [B] float32, undiscounted return of the ended episode (player 0's view;
    #   Atari: the unclipped game score), valid where episode_end, 0 elsewhere
    episode_length: Any  # [B] int32, agent steps in the ended episode, valid where episode_end
    episode_end: Any  # [B] bool, a whole episode ended: episode_return/length are valid here
    env_id: Any  # [B] int32, which env each row is (0..num_envs-1; arange unless envpool async)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What a learner or a search needs to know about an environment, fixed at construction."""

    name: str  # the full name given to make_env, e.g. "openspiel:connect_four", "py:my_envs:make"
    family: str  # one of FAMILIES: the adapter's (a `py:` environment's: the API it speaks)
    num_actions: int  # size A of the discrete action space; a box's dimensions D
    observation_shape: tuple[int, ...]  # shape of one observation, channels-last for images
    observation_dtype: str  # numpy dtype name of observations: "float32", or "uint8" for Atari
    num_players: int  # 1 (single-agent) or 2 (sequential, two-player zero-sum)
    two_player_zero_sum: bool  # True when rewards of the two players sum to zero; search negates
    discount: float  # the env's own per-step discount of future rewards (1.0 for all supported)
    deterministic: bool  # next state is a function of (state, action): an exact model may search
    max_episode_steps: int | None  # a time limit that truncates episodes, None if none
    # Two-player games: the player to move changes after every move. False where the mover may
    # move again (backgammon's moves within a turn): the value targets and a search then take
    # the sign between two states from who is to move in them, not from the ply's parity.
    alternating: bool = True
    # The game has chance events (dice, tile spawns) between a move and the next state, which a
    # model must represent: an exact model splits the rules there (pgx's 2048 and backgammon),
    # a learned one needs Stochastic MuZero's afterstates and chance codes.
    chance: bool = False
    # A box of continuous actions: (low, high), one bound per dimension (D = num_actions); its
    # actions are float vectors [B, D] within them and its legal mask [B, D] is all True. None:
    # discrete actions, integers in [0, num_actions).
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @property
    def is_box(self) -> bool:
        """Whether the actions are continuous vectors (`action_bounds`), not indices."""
        return self.action_bounds is not None

    @property
    def env_id(self) -> str:
        """The name within its family: "connect_four" of "openspiel:connect_four", "my_envs:make"
        of "py:my_envs:make"."""
        return self.name.partition(":")[2]

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"EnvSpec.family must be one of {FAMILIES}, got {self.family}")
        if self.num_actions < 1:
            raise ValueError(f"EnvSpec.num_actions must be >= 1, got {self.num_actions}")
        if self.num_players not in (1, 2):
            raise ValueError(f"EnvSpec.num_players must be 1 or 2, got {self.num_players}")
        if self.two_player_zero_sum != (self.num_players == 2):
            raise ValueError("EnvSpec.two_player_zero_sum must hold exactly when num_players == 2")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"EnvSpec.discount must be in [0, 1], got {self.discount}")
        np.dtype(self.observation_dtype)  # raises TypeError on a bad name
        if self.action_bounds is not None:
            low, high = self.action_bounds
            if not (len(low) == len(high) == self.num_actions) or not all(
                np.isfinite(lo) and np.isfinite(hi) and lo < hi
                for lo, hi in zip(low, high, strict=True)
            ):
                raise ValueError(
                    f"EnvSpec.action_bounds must be finite low < high for each of the "
                    f"{self.num_actions} dimensions, got {self.action_bounds}"
                )


@runtime_checkable
class BatchedEnv(Protocol):
    """A batch of `num_envs` environments stepped together. See the module docstring."""

    spec: EnvSpec  # fixed at construction: what a learner or a search needs to know
    num_envs: int  # environments in the pool
    batch_size: int  # rows per TimeStep from recv (== num_envs unless envpool async)

    def reset(self, seed: int) -> TimeStep:
        """Starts every env afresh (envpool async: returns the first `batch_size` to be ready)."""
        ...

    def step(self, actions: np.ndarray) -> TimeStep:
        """Applies `actions` [num_envs] int to every env; synchronous adapters only."""
        ...

    def send(self, actions: np.ndarray, env_id: np.ndarray) -> None:
        """Queues `actions` [N] for the envs `env_id` [N] (those of the last recv/reset)."""
        ...

    def recv(self) -> TimeStep:
        """Returns the next `batch_size` envs whose step (sent earlier) has finished."""
        ...

    def close(self) -> None:
        """Releases the envs' threads and memory; the env cannot be used afterwards."""
        ...


def check_actions(
    actions: Any,
    batch: int,
    num_actions: int,
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> np.ndarray:
    """Returns `actions` as an int32 [batch] array, or raises ValueError naming what is wrong;
    with a box's `bounds` (`EnvSpec.action_bounds`), as a float32 [batch, D] array of finite
    values within them."""
    actions = np.asarray(actions)
    if bounds is not None:
        if actions.shape != (batch, num_actions) or not np.issubdtype(actions.dtype, np.floating):
            raise ValueError(
                f"actions of a box must be floats of shape [{batch}, {num_actions}], got "
                f"{actions.dtype} {actions.shape}"
            )
        low, high = (np.asarray(b, np.float32) for b in bounds)
        outside = ~np.isfinite(actions) | (actions < low) | (actions > high)
        rows = np.flatnonzero(outside.any(axis=-1))
        if rows.size:
            raise ValueError(
                f"actions of rows {rows[:8].tolist()} are NaN or outside the box "
                f"[{low.tolist()}, {high.tolist()}]: {actions[rows[:8]].tolist()}"
            )
        return actions.astype(np.float32, copy=False)
    if actions.shape != (batch,):
        raise ValueError(f"actions must have shape [{batch}], got {actions.shape}")
    if not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(f"actions must be integers, got dtype {actions.dtype}")
    if actions.size and (actions.min() < 0 or actions.max() >= num_actions):
        raise ValueError(f"actions must be in [0, {num_actions}), got {actions.tolist()}")
    return actions.astype(np.int32, copy=False)


def box_bounds(
    name: str, shape: tuple[int, ...], low: Any, high: Any
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """A Box action space's (low, high) per dimension, as `EnvSpec.action_bounds` holds them;
    UsageError, one line, for a box the agents cannot parametrise (not one axis, or a bound
    that is not finite)."""
    low = np.broadcast_to(np.asarray(low, np.float64), shape).reshape(-1)
    high = np.broadcast_to(np.asarray(high, np.float64), shape).reshape(-1)
    if len(shape) != 1 or not (np.isfinite(low).all() and np.isfinite(high).all()):
        from configs.errors import UsageError

        raise UsageError(
            f"{name} has a Box action space of shape {tuple(shape)} with bounds "
            f"{low.tolist()}..{high.tolist()}; the agents take a box of one axis with finite "
            "bounds"
        )
    return tuple(float(x) for x in low), tuple(float(x) for x in high)


def check_rewards(name: str, rewards: Any) -> None:
    """UsageError, one line, where a reward in `rewards` (any shape) is not finite: a JAX
    environment's step runs inside a jit, where it cannot raise, so the runtimes check the
    rewards that reach the host, before a NaN reaches every loss."""
    rewards = np.asarray(rewards)
    if not np.isfinite(rewards).all():
        from configs.errors import UsageError

        raise UsageError(
            f"{name} gave a non-finite reward ({rewards[~np.isfinite(rewards)].flat[0]}): "
            "rewards must be finite numbers"
        )


def checked_time_limit(name: str, max_episode_steps: Any) -> int | None:
    """`max_episode_steps` as an int (None: none of ours) for environment `name`; UsageError,
    one line, unless an integer > 0."""
    if max_episode_steps is None:
        return None
    if (
        isinstance(max_episode_steps, bool)
        or not isinstance(max_episode_steps, int | np.integer)
        or max_episode_steps < 1
    ):
        from configs.errors import UsageError

        raise UsageError(
            f"max_episode_steps must be an integer > 0 for {name}, got {max_episode_steps!r}"
        )
    return int(max_episode_steps)


def step_input(actions: Any) -> Any:
    """`actions` [B] for a JAX adapter's jitted step: a device array as it is, host data as
    int32 NumPy, which the jitted call transfers itself (`jnp.asarray` of host data runs a program
    of its own, compiled once for each shape, at every step)."""
    import jax  # the JAX adapters' (pgx, gymnax): this module loads without JAX

    return actions if isinstance(actions, jax.Array) else np.asarray(actions, np.int32)


class SyncSendRecv:
    """`send`/`recv` for adapters that step all envs at once: `send` holds, `recv` steps."""

    num_envs: int
    _pending: np.ndarray | None = None

    def step(self, actions: np.ndarray) -> TimeStep:
        raise NotImplementedError

    def send(self, actions: np.ndarray, env_id: np.ndarray) -> None:
        env_id = np.asarray(env_id)
        if not np.array_equal(env_id, np.arange(self.num_envs)):
            raise ValueError(
                f"{type(self).__name__} steps all {self.num_envs} envs at once: send needs "
                f"env_id == arange({self.num_envs}), got {env_id.tolist()}"
            )
        if self._pending is not None:
            raise ValueError("send called twice without recv")
        self._pending = np.asarray(actions)

    def recv(self) -> TimeStep:
        if self._pending is None:
            raise ValueError("recv called without send")
        actions, self._pending = self._pending, None
        return self.step(actions)
