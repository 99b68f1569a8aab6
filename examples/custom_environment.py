"""A custom environment: your own JAX environment behind Podracer's batched interface, and an
agent of Podracer's trained on it for a few updates.

The interface is `envs.BatchedEnv` (envs/base.py): numpy batches `[B, ...]` in
and out, a `TimeStep` per step, and the same-step auto-reset (the step that ends an episode
returns its reward and statistics with the first observation of the next). A JAX environment
writes pure, batched `reset(key)` / `step(state, actions)` functions first, as the gymnax
adapter does (envs/gymnax_env.py), and wraps them for the host.

The environment: a walk on a line of SIZE cells, started at a random cell left of the goal at
the right end; a step onto the goal pays 1 and ends the episode, TIME_LIMIT steps truncate it.

    python examples/custom_environment.py
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import configs
import muzero
from envs import BatchedEnv, EnvSpec, TimeStep
from envs.base import SyncSendRecv, check_actions
from selfplay.agent import make_agent

SIZE, TIME_LIMIT = 6, 20
LEFT, RIGHT = 0, 1


class WalkState(NamedTuple):
    """The device-side state of B walks."""

    position: jax.Array  # [B] int32
    key: jax.Array  # for the next episodes' starting cells
    episode_return: jax.Array  # [B] float32, so far in the current episode
    episode_length: jax.Array  # [B] int32, so far in the current episode


def walk_functions(num_envs: int):
    """Pure, jittable `reset(key) -> (state, TimeStep)` and `step(state, actions [B]) -> (state,
    TimeStep)` for `num_envs` walks, with the same-step auto-reset."""
    all_legal = jnp.ones((num_envs, 2), bool)
    zeros_i, zeros_f = jnp.zeros(num_envs, jnp.int32), jnp.zeros(num_envs, jnp.float32)

    def starts(key):  # [B] int32: a cell left of the goal
        return jax.random.randint(key, (num_envs,), 0, SIZE - 1)

    def timestep(position, reward, done, truncated, ep_return, ep_length) -> TimeStep:
        return TimeStep(
            observation=jax.nn.one_hot(position, SIZE),  # [B, SIZE] float32
            reward=reward,
            done=done,
            truncated=truncated,
            legal_mask=all_legal,
            to_play=zeros_i,
            episode_return=jnp.where(done, ep_return, 0.0),
            episode_length=jnp.where(done, ep_length, 0),
            episode_end=done,
            env_id=jnp.arange(num_envs, dtype=jnp.int32),
        )

    def reset(key):
        key, start_key = jax.random.split(key)
        state = WalkState(starts(start_key), key, zeros_f, zeros_i)
        no = jnp.zeros(num_envs, bool)
        return state, timestep(state.position, zeros_f, no, no, zeros_f, zeros_i)

    def step(state: WalkState, actions):
        moved = jnp.clip(state.position + jnp.where(actions == RIGHT, 1, -1), 0, SIZE - 1)
        terminated = moved == SIZE - 1  # [B]
        reward = terminated.astype(jnp.float32)
        ep_return, ep_length = state.episode_return + reward, state.episode_length + 1
        truncated = (ep_length >= TIME_LIMIT) & ~terminated
        done = terminated | truncated
        key, start_key = jax.random.split(state.key)
        position = jnp.where(done, starts(start_key), moved)  # the next episode where one ended
        next_state = WalkState(
            position, key, jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length)
        )
        return next_state, timestep(position, reward, done, truncated, ep_return, ep_length)

    return reset, step


class WalkEnv(SyncSendRecv):
    """`num_envs` walks as a `BatchedEnv`: numpy in and out, the state on the device."""

    def __init__(self, num_envs: int, seed: int = 0):
        self.num_envs = self.batch_size = num_envs
        # EnvSpec names one of the built-in families; a JAX one-player environment follows the
        # gymnax adapter's conventions.
        self.spec = EnvSpec(
            name="gymnax:Walk",
            family="gymnax",
            num_actions=2,
            observation_shape=(SIZE,),
            observation_dtype="float32",
            num_players=1,
            two_player_zero_sum=False,
            discount=1.0,
            deterministic=False,
            max_episode_steps=TIME_LIMIT,
        )
        reset, step = walk_functions(num_envs)
        self._reset, self._step = jax.jit(reset), jax.jit(step)
        self._seed, self._state = seed, None

    def reset(self, seed: int | None = None) -> TimeStep:
        self._seed = self._seed if seed is None else seed
        self._state, timestep = self._reset(jax.random.PRNGKey(self._seed))
        return TimeStep(*jax.device_get(tuple(timestep)))

    def step(self, actions: np.ndarray) -> TimeStep:
        actions = check_actions(actions, self.num_envs, self.spec.num_actions)
        self._state, timestep = self._step(self._state, jnp.asarray(actions))
        return TimeStep(*jax.device_get(tuple(timestep)))

    def close(self) -> None:
        self._state = None


def train(updates: int = 20, num_envs: int = 16, seed: int = 0) -> dict[str, float]:
    """V-trace (the `cartpole_vtrace` preset, smaller) on the walk: `updates` updates, each
    learning from a trajectory of `actors.unroll_length` + 1 steps of every walk."""
    env = WalkEnv(num_envs, seed)
    assert isinstance(env, BatchedEnv)
    config = configs.load_config(
        "cartpole_vtrace",
        ["network.mlp_sizes=[32]", "optimizer.learning_rate=0.01", "actors.unroll_length=8"],
    )
    agent = make_agent(config, env.spec)
    optimizer = muzero.make_optimizer(config.optimizer)
    update = jax.jit(muzero.make_update(agent.loss_fn, optimizer))
    key = jax.random.PRNGKey(seed)
    # One program: run outside `jit`, each operation of the init compiles a program of its own.
    state = jax.jit(lambda key: muzero.init_train_state(agent.init(key), optimizer, key))(key)

    def right_probability(params) -> float:  # the policy's mean chance of RIGHT off the goal
        cells = np.eye(SIZE, dtype=np.float32)[: SIZE - 1]  # [SIZE - 1, SIZE]
        legal, greedy = np.ones((SIZE - 1, 2), bool), np.zeros(SIZE - 1, bool)
        out = agent.act(params, key, cells, legal, greedy, None)
        return float(np.mean(out.search_policy[:, RIGHT]))

    before = right_probability(state.params)
    timestep, greedy = env.reset(), np.zeros(num_envs, bool)
    for index in range(updates):
        steps = []
        for _ in range(agent.window_length):  # T + 1 steps: the last one bootstraps
            key, act_key = jax.random.split(key)
            out = agent.act(
                state.params, act_key, timestep.observation, timestep.legal_mask, greedy, None
            )
            action = np.asarray(out.action)
            following = env.step(action)
            steps.append(
                muzero.Trajectory(
                    observation=timestep.observation,
                    action=action,
                    reward=following.reward,
                    discount=np.where(following.done, 0.0, 1.0).astype(np.float32),
                    search_policy=np.asarray(out.search_policy),
                    search_value=np.asarray(out.search_value),
                    legal_mask=timestep.legal_mask,
                    to_play=timestep.to_play,
                    behaviour_logits=np.asarray(out.behaviour_logits),
                    policy_version=np.full(num_envs, index, np.int32),
                    truncated=following.truncated.astype(np.float32),
                )
            )
            timestep = following
        trajectory = jax.tree.map(lambda *xs: np.stack(xs), *steps)  # [T + 1, B, ...]
        batch, _ = agent.make_batch(trajectory, None, None)
        state, metrics = update(state, batch)
    env.close()
    result = {
        "right_before": before,
        "right_after": right_probability(state.params),
        "loss": float(metrics["loss"]),
    }
    print(
        f"the policy's chance of stepping towards the goal: {result['right_before']:.2f} "
        f"untrained, {result['right_after']:.2f} after {updates} updates"
    )
    return result


def main() -> dict[str, float]:
    return train()


if __name__ == "__main__":
    main()
