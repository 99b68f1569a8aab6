"""Configs owned by `muzero`: each a frozen dataclass that checks itself when built.

Library code raises `ValueError` naming the field; the commands turn it into a `UsageError`.
This module imports no JAX, flax or optax, so the experiment's config (and `podracer train
--help`) loads without them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from muzero.transforms import ValueTransform

__all__ = [
    "LossConfig",
    "NetworkConfig",
    "OptimizerConfig",
    "ReanalyseConfig",
    "StochasticConfig",
    "switched_on",
]


def switched_on(weight) -> bool:
    """Whether a weight (or probability) > 0 turns its part of the agent on. A value that is no
    Python number is a member's own in a population trained as one program
    (`selfplay.population`), an array known only when it runs: on, for a population explores a
    part's weight only where every member has it on, and a probability of 0 draws nothing."""
    return not isinstance(weight, int | float) or weight > 0


REANALYSE_VALUES = ("stored", "target_network", "search")

_TORSOS = ("auto", "resnet", "mlp", "resnet_mlp", "impala")

_OPTIMIZERS = ("adam", "sgd")
_SCHEDULES = ("constant", "cosine", "linear")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The learner's optimizer: algorithm, learning-rate schedule, clipping and weight decay."""

    optimizer: Literal["adam", "sgd"] = "adam"  # "adam" (AdamW when weight_decay > 0) or "sgd".
    learning_rate: float = 3e-4  # Peak learning rate, reached after the warm-up.
    schedule: Literal["constant", "cosine", "linear"] = "constant"  # Decay after the warm-up.
    warmup_steps: int = 0  # Updates of linear warm-up from 0 to learning_rate (0: none).
    decay_steps: int = 100_000  # Updates of cosine/linear decay after the warm-up.
    final_learning_rate: float = 0.0  # Learning rate at the end of the cosine/linear decay.
    max_grad_norm: float = 0.0  # Clip the global gradient norm to this (0: no clipping).
    weight_decay: float = 0.0  # Decoupled (AdamW-style) decay of weight matrices per unit lr.
    adam_b1: float = 0.9  # Adam's decay rate of the first moment.
    adam_b2: float = 0.999  # Adam's decay rate of the second moment.
    adam_eps: float = 1e-8  # Adam's epsilon added to the root of the second moment.
    momentum: float = 0.9  # SGD's momentum (0: plain SGD).
    nesterov: bool = False  # SGD: use Nesterov momentum.

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                value = getattr(self, field)
                raise ValueError(f"OptimizerConfig.{field} must be {expected}, got {value!r}")

        check(self.optimizer in _OPTIMIZERS, "optimizer", f"one of {_OPTIMIZERS}")
        check(self.schedule in _SCHEDULES, "schedule", f"one of {_SCHEDULES}")
        check(_is_real(self.learning_rate) and self.learning_rate > 0, "learning_rate", "> 0")
        check(
            _is_int(self.warmup_steps) and self.warmup_steps >= 0, "warmup_steps", "an integer >= 0"
        )
        check(_is_int(self.decay_steps) and self.decay_steps > 0, "decay_steps", "an integer > 0")
        check(
            _is_real(self.final_learning_rate)
            and 0 <= self.final_learning_rate <= self.learning_rate,
            "final_learning_rate",
            "between 0 and learning_rate",
        )
        check(
            _is_real(self.max_grad_norm) and self.max_grad_norm >= 0,
            "max_grad_norm",
            ">= 0 (0 disables clipping)",
        )
        check(_is_real(self.weight_decay) and self.weight_decay >= 0, "weight_decay", ">= 0")
        check(_is_real(self.adam_b1) and 0 <= self.adam_b1 < 1, "adam_b1", "in [0, 1)")
        check(_is_real(self.adam_b2) and 0 <= self.adam_b2 < 1, "adam_b2", "in [0, 1)")
        check(_is_real(self.adam_eps) and self.adam_eps > 0, "adam_eps", "> 0")
        check(_is_real(self.momentum) and 0 <= self.momentum < 1, "momentum", "in [0, 1)")
        check(isinstance(self.nesterov, bool), "nesterov", "a bool")


