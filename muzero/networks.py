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
    "PrefixEmbedding",
    "scale_latent",
]

Params = Any


class MuZeroNetworks(NamedTuple):
    """MuZero's learned model as pure functions over one params pytree.

    Attributes:
      init: `init(key) -> params`.
      represent: `represent(params, obs [B, ...]) -> latent [B, ...]`, scaled to [0, 1].
      dynamics: `dynamics(params, latent [B, ...], action [B]) -> (reward_logits [B, R],
        next_latent [B, ...])`; the reward is the one received for taking `action`. A model
        with a value prefix has no reward head: it raises there (use `transition` and
        `value_prefix`).
      predict: `predict(params, latent [B, ...]) -> (policy_logits [B, A], value_logits [B, V])`.
      value_transform: decodes and trains `value_logits` (V = its num_bins).
      reward_transform: decodes and trains `reward_logits` and the value prefix's logits (R =
        its num_bins).
      transition: `transition(params, latent, action [B]) -> next_latent`: the dynamics' latent
        alone.
      value_prefix: EfficientZero's value prefix, or None: `value_prefix(params, next_latent,
        carry) -> (prefix_logits [B, R], carry)`, an LSTM step over the latents the dynamics
        reaches; its output is the rewards summed since the carry was last reset
        (`prefix_carry(batch)`, zeros).
      prefix_carry: `prefix_carry(batch) -> carry` of zeros (the LSTM's (c, h), [B, H] each),
        or None.
      project: the consistency loss's projector, or None: `project(params, latent) -> [B, P]`.
      predict_projection: its predictor, or None: `predict_projection(params, z [B, P]) -> [B, P]`.
    """

    init: Callable[[chex.PRNGKey], Params]
    represent: Callable[[Params, chex.Array], chex.Array]
    dynamics: Callable[[Params, chex.Array, chex.Array], tuple[chex.Array, chex.Array]]
    predict: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]
    value_transform: ValueTransform
    reward_transform: ValueTransform
    transition: Callable[[Params, chex.Array, chex.Array], chex.Array]
    value_prefix: Callable[[Params, chex.Array, Any], tuple[chex.Array, Any]] | None = None
    prefix_carry: Callable[[int], Any] | None = None
    project: Callable[[Params, chex.Array], chex.Array] | None = None
    predict_projection: Callable[[Params, chex.Array], chex.Array] | None = None


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
    config: NetworkConfig,
    observation_shape: Sequence[int],
    num_actions: int,
    *,
    value_prefix: bool = False,
    projection: bool = False,
    action_dims: int = 0,
) -> MuZeroNetworks:
    """MuZero's representation, dynamics and prediction for observations of one example's shape.

    Args:
      config: sizes; `torso` "auto" picks the resnet for [H, W, C] or [H, W] observations and the
        MLP for [D]; "mlp" takes planes too (flattened); "resnet_mlp" flattens the resnet's
        features of planes into a vector latent; "impala" is not a MuZero torso.
      observation_shape: the shape of one observation, without the batch axis.
      num_actions: A, the number of actions (policy logits and dynamics' action input); with
        `action_dims`, the policy head's outputs (a box policy's: `muzero.BoxPolicy`).
      value_prefix: an LSTM value-prefix head instead of the per-step reward head
        (EfficientZero; `LossConfig.value_prefix_horizon`).
      projection: the consistency loss's projector and predictor (EfficientZero;
        `LossConfig.consistency_weight`).
      action_dims: D > 0 for a box of continuous actions: the dynamics take the action vector
        [B, D] (scaled to [-1, 1]) instead of an index's one-hot (Sampled MuZero).
    """
    torso = _choose_torso(config, observation_shape, allow_impala=False)
    value_transform, reward_transform = config.value_transform(), config.reward_transform()
    module = _MuZeroModule(
        config,
        torso,
        num_actions,
        value_transform.num_bins,
        reward_transform.num_bins,
        value_prefix,
        projection,
        action_dims,
    )
    obs_shape = tuple(observation_shape)
    action_shape = (action_dims,) if action_dims else ()

    def init(key):
        obs = jnp.zeros((1,) + obs_shape, jnp.float32)
        action = jnp.zeros((1,) + action_shape, jnp.float32 if action_dims else jnp.int32)
        return module.init(key, obs, action)

    def represent(params, obs):
        _check_obs(obs, obs_shape)
        return module.apply(params, obs, method=_MuZeroModule.represent)

    def check_action(latent, action):
        chex.assert_rank(action, 1 + len(action_shape))
        chex.assert_equal_shape_prefix([latent, action], 1)

    def dynamics(params, latent, action):
        if value_prefix:
            raise ValueError(
                "this model predicts a value prefix, not per-step rewards: call transition "
                "and value_prefix"
            )
        check_action(latent, action)
        return module.apply(params, latent, action, method=_MuZeroModule.dynamics)

    def transition(params, latent, action):
        check_action(latent, action)
        return module.apply(params, latent, action, method=_MuZeroModule.transition)

    def predict(params, latent):
        return module.apply(params, latent, method=_MuZeroModule.predict)

    def prefix_step(params, next_latent, carry):
        return module.apply(params, next_latent, carry, method=_MuZeroModule.prefix)

    def prefix_carry(batch: int):
        zeros = jnp.zeros((batch, config.value_prefix_hidden), jnp.float32)
        return (zeros, zeros)

    def project(params, latent):
        return module.apply(params, latent, method=_MuZeroModule.project)

    def predict_projection(params, z):
        return module.apply(params, z, method=_MuZeroModule.predict_projection)

    return MuZeroNetworks(
        init,
        represent,
        dynamics,
        predict,
        value_transform,
        reward_transform,
        transition,
        value_prefix=prefix_step if value_prefix else None,
        prefix_carry=prefix_carry if value_prefix else None,
        project=project if projection else None,
        predict_projection=predict_projection if projection else None,
    )


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


