"""The host-side `BatchedEnv` of a JAX family (pgx, gymnax, jumanji): its pure functions jitted,
the state kept on the device.

Each JAX adapter writes pure, batched `reset(key) -> (state, TimeStep)` and `step(state, actions)
-> (state, TimeStep)` functions (what Anakin steps inside its jit) and serves them to the host
through `JaxEnv`: `reset` and `step` in NumPy (the actions checked in range and legal), and
`step_device` for a caller that keeps the arrays on the device (unchecked: an illegal action does
what the environment's own step does with it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from configs.caching import built_once
from configs.errors import UsageError
from envs.base import EnvSpec, SyncSendRecv, TimeStep, check_actions, step_input

__all__ = ["JaxEnv", "end_episodes", "where_rows"]


def where_rows(done: jax.Array, new: Any, old: Any) -> Any:
    """The pytree `new` in the rows where `done` [B], `old` elsewhere (leaves `[B, ...]`)."""
    pick = lambda a, b: jax.numpy.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
    return jax.tree.map(pick, new, old)


def one_player_timestep(
    observation: Any,
    legal_mask: jax.Array,
    reward: jax.Array,
    done: jax.Array,
    truncated: jax.Array,
    episode_return: jax.Array,
    episode_length: jax.Array,
) -> TimeStep:
    """The `TimeStep` of B environments of a one-player JAX family (leaves [B, ...]): the ended
    episodes' statistics where `done` (`end_episodes`), player 0 to move, env ids 0..B-1."""
    batch = done.shape[0]
    return TimeStep(
        observation=observation,
        reward=reward,
        done=done,
        truncated=truncated,
        legal_mask=legal_mask,
        to_play=jax.numpy.zeros(batch, jax.numpy.int32),
        episode_return=episode_return,
        episode_length=episode_length,
        episode_end=done,
        env_id=jax.numpy.arange(batch, dtype=jax.numpy.int32),
    )


def end_episodes(
    episode_return: jax.Array, episode_length: jax.Array, done: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The running statistics [B] after a step (this step's reward and length already added):
    `(ended return, ended length)` for the TimeStep, valid where `done` and 0 elsewhere, and
    `(return, length)` to carry, restarted at 0 where `done`."""
    return (
        jax.numpy.where(done, episode_return, 0.0),
        jax.numpy.where(done, episode_length, 0),
        jax.numpy.where(done, 0.0, episode_return),
        jax.numpy.where(done, 0, episode_length),
    )


class JaxEnv(SyncSendRecv):
    """`num_envs` environments of a JAX family as a `BatchedEnv`; the state stays on the device.

    `functions` are the family's pure `(reset, step)`, built once for each environment and size
    (`built_once`), so that every env of them shares one jitted pair and a second env compiles
    nothing; `seed` fixes all the randomness to come unless `reset` is given another."""

    def __init__(
        self,
        spec: EnvSpec,
        num_envs: int,
        functions: Any,
        seed: int = 0,
    ):
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        self.spec = spec
        self.env_id = spec.env_id
        self.num_envs = self.batch_size = num_envs
        self.functions = functions
        self._reset, self._step = _jitted(functions)
        self._seed = seed
        self._env_state: Any = None
        self._mask: np.ndarray | None = None  # [B, A] the last TimeStep's legal mask, on host
        self._device_mask: jax.Array | None = None  # [B, A] the same, as step_device left it

    @property
    def env_state(self) -> Any:
        """The whole device-side state, as `functions.step` takes it."""
        if self._env_state is None:
            raise ValueError("no state before reset")
        return self._env_state

    def reset(self, seed: int | None = None) -> TimeStep:
        """Starts every env afresh; `seed` (default: the one given at construction) fixes all
        the randomness to come."""
        self._seed = self._seed if seed is None else seed
        self._pending = None
        self._env_state, ts = self._reset(jax.random.PRNGKey(self._seed))
        return self._to_host(ts)

    def step_device(self, actions: Any) -> TimeStep:
        """Steps with `actions` [B] int (host or device, unchecked: an illegal action does what
        the environment's own step does with it); returns device arrays."""
        if self._env_state is None:
            raise ValueError("step called before reset")
        self._env_state, ts = self._step(self._env_state, step_input(actions))
        self._mask, self._device_mask = None, ts.legal_mask
        return ts

    def step(self, actions: np.ndarray) -> TimeStep:
        """Steps with legal `actions` [B] in [0, num_actions) (a box's: [B, D] within its bounds;
        ValueError otherwise); numpy out."""
        if self._env_state is None:
            raise ValueError("step called before reset")
        actions = check_actions(
            actions, self.num_envs, self.spec.num_actions, self.spec.action_bounds
        )
        if self.spec.is_box:  # every action of a box is legal
            return self._to_host(self.step_device(actions))
        if self._mask is None:  # the last step was step_device: fetch its mask once
            self._mask = np.asarray(jax.device_get(self._device_mask))
        legal = self._mask[np.arange(self.num_envs), actions]
        if not legal.all():
            bad = np.flatnonzero(~legal)
            raise ValueError(
                f"illegal actions {actions[bad].tolist()} in envs {bad.tolist()} "
                f"of {self.spec.name}"
            )
        return self._to_host(self.step_device(actions))

    def _to_host(self, ts: TimeStep) -> TimeStep:
        host = TimeStep(*jax.device_get(tuple(ts)))
        self._mask = host.legal_mask
        return host

    def close(self) -> None:
        self._env_state = None
        self._pending = None
        self._mask = self._device_mask = None


@built_once()  # keyed on the functions' identity: one compiled pair for all their envs
def _jitted(functions: Any) -> tuple[Callable, Callable]:
    return jax.jit(functions.reset), jax.jit(functions.step)
