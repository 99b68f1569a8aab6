"""Stochastic MuZero (Antonoglou et al., ICLR 2022): a learned model with afterstates and chance.

MuZero's dynamics `s' = g(s, a)` is deterministic: where chance acts (2048's new tile, the dice),
it can only learn one next state per move, a blur of the outcomes. Stochastic MuZero splits the
step at the chance event:

    afterstate dynamics   as = phi(s, a)                      the move, chance not yet
    afterstate prediction sigma(as) [C], Q(as)                the chance codes' distribution, the
                                                              move's value (for the mover)
    dynamics              r, s' = g(as, c)                    c: one of C chance codes, one-hot
    prediction            p(s) [A], v(s)                      as MuZero

and learns the codes without labels: a chance encoder `e` reads the observations before and after
each transition of a replayed window and picks its code, `c = one_hot(argmax e(o_t, o_t+1))`,
passed on with the straight-through gradient of `softmax(e)` (a VQ-VAE whose codebook is the C
one-hot vectors). Its losses, beside MuZero's at each unroll step k (policy, value, reward):

    afterstate value   Q(as_k) to the n-step return z_k (it starts with the move taken, a_k)
    chance             cross-entropy of sigma(as_k) to the encoder's code c_k (a fixed target)
    commitment         ||c_k - softmax(e(o_k, o_k+1))||^2, pulling the encoder to one-hot codes
    turn               (two-player games whose mover may move again, backgammon) whether the
                       same player moves in s_k+1, whose sign the search needs
    consistency        (optional, not in the paper) -cos(s_k+1, sg(h(o_k+1))): the next state
                       the model reaches against the representation of the real next observation

`make_stochastic_model` turns the networks into the `search.StochasticModel` searched by
`SearchConfig(algorithm="stochastic_muzero")`: decision nodes on states, chance nodes on
afterstates with C outcomes (the codes).
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import mctx

import search
from muzero.config import LossConfig, NetworkConfig, StochasticConfig
from muzero.losses import (
    LossFn,
    cosine_similarity,
    logits_entropy,
    policy_cross_entropy,
    scale_gradient,
)
from muzero.networks import (
    _MLP,
    _action_planes,
    _check_obs,
    _choose_torso,
    _compute_dtype,
    _Head,
    _preprocess,
    _ResBlock,
    _Trunk,
    scale_latent,
    vector_latent,
)
from muzero.targets import muzero_batch
from muzero.transforms import ValueTransform
from muzero.types import Trajectory

__all__ = [
    "StochasticBatch",
    "StochasticNetworks",
    "chance_code",
    "make_stochastic_loss",
    "make_stochastic_model",
    "make_stochastic_networks",
    "make_stochastic_root_fn",
    "stochastic_batch",
]

Params = Any


class StochasticNetworks(NamedTuple):
    """Stochastic MuZero's learned model as pure functions over one params pytree.

    Attributes:
      init: `init(key) -> params`.
      represent: `represent(params, obs [B, ...]) -> latent [B, ...]`.
      predict: `predict(params, latent) -> (policy_logits [B, A], value_logits [B, V])`.
      afterstate_dynamics: `(params, latent, action [B]) -> afterstate [B, ...]`.
      afterstate_predict: `(params, afterstate) -> (chance_logits [B, C], value_logits [B, V])`:
        the codes' distribution and the afterstate's value, from the view of the mover.
      dynamics: `(params, afterstate, code [B, C]) -> (reward_logits [B, R], next_latent,
        same_player_logit [B])`: the reward of the move, the next state, and the logit of "the
        mover moves again" (read only where the mover may move again).
      encode: `(params, obs [B, ...], next_obs [B, ...]) -> code_logits [B, C]`, the chance
        encoder.
      value_transform, reward_transform: decode and train the value and reward logits.
      num_codes: C.
    """

    init: Callable[[chex.PRNGKey], Params]
    represent: Callable[[Params, chex.Array], chex.Array]
    predict: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]
    afterstate_dynamics: Callable[[Params, chex.Array, chex.Array], chex.Array]
    afterstate_predict: Callable[[Params, chex.Array], tuple[chex.Array, chex.Array]]
    dynamics: Callable[[Params, chex.Array, chex.Array], tuple[chex.Array, chex.Array, chex.Array]]
    encode: Callable[[Params, chex.Array, chex.Array], chex.Array]
    value_transform: ValueTransform
    reward_transform: ValueTransform
    num_codes: int


class StochasticBatch(NamedTuple):
    """N training windows for unroll steps 0..K, batch on axis 0 (`stochastic_batch`)."""

    observation: chex.Array  # [N, K+1, ...] observations of steps 0..K (the encoder's inputs)
    action: chex.Array  # [N, K] int32; actions taken at steps 0..K-1.
    value_target: chex.Array  # [N, K+1] float32; n-step value target of step k (0 if absorbing).
    reward_target: chex.Array  # [N, K+1] float32; reward of the transition into step k.
    policy_target: chex.Array  # [N, K+1, A] float32; search policy at k (uniform if absorbing).
    policy_mask: chex.Array  # [N, K+1] float32; 1 where step k lies inside the episode.
    same_player: chex.Array  # [N, K] float32; 1 where the mover at k also moves at k + 1.
    importance_weight: chex.Array  # [N] float32; prioritized replay's correction, max 1.


def chance_code(code_logits: chex.Array) -> tuple[chex.Array, chex.Array, chex.Array]:
    """The encoder's code: `(code, one_hot, probs)`, each [B, C].

    `one_hot` is the codebook's nearest entry (the argmax); `code` equals it in value, and its
    gradient is that of `probs = softmax(code_logits)` (straight-through), so the losses after the
    dynamics reach the encoder.
    """
    chex.assert_rank(code_logits, 2)
    probs = jax.nn.softmax(code_logits.astype(jnp.float32))
    one_hot = jax.nn.one_hot(jnp.argmax(code_logits, axis=-1), code_logits.shape[-1])
    code = one_hot + probs - jax.lax.stop_gradient(probs)
    return code, one_hot, probs


def make_stochastic_networks(
    config: NetworkConfig, observation_shape: Sequence[int], num_actions: int, num_codes: int
) -> StochasticNetworks:
    """Stochastic MuZero's networks, with MuZero's torsos and sizes (`NetworkConfig`).

    The afterstate dynamics is MuZero's dynamics (the action as planes or a one-hot input); the
    dynamics from an afterstate takes the code the same way (C constant planes, or C inputs);
    the encoder is a torso of its own over the two observations stacked on the last axis.
    """
    torso = _choose_torso(config, observation_shape, allow_impala=False)
    value_transform, reward_transform = config.value_transform(), config.reward_transform()
    module = _StochasticModule(
        config,
        torso,
        num_actions,
        num_codes,
        value_transform.num_bins,
        reward_transform.num_bins,
    )
    obs_shape = tuple(observation_shape)

    def init(key):
        obs = jnp.zeros((1,) + obs_shape, jnp.float32)
        return module.init(key, obs, jnp.zeros((1,), jnp.int32))

    def represent(params, obs):
        _check_obs(obs, obs_shape)
        return module.apply(params, obs, method=_StochasticModule.represent)

    def predict(params, latent):
        return module.apply(params, latent, method=_StochasticModule.predict)

    def afterstate_dynamics(params, latent, action):
        chex.assert_rank(action, 1)
        chex.assert_equal_shape_prefix([latent, action], 1)
        return module.apply(params, latent, action, method=_StochasticModule.afterstate_dynamics)

    def afterstate_predict(params, afterstate):
        return module.apply(params, afterstate, method=_StochasticModule.afterstate_predict)

    def dynamics(params, afterstate, code):
        chex.assert_shape(code, (afterstate.shape[0], num_codes))
        return module.apply(params, afterstate, code, method=_StochasticModule.dynamics)

    def encode(params, obs, next_obs):
        _check_obs(obs, obs_shape)
        _check_obs(next_obs, obs_shape)
        return module.apply(params, obs, next_obs, method=_StochasticModule.encode)

    return StochasticNetworks(
        init,
        represent,
        predict,
        afterstate_dynamics,
        afterstate_predict,
        dynamics,
        encode,
        value_transform,
        reward_transform,
        num_codes,
    )


class _StochasticModule(nn.Module):
    config: NetworkConfig
    torso: str
    num_actions: int
    num_codes: int
    value_bins: int
    reward_bins: int

    def setup(self):
        cfg, dtype = self.config, _compute_dtype(self.config)
        norm = cfg.block_norm == "layer"
        self.trunk = _Trunk(cfg, self.torso)
        self.encoder_trunk = _Trunk(cfg, self.torso)
        if vector_latent(self.torso):
            self.afterstate_in = nn.Dense(cfg.latent_size, dtype=dtype)
            self.afterstate_mlp = _MLP(cfg.mlp_sizes, dtype)
            self.afterstate_out = nn.Dense(cfg.latent_size, dtype=dtype)
            self.dynamics_in = nn.Dense(cfg.latent_size, dtype=dtype)
            self.dynamics_mlp = _MLP(cfg.mlp_sizes, dtype)
            self.dynamics_out = nn.Dense(cfg.latent_size, dtype=dtype)
        else:
            self.afterstate_in = nn.Conv(cfg.channels, (3, 3), dtype=dtype)
            self.afterstate_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.dynamics_blocks)
            ]
            self.dynamics_in = nn.Conv(cfg.channels, (3, 3), dtype=dtype)
            self.dynamics_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.dynamics_blocks)
            ]
            self.prediction_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.prediction_blocks)
            ]
            self.afterstate_prediction_blocks = [
                _ResBlock(cfg.channels, norm, dtype) for _ in range(cfg.prediction_blocks)
            ]

        def head(outputs):
            return _Head(
                outputs,
                cfg.head_channels,
                cfg.head_hidden,
                dtype,
                cfg.heads_start_at_zero(muzero=False),
            )

        self.policy_head, self.value_head = head(self.num_actions), head(self.value_bins)
        self.chance_head, self.afterstate_value_head = head(self.num_codes), head(self.value_bins)
        self.reward_head, self.same_player_head = head(self.reward_bins), head(1)
        self.code_head = head(self.num_codes)

    def __call__(self, obs, action):
        latent = self.represent(obs)
        self.predict(latent)
        afterstate = self.afterstate_dynamics(latent, action)
        chance_logits, _ = self.afterstate_predict(afterstate)
        code, _, _ = chance_code(self.encode(obs, obs))
        return self.dynamics(afterstate, code)

    def _scale(self, latent):
        return scale_latent(latent) if self.config.latent_scaling == "min_max" else latent

    def represent(self, obs):
        return self._scale(self.trunk(obs))

    def predict(self, latent):
        x = latent
        if not vector_latent(self.torso):
            for block in self.prediction_blocks:
                x = block(x)
        return self.policy_head(x), self.value_head(x)

    def afterstate_dynamics(self, latent, action):
        one_hot = jax.nn.one_hot(action, self.num_actions, dtype=latent.dtype)  # [B, A]
        if vector_latent(self.torso):
            x = jnp.concatenate([latent, one_hot], axis=-1)
            x = self.afterstate_out(self.afterstate_mlp(self.afterstate_in(x)))
        else:
            mode = self.config.action_planes
            if mode == "auto" and self.config.downsample:
                mode = "constant"
            planes = _action_planes(action, one_hot, latent.shape[:3], mode)
            x = self.afterstate_in(jnp.concatenate([latent, planes], axis=-1))
            for block in self.afterstate_blocks:
                x = block(x)
        return self._scale(x)

    def afterstate_predict(self, afterstate):
        x = afterstate
        if not vector_latent(self.torso):
            for block in self.afterstate_prediction_blocks:
                x = block(x)
        return self.chance_head(x), self.afterstate_value_head(x)

    def dynamics(self, afterstate, code):
        code = code.astype(afterstate.dtype)  # [B, C]
        if vector_latent(self.torso):
            x = jnp.concatenate([afterstate, code], axis=-1)
            x = self.dynamics_out(self.dynamics_mlp(self.dynamics_in(x)))
        else:
            batch, height, width = afterstate.shape[:3]
            planes = jnp.broadcast_to(
                code[:, None, None, :], (batch, height, width, code.shape[-1])
            )
            x = self.dynamics_in(jnp.concatenate([afterstate, planes], axis=-1))
            for block in self.dynamics_blocks:
                x = block(x)
        return self.reward_head(x), self._scale(x), self.same_player_head(x)[:, 0]

    def encode(self, obs, next_obs):
        before, after = _preprocess(obs, self.torso), _preprocess(next_obs, self.torso)
        return self.code_head(self.encoder_trunk(jnp.concatenate([before, after], axis=-1)))


def make_stochastic_root_fn(
    networks: StochasticNetworks,
) -> Callable[[Params, chex.Array], mctx.RootFnOutput]:
    """`root_fn(params, observation [B, ...]) -> mctx.RootFnOutput`: the represented state."""

    def root_fn(params, observation):
        latent = networks.represent(params, observation)
        policy_logits, value_logits = networks.predict(params, latent)
        return mctx.RootFnOutput(
            prior_logits=policy_logits,
            value=networks.value_transform.decode_logits(value_logits),
            embedding=latent,
        )

    return root_fn


def make_stochastic_model(
    networks: StochasticNetworks,
    *,
    discount: float = 1.0,
    two_player: bool = False,
    alternating: bool = True,
) -> search.StochasticModel:
    """The learned model as a `search.StochasticModel` (chance outcomes: the C codes).

    The discount from an afterstate to the next state: `discount` in one-player games,
    `-discount` in alternating two-player games, and where the mover may move again
    (`alternating=False`, backgammon) `+discount` where the model says the same player moves
    next and `-discount` where it says the other does. The learned model has no terminal states.
    """
    value_tf, reward_tf = networks.value_transform, networks.reward_transform

    def decision_fn(params, rng_key, action, latent):
        del rng_key
        afterstate = networks.afterstate_dynamics(params, latent, action)
        chance_logits, value_logits = networks.afterstate_predict(params, afterstate)
        output = mctx.DecisionRecurrentFnOutput(
            chance_logits=chance_logits, afterstate_value=value_tf.decode_logits(value_logits)
        )
        return output, afterstate

    def chance_fn(params, rng_key, outcome, afterstate):
        del rng_key
        code = jax.nn.one_hot(outcome, networks.num_codes, dtype=jnp.float32)  # [B, C]
        reward_logits, latent, same_player_logit = networks.dynamics(params, afterstate, code)
        policy_logits, value_logits = networks.predict(params, latent)
        reward = reward_tf.decode_logits(reward_logits)
        if not two_player:
            step_discount = jnp.full_like(reward, discount)
        elif alternating:
            step_discount = jnp.full_like(reward, -discount)
        else:
            step_discount = jnp.where(same_player_logit > 0, discount, -discount)
        output = mctx.ChanceRecurrentFnOutput(
            action_logits=policy_logits,
            value=value_tf.decode_logits(value_logits),
            reward=reward,
            discount=step_discount.astype(reward.dtype),
        )
        return output, latent

    return search.StochasticModel(decision_fn, chance_fn)


def stochastic_batch(
    window: Trajectory,
    importance_weight: chex.Array,
    *,
    unroll_steps: int,
    td_steps: int,
    discount: float,
    two_player: bool,
    alternating: bool = True,
) -> StochasticBatch:
    """MuZero's targets of K + 1 unroll steps (`muzero.muzero_batch`), with the observations of
    steps 0..K (window.observation [>= K+1, N, ...]) and who moves after each transition."""
    k = unroll_steps
    if window.observation.shape[0] < k + 1:
        raise ValueError(
            f"stochastic_batch needs the observations of steps 0..{k} of each window, got "
            f"{window.observation.shape[0]}"
        )
    targets = muzero_batch(
        window,
        importance_weight,
        unroll_steps=unroll_steps,
        td_steps=td_steps,
        discount=discount,
        two_player=two_player,
        alternating=alternating,
    )
    same_player = (window.to_play[1 : k + 1] == window.to_play[:k]).astype(jnp.float32)  # [K, N]
    return StochasticBatch(
        observation=jnp.swapaxes(window.observation[: k + 1], 0, 1),
        action=targets.action,
        value_target=targets.value_target,
        reward_target=targets.reward_target,
        policy_target=targets.policy_target,
        policy_mask=targets.policy_mask,
        same_player=jnp.swapaxes(same_player, 0, 1),
        importance_weight=targets.importance_weight,
    )


def make_stochastic_loss(
    networks: StochasticNetworks,
    config: LossConfig,
    stochastic: StochasticConfig,
    *,
    learn_turns: bool = False,
) -> LossFn:
    """Stochastic MuZero's loss on a `StochasticBatch` (see the module docstring).

    Unrolled as MuZero's (`muzero.make_muzero_loss`): a Python loop over K, step 0 weighted 1 and
    each later step 1/K, the gradient into each latent and afterstate scaled by
    `dynamics_gradient_scale`. The afterstate, chance, commitment and turn terms of the K moves
    weigh 1/K each. A move after the episode's end (absorbing) trains no chance, commitment or
    turn term: its next observation belongs to the next episode. `learn_turns`: train the
    same-player logit (two-player games whose mover may move again).
    """
    k_steps = config.unroll_steps
    value_tf, reward_tf = networks.value_transform, networks.reward_transform

    def loss_fn(params, batch: StochasticBatch, key):
        del key
        n = batch.action.shape[0]
        chex.assert_shape(batch.action, (n, k_steps))
        chex.assert_shape(
            [batch.value_target, batch.reward_target, batch.policy_mask], (n, k_steps + 1)
        )
        chex.assert_shape(batch.same_player, (n, k_steps))
        chex.assert_equal_shape_prefix([batch.observation, batch.policy_mask], 2)
        chex.assert_shape(batch.importance_weight, (n,))

        zeros = jnp.zeros((n,))
        value_loss = reward_loss = policy_loss = zeros
        afterstate_value_loss = chance_loss = commitment_loss = turn_loss = zeros
        consistency_loss = zeros
        codes, code_probs = [], []
        latent = networks.represent(params, batch.observation[:, 0])
        for k in range(k_steps + 1):
            policy_logits, value_logits = networks.predict(params, latent)  # [N, A], [N, V]
            step_scale = 1.0 if k == 0 else 1.0 / k_steps
            value_loss += step_scale * value_tf.loss(value_logits, batch.value_target[:, k])
            policy_loss += (
                step_scale
                * batch.policy_mask[:, k]
                * policy_cross_entropy(policy_logits, batch.policy_target[:, k])
            )
            if k == 0:
                root_policy_logits, root_value_logits = policy_logits, value_logits
            if k == k_steps:
                break
            move_scale = 1.0 / k_steps
            real = batch.policy_mask[:, k + 1]  # [N] the next state is in the episode
            afterstate = networks.afterstate_dynamics(params, latent, batch.action[:, k])
            afterstate = scale_gradient(afterstate, config.dynamics_gradient_scale)
            chance_logits, afterstate_value_logits = networks.afterstate_predict(params, afterstate)
            # The move's value: the n-step return from state k, which starts with this move.
            afterstate_value_loss += move_scale * value_tf.loss(
                afterstate_value_logits, batch.value_target[:, k]
            )
            code_logits = networks.encode(
                params, batch.observation[:, k], batch.observation[:, k + 1]
            )
            code, one_hot, probs = chance_code(code_logits)  # [N, C] each
            codes.append(one_hot)
            code_probs.append(probs)
            chance_loss += (
                move_scale
                * real
                * policy_cross_entropy(chance_logits, jax.lax.stop_gradient(one_hot))
            )
            commitment_loss += move_scale * real * jnp.sum(jnp.square(one_hot - probs), axis=-1)
            reward_logits, latent, same_player_logit = networks.dynamics(params, afterstate, code)
            latent = scale_gradient(latent, config.dynamics_gradient_scale)
            reward_loss += (1.0 / k_steps) * reward_tf.loss(
                reward_logits, batch.reward_target[:, k + 1]
            )
            if stochastic.consistency_loss_weight > 0:
                target = jax.lax.stop_gradient(
                    networks.represent(params, batch.observation[:, k + 1])
                )
                n = latent.shape[0]
                similarity = cosine_similarity(
                    latent.reshape((n, -1)).astype(jnp.float32),
                    target.reshape((n, -1)).astype(jnp.float32),
                )  # [N] over each example's flattened state
                consistency_loss -= move_scale * real * similarity
            if learn_turns:
                turn_loss += (
                    move_scale
                    * real
                    * _binary_cross_entropy(same_player_logit, batch.same_player[:, k])
                )

        per_example = (
            config.value_loss_weight * value_loss
            + config.reward_loss_weight * reward_loss
            + config.policy_loss_weight * policy_loss
            + stochastic.afterstate_value_loss_weight * afterstate_value_loss
            + stochastic.chance_loss_weight * chance_loss
            + stochastic.commitment_loss_weight * commitment_loss
            + stochastic.turn_loss_weight * turn_loss
            + stochastic.consistency_loss_weight * consistency_loss
        )  # [N]
        weight = batch.importance_weight
        loss = jnp.mean(weight * per_example)
        # The mutual information between the batch's transitions and their codes: the entropy of
        # the mean code distribution minus the mean of each transition's (a batch-level term).
        probs = jnp.stack(code_probs)  # [K, N, C]
        mean_probs = jnp.mean(probs, axis=(0, 1))  # [C]
        code_entropy = -jnp.sum(mean_probs * jnp.log(jnp.maximum(mean_probs, 1e-12)))
        each_entropy = -jnp.mean(jnp.sum(probs * jnp.log(jnp.maximum(probs, 1e-12)), axis=-1))
        code_information = code_entropy - each_entropy
        loss = loss - stochastic.code_information_weight * code_information
        root_value = value_tf.decode_logits(root_value_logits)
        code_share = jnp.mean(jnp.stack(codes), axis=(0, 1))  # [C] how often each code is used
        metrics = {
            "loss": loss,
            "value_loss": jnp.mean(weight * value_loss),
            "reward_loss": jnp.mean(weight * reward_loss),
            "policy_loss": jnp.mean(weight * policy_loss),
            "afterstate_value_loss": jnp.mean(weight * afterstate_value_loss),
            "chance_loss": jnp.mean(weight * chance_loss),
            "commitment_loss": jnp.mean(weight * commitment_loss),
            "policy_entropy": jnp.mean(logits_entropy(root_policy_logits)),
            "value_prediction": jnp.mean(root_value),
            "value_target": jnp.mean(batch.value_target[:, 0]),
            "value_abs_error": jnp.mean(jnp.abs(root_value - batch.value_target[:, 0])),
            # exp(entropy) of the codes' use: how many codes the encoder effectively uses.
            "codes_used": jnp.exp(logits_entropy(jnp.log(jnp.maximum(code_share, 1e-12)))),
            "code_information": code_information,
            "importance_weight": jnp.mean(weight),
        }
        if learn_turns:
            metrics["turn_loss"] = jnp.mean(weight * turn_loss)
        if stochastic.consistency_loss_weight > 0:
            metrics["consistency_loss"] = jnp.mean(weight * consistency_loss)
        return loss, metrics

    return loss_fn


def _binary_cross_entropy(logit: chex.Array, target: chex.Array) -> chex.Array:
    chex.assert_equal_shape([logit, target])
    return -(target * jax.nn.log_sigmoid(logit) + (1.0 - target) * jax.nn.log_sigmoid(-logit))
