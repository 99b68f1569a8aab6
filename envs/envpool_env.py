"""envpool adapter: classic control (CartPole-v1) and Atari (Pong-v5, ...) with one interface.

`**options` go to `envpool.make` unchanged. For Atari, envpool's defaults are the standard
preprocessing: `img_height=84, img_width=84, gray_scale=True, stack_num=4, frame_skip=4,
noop_max=30, repeat_action_probability=0.0, episodic_life=False, reward_clip=False,
max_episode_steps=27000` (agent steps, i.e. 108000 frames). Pass
`repeat_action_probability=0.25` for sticky actions (Machado et al.), `episodic_life=True` and
`reward_clip=True` for training only. Atari frames are returned channels-last `[84, 84, 4]` uint8.

Semantics mapped onto `TimeStep` (see base.py):
- envpool resets an env on the call *after* the one that reported `terminated | truncated`,
  ignoring that call's action. This adapter sends that extra call itself (only for the envs that
  ended), so the TimeStep reporting `done` already carries the new episode's first observation.
- `reward` is envpool's (clipped to its sign if `reward_clip`); `episode_return` is the game score
  (unclipped) and `episode_length` counts agent steps. With `episodic_life`, `done` marks each lost
  life while `episode_end` (and the episode statistics) mark only the game's true end.
- `truncated` is envpool's time limit (`max_episode_steps`).
- Async mode (`batch_size < num_envs`): `send(actions, env_id)` then `recv()`, which returns the
  first `batch_size` envs to finish, in any order, named by `TimeStep.env_id`. Send back actions for
  every env of a `recv` before the next `recv`. After `reset`, an env's first observation may
  come in any later `recv` (reward 0, not done): it is the first row with that env id.
  `num_envs >= 2 * batch_size - 1` is required so that envs held back for their reset call can
  never leave envpool with too few envs in flight to fill a batch.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from configs.errors import UsageError
from envs.base import EnvSpec, SyncSendRecv, TimeStep, check_actions

__all__ = ["EnvPoolEnv"]


def _envpool():
    import envpool  # deferred: importing envpool loads every env family's extension

    return envpool


class EnvPoolEnv(SyncSendRecv):
    """A pool of envpool environments as a `BatchedEnv`. See the module docstring."""

    def __init__(
        self,
        task_id: str,
        num_envs: int,
        seed: int = 0,
        *,
        batch_size: int | None = None,
        **options: Any,
    ):
        envpool = _envpool()
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        batch_size = num_envs if batch_size is None else batch_size
        if not 1 <= batch_size <= num_envs:
            raise UsageError(f"batch_size must be in [1, num_envs={num_envs}], got {batch_size}")
        if batch_size < num_envs and num_envs < 2 * batch_size - 1:
            raise UsageError(
                f"async envpool needs num_envs >= 2 * batch_size - 1, got num_envs={num_envs}, "
                f"batch_size={batch_size}"
            )
        all_tasks = envpool.list_all_envs()
        if task_id not in all_tasks:
            close = difflib.get_close_matches(task_id, all_tasks, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "see envpool.list_all_envs()"
            raise UsageError(
                f"unknown envpool task {task_id!r}: {hint} "
                "(e.g. envpool:CartPole-v1, envpool:Pong-v5, envpool:Breakout-v5)"
            )
        try:
            spec = envpool.make_spec(task_id, num_envs=num_envs, batch_size=batch_size, **options)
        except TypeError as e:
            raise UsageError(f"bad envpool option for {task_id}: {e}") from None
        if type(spec.action_space).__name__ != "Discrete":
            raise UsageError(
                f"envpool task {task_id!r} has a {type(spec.action_space).__name__} action "
                "space; only discrete actions are supported"
            )
        config = spec.config._asdict()
        raw_shape = tuple(int(d) for d in spec.observation_space.shape)
        self._image = len(raw_shape) == 3  # Atari: [stack, H, W]
        obs_shape = (raw_shape[1], raw_shape[2], raw_shape[0]) if self._image else raw_shape
        self._atari = "episodic_life" in config
        self.task_id = task_id
        self.num_envs = num_envs
        self.batch_size = batch_size
        self._options = options
        self._num_actions = int(spec.action_space.n)
        max_steps = config.get("max_episode_steps")
        self.spec = EnvSpec(
            name=f"envpool:{task_id}",
            family="envpool",
            num_actions=self._num_actions,
            observation_shape=obs_shape,
            observation_dtype=np.dtype(spec.observation_space.dtype).name,
            num_players=1,
            two_player_zero_sum=False,
            discount=1.0,
            deterministic=False,
            max_episode_steps=int(max_steps) if max_steps else None,
        )
        self._seed = seed
        self._pool = None
        self._pool_used = False
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._no_op = np.zeros(num_envs, np.int32)

    @property
    def is_async(self) -> bool:
        return self.batch_size < self.num_envs

    def _new_pool(self, seed: int):
        # A pool is seeded once at creation, so a reset with a seed (or after use) builds a new one.
        if self._pool is not None:
            self._pool.close()
        self._pool = _envpool().make(
            self.task_id,
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=self.batch_size,
            seed=seed,
            **self._options,
        )
        self._seed = seed
        self._pool_used = False
        self._returns = np.zeros(self.num_envs, np.float64)  # running game score per env
        self._lengths = np.zeros(self.num_envs, np.int32)
        self._awaiting_reset: dict[int, tuple | None] = {}  # env -> held row of its ended episode
        self._ready: list[tuple] = []  # rows (see _row) waiting to be returned by recv
        self._pending = None

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(obs.transpose(0, 2, 3, 1)) if self._image else obs

    def _timestep(self, obs, reward, done, truncated, ep_return, ep_length, ep_end, env_id):
        n = env_id.shape[0]
        return TimeStep(
            observation=obs,
            reward=reward.astype(np.float32),
            done=done.astype(bool),
            truncated=truncated.astype(bool),
            legal_mask=np.ones((n, self._num_actions), bool),
            to_play=np.zeros(n, np.int32),
            episode_return=ep_return.astype(np.float32),
            episode_length=ep_length.astype(np.int32),
            episode_end=ep_end.astype(bool),
            env_id=env_id.astype(np.int32),
        )

    def _account(self, ids, reward, terminated, truncated, info):
        """Updates the running episode statistics of `ids`; returns the TimeStep's fields."""
        raw_reward = info["reward"] if self._atari else reward
        game_over = info["terminated"].astype(bool) if self._atari else terminated
        done = terminated | truncated
        ep_end = game_over | truncated
        self._returns[ids] += raw_reward
        self._lengths[ids] += 1
        ep_return = np.where(ep_end, self._returns[ids], 0.0)
        ep_length = np.where(ep_end, self._lengths[ids], 0).astype(np.int32)
        self._returns[ids[ep_end]] = 0.0
        self._lengths[ids[ep_end]] = 0
        return done, truncated & ~terminated, ep_return, ep_length, ep_end

    def reset(self, seed: int | None = None) -> TimeStep:
        """Starts every env afresh with `seed` (default: the one given at construction).

        Async mode returns the first `batch_size` envs to be ready, like `recv`.
        """
        seed = self._seed if seed is None else seed
        if self._pool is None or self._pool_used or seed != self._seed:
            self._new_pool(seed)
        self._pool_used = True
        if self.is_async:
            self._pool.async_reset()
            self._awaiting_reset = {int(i): None for i in self._all_ids}
            return self.recv()
        obs, info = self._pool.reset()
        b = self.num_envs
        no = np.zeros(b, bool)
        return self._timestep(
            self._obs(obs), np.zeros(b), no, no, np.zeros(b), np.zeros(b, np.int32), no,
            info["env_id"],
        )  # fmt: skip

    def step(self, actions: np.ndarray) -> TimeStep:
        """Steps all envs (sync mode only) with `actions` [num_envs]."""
        if self.is_async:
            raise ValueError("envpool in async mode (batch_size < num_envs): use send/recv")
        if self._pool is None:
            raise ValueError("step called before reset")
        actions = check_actions(actions, self.num_envs, self._num_actions)
        obs, reward, terminated, truncated, info = self._pool.step(actions, self._all_ids)
        ids = info["env_id"]
        if not np.array_equal(ids, self._all_ids):  # envpool returns sync batches in order
            raise RuntimeError(f"envpool returned envs {ids.tolist()} out of order")
        done, trunc, ep_return, ep_length, ep_end = self._account(
            ids, reward, terminated, truncated, info
        )
        obs = self._obs(obs)
        if done.any():
            ended = ids[done]
            new_obs, *_, new_info = self._pool.step(self._no_op[: ended.size], ended)
            order = np.argsort(new_info["env_id"])
            obs[done] = self._obs(new_obs[order])
        return self._timestep(obs, reward, done, trunc, ep_return, ep_length, ep_end, ids)

    def send(self, actions: np.ndarray, env_id: np.ndarray) -> None:
        if not self.is_async:
            return super().send(actions, env_id)
        env_id = np.asarray(env_id, np.int32)
        actions = check_actions(actions, env_id.shape[0], self._num_actions)
        self._pool.send(actions, env_id)

    def recv(self) -> TimeStep:
        if not self.is_async:
            return super().recv()
        if self._pool is None:
            raise ValueError("recv called before reset")
        while len(self._ready) < self.batch_size:
            self._recv_some()
        rows, self._ready = self._ready[: self.batch_size], self._ready[self.batch_size :]
        columns = (np.stack(column) for column in zip(*rows, strict=True))
        return self._timestep(*columns)

    def _recv_some(self) -> None:
        """Receives one envpool batch into `_ready`, holding back envs that need a reset call."""
        obs, reward, terminated, truncated, info = self._pool.recv()
        ids = info["env_id"].astype(np.int32)
        obs = self._obs(obs)
        is_reset = np.array([int(i) in self._awaiting_reset for i in ids], bool)
        stepped = ~is_reset
        fields = self._account(
            ids[stepped],
            reward[stepped],
            terminated[stepped],
            truncated[stepped],
            {k: v[stepped] for k, v in info.items() if k in ("reward", "terminated")},
        )
        to_reset = []
        k = 0
        for j, env in enumerate(ids.tolist()):
            if is_reset[j]:
                held = self._awaiting_reset.pop(env)
                if held is None:  # the first observation after reset()
                    held = (None, 0.0, False, False, 0.0, 0, False, env)
                self._ready.append((obs[j], *held[1:]))
                continue
            done, trunc, ep_return, ep_length, ep_end = (f[k] for f in fields)
            row = (obs[j], reward[j], done, trunc, ep_return, ep_length, ep_end, env)
            k += 1
            if done:
                self._awaiting_reset[env] = row
                to_reset.append(env)
            else:
                self._ready.append(row)
        if to_reset:
            self._pool.send(self._no_op[: len(to_reset)], np.array(to_reset, np.int32))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
