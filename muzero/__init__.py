"""The learning side: networks, value transforms, targets, losses and the replicated update."""

from muzero.config import OptimizerConfig
from muzero.distributed import (
    AXIS,
    global_devices,
    make_mesh,
    make_replicated_update,
    replicate,
    shard_batch,
    unreplicate,
)
from muzero.learner import (
    TrainState,
    init_train_state,
    make_optimizer,
    make_schedule,
    make_update,
)
from muzero.losses import (
    LossConfig,
    make_alphazero_loss,
    make_muzero_loss,
    make_muzero_priority_fn,
    policy_cross_entropy,
    scale_gradient,
)
from muzero.networks import (
    ActorCriticNetworks,
    AlphaZeroNetworks,
    MuZeroNetworks,
    NetworkConfig,
    make_actor_critic_networks,
    make_alphazero_networks,
    make_muzero_networks,
    make_recurrent_fn,
    make_root_fn,
    scale_latent,
)
from muzero.symmetries import (
    BoardSymmetries,
    augment_alphazero_batch,
    augment_muzero_batch,
    dihedral_symmetries,
    make_symmetries,
    mirror_symmetries,
    with_symmetries,
)
from muzero.targets import (
    alphazero_batch,
    muzero_batch,
    n_step_values,
    ply_discount,
    sequence_priorities,
    value_priorities,
)
from muzero.transforms import (
    ValueTransform,
    categorical_transform,
    h_inverse,
    h_transform,
    logits_to_scalar,
    scalar_to_two_hot,
    scalar_transform,
    two_hot_to_scalar,
)
from muzero.types import AlphaZeroBatch, MuZeroBatch, Trajectory, VTraceBatch
from muzero.vtrace import (
    VTraceOutput,
    make_vtrace_loss,
    vtrace,
    vtrace_td_error_and_advantage,
)

__all__ = [
    # networks
    "NetworkConfig",
    "MuZeroNetworks",
    "AlphaZeroNetworks",
    "ActorCriticNetworks",
    "make_muzero_networks",
    "make_alphazero_networks",
    "make_actor_critic_networks",
    "make_root_fn",
    "make_recurrent_fn",
    "scale_latent",
    # transforms
    "ValueTransform",
    "categorical_transform",
    "scalar_transform",
    "h_transform",
    "h_inverse",
    "scalar_to_two_hot",
    "two_hot_to_scalar",
    "logits_to_scalar",
    # pytrees
    "Trajectory",
    "MuZeroBatch",
    "AlphaZeroBatch",
    "VTraceBatch",
    # targets
    "ply_discount",
    "n_step_values",
    "muzero_batch",
    "alphazero_batch",
    "value_priorities",
    "sequence_priorities",
    # board symmetries (data augmentation)
    "BoardSymmetries",
    "make_symmetries",
    "dihedral_symmetries",
    "mirror_symmetries",
    "augment_muzero_batch",
    "augment_alphazero_batch",
    "with_symmetries",
    # losses
    "LossConfig",
    "make_muzero_loss",
    "make_alphazero_loss",
    "make_muzero_priority_fn",
    "make_vtrace_loss",
    "policy_cross_entropy",
    "scale_gradient",
    "VTraceOutput",
    "vtrace",
    "vtrace_td_error_and_advantage",
    # learner
    "OptimizerConfig",
    "TrainState",
    "make_optimizer",
    "make_schedule",
    "init_train_state",
    "make_update",
    "make_replicated_update",
    "AXIS",
    "make_mesh",
    "global_devices",
    "replicate",
    "unreplicate",
    "shard_batch",
]