def _is_real(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Sizes of the networks. The defaults are small; `atari_muzero()` has the paper's sizes."""

    # auto: resnet for planes, mlp for vectors. "mlp" also takes planes, flattened: a model whose
    # dynamics is a few dense layers makes each simulation of the search several times cheaper
    # than a conv model's (MinAtar's 10x10 planes: 15x on a CPU, BENCHMARKS.md). "resnet_mlp":
    # the resnet's representation of planes, flattened into a vector latent (`latent_size`),
    # with the MLP's dynamics and heads: conv features for the price of a dense search.
    torso: Literal["auto", "resnet", "mlp", "resnet_mlp", "impala"] = "auto"
    channels: int = 32  # Channels of the resnet's residual blocks (and of a conv latent).
    representation_blocks: int = 2  # Residual blocks of h (and of AlphaZero's/actor-critic torso).
    dynamics_blocks: int = 2  # Residual blocks of the dynamics g.
    prediction_blocks: int = 1  # Residual blocks of the prediction f before its heads.
    downsample: bool = False  # Atari stem (MuZero appendix): strided convs + pools, 84x84 -> 6x6.
    head_channels: int = 4  # Channels of the 1x1 conv that starts each head of a conv latent.
    head_hidden: int = 32  # Width of the hidden dense layer of each policy/value/reward head.
    mlp_sizes: tuple[int, ...] = (64, 64)  # Hidden widths of the MLP torso (vector observations).
    latent_size: int = 64  # Width of an MLP latent state.
    impala_channels: tuple[int, ...] = (16, 32, 32)  # Channels of the IMPALA torso's 3 stacks.
    impala_dense: int = 256  # Width of the dense layer after the IMPALA torso.
    value_support: int = 10  # Categorical value support [-S, S] of h(value); 0: one scalar output.
    reward_support: int = 10  # Categorical reward support [-S, S] of h(reward); 0: scalar.
    transform_eps: float = 1e-3  # The eps of h(x) = sign(x)(sqrt(|x|+1)-1) + eps x.
    # How a conv dynamics sees the action: "board" marks the cell (or column) played, "constant"
    # gives A constant one-hot planes (Atari); "auto": board when the actions fit the board and
    # the latent is not downsampled.
    action_planes: Literal["auto", "board", "constant"] = "auto"
    # The latent state's scale: "none" keeps it raw (LightZero's choice); "min_max" rescales
    # each example to [0, 1] (the MuZero paper). "min_max" slowed the learning of a winning
    # move's reward several-fold on tic-tac-toe, and with the two choices below cost CartPole
    # steps and MinAtar's return up to 250k frames, though not at 500k (BENCHMARKS.md).
    latent_scaling: Literal["min_max", "none"] = "none"
    # Normalization inside each residual block: "layer" (LayerNorm over channels, stateless)
    # or "none" (plain pre-activation blocks).
    block_norm: Literal["layer", "none"] = "layer"
    # An MLP latent's dynamics adds its output to the latent it was given (a residual step, as
    # LightZero's MLP model), instead of replacing it.
    dynamics_residual: bool = True
    # The last layer of the policy, value and reward heads starts at zero: every prediction
    # starts uniform (value and reward 0), so the first searches and bootstraps are unbiased.
    # None: on for MuZero's networks, where it was measured; off for Stochastic MuZero's,
    # AlphaZero's and the actor-critic's.
    zero_init_heads: bool | None = None
    # The dtype of activations and convolutions: "bfloat16" halves their memory and runs on the
    # tensor cores of GPUs and TPUs. Parameters, optimizer state, the output heads, the losses
    # and the search's value arithmetic stay float32 either way, so checkpoints do not change.
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    # EfficientZero's consistency loss (`LossConfig.consistency_weight`) projects the latent
    # and predicts the projection (SimSiam's heads): the projector's hidden width.
    projection_hidden: int = 256
    projection_size: int = 256  # The projector's output size (consistency loss).
    predictor_hidden: int = 128  # The predictor's hidden width (consistency loss).
    # The value prefix's LSTM width (`LossConfig.value_prefix_horizon` > 0).
    value_prefix_hidden: int = 64
    # The policy head over a box of continuous actions (Sampled MuZero, V-trace): "gaussian", a
    # tanh-squashed diagonal Gaussian (`muzero.BoxPolicy`), or "categorical", a categorical per
    # dimension over `box_bins` evenly spaced values (`muzero.FactorisedBoxPolicy`).
    box_policy: Literal["gaussian", "categorical"] = "gaussian"
    box_bins: int = 11  # Values per dimension of the "categorical" box policy (>= 2).

    def heads_start_at_zero(self, muzero: bool) -> bool:
        """`zero_init_heads` for MuZero's networks (`muzero`) or another agent's."""
        return muzero if self.zero_init_heads is None else self.zero_init_heads

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(
                    f"NetworkConfig.{field} must be {expected}, got {getattr(self, field)!r}"
                )

        def positive_ints(xs) -> bool:
            return isinstance(xs, tuple) and all(_is_int(x) and x > 0 for x in xs)

        check(self.torso in _TORSOS, "torso", f"one of {_TORSOS}")
        check(
            self.action_planes in ("auto", "board", "constant"),
            "action_planes",
            "'auto', 'board' or 'constant'",
        )
        check(self.latent_scaling in ("min_max", "none"), "latent_scaling", "'min_max' or 'none'")
        check(self.block_norm in ("layer", "none"), "block_norm", "'layer' or 'none'")
        check(
            self.box_policy in ("gaussian", "categorical"),
            "box_policy",
            "'gaussian' or 'categorical'",
        )
        check(_is_int(self.box_bins) and self.box_bins >= 2, "box_bins", "an integer >= 2")
        check(
            self.compute_dtype in ("float32", "bfloat16"),
            "compute_dtype",
            "'float32' or 'bfloat16'",
        )
        for name in (
            "channels",
            "head_channels",
            "head_hidden",
            "latent_size",
            "impala_dense",
            "projection_hidden",
            "projection_size",
            "predictor_hidden",
            "value_prefix_hidden",
        ):
            check(_is_int(getattr(self, name)) and getattr(self, name) > 0, name, "an integer > 0")
        for name in (
            "representation_blocks",
            "dynamics_blocks",
            "prediction_blocks",
            "value_support",
            "reward_support",
        ):
            check(
                _is_int(getattr(self, name)) and getattr(self, name) >= 0, name, "an integer >= 0"
            )
        for name in ("downsample", "dynamics_residual"):
            check(isinstance(getattr(self, name), bool), name, "a bool")
        check(
            self.zero_init_heads is None or isinstance(self.zero_init_heads, bool),
            "zero_init_heads",
            "a bool or None",
        )
        check(positive_ints(self.mlp_sizes), "mlp_sizes", "a tuple of integers > 0")
        check(
            positive_ints(self.impala_channels) and len(self.impala_channels) > 0,
            "impala_channels",
            "a non-empty tuple of integers > 0",
        )
        check(
            isinstance(self.transform_eps, float | int) and self.transform_eps > 0,
            "transform_eps",
            "> 0",
        )

    @classmethod
    def atari_muzero(cls, **overrides) -> NetworkConfig:
        """MuZero's Atari network: 84x84 frames downsampled to 6x6, 16 blocks of 256 channels.

        The paper's support of 601 bins (S = 300) for values and rewards, its min-max scaled
        latents and heads initialised as any layer.
        """
        sizes = dict(
            torso="resnet",
            channels=256,
            representation_blocks=16,
            dynamics_blocks=16,
            prediction_blocks=0,
            downsample=True,
            head_channels=2,
            head_hidden=256,
            value_support=300,
            reward_support=300,
            latent_scaling="min_max",
            zero_init_heads=False,
        )
        return cls(**{**sizes, **overrides})

    @classmethod
    def atari_impala(cls, **overrides) -> NetworkConfig:
        """The IMPALA "deep" ResNet torso (16/32/32 channels, dense 256) for V-trace on Atari."""
        return cls(**{"torso": "impala", **overrides})

    def value_transform(self) -> ValueTransform:
        """The transform of the value head: categorical over `value_support`, or scalar."""
        from muzero.transforms import make_transform  # JAX only once a network is built

        return make_transform(self.value_support, self.transform_eps)

    def reward_transform(self) -> ValueTransform:
        """The transform of the reward head: categorical over `reward_support`, or scalar."""
        from muzero.transforms import make_transform

        return make_transform(self.reward_support, self.transform_eps)


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Targets and weights of the MuZero, AlphaZero and V-trace losses."""

    unroll_steps: int = 5  # K: dynamics steps unrolled from each sampled state (MuZero).
    td_steps: int = 10  # n: rewards summed before bootstrapping from a stored search value.
    discount: float = 0.997  # Learning discount per step (1.0 for board games).
    two_player: bool = False  # Alternating two-player zero-sum game: discount between plies < 0.
    value_loss_weight: float = 0.25  # Weight of the value loss (MuZero Reanalyze uses 0.25).
    reward_loss_weight: float = 1.0  # Weight of the reward loss (MuZero).
    policy_loss_weight: float = 1.0  # Weight of the policy cross-entropy.
    dynamics_gradient_scale: float = 0.5  # Gradient into the latent kept at each unroll step.
    baseline_cost: float = 0.5  # V-trace: weight of the value loss 0.5 * (v_s - V(x))^2.
    # V-trace and Sampled MuZero: weight of the policy-entropy bonus.
    entropy_cost: float = 0.01
    clip_rho_threshold: float = 1.0  # V-trace: clip of the importance ratio in the value target.
    clip_pg_rho_threshold: float = 1.0  # V-trace: clip of the importance ratio in the gradient.
    vtrace_lambda: float = 1.0  # V-trace: lambda mixing n-step and 1-step targets.
    # V-trace: rewards are multiplied by this in the loss (brax's PPO's `reward_scaling`), so that
    # advantages and values of large per-step rewards (Pendulum's -16..0) stay near 1.
    reward_scale: float = 1.0
    # EfficientZero's self-supervised consistency loss (MuZero): the negative cosine similarity
    # between the predicted projection of the latent the dynamics reached at each unroll step and
    # the projection of the real observation's representation there (stop-gradient); 0: off.
    consistency_weight: float = 0.0
    # EfficientZero's value prefix (MuZero): 0 learns and searches with per-step rewards; H > 0
    # replaces the reward head with an LSTM over the unrolled latents that predicts the rewards
    # summed since its last reset, reset every H steps (in the loss and in the search).
    value_prefix_horizon: int = 0
    # EfficientZero's off-policy correction: a window's bootstrap horizon shrinks by one step for
    # every this many updates between the parameters that acted at its start and the learner's
    # (the older the data, the less its stored trajectory is trusted); at least 1; 0: off.
    td_steps_decay_every: int = 0

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(
                    f"LossConfig.{field} must be {expected}, got {getattr(self, field)!r}"
                )

        check(
            _is_int(self.unroll_steps) and self.unroll_steps >= 1, "unroll_steps", "an integer >= 1"
        )
        check(_is_int(self.td_steps) and self.td_steps >= 1, "td_steps", "an integer >= 1")
        check(_is_real(self.discount) and 0 <= self.discount <= 1, "discount", "in [0, 1]")
        check(isinstance(self.two_player, bool), "two_player", "a bool")
        for name in (
            "value_loss_weight",
            "reward_loss_weight",
            "policy_loss_weight",
            "baseline_cost",
            "entropy_cost",
        ):
            check(_is_real(getattr(self, name)) and getattr(self, name) >= 0, name, ">= 0")
        check(
            _is_real(self.dynamics_gradient_scale) and 0 <= self.dynamics_gradient_scale <= 1,
            "dynamics_gradient_scale",
            "in [0, 1]",
        )
        for name in ("clip_rho_threshold", "clip_pg_rho_threshold", "reward_scale"):
            check(_is_real(getattr(self, name)) and getattr(self, name) > 0, name, "> 0")
        check(
            _is_real(self.vtrace_lambda) and 0 <= self.vtrace_lambda <= 1,
            "vtrace_lambda",
            "in [0, 1]",
        )
        check(
            _is_real(self.consistency_weight) and self.consistency_weight >= 0,
            "consistency_weight",
            ">= 0",
        )
        for name in ("value_prefix_horizon", "td_steps_decay_every"):
            check(
                _is_int(getattr(self, name)) and getattr(self, name) >= 0,
                name,
                "an integer >= 0 (0: off)",
            )

    @property
    def window_length(self) -> int:
        """L = K + n + 1: the length of the replay windows `muzero.targets.muzero_batch` takes."""
        return self.unroll_steps + self.td_steps + 1


@dataclasses.dataclass(frozen=True)
class ReanalyseConfig:
    """Fresh targets for sampled windows (MuZero Reanalyse, EfficientZero): which share of each
    batch is searched again with the newest parameters, and where value bootstraps come from."""

    # The share of each batch's windows whose policy targets (every unroll step's) come from a
    # fresh search with the newest parameters over the stored observations (AlphaZero: over
    # the stored game states); 0 keeps the actors' search policies.
    fraction: float = 0.0
    # Where the n-step value targets bootstrap from: "stored" (the actors' search value),
    # "target_network" (the target network's value of the stored observation, for every window;
    # needs learner.target_update_every or learner.target_ema) or "search" (the root value of a
    # fresh search there, for the reanalysed windows; the others keep "stored").
    value: Literal["stored", "target_network", "search"] = "stored"
    # Simulations of the fresh search; 0: the run's `search.num_simulations`.
    num_simulations: int = 0
    # The parameters the fresh searches run with: "newest" (MuZero Reanalyse) or "target" (the
    # target network, as EfficientZero reanalyses: a policy target that moves only when the
    # target does; needs learner.target_update_every or learner.target_ema). With Gumbel MuZero's
    # improved policy searched again after every update with the newest parameters, each update
    # sharpens the policy towards its own search, and it collapsed on MinAtar (BENCHMARKS.md).
    network: Literal["newest", "target"] = "newest"
    # Sebulba: where the fresh searches run: "learner" (each batch is built on the learner's
    # first device) or "actors" (on the first actor device, beside the actors' searches, and
    # sent to the learner devices). Anakin searches on every device of its mesh.
    device: Literal["learner", "actors"] = "learner"

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(
                    f"ReanalyseConfig.{field} must be {expected}, got {getattr(self, field)!r}"
                )

        check(_is_real(self.fraction) and 0 <= self.fraction <= 1, "fraction", "in [0, 1]")
        check(self.value in REANALYSE_VALUES, "value", f"one of {REANALYSE_VALUES}")
        check(self.device in ("learner", "actors"), "device", "'learner' or 'actors'")
        check(self.network in ("newest", "target"), "network", "'newest' or 'target'")
        check(
            _is_int(self.num_simulations) and self.num_simulations >= 0,
            "num_simulations",
            "an integer >= 0 (0: the run's)",
        )
        check(
            self.value != "search" or self.fraction > 0,
            "value",
            "'stored' or 'target_network' with fraction 0 (value 'search' bootstraps from the "
            "reanalysed windows' fresh searches)",
        )

    @property
    def searches(self) -> bool:
        """Whether any target comes from a fresh search."""
        return self.fraction > 0 or self.value == "search"


@dataclasses.dataclass(frozen=True)
class StochasticConfig:
    """Stochastic MuZero's chance model (Antonoglou et al., ICLR 2022): afterstates, chance codes.

    A move leads to an afterstate (the position before chance acts); a chance code, one of
    `num_chance_codes`, leads from it to the next state. In training a chance encoder reads the
    observations before and after the transition and picks the code (one-hot, straight-through);
    the afterstate's prediction learns the distribution of the codes and the move's value.
    """

    # C: the chance codes the encoder can choose (2048: 32, a tile's cell and value; backgammon:
    # 21 rolls; more than the game's outcomes is harmless, fewer merges outcomes).
    num_chance_codes: int = 32
    # Weight of the cross-entropy of the afterstate's code distribution to the encoder's code.
    chance_loss_weight: float = 1.0
    # Weight of the commitment loss ||one-hot code - encoder's softmax||^2 (VQ-VAE's beta). Kept
    # small: on a fair coin 0.05 and more collapsed the encoder to one code before the reward's
    # straight-through gradient could split it (0.01 found both; tests/test_stochastic.py).
    commitment_loss_weight: float = 0.01
    # Weight of the afterstate's value loss (its target: the move's n-step return).
    afterstate_value_loss_weight: float = 0.25
    # Two-player games whose mover may move again (backgammon): weight of the cross-entropy of
    # the model's "the same player moves next" to what happened; its sign drives the search.
    turn_loss_weight: float = 1.0
    # Weight of a consistency loss between the model's next state g(as, c) and the representation
    # of the real next observation (negative cosine, the target's gradient stopped; EfficientZero's
    # self-supervision, not in the paper). Where a move's reward does not depend on the outcome
    # (2048: the merges come before the new tile) nothing else asks the next state to hold the
    # outcome, and the encoder collapsed to one code (BENCHMARKS.md); 0 turns it off.
    consistency_loss_weight: float = 0.0
    # Weight of minus the mutual information between a transition and its code: the entropy of
    # the batch's mean code distribution (softmax of the encoder) minus the mean entropy of each
    # transition's. It spreads the transitions over the codes, each one confidently, and keeps the
    # encoder from collapsing onto one code early (not in the paper; a clustering objective, the
    # usual remedy for a collapsed codebook); 0 turns it off.
    code_information_weight: float = 0.0

    def __post_init__(self):
        def check(ok: bool, field: str, expected: str):
            if not ok:
                raise ValueError(
                    f"StochasticConfig.{field} must be {expected}, got {getattr(self, field)!r}"
                )

        check(
            _is_int(self.num_chance_codes) and self.num_chance_codes >= 1,
            "num_chance_codes",
            "an integer >= 1",
        )
        for name in (
            "chance_loss_weight",
            "commitment_loss_weight",
            "afterstate_value_loss_weight",
            "turn_loss_weight",
            "consistency_loss_weight",
            "code_information_weight",
        ):
            check(_is_real(getattr(self, name)) and getattr(self, name) >= 0, name, ">= 0")