class PrefixEmbedding(NamedTuple):
    """A search node's embedding for a model with a value prefix: the latent, and what the
    prefix's LSTM needs to give the reward of the next step."""

    latent: chex.Array  # [B, ...] the model's latent state
    carry: Any  # the LSTM's (c, h), [B, H] each, since its last reset
    depth: chex.Array  # [B] int32 steps from the search's root
    prefix: chex.Array  # [B] float32 the decoded value prefix that reached this node


def make_root_fn(
    networks: MuZeroNetworks, *, value_prefix_horizon: int = 0
) -> Callable[[Params, chex.Array], mctx.RootFnOutput]:
    """`root_fn(params, observation [B, ...]) -> mctx.RootFnOutput` for MuZero's search.

    With a value prefix (`value_prefix_horizon` > 0) the embedding is a `PrefixEmbedding` at
    depth 0 whose LSTM starts afresh."""
    _check_prefix(networks, value_prefix_horizon)

    def root_fn(params, observation):
        latent = networks.represent(params, observation)
        policy_logits, value_logits = networks.predict(params, latent)
        embedding = latent
        if value_prefix_horizon:
            assert networks.prefix_carry is not None
            batch = latent.shape[0]
            embedding = PrefixEmbedding(
                latent,
                networks.prefix_carry(batch),
                jnp.zeros((batch,), jnp.int32),
                jnp.zeros((batch,), jnp.float32),
            )
        return mctx.RootFnOutput(
            prior_logits=policy_logits,
            value=networks.value_transform.decode_logits(value_logits),
            embedding=embedding,
        )

    return root_fn


