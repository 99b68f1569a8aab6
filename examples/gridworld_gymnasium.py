"""A grid world in Gymnasium's API: walk to the goal corner. Stepped on the host (Sebulba).

Train it with one command (from this checkout's root, or with this folder on PYTHONPATH):

    podracer train --config cartpole_muzero env.name=py:examples.gridworld_gymnasium:make

`make(**env.options)` returns a `gymnasium.Env`; Podracer recognises Gymnasium's API by its
methods (`reset(seed=...)`, `step(action)`, `action_space`, `observation_space`), calls `make`
once more for each copy a batch needs, and steps them on the host with Gymnasium's own vector
env. A function returning a vector env (`gymnasium.make_vec`) works too. Registered ids need no
module at all: `env.name=gymnasium:CartPole-v1`.
"""

from __future__ import annotations

import gymnasium
import numpy as np

__all__ = ["GridWorld", "make"]


class GridWorld(gymnasium.Env):
    """A `size` x `size` grid; start in a random cell, reach the bottom-right corner. Actions 0
    up, 1 right, 2 down, 3 left; reward -0.01 a step and +1 at the goal; 4 * size steps at most
    (a truncation)."""

    def __init__(self, size: int = 5):
        self.size = size
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (size, size, 1), np.float32)
        self.action_space = gymnasium.spaces.Discrete(4)
        self._moves = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])

    def _observe(self) -> np.ndarray:
        grid = np.zeros((self.size, self.size, 1), np.float32)
        grid[self._cell[0], self._cell[1], 0] = 1.0
        return grid

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cell = self.np_random.integers(0, self.size, 2)
        self._steps = 0
        return self._observe(), {}

    def step(self, action: int):
        self._cell = np.clip(self._cell + self._moves[action], 0, self.size - 1)
        self._steps += 1
        goal = bool((self._cell == self.size - 1).all())
        reward = 1.0 if goal else -0.01
        return self._observe(), reward, goal, self._steps >= 4 * self.size, {}


def make(size: int = 5) -> GridWorld:
    """The environment; `env.options` may set `size`."""
    return GridWorld(size)
