"""Configs owned by `muzero`: each a frozen dataclass that checks itself when built.

Library code raises `ValueError` naming the field; the commands turn it into a `UsageError`.
"""

import dataclasses
from typing import Literal

__all__ = ["OptimizerConfig"]

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
        check(_is_int(self.warmup_steps) and self.warmup_steps >= 0, "warmup_steps",
              "an integer >= 0")
        check(_is_int(self.decay_steps) and self.decay_steps > 0, "decay_steps", "an integer > 0")
        check(_is_real(self.final_learning_rate)
              and 0 <= self.final_learning_rate <= self.learning_rate,
              "final_learning_rate", "between 0 and learning_rate")
        check(_is_real(self.max_grad_norm) and self.max_grad_norm >= 0, "max_grad_norm",
              ">= 0 (0 disables clipping)")
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