def make_recurrent_fn(
    networks: MuZeroNetworks,
    *,
    discount: float = 1.0,
    two_player: bool = False,
    value_prefix_horizon: int = 0,
) -> mctx.RecurrentFn:
    """mctx's `recurrent_fn(params, rng_key, action [B], embedding [B, ...])` on the learned model.

    The discount is a constant: `discount` in one-player games, `-discount` between the plies of
    an alternating two-player game (a value is for the player to move). The learned model has no
    terminal states: past an episode's end it predicts the absorbing values it was trained on.

    With a value prefix (`value_prefix_horizon` H > 0; EfficientZero) the reward of a step is the
    difference of consecutive prefixes: the LSTM and the parent's prefix restart from zero at
    depths 0, H, 2H, ... from the root, as in the loss's unroll.
    """
    _check_prefix(networks, value_prefix_horizon)
    step_discount = -discount if two_player else discount

    def output(next_latent, reward, params):
        policy_logits, value_logits = networks.predict(params, next_latent)
        return mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.full_like(reward, step_discount),
            prior_logits=policy_logits,
            value=networks.value_transform.decode_logits(value_logits),
        )

    def recurrent_fn(params, rng_key, action, embedding):
        del rng_key
        reward_logits, next_embedding = networks.dynamics(params, embedding, action)
        reward = networks.reward_transform.decode_logits(reward_logits)
        return output(next_embedding, reward, params), next_embedding

    def prefix_recurrent_fn(params, rng_key, action, embedding: PrefixEmbedding):
        del rng_key
        assert networks.value_prefix is not None and networks.prefix_carry is not None
        reset = embedding.depth % value_prefix_horizon == 0  # [B]
        fresh = networks.prefix_carry(action.shape[0])
        carry = jax.tree.map(
            lambda zero, c: jnp.where(reset[:, None], zero, c), fresh, embedding.carry
        )
        parent_prefix = jnp.where(reset, 0.0, embedding.prefix)
        next_latent = networks.transition(params, embedding.latent, action)
        prefix_logits, carry = networks.value_prefix(params, next_latent, carry)
        prefix = networks.reward_transform.decode_logits(prefix_logits)
        next_embedding = PrefixEmbedding(next_latent, carry, embedding.depth + 1, prefix)
        return output(next_latent, prefix - parent_prefix, params), next_embedding

    return prefix_recurrent_fn if value_prefix_horizon else recurrent_fn


def _check_prefix(networks: MuZeroNetworks, value_prefix_horizon: int) -> None:
    if bool(value_prefix_horizon) != (networks.value_prefix is not None):
        raise ValueError(
            f"value_prefix_horizon {value_prefix_horizon} does not fit a model "
            f"{'with' if networks.value_prefix is not None else 'without'} a value prefix"
        )


def vector_latent(torso: str) -> bool:
    """Whether a MuZero model with this torso has a vector latent (dense dynamics and heads)
    rather than planes (conv dynamics and heads)."""
    return torso in ("mlp", "resnet_mlp")


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
    if config.torso != "mlp" and rank == 1:  # the MLP flattens planes; a conv needs them
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
    zero_init: bool = False

    @nn.compact
    def __call__(self, x):
        if x.ndim == 4:
            x = nn.relu(nn.Conv(self.head_channels, (1, 1), dtype=self.dtype)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(self.hidden, dtype=self.dtype)(x))
        init = nn.initializers.zeros if self.zero_init else nn.linear.default_kernel_init
        return nn.Dense(self.outputs, dtype=jnp.float32, kernel_init=init)(x)


class _Trunk(nn.Module):
    """The observation torso: resnet (optionally with the Atari stem), MLP, or resnet flattened
    into a vector (resnet_mlp); unscaled output."""

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
        if self.torso == "resnet_mlp":  # the planes' features, flattened into a vector latent
            x = nn.relu(x).reshape((x.shape[0], -1))
            return nn.Dense(cfg.latent_size, dtype=dtype)(x)
        return x


def _compute_dtype(config: NetworkConfig) -> Any:
    return jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32


