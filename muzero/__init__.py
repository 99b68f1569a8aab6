"""The learning side: networks, value transforms, targets, losses and the replicated update.

Names are imported on first use, so the configs (`muzero.config`) load without JAX, flax or
optax.
"""

import importlib
from typing import TYPE_CHECKING

# Each public name and the module that defines it, imported on first use.
_SOURCES = {
    "NetworkConfig": "muzero.config",
    "MuZeroNetworks": "muzero.networks",
    "AlphaZeroNetworks": "muzero.networks",
    "ActorCriticNetworks": "muzero.networks",
    "make_muzero_networks": "muzero.networks",
    "make_alphazero_networks": "muzero.networks",
    "make_actor_critic_networks": "muzero.networks",
    "make_root_fn": "muzero.networks",
    "make_recurrent_fn": "muzero.networks",
    "scale_latent": "muzero.networks",
    "ValueTransform": "muzero.transforms",
    "categorical_transform": "muzero.transforms",
    "scalar_transform": "muzero.transforms",
    "h_transform": "muzero.transforms",
    "h_inverse": "muzero.transforms",
    "scalar_to_two_hot": "muzero.transforms",
    "two_hot_to_scalar": "muzero.transforms",
    "logits_to_scalar": "muzero.transforms",
    "Trajectory": "muzero.types",
    "MuZeroBatch": "muzero.types",
    "AlphaZeroBatch": "muzero.types",
    "VTraceBatch": "muzero.types",
    "ply_discount": "muzero.targets",
    "n_step_values": "muzero.targets",
    "muzero_batch": "muzero.targets",
    "alphazero_batch": "muzero.targets",
    "bootstrap_truncations": "muzero.targets",
    "value_priorities": "muzero.targets",
    "sequence_priorities": "muzero.targets",
    "BoardSymmetries": "muzero.symmetries",
    "make_symmetries": "muzero.symmetries",
    "dihedral_symmetries": "muzero.symmetries",
    "mirror_symmetries": "muzero.symmetries",
    "augment_muzero_batch": "muzero.symmetries",
    "augment_alphazero_batch": "muzero.symmetries",
    "with_symmetries": "muzero.symmetries",
    "LossConfig": "muzero.config",
    "make_muzero_loss": "muzero.losses",
    "make_alphazero_loss": "muzero.losses",
    "make_muzero_priority_fn": "muzero.losses",
    "make_vtrace_loss": "muzero.impala",
    "policy_cross_entropy": "muzero.losses",
    "scale_gradient": "muzero.losses",
    "VTraceOutput": "muzero.impala",
    "vtrace": "muzero.impala",
    "vtrace_td_error_and_advantage": "muzero.impala",
    "OptimizerConfig": "muzero.config",
    "TrainState": "muzero.learner",
    "make_optimizer": "muzero.learner",
    "make_schedule": "muzero.learner",
    "init_train_state": "muzero.learner",
    "make_update": "muzero.learner",
    "make_replicated_update": "muzero.distributed",
    "AXIS": "muzero.distributed",
    "make_mesh": "muzero.distributed",
    "from_process_local": "muzero.distributed",
    "global_devices": "muzero.distributed",
    "replicate": "muzero.distributed",
    "unreplicate": "muzero.distributed",
    "shard_batch": "muzero.distributed",
    "StochasticConfig": "muzero.config",
    "StochasticBatch": "muzero.stochastic",
    "StochasticNetworks": "muzero.stochastic",
    "chance_code": "muzero.stochastic",
    "make_stochastic_loss": "muzero.stochastic",
    "make_stochastic_model": "muzero.stochastic",
    "make_stochastic_networks": "muzero.stochastic",
    "make_stochastic_root_fn": "muzero.stochastic",
    "stochastic_batch": "muzero.stochastic",
    "turn_discount": "muzero.targets",
}

__all__ = [
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
    "ValueTransform",
    "categorical_transform",
    "scalar_transform",
    "h_transform",
    "h_inverse",
    "scalar_to_two_hot",
    "two_hot_to_scalar",
    "logits_to_scalar",
    "Trajectory",
    "MuZeroBatch",
    "AlphaZeroBatch",
    "VTraceBatch",
    "ply_discount",
    "n_step_values",
    "muzero_batch",
    "alphazero_batch",
    "bootstrap_truncations",
    "value_priorities",
    "sequence_priorities",
    "BoardSymmetries",
    "make_symmetries",
    "dihedral_symmetries",
    "mirror_symmetries",
    "augment_muzero_batch",
    "augment_alphazero_batch",
    "with_symmetries",
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
    "OptimizerConfig",
    "TrainState",
    "make_optimizer",
    "make_schedule",
    "init_train_state",
    "make_update",
    "make_replicated_update",
    "AXIS",
    "make_mesh",
    "from_process_local",
    "global_devices",
    "replicate",
    "unreplicate",
    "shard_batch",
    "StochasticConfig",
    "StochasticBatch",
    "StochasticNetworks",
    "chance_code",
    "make_stochastic_loss",
    "make_stochastic_model",
    "make_stochastic_networks",
    "make_stochastic_root_fn",
    "stochastic_batch",
    "turn_discount",
]


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from muzero.config import LossConfig, NetworkConfig, OptimizerConfig, StochasticConfig
    from muzero.distributed import (
        AXIS,
        from_process_local,
        global_devices,
        make_mesh,
        make_replicated_update,
        replicate,
        shard_batch,
        unreplicate,
    )
    from muzero.impala import VTraceOutput, make_vtrace_loss, vtrace, vtrace_td_error_and_advantage
    from muzero.learner import (
        TrainState,
        init_train_state,
        make_optimizer,
        make_schedule,
        make_update,
    )
    from muzero.losses import (
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
        make_actor_critic_networks,
        make_alphazero_networks,
        make_muzero_networks,
        make_recurrent_fn,
        make_root_fn,
        scale_latent,
    )
    from muzero.stochastic import (
        StochasticBatch,
        StochasticNetworks,
        chance_code,
        make_stochastic_loss,
        make_stochastic_model,
        make_stochastic_networks,
        make_stochastic_root_fn,
        stochastic_batch,
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
        bootstrap_truncations,
        muzero_batch,
        n_step_values,
        ply_discount,
        sequence_priorities,
        turn_discount,
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
