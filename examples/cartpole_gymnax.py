"""CartPole in gymnax's API, written as a user would write an environment of their own.

Train it with one command (from this checkout's root, or with this folder on PYTHONPATH):

    podracer train --config gymnax_cartpole_muzero env.name=py:examples.cartpole_gymnax:make

`make(**env.options)` returns the environment; Podracer recognises gymnax's API by its methods
(`reset(key, params)`, `step(key, state, action, params)`, `default_params`, `action_space`,
`observation_space`) and steps it inside `jit` on either runtime. gymnax's `Environment` base
class supplies `reset` and `step` (with the same-step auto-reset) around `reset_env` and
`step_env`, which are all a user writes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["CartPole", "make"]


@struct.dataclass
class State(environment.EnvState):
    position: jax.Array  # [4] x, x_dot, theta, theta_dot
    time: int


@struct.dataclass
class Params(environment.EnvParams):
    gravity: float = 9.8
    cart_mass: float = 1.0
    pole_mass: float = 0.1
    pole_half_length: float = 0.5
    force: float = 10.0
    tau: float = 0.02  # seconds per step
    max_angle: float = 12 * 2 * jnp.pi / 360
    max_position: float = 2.4
    max_steps_in_episode: int = 500


class CartPole(environment.Environment[State, Params]):
    """Balance a pole on a cart by pushing it left (0) or right (1): +1 a step until it falls."""

    @property
    def default_params(self) -> Params:
        return Params()

    def reset_env(self, key: jax.Array, params: Params) -> tuple[jax.Array, State]:
        state = State(position=jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05), time=0)
        return state.position, state

    def step_env(self, key, state: State, action, params: Params):
        x, x_dot, theta, theta_dot = state.position
        force = jnp.where(action == 1, params.force, -params.force)
        total_mass = params.cart_mass + params.pole_mass
        cos, sin = jnp.cos(theta), jnp.sin(theta)
        temp = (
            force + params.pole_mass * params.pole_half_length * theta_dot**2 * sin
        ) / total_mass
        theta_acc = (params.gravity * sin - cos * temp) / (
            params.pole_half_length * (4.0 / 3.0 - params.pole_mass * cos**2 / total_mass)
        )
        x_acc = temp - params.pole_mass * params.pole_half_length * theta_acc * cos / total_mass
        position = state.position + params.tau * jnp.stack([x_dot, x_acc, theta_dot, theta_acc])
        state = State(position=position, time=state.time + 1)
        fallen = (jnp.abs(position[0]) > params.max_position) | (
            jnp.abs(position[2]) > params.max_angle
        )
        # The time limit is gymnax's `step`'s business (it truncates); this is termination only.
        return position, state, jnp.float32(1.0), fallen, {}

    def action_space(self, params: Params | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: Params) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (4,), jnp.float32)


def make(**params) -> tuple[CartPole, Params]:
    """The environment and its params; `env.options` set the params (e.g. `force=12.0`)."""
    return CartPole(), Params(**params)
