"""Your own environment, trained with `podracer train`: a walk written in gymnax's API and named
by import path. Nothing of Podracer's to subclass or wrap.

The environment: a walk on a line of `size` cells, started at a random cell left of the goal at
the right end; a step onto the goal pays 1 and ends the episode, `time_limit` steps truncate it.

    python examples/custom_environment.py

trains V-trace on it for a few seconds with `podracer train` and prints how often the trained
agent steps towards the goal. From the `examples/` folder the same run is one command:

    podracer train --config cartpole_vtrace runtime=anakin env.name=py:custom_environment:make

`docs/your-environment.md` shows the other APIs (jumanji, pgx for two-player games with
AlphaZero and the arena, Gymnasium).
"""

import pathlib
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

LEFT, RIGHT = 0, 1


@struct.dataclass
class WalkState(environment.EnvState):
    position: jax.Array  # [] int32, the walker's cell
    time: int


@struct.dataclass
class WalkParams(environment.EnvParams):
    # Cells (the goal is the last): a shape, so static; gymnax passes params to `jit` as traced
    # values, and a field that sets a shape must say it is none.
    size: int = struct.field(pytree_node=False, default=6)
    max_steps_in_episode: int = 20  # gymnax's `step` truncates there


class Walk(environment.Environment[WalkState, WalkParams]):
    """gymnax's `Environment` supplies `reset` and `step` (the same-step auto-reset, the time
    limit) around `reset_env` and `step_env`, which are all an environment writes."""

    @property
    def default_params(self) -> WalkParams:
        return WalkParams()

    def reset_env(self, key: jax.Array, params: WalkParams) -> tuple[jax.Array, WalkState]:
        state = WalkState(position=jax.random.randint(key, (), 0, params.size - 1), time=0)
        return self.get_obs(state, params), state

    def step_env(self, key, state: WalkState, action, params: WalkParams):
        position = jnp.clip(state.position + 2 * action - 1, 0, params.size - 1)
        state = WalkState(position=position, time=state.time + 1)
        at_goal = position == params.size - 1
        return self.get_obs(state, params), state, at_goal.astype(jnp.float32), at_goal, {}

    def get_obs(self, state: WalkState, params: WalkParams, key=None) -> jax.Array:
        return jax.nn.one_hot(state.position, params.size)  # [size]

    def action_space(self, params: WalkParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: WalkParams) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (params.size,), jnp.float32)


def make(size: int = 6, time_limit: int = 20) -> tuple[Walk, WalkParams]:
    """What `env.name=py:custom_environment:make` calls, with `env.options` as keywords."""
    return Walk(), WalkParams(size=size, max_steps_in_episode=time_limit)


def right_probability(run_dir: str, size: int = 6) -> float:
    """The mean chance the run's agent (its newest checkpoint) steps RIGHT
    from the cells left of the goal."""
    from selfplay.evaluation import load_agent

    config, agent, params = load_agent(run_dir)
    cells = np.eye(size, dtype=np.float32)[: size - 1]  # [size - 1, size]
    legal, greedy = np.ones((size - 1, 2), bool), np.zeros(size - 1, bool)
    out = agent.act(params, jax.random.PRNGKey(0), cells, legal, greedy, None)
    return float(np.mean(out.search_policy[:, RIGHT]))


def main(updates: int = 200, run_dir: str | None = None) -> dict[str, float]:
    """Trains `updates` updates into `run_dir` (default: a new temporary folder)."""
    from podracer import cli

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # as `python` run from here
    run_dir = run_dir or tempfile.mkdtemp(prefix="walk-")
    args = [
        *("train", "--config", "cartpole_vtrace", "--run-dir", run_dir, "--quiet"),
        *("--no-plot", "env.name=py:custom_environment:make", "runtime=anakin"),
        *("network.mlp_sizes=[32]", "actors.unroll_length=8"),
        *("actors.envs_per_thread=16", "evaluation.every_s=0", f"learner.max_updates={updates}"),
    ]
    if cli.main(args) != 0:
        raise SystemExit("training failed")
    after = right_probability(run_dir)
    print(f"steps towards the goal with probability {after:.2f} after {updates} updates")
    return {"right_after": after, "run_dir": run_dir}


if __name__ == "__main__":
    main()
