"""Gymnasium adapter: any registered id, Atari through ale-py, or a user's own `gymnasium.Env`.

What goes in (`GymnasiumEnv(source, num_envs, seed, **options)`, built by `envs.make_env`):
- `gymnasium:<id>`, a registered id (`gymnasium:CartPole-v1`, `gymnasium:ALE/Pong-v5`): `num_envs`
  copies from `gymnasium.make`, stepped one after another on the host by a `SyncVectorEnv`.
  Options: `max_episode_steps` (overrides the id's time limit). Atari ids (those ale-py
  registers: `ALE/...`, `...NoFrameskip-v4`) take envpool's preprocessing options too, with
  envpool's defaults, so that the `atari` presets run on either family unchanged:
  `episodic_life=False, reward_clip=False, repeat_action_probability=0.0` (ale-py's v5 ids say
  0.25: pass it for sticky actions), `noop_max=30, frame_skip=4, stack_num=4, img_height=84,
  img_width=84, gray_scale=True, use_fire_reset=True, full_action_space=False,
  max_episode_steps=27000` (agent steps, 108000 frames).
- `py:<module>:<callable>` returning a `gymnasium.Env` (`envs.user.UserEnv`): `num_envs` copies,
  the first the object the callable returned, the others from calling it again; or returning a
  vector env (`num_envs`, e.g. a `SyncVectorEnv`), stepped as it is: it must have been built with
  `num_envs` equal to the batch asked for and `autoreset_mode=AutoresetMode.SAME_STEP`.

Actions are `Discrete(n)` (a `start` offset is added back) or a `Box` of one axis with finite
bounds (MuJoCo's: `EnvSpec.action_bounds`, float vectors [B, D] for Sampled MuZero and the
Gaussian V-trace); other action spaces are refused.

Observations: a `Box` as float32 (a `uint8` Box, images, stays uint8); a `Discrete(n)` as a
one-hot float32 `[n]`; `Dict` and `Tuple` are refused (`gymnasium.wrappers.FlattenObservation`
makes them a Box). Every observation is checked against the space the env declared: one whose
shape or dtype differs is a UsageError naming both (the run stops with that line). Atari frames
are envpool's: the max over the last two frames of each skip, 84x84 grayscale by area
interpolation, the last 4 stacked channels-last `[84, 84, 4]` uint8 (colour: `[84, 84, 12]`,
frame by frame). ale-py steps the emulator and this module does the rest in NumPy:
gymnasium's `AtariPreprocessing` needs OpenCV, and under a vector env's auto-reset its life-loss
signal would restart the game.

Semantics mapped onto `TimeStep` (see base.py): the vector env runs with same-step auto-reset,
so a `done` row already carries the next episode's first observation. `done` is
`terminated | truncated` (with Atari's `episodic_life`, also a lost life: the game goes on after
envpool's no-ops and FIRE, and `episode_end` with the statistics marks the game's end);
`truncated` is a time limit's (Gymnasium's `TimeLimit`, counting agent steps over the whole game)
that did not also terminate. `episode_return` is the sum of the env's rewards (Atari: the game
score, unclipped; `reward` is clipped to its sign with `reward_clip`). `legal_mask` is all True,
or the env's `info["action_mask"]` where it gives one (an action it masks out is then a
ValueError). A non-finite reward is a UsageError (`envs.base.check_rewards`). `reset(seed)` seeds
env i with `seed + i`.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import threading
import weakref
from typing import Any

import gymnasium
import numpy as np

from configs.errors import UsageError
from envs.base import (
    ATARI_OPTIONS,
    EnvSpec,
    SyncSendRecv,
    TimeStep,
    box_bounds,
    check_actions,
    check_rewards,
    checked_time_limit,
)
from envs.user import UserEnv

__all__ = ["GymnasiumEnv"]

_ATARI_ENTRY_POINT = "ale_py.env:AtariEnv"


class GymnasiumEnv(SyncSendRecv):
    """`num_envs` Gymnasium environments as a `BatchedEnv`. See the module docstring."""

    def __init__(self, source: str | UserEnv, num_envs: int, seed: int = 0, **options: Any):
        if num_envs < 1:
            raise UsageError(f"num_envs must be >= 1, got {num_envs}")
        if isinstance(source, UserEnv):
            if options:  # the registry gives none: the user's callable took them
                raise UsageError(f"{source.name}: options go to the callable, got {options}")
            name = source.name
            vector, limit = _user_vector(source, num_envs)
            self._atari: dict[str, Any] | None = None
            self._check_batch = source.vectorised  # our own SyncVectorEnv checks each env's
        else:
            name = f"gymnasium:{source}"
            vector, limit, self._atari = _registered(source, num_envs, options)
            self._check_batch = False
        self._vector = vector
        try:
            self._init_spaces(name, vector)
        except BaseException:
            vector.close()
            raise
        self.num_envs = self.batch_size = num_envs
        self.spec = EnvSpec(
            name=name,
            family="gymnasium",
            num_actions=self._num_actions,
            observation_shape=self._obs_shape,
            observation_dtype=self._obs_dtype.name,
            num_players=1,
            two_player_zero_sum=False,
            discount=1.0,
            deterministic=False,
            max_episode_steps=limit,
            action_bounds=self._bounds,
        )
        self._seed = seed
        self._started = False
        self._mask: np.ndarray | None = None  # the last action_mask, where the env gives one
        self._all_legal = np.ones((num_envs, self._num_actions), bool)
        self._ids = np.arange(num_envs, dtype=np.int32)

    def _init_spaces(self, name: str, vector: Any) -> None:
        action_space = vector.single_action_space
        self._bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        if isinstance(action_space, gymnasium.spaces.Box):
            self._bounds = box_bounds(name, action_space.shape, action_space.low, action_space.high)
            self._num_actions, self._action_start = len(self._bounds[0]), 0
        elif isinstance(action_space, gymnasium.spaces.Discrete):
            self._num_actions = int(action_space.n)
            self._action_start = int(action_space.start)
        else:
            kind = type(action_space).__name__
            raise UsageError(
                f"{name} has a {kind} action space: the agents take Discrete actions or a Box"
            )
        self._action_dtype = action_space.dtype
        space = vector.single_observation_space
        if isinstance(space, gymnasium.spaces.Discrete):
            self._obs_shape: tuple[int, ...] = (int(space.n),)
            self._obs_dtype = np.dtype(np.float32)
            self._one_hot = np.eye(int(space.n), dtype=np.float32)
        elif isinstance(space, gymnasium.spaces.Box):
            self._obs_shape = tuple(int(d) for d in space.shape)
            keep = space.dtype == np.uint8  # images stay bytes; everything else float32
            self._obs_dtype = np.dtype(np.uint8 if keep else np.float32)
            self._one_hot = None
        else:
            raise UsageError(
                f"{name} has a {type(space).__name__} observation space: only Box and Discrete "
                "observations are supported (gymnasium.wrappers.FlattenObservation makes a Box)"
            )
        self._space = space
        self._name = name

    def _observations(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs)
        if self._check_batch:  # a user's vector env: its batch against its declared space
            _check_observation(self._name, self._space, obs, batch=self.num_envs)
        if self._one_hot is not None:
            return self._one_hot[obs.astype(np.int64) - int(self._space.start)]
        return obs.astype(self._obs_dtype, copy=False)

    def _legal(self, info: dict[str, Any]) -> np.ndarray:
        mask = info.get("action_mask")
        if mask is None:
            self._mask = None
            return self._all_legal
        mask = np.asarray(mask).astype(bool)
        if mask.shape != self._all_legal.shape:
            raise ValueError(
                f"{self._name} returned an action_mask of shape {list(mask.shape)}, expected "
                f"[{self.num_envs}, {self._num_actions}]"
            )
        given = np.asarray(info.get("_action_mask", np.ones(self.num_envs, bool)), bool)
        mask = np.where(given[:, None], mask, True)
        empty = ~mask.any(axis=1)
        if empty.any():
            raise ValueError(
                f"{self._name} returned an action_mask with no legal action in env "
                f"{int(np.argmax(empty))}"
            )
        self._mask = mask
        return mask

    def _timestep(self, obs, reward, done, truncated, ep_return, ep_length, ep_end, legal):
        return TimeStep(
            observation=obs,
            reward=reward.astype(np.float32),
            done=done,
            truncated=truncated,
            legal_mask=legal.copy(),  # the caller's own: _all_legal and _mask are kept here
            to_play=np.zeros(self.num_envs, np.int32),
            episode_return=ep_return.astype(np.float32),
            episode_length=ep_length.astype(np.int32),
            episode_end=ep_end,
            env_id=self._ids.copy(),
        )

    def reset(self, seed: int | None = None) -> TimeStep:
        """Starts every env afresh, env i seeded with `seed + i` (default: the constructor's)."""
        seed = self._seed if seed is None else int(seed)
        self._seed = seed
        obs, info = self._vector.reset(seed=seed)
        self._returns = np.zeros(self.num_envs, np.float64)  # running return per env
        self._lengths = np.zeros(self.num_envs, np.int32)
        self._started = True
        b = self.num_envs
        no = np.zeros(b, bool)
        zeros = np.zeros(b, np.float32)
        return self._timestep(
            self._observations(obs), zeros, no, no, zeros, zeros, no, self._legal(info)
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        """Steps every env with `actions` [num_envs] (a box's: [num_envs, D])."""
        if not self._started:
            raise ValueError("step called before reset")
        actions = check_actions(actions, self.num_envs, self._num_actions, self._bounds)
        if self._bounds is not None:
            actions = actions.astype(self._action_dtype)  # MuJoCo's float64
        elif self._mask is not None:
            illegal = ~self._mask[self._ids, actions]
            if illegal.any():
                env = int(np.argmax(illegal))
                raise ValueError(
                    f"illegal action {int(actions[env])} in env {env} of {self._name}: its "
                    "action_mask forbids it"
                )
        obs, reward, terminated, truncated, info = self._vector.step(
            actions + self._action_start if self._action_start else actions
        )
        reward = np.asarray(reward, np.float64)
        check_rewards(self._name, reward)
        obs = self._observations(obs)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        ep_end = done = terminated | truncated
        raw = reward  # the game score, where the reward is clipped
        if self._atari is not None:
            done = ep_end | np.asarray(info.get("life_lost", False), bool)
            if self._atari["reward_clip"]:
                reward = np.sign(raw)
        self._returns += raw
        self._lengths += 1
        ep_return = np.where(ep_end, self._returns, 0.0)
        ep_length = np.where(ep_end, self._lengths, 0)
        self._returns[ep_end] = 0.0
        self._lengths[ep_end] = 0
        return self._timestep(
            obs, reward, done, truncated & ~terminated, ep_return, ep_length, ep_end,
            self._legal(info),
        )  # fmt: skip

    def close(self) -> None:
        if self._vector is not None:
            self._vector.close()
            self._vector = None


# --- registered ids --------------------------------------------------------------------------


def _registered(env_id: str, num_envs: int, options: dict[str, Any]) -> tuple[Any, int | None, Any]:
    """`(vector env, time limit, Atari options or None)` for a registered id; UsageError, one
    line, for an unknown id or option."""
    spec = _find_spec(env_id)
    atari = spec.entry_point == _ATARI_ENTRY_POINT
    accepted = ATARI_OPTIONS if atari else {"max_episode_steps": None}
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UsageError(
            f"unknown option(s) {', '.join(unknown)} for gymnasium:{env_id}; accepted: "
            f"{', '.join(sorted(accepted))}"
        )
    limit = checked_time_limit(f"gymnasium:{env_id}", options.get("max_episode_steps"))
    try:
        if atari:
            settings = _atari_settings(env_id, options)
            limit = settings["max_episode_steps"]
            vector = gymnasium.vector.SyncVectorEnv(
                [functools.partial(_atari_env, env_id, settings)] * num_envs,
                autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
            )
            return vector, limit, settings
        limit = limit if limit is not None else spec.max_episode_steps
        vector = gymnasium.make_vec(
            env_id,
            num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
            wrappers=[functools.partial(_Checked, f"gymnasium:{env_id}")],
            **({"max_episode_steps": limit} if limit is not None else {}),
        )
    except (gymnasium.error.Error, ImportError) as e:  # a missing extra (box2d, mujoco), ...
        message = " ".join(str(e).split()) or type(e).__name__
        raise UsageError(f"gymnasium:{env_id} could not be made: {message}") from None
    return vector, limit, None


def _find_spec(env_id: str) -> Any:
    """The registry's spec of `env_id`, registering ale-py's ids first where it may be one."""
    if env_id.startswith("ALE/") or env_id not in gymnasium.registry:
        _register_atari(required=env_id.startswith("ALE/"), env_id=env_id)
    try:
        return gymnasium.spec(env_id)
    except (gymnasium.error.Error, ImportError):
        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "see gymnasium.pprint_registry()"
        raise UsageError(
            f"unknown Gymnasium id {env_id!r}: {hint} (e.g. gymnasium:CartPole-v1, "
            "gymnasium:ALE/Pong-v5)"
        ) from None


def _register_atari(required: bool, env_id: str) -> None:
    if importlib.util.find_spec("ale_py") is None:
        if required:
            raise UsageError(
                f"gymnasium:{env_id} needs the ale-py package, which is not installed: "
                "pip install 'podracer[atari]'"
            )
        return
    import ale_py

    gymnasium.register_envs(ale_py)


def _atari_settings(env_id: str, options: dict[str, Any]) -> dict[str, Any]:
    settings = {**ATARI_OPTIONS, **options}
    for key, default in ATARI_OPTIONS.items():
        value = settings[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            low = 0 if key == "noop_max" else 1
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
        if not ok:
            expected = {bool: "true or false", int: "an integer >= 1", float: "a number in [0, 1]"}
            what = "an integer >= 0" if key == "noop_max" else expected[type(default)]
            raise UsageError(f"{key} for gymnasium:{env_id} must be {what}, got {value!r}")
    return settings


def _atari_env(env_id: str, settings: dict[str, Any]) -> Any:
    """One ALE env with envpool's preprocessing and time limit (outermost, so that it counts the
    agent steps of a whole game over its lives, as envpool's does)."""
    ale_env = gymnasium.make(
        env_id,
        frameskip=1,  # the wrapper skips, pooling the last two frames
        repeat_action_probability=float(settings["repeat_action_probability"]),
        full_action_space=settings["full_action_space"],
        max_num_frames_per_episode=None,  # ALE's own limit off: TimeLimit counts agent steps
    ).unwrapped
    return gymnasium.wrappers.TimeLimit(
        _AtariFrames(ale_env, settings), max_episode_steps=settings["max_episode_steps"]
    )


def _area_taps(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray]:
    """`(index, weight)`, each [size_out, K]: area interpolation (OpenCV's INTER_AREA when
    shrinking) along one axis, output pixel i the weighted sum of the K input pixels `index[i]`
    it covers, those cut by its edges in part. Gathers and sums, not a matmul: a multithreaded
    BLAS call this small is slowed tenfold by the actor and JAX threads beside it."""
    scale = size_in / size_out
    starts = np.arange(size_out)[:, None] * scale
    pixels = np.arange(size_in)[None, :]
    overlap = np.minimum(pixels + 1, starts + scale) - np.maximum(pixels, starts)
    weights = np.clip(overlap, 0.0, None) / scale  # [size_out, size_in]
    taps = int((weights > 0).sum(axis=1).max())
    index = np.minimum((weights > 0).argmax(axis=1)[:, None] + np.arange(taps), size_in - 1)
    weight = np.take_along_axis(weights, index, axis=1)
    weight[:, 1:] *= index[:, 1:] != index[:, :-1]  # a tap clamped onto the last pixel twice
    return index, weight.astype(np.float32)


class _AtariFrames(gymnasium.Wrapper):
    """envpool's Atari preprocessing (`atari_env.h`) over one ale-py env, stepped through its
    `ale`: frame skip with a max over the last two frames, area resize, a channels-last frame
    stack; at each start 1 to `noop_max` no-ops, the last replaced by FIRE where the game has it.
    With `episodic_life`, a lost life is reported in `info["life_lost"]`, not as a termination,
    and the game goes on at once after the no-ops and FIRE (the frame of the lost life is stacked
    too, as envpool's), so that the vector env's auto-reset never restarts a game with lives left.
    """

    def __init__(self, env: Any, settings: dict[str, Any]):
        super().__init__(env)
        import ale_py

        self._ale = env.unwrapped.ale
        full = settings["full_action_space"]
        self._actions = list(
            self._ale.getLegalActionSet() if full else self._ale.getMinimalActionSet()
        )
        self._noop, self._fire = ale_py.Action.NOOP, ale_py.Action.FIRE
        self._fire_reset = settings["use_fire_reset"] and self._fire in self._actions
        self._skip = settings["frame_skip"]
        self._noop_max = settings["noop_max"]
        self._episodic_life = settings["episodic_life"]
        self._gray = settings["gray_scale"]
        height, width = self._ale.getScreenDims()
        channels = 1 if self._gray else 3
        frame = (height, width) if self._gray else (height, width, 3)
        self._frames = [np.zeros(frame, np.uint8) for _ in range(2)]
        self._rows = _area_taps(height, settings["img_height"])
        self._columns = _area_taps(width, settings["img_width"])
        self._channels = channels
        shape = (settings["img_height"], settings["img_width"], channels * settings["stack_num"])
        self._stack = np.zeros(shape, np.uint8)
        self._lives = 0
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)

    def _grab(self, index: int) -> None:
        if self._gray:
            self._ale.getScreenGrayscale(self._frames[index])
        else:
            self._ale.getScreenRGB(self._frames[index])

    def _push(self, pooled: bool, push_all: bool) -> None:
        frame = np.maximum(*self._frames) if pooled else self._frames[0]
        frame = frame.reshape(*frame.shape[:2], self._channels).astype(np.float32)  # [H, W, C]
        (rows, row_weights), (columns, column_weights) = self._rows, self._columns
        tall = sum(row_weights[:, k, None, None] * frame[rows[:, k]] for k in range(rows.shape[1]))
        small = sum(
            column_weights[:, k, None] * tall[:, columns[:, k]] for k in range(columns.shape[1])
        )  # [H', W', C]
        small = np.rint(small).astype(np.uint8)
        c = self._channels
        if push_all:
            self._stack[:] = np.tile(small, (1, 1, self._stack.shape[-1] // c))
        else:
            self._stack[..., :-c] = self._stack[..., c:]
            self._stack[..., -c:] = small

    def _start(self, push_all: bool) -> None:
        """envpool's `Reset` after the game's reset (or, with lives left, in place of it)."""
        noops = 0
        if self._noop_max > 0:
            noops = int(self.env.unwrapped.np_random.integers(1, self._noop_max + 1))
        for _ in range(noops - int(self._fire_reset)):
            self._ale.act(self._noop)
            if self._ale.game_over():
                self._ale.reset_game()
                push_all = True
        if self._fire_reset:
            self._ale.act(self._fire)
        self._grab(0)
        self._push(pooled=False, push_all=push_all)
        self._lives = self._ale.lives()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.env.reset(seed=seed, options=options)
        self._start(push_all=True)
        return self._stack.copy(), {"lives": self._lives, "life_lost": False}

    def step(self, action: Any):
        ale_action = self._actions[int(action)]
        reward = 0.0
        game_over = False
        for left in range(self._skip, 0, -1):
            reward += self._ale.act(ale_action)
            game_over = self._ale.game_over()
            if left <= 2:
                self._grab(min(self._skip, 2) - left)
            if game_over:
                if left > 1:  # ended within the skip: its last frame, unpooled
                    self._grab(0)
                break
        self._push(pooled=self._skip > 1 and not (game_over and left > 1), push_all=False)
        lives = self._ale.lives()
        life_lost = self._episodic_life and not game_over and 0 < lives < self._lives
        self._lives = lives
        if life_lost:
            self._start(push_all=False)
        info = {"lives": self._lives, "life_lost": life_lost}
        return self._stack.copy(), reward, game_over, False, info


# --- a user's environment --------------------------------------------------------------------

# The UserEnvs whose own object (`UserEnv.env`) an adapter took: `load_user_env` builds it once a
# process, so any later adapter of the same name (another actor thread's, say) steps copies.
_TAKEN: weakref.WeakSet[UserEnv] = weakref.WeakSet()
_TAKEN_LOCK = threading.Lock()


def _take(source: UserEnv) -> Any:
    with _TAKEN_LOCK:
        if source not in _TAKEN:
            _TAKEN.add(source)
            return source.env
    return source.make()


def _user_vector(source: UserEnv, num_envs: int) -> tuple[Any, int | None]:
    """`(vector env, time limit)` of a user's Gymnasium env or vector env; UsageError, one line,
    for a vector env of another size or auto-reset mode."""
    first = _take(source)
    if not source.vectorised:
        makers = [lambda: first] + [source.make] * (num_envs - 1)
        vector = gymnasium.vector.SyncVectorEnv(
            [lambda make=make: _Checked(source.name, make()) for make in makers],
            autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
        )
        return vector, _time_limit(first)
    vector = first
    try:
        if vector.num_envs != num_envs:
            raise UsageError(
                f"{source.name} is a vector env of num_envs={vector.num_envs}, but a batch of "
                f"{num_envs} was asked for: ask for {vector.num_envs} (actors.envs_per_thread) or "
                f"build it with num_envs={num_envs}"
            )
        modes = gymnasium.vector.AutoresetMode
        mode = getattr(vector, "autoreset_mode", None) or vector.metadata.get("autoreset_mode")
        if mode is None or modes(mode) != modes.SAME_STEP:
            if mode is None:
                said = "no autoreset_mode (Gymnasium's default is NEXT_STEP)"
            else:
                said = f"autoreset_mode {modes(mode).name}"
            raise UsageError(
                f"{source.name} is a vector env with {said}: build it with "
                "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP, so that the step that "
                "ends an episode returns the next one's first observation"
            )
    except BaseException:
        vector.close()
        raise
    sub_envs = getattr(vector, "envs", None)
    limit = _time_limit(sub_envs[0]) if sub_envs else None
    if limit is None and getattr(vector, "spec", None) is not None:
        limit = vector.spec.max_episode_steps
    return vector, limit


def _time_limit(env: Any) -> int | None:
    """The agent steps of a `TimeLimit` wrapping `env`, or its registered spec's, or None."""
    inner = env
    while isinstance(inner, gymnasium.Wrapper):
        if isinstance(inner, gymnasium.wrappers.TimeLimit):  # its spec is None on a bare env
            return int(inner._max_episode_steps)
        inner = inner.env
    spec = getattr(env, "spec", None)
    return spec.max_episode_steps if spec is not None else None


class _Checked(gymnasium.ObservationWrapper):
    """Raises UsageError, one line, on an observation unlike the env's `observation_space` (a
    vector env would stack it into the declared shape and dtype, or fail obscurely)."""

    def __init__(self, name: str, env: Any):
        super().__init__(env)
        self._name = name
        self._space = env.observation_space  # looked up once: a wrapper's walks the chain

    def observation(self, observation: Any) -> Any:
        _check_observation(self._name, self._space, observation)
        return observation


def _check_observation(name: str, space: Any, obs: Any, batch: int | None = None) -> None:
    """UsageError, one line, unless `obs` (`[batch, ...]` if given) is of `space`'s shape and
    dtype (a Discrete space's: integers in its range). Cheap where it passes: every step runs it."""
    obs = np.asarray(obs)
    lead = () if batch is None else (batch,)
    if isinstance(space, gymnasium.spaces.Discrete):
        shape, ok = lead, obs.shape == lead and obs.dtype.kind in "iu"
        if ok and ((obs < space.start) | (obs >= space.start + space.n)).any():
            raise UsageError(
                f"{name} returned the observation {obs.tolist()} outside its "
                f"observation_space {space}"
            )
    else:
        shape = (*lead, *space.shape)
        ok = obs.shape == shape and obs.dtype == space.dtype
    if not ok:
        expected = "an integer" if isinstance(space, gymnasium.spaces.Discrete) else space.dtype
        raise UsageError(
            f"{name} returned an observation of shape {list(obs.shape)} and dtype {obs.dtype}, "
            f"expected shape {list(shape)} and dtype {expected} (its observation_space)"
        )