class _MuZeroModule(nn.Module):
    config: NetworkConfig
    torso: str
    num_actions: int
    value_bins: int
    reward_bins: int
    value_prefix: bool = False
    projection: bool = False
    action_dims: int = 0  # D > 0: the dynamics take a box's action vectors, not indices

    def setup(self):
        cfg, dtype = self.config, _compute_dtype(self.config)
        zero_heads = cfg.heads_start_at_zero(muzero=True)
        self.trunk = _Trunk(cfg, self.torso)
        if vector_latent(self.torso):
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
        if self.value_prefix:
            if not vector_latent(self.torso):  # EfficientZero: a 1x1 conv shrinks the latent first
                self.prefix_reduce = nn.Conv(cfg.head_channels, (1, 1), dtype=dtype)
            self.prefix_lstm = nn.OptimizedLSTMCell(
                cfg.value_prefix_hidden, param_dtype=jnp.float32
            )
            self.prefix_norm = nn.LayerNorm(dtype=dtype)
            self.prefix_head = _Head(
                self.reward_bins, cfg.head_channels, cfg.head_hidden, dtype, zero_heads
            )
        else:
            self.reward_head = _Head(
                self.reward_bins, cfg.head_channels, cfg.head_hidden, dtype, zero_heads
            )
        if self.projection:  # SimSiam's projector and predictor (EfficientZero)
            self.projector = _Projection(
                (cfg.projection_hidden, cfg.projection_size), final_norm=True, dtype=dtype
            )
            self.predictor = _Projection(
                (cfg.predictor_hidden, cfg.projection_size), final_norm=False, dtype=dtype
            )
        self.policy_head = _Head(
            self.num_actions, cfg.head_channels, cfg.head_hidden, dtype, zero_heads
        )
        self.value_head = _Head(
            self.value_bins, cfg.head_channels, cfg.head_hidden, dtype, zero_heads
        )

    def __call__(self, obs, action):
        latent = self.represent(obs)
        next_latent = self.transition(latent, action)
        if self.value_prefix:
            zeros = jnp.zeros((obs.shape[0], self.config.value_prefix_hidden), jnp.float32)
            self.prefix(next_latent, (zeros, zeros))
        else:
            self.dynamics(latent, action)
        if self.projection:
            self.predict_projection(self.project(next_latent))
        return self.predict(next_latent)

    def _scale(self, latent):
        return scale_latent(latent) if self.config.latent_scaling == "min_max" else latent

    def represent(self, obs):
        return self._scale(self.trunk(obs))

    def _transition_unscaled(self, latent, action):
        if self.action_dims:  # a box's vector [B, D] in [-1, 1], as it is
            action_input = action.astype(latent.dtype)
        else:
            action_input = jax.nn.one_hot(action, self.num_actions, dtype=latent.dtype)  # [B, A]
        if vector_latent(self.torso):
            out = self.dynamics_out(
                self.dynamics_mlp(
                    self.dynamics_in(jnp.concatenate([latent, action_input], axis=-1))
                )
            )
            return latent + out if self.config.dynamics_residual else out
        mode = self.config.action_planes
        if mode == "auto" and (self.config.downsample or self.action_dims):
            mode = "constant"  # a downsampled frame or a box's vector: no cell to mark
        planes = _action_planes(action, action_input, latent.shape[:3], mode)
        x = self.dynamics_in(jnp.concatenate([latent, planes], axis=-1))
        for block in self.dynamics_blocks:
            x = block(x)
        return x

    def transition(self, latent, action):
        return self._scale(self._transition_unscaled(latent, action))

    def dynamics(self, latent, action):
        x = self._transition_unscaled(latent, action)
        return self.reward_head(x), self._scale(x)

    def prefix(self, next_latent, carry):
        x = next_latent
        if not vector_latent(self.torso):
            x = nn.relu(self.prefix_reduce(x))
        x = x.reshape((x.shape[0], -1)).astype(jnp.float32)
        carry, out = self.prefix_lstm(carry, x)
        return self.prefix_head(nn.relu(self.prefix_norm(out))), carry

    def project(self, latent):
        return self.projector(latent.reshape((latent.shape[0], -1)))

    def predict_projection(self, z):
        return self.predictor(z)

    def predict(self, latent):
        x = latent
        if not vector_latent(self.torso):
            for block in self.prediction_blocks:
                x = block(x)
        return self.policy_head(x), self.value_head(x)


class _Projection(nn.Module):
    """Dense layers with LayerNorm and ReLU between them (SimSiam's projector and predictor use
    BatchNorm; LayerNorm keeps the functions stateless). The output is float32."""

    sizes: tuple[int, ...]
    final_norm: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        for size in self.sizes[:-1]:
            x = nn.relu(nn.LayerNorm(dtype=self.dtype)(nn.Dense(size, dtype=self.dtype)(x)))
        x = nn.Dense(self.sizes[-1], dtype=jnp.float32)(x)
        return nn.LayerNorm(dtype=jnp.float32)(x) if self.final_norm else x


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
        zero_heads = cfg.heads_start_at_zero(muzero=False)
        return (
            _Head(self.num_actions, cfg.head_channels, cfg.head_hidden, dtype, zero_heads)(x),
            _Head(self.value_bins, cfg.head_channels, cfg.head_hidden, dtype, zero_heads)(x),
        )
