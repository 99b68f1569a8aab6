"""Networks as pure functions over one params pytree: MuZero, AlphaZero and actor-critic.

Each builder returns a NamedTuple of callables, `init(key) -> params` and `fn(params, ...)`, so
search, losses and actors share the same functions and never see flax. Observations are batched
and channels-last: `[B, H, W, C]` images or board planes (a resnet torso), `[B, H, W]` planes (a
channel axis is added), or `[B, D]` vectors (an MLP torso). uint8 observations (Atari frames) are
scaled by 1/255 inside the network.

Mixed precision (`NetworkConfig.compute_dtype="bfloat16"`): every layer computes in bf16 on
float32 parameters (flax's `dtype` / `param_dtype`), and the heads' last layers compute in float32,
so logits, values and rewards (what the losses and the search's arithmetic use) are float32. A
MuZero latent (the search's embedding) is in the compute dtype.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import mctx

from muzero.config import NetworkConfig
from muzero.pooling import max_pool_3x3_stride2
from muzero.transforms import ValueTransform

__all__ = [
    "MuZeroNetworks",
    "AlphaZeroNetworks",
    "ActorCriticNetworks",
    "make_muzero_networks",
    "make_alphazero_networks",
    "make_actor_critic_networks",
    "make_root_fn",
    "make_recurrent_fn",
    "scale_latent",
]

Params = Any


class MuZeroNetworks(NamedTuple):
    """MuZero's learned model as pure functions over one params pytree.

    Attributes:
      init: `init(key) -> params`.
      represent: `represent(params, obs [B, ...]) -> latent [B, ...]`, scaled to [0, 1].
      dynamics: `dynamics(params, latent [B, ...], action [B]) -> (reward_logits [B, R],
        next_latent [B, ...])`; the reward is the one received for taking `action`.
      predict: `predict(params, latent [B, ...]) -> (policy_logits [B, A], value_logits [B, V])`.
      value_transform: decodes and trains `value_logits` (V = its num_bins).
      reward_transform: decodes and trains `reward_logits` (R = its num_bins).
    """

    init: Callable[[chex.PRNGKey], Params]
    represent: Callable[[Params, chex.Array], chex.Array]
    dynamics: Callable[[Params, chex.Array, chex.Array], tuple[chex.Array, chex.Array]]
    predict: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]
    value_transform: ValueTransform
    reward_transform: ValueTransform


class AlphaZeroNetworks(NamedTuple):
    """AlphaZero's policy-value network on real observations.

    Attributes:
      init: `init(key) -> params`.
      predict: `predict(params, obs [B, ...]) -> (policy_logits [B, A], value_logits [B, V])`.
      value_transform: decodes and trains `value_logits` (V = 1 for a scalar value).
    """

    init: Callable[[chex.PRNGKey], Params]
    predict: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]
    value_transform: ValueTransform


class ActorCriticNetworks(NamedTuple):
    """The V-trace agent's network.

    Attributes:
      init: `init(key) -> params`.
      apply: `apply(params, obs [B, ...]) -> (policy_logits [B, A], value [B])`.
    """

    init: Callable[[chex.PRNGKey], Params]
    apply: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]


def scale_latent(latent: chex.Array) -> chex.Array:
    """Min-max scale each example of `latent [B, ...]` to [0, 1] (the MuZero paper's choice).

    It keeps the latent in the range of the one-hot action input of the dynamics.
    """
    axes = tuple(range(1, latent.ndim))
    low = jnp.min(latent, axis=axes, keepdims=True)
    high = jnp.max(latent, axis=axes, keepdims=True)
    return (latent - low) / jnp.maximum(high - low, 1e-5)


def make_muzero_networks(
    config: NetworkConfig, observation_shape: Sequence[int], num_actions: int
) -> MuZeroNetworks:
    """MuZero's representation, dynamics and prediction for observations of one example's shape.

    Args:
      config: sizes; `torso` "auto" picks the resnet for [H, W, C] or [H, W] observations and the
        MLP for [D]; "impala" is not a MuZero torso.
      observation_shape: the shape of one observation, without the batch axis.
      num_actions: A, the number of actions (policy logits and dynamics' action input).
    """
    torso = _choose_torso(config, observation_shape, allow_impala=False)
    value_transform, reward_transform = config.value_transform(), config.reward_transform()
    module = _MuZeroModule(
        config, torso, num_actions, value_transform.num_bins, reward_transform.num_bins
    )
    obs_shape = tuple(observation_shape)

    def init(key):
        obs = jnp.zeros((1,) + obs_shape, jnp.float32)
        return module.init(key, obs, jnp.zeros((1,), jnp.int32))

    def represent(params, obs):
        _check_obs(obs, obs_shape)
        return module.apply(params, obs, method=_MuZeroModule.represent)

    def dynamics(params, latent, action):
        chex.assert_rank(action, 1)
        chex.assert_equal_shape_prefix([latent, action], 1)
        return module.apply(params, latent, action, method=_MuZeroModule.dynamics)

    def predict(params, latent):
        return module.apply(params, latent, method=_MuZeroModule.predict)

    return MuZeroNetworks(init, represent, dynamics, predict, value_transform, reward_transform)


def make_alphazero_networks(
    config: NetworkConfig, observation_shape: Sequence[int], num_actions: int
) -> AlphaZeroNetworks:
    """AlphaZero's policy-value network: the representation torso, then the prediction heads."""
    torso = _choose_torso(config, observation_shape, allow_impala=True)
    value_transform = config.value_transform()
    module = _PolicyValueModule(config, torso, num_actions, value_transform.num_bins)
    obs_shape = tuple(observation_shape)

    def init(key):
        return module.init(key, jnp.zeros((1,) + obs_shape, jnp.float32))

    def predict(params, obs):
        _check_obs(obs, obs_shape)
        return module.apply(params, obs)

    return AlphaZeroNetworks(init, predict, value_transform)


def make_actor_critic_networks(
    config: NetworkConfig, observation_shape: Sequence[int], num_actions: int
) -> ActorCriticNetworks:
    """The V-trace network: a torso, then linear policy logits and a scalar value."""
    torso = _choose_torso(config, observation_shape, allow_impala=True)
    module = _PolicyValueModule(config, torso, num_actions, 1)
    obs_shape = tuple(observation_shape)

    def init(key):
        return module.init(key, jnp.zeros((1,) + obs_shape, jnp.float32))

    def apply(params, obs):
        _check_obs(obs, obs_shape)
        policy_logits, value = module.apply(params, obs)
        return policy_logits, value[:, 0]

    return ActorCriticNetworks(init, apply)


def make_root_fn(networks: MuZeroNetworks) -> Callable[[Params, chex.Array], mctx.RootFnOutput]:
    """`root_fn(params, observation [B, ...]) -> mctx.RootFnOutput` for MuZero's search."""

    def root_fn(params, observation):
        latent = networks.represent(params, observation)
        policy_logits, value_logits = networks.predict(params, latent)
        return mctx.RootFnOutput(
            prior_logits=policy_logits,
            value=networks.value_transform.decode_logits(value_logits),
            embedding=latent,
        )

    return root_fn


def make_recurrent_fn(
    networks: MuZeroNetworks, *, discount: float = 1.0, two_player: bool = False
) -> mctx.RecurrentFn:
    """mctx's `recurrent_fn(params, rng_key, action [B], embedding [B, ...])` on the learned model.

    The discount is a constant: `discount` in one-player games, `-discount` between the plies of
    an alternating two-player game (a value is for the player to move). The learned model has no
    terminal states: past an episode's end it predicts the absorbing values it was trained on.
    """
    step_discount = -discount if two_player else discount

    def recurrent_fn(params, rng_key, action, embedding):
        del rng_key
        reward_logits, next_embedding = networks.dynamics(params, embedding, action)
        policy_logits, value_logits = networks.predict(params, next_embedding)
        reward = networks.reward_transform.decode_logits(reward_logits)
        output = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.full_like(reward, step_discount),
            prior_logits=policy_logits,
            value=networks.value_transform.decode_logits(value_logits),
        )
        return output, next_embedding

    return recurrent_fn


def _choose_torso(
    config: NetworkConfig, observation_shape: Sequence[int], allow_impala: bool
) -> str:
    rank = len(tuple(observation_shape))
    if rank not in (1, 2, 3):
        raise ValueError(
            f"observations must have shape [D], [H, W] or [H, W, C] per example, "
            f"got {tuple(observation_shape)}"
        )
    if config.torso == "auto":
        return "mlp" if rank == 1 else "resnet"
    if config.torso == "impala" and not allow_impala:
        raise ValueError(
            "NetworkConfig.torso 'impala' serves actor-critic and AlphaZero "
            "networks, not MuZero's model: use 'resnet' or 'auto'"
        )
    if (config.torso == "mlp") != (rank == 1):
        raise ValueError(
            f"NetworkConfig.torso {config.torso!r} does not fit observations of "
            f"shape {tuple(observation_shape)}"
        )
    return config.torso


def _check_obs(obs: chex.Array, obs_shape: tuple[int, ...]):
    if tuple(obs.shape[1:]) != obs_shape:
        raise ValueError(
            f"expected observations of shape [B, {', '.join(map(str, obs_shape))}], "
            f"got {tuple(obs.shape)}"
        )


def _preprocess(obs: chex.Array, torso: str) -> chex.Array:
    # Atari frames arrive as uint8 to keep transfers small; scale on the device.
    x = obs.astype(jnp.float32) / 255.0 if obs.dtype == jnp.uint8 else obs.astype(jnp.float32)
    if torso != "mlp" and x.ndim == 3:
        x = x[..., None]
    return x


class _ResBlock(nn.Module):
    """Pre-activation residual block; LayerNorm, not BatchNorm, keeps the functions stateless."""

    channels: int
    norm: bool = True
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        def normalize(z):
            return nn.LayerNorm(dtype=self.dtype)(z) if self.norm else z

        y = nn.Conv(self.channels, (3, 3), dtype=self.dtype)(nn.relu(normalize(x)))
        y = nn.Conv(self.channels, (3, 3), dtype=self.dtype)(nn.relu(normalize(y)))
        return x + y


class _AtariDownsample(nn.Module):
    """MuZero appendix: 84x84 -> 42 (conv) -> 21 (conv) -> 11 (avg pool) -> 6 (avg pool)."""

    channels: int
    norm: bool = True
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.channels // 2, (3, 3), strides=(2, 2), dtype=self.dtype)(x)
        for _ in range(2):
            x = _ResBlock(self.channels // 2, self.norm, self.dtype)(x)
        x = nn.Conv(self.channels, (3, 3), strides=(2, 2), dtype=self.dtype)(x)
        for _ in range(3):
            x = _ResBlock(self.channels, self.norm, self.dtype)(x)
        x = nn.avg_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for _ in range(3):
            x = _ResBlock(self.channels, self.norm, self.dtype)(x)
        return nn.avg_pool(x, (3, 3), strides=(2, 2), padding="SAME")


class _ImpalaTorso(nn.Module):
    """IMPALA's deep ResNet: per stack conv, max pool /2, two residual blocks; then dense."""

    channels: tuple[int, ...]
    dense: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        for c in self.channels:
            x = nn.Conv(c, (3, 3), dtype=self.dtype)(x)
            x = max_pool_3x3_stride2(x)  # nn.max_pool's value; a cheaper gradient
            for _ in range(2):
                y = nn.Conv(c, (3, 3), dtype=self.dtype)(nn.relu(x))
                x = x + nn.Conv(c, (3, 3), dtype=self.dtype)(nn.relu(y))
        x = nn.relu(x).reshape((x.shape[0], -1))
        return nn.relu(nn.Dense(self.dense, dtype=self.dtype)(x))


class _MLP(nn.Module):
    sizes: tuple[int, ...]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        for size in self.sizes:
            x = nn.relu(nn.LayerNorm(dtype=self.dtype)(nn.Dense(size, dtype=self.dtype)(x)))
        return x


class _Head(nn.Module):
    """A hidden dense layer, then `outputs` linear outputs; conv inputs are first reduced 1x1.
    The outputs are float32 whatever the compute dtype (they are logits, values, rewards)."""

    outputs: int
    head_channels: int
    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        if x.ndim == 4:
            x = nn.relu(nn.Conv(self.head_channels, (1, 1), dtype=self.dtype)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(self.hidden, dtype=self.dtype)(x))
        return nn.Dense(self.outputs, dtype=jnp.float32)(x)


class _Trunk(nn.Module):
    """The observation torso: resnet (optionally with the Atari stem) or MLP; unscaled output."""

    config: NetworkConfig
    torso: str

    @nn.compact
    def __call__(self, obs):
        cfg, dtype = self.config, _compute_dtype(self.config)
        x = _preprocess(obs, self.torso).astype(dtype)
        if self.torso == "mlp":
            x = _MLP(cfg.mlp_sizes, dtype)(x.reshape((x.shape[0], -1)))
            return nn.Dense(cfg.latent_size, dtype=dtype)(x)
        if self.torso == "impala":
            return _ImpalaTorso(cfg.impala_channels, cfg.impala_dense, dtype)(x)
        x = (
            _AtariDownsample(cfg.channels, cfg.block_norm == "layer", dtype)
            if cfg.downsample
            else nn.Conv(cfg.channels, (3, 3), dtype=dtype)
        )(x)
        for _ in range(cfg.representation_blocks):
            x = _ResBlock(cfg.channels, cfg.block_norm == "layer", dtype)(x)
        return x


def _compute_dtype(config: NetworkConfig) -> Any:
    return jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32


class _MuZeroModule(nn.Module):
    config: NetworkConfig
    torso: str
    num_actions: int
    value_bins: int
    reward_bins: int

    def setup(self):
        cfg, dtype = self.config, _compute_dtype(self.config)
        self.trunk = _Trunk(cfg, self.torso)
        if self.torso == "mlp":
            self.dynamics_in = nn.Dense(cfg.latent_size, dtype=dtype)
            self.dynamics_mlp = _MLP(cfg.mlp_sizes, dtype)
            self.dynamics_out = nn.Dense(cfg.latent_size, dtype=dtype)
        else:
            self.dynamics_in = nn.Conv(cfg.channels, (3, 3), dtype=dtype)
            norm = cfg.block_norm == "layer"
            self.dynamics_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.dynamics_blocks)
            ]
            self.prediction_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.prediction_blocks)
            ]
        self.reward_head = _Head(self.reward_bins, cfg.head_channels, cfg.head_hidden, dtype)
        self.policy_head = _Head(self.num_actions, cfg.head_channels, cfg.head_hidden, dtype)
        self.value_head = _Head(self.value_bins, cfg.head_channels, cfg.head_hidden, dtype)

    def __call__(self, obs, action):
        latent = self.represent(obs)
        _, next_latent = self.dynamics(latent, action)
        return self.predict(next_latent)

    def _scale(self, latent):
        return scale_latent(latent) if self.config.latent_scaling == "min_max" else latent

    def represent(self, obs):
        return self._scale(self.trunk(obs))

    def dynamics(self, latent, action):
        one_hot = jax.nn.one_hot(action, self.num_actions, dtype=latent.dtype)  # [B, A]
        if self.torso == "mlp":
            x = self.dynamics_out(
                self.dynamics_mlp(self.dynamics_in(jnp.concatenate([latent, one_hot], axis=-1)))
            )
        else:
            mode = self.config.action_planes
            if mode == "auto" and self.config.downsample:
                mode = "constant"  # the latent is a downsampled frame, not a board
            planes = _action_planes(action, one_hot, latent.shape[:3], mode)
            x = self.dynamics_in(jnp.concatenate([latent, planes], axis=-1))
            for block in self.dynamics_blocks:
                x = block(x)
        return self.reward_head(x), self._scale(x)

    def predict(self, latent):
        x = latent
        if self.torso != "mlp":
            for block in self.prediction_blocks:
                x = block(x)
        return self.policy_head(x), self.value_head(x)


