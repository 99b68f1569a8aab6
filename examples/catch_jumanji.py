"""Catch in jumanji's API: a ball falls down a grid; move the paddle under it.

Train it with one command, on either runtime (from this checkout's root, or with this folder on
PYTHONPATH):

    podracer train --config gymnax_cartpole_muzero env.name=py:examples.catch_jumanji:make

`make(**env.options)` returns the environment; Podracer recognises jumanji's API by its methods
(`reset(key) -> (state, TimeStep)`, `step(state, action) -> (state, TimeStep)`, `action_spec`,
`observation_spec`) and steps it inside `jit`. An observation field named `action_mask` would be
the legal moves; here every move is legal, so there is none.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import jumanji
from jumanji import specs
from jumanji.types import TimeStep, restart, termination, transition

__all__ = ["Catch", "make"]


class State(NamedTuple):
    ball: jax.Array  # [2] int32 row, column
    paddle: jax.Array  # [] int32 column of the paddle, on the bottom row
    key: jax.Array


class Catch(jumanji.Environment[State, specs.DiscreteArray, jax.Array]):
    """A `rows` x `columns` grid; the ball starts in a random column of the top row and falls a
    row a step; actions 0 left, 1 stay, 2 right. Reward +1 for a catch, -1 for a miss."""

    def __init__(self, rows: int = 10, columns: int = 5):
        self.rows, self.columns = rows, columns
        super().__init__()

    def reset(self, key: jax.Array) -> tuple[State, TimeStep]:
        key, column = jax.random.split(key)
        ball = jnp.array([0, jax.random.randint(column, (), 0, self.columns)], jnp.int32)
        state = State(ball=ball, paddle=jnp.int32(self.columns // 2), key=key)
        return state, restart(self._observe(state))

    def step(self, state: State, action: jax.Array) -> tuple[State, TimeStep]:
        paddle = jnp.clip(state.paddle + action - 1, 0, self.columns - 1).astype(jnp.int32)
        state = State(ball=state.ball + jnp.array([1, 0], jnp.int32), paddle=paddle, key=state.key)
        landed = state.ball[0] == self.rows - 1
        reward = jnp.where(state.ball[1] == paddle, 1.0, -1.0).astype(jnp.float32)
        observation = self._observe(state)
        timestep = jax.lax.cond(
            landed,
            lambda: termination(reward, observation),
            lambda: transition(jnp.float32(0.0), observation),
        )
        return state, timestep

    def _observe(self, state: State) -> jax.Array:
        grid = jnp.zeros((self.rows, self.columns), jnp.float32)  # [rows, columns]
        grid = grid.at[state.ball[0], state.ball[1]].set(1.0)
        return grid.at[self.rows - 1, state.paddle].add(1.0)

    @property
    def observation_spec(self) -> specs.Array:
        return specs.BoundedArray((self.rows, self.columns), jnp.float32, 0.0, 2.0, "grid")

    @property
    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(3, name="action")


def make(rows: int = 10, columns: int = 5) -> Catch:
    """The environment; `env.options` may set `rows` and `columns`."""
    return Catch(rows, columns)