def _action_planes(action, one_hot, batch_height_width, mode: str):
    """The action as planes over a conv latent [B, H, W].

    A convolution applies the same weights at every cell, so constant planes cannot say *where*
    a board move was played. Board games whose actions are the cells (tic-tac-toe, go: H * W, plus
    a pass) get one plane marking the cell (and a pass plane); games whose actions are the columns
    (connect four: W) get one plane marking the column. Anything else (Atari) gets A constant
    one-hot planes, one of them all ones.
    """
    batch, height, width = batch_height_width
    num_actions = one_hot.shape[-1]
    fits_cells = num_actions in (height * width, height * width + 1)
    fits_columns = num_actions == width
    if mode == "board" and not (fits_cells or fits_columns):
        raise ValueError(
            f"NetworkConfig.action_planes 'board' needs H*W, H*W+1 or W actions for "
            f"a {height}x{width} latent, got {num_actions}"
        )
    if mode == "constant" or not (fits_cells or fits_columns):
        return jnp.broadcast_to(one_hot[:, None, None, :], (batch, height, width, num_actions))
    if fits_cells:
        cells = jax.nn.one_hot(action, height * width + 1, dtype=one_hot.dtype)  # [B, H*W+1]
        board = cells[:, : height * width].reshape(batch, height, width, 1)
        passed = jnp.broadcast_to(
            cells[:, height * width, None, None, None], (batch, height, width, 1)
        )
        return jnp.concatenate([board, passed], axis=-1)  # [B, H, W, 2]
    column = jnp.broadcast_to(one_hot[:, None, :, None], (batch, height, width, 1))
    return column  # [B, H, W, 1]


class _PolicyValueModule(nn.Module):
    config: NetworkConfig
    torso: str
    num_actions: int
    value_bins: int

    @nn.compact
    def __call__(self, obs):
        cfg, dtype = self.config, _compute_dtype(self.config)
        x = _Trunk(cfg, self.torso)(obs)
        if self.torso == "impala":  # float32 outputs, as _Head's
            return (
                nn.Dense(self.num_actions, dtype=jnp.float32)(x),
                nn.Dense(self.value_bins, dtype=jnp.float32)(x),
            )
        return (
            _Head(self.num_actions, cfg.head_channels, cfg.head_hidden, dtype)(x),
            _Head(self.value_bins, cfg.head_channels, cfg.head_hidden, dtype)(x),
        )
