"""The learner's pure step: `update(state, batch) -> (state, metrics)` over any loss function.

A loss is `loss_fn(params, batch, key) -> (scalar_loss, metrics)`, pure and jittable, with the
loss a *mean* over the batch: then the mean of per-shard gradients (`pmean` over `axis_name`) is
the gradient of the global batch, and the replicated update (`muzero.distributed`) computes the
same step as one device would.
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from muzero.config import OptimizerConfig

__all__ = [
    "LossFn",
    "NO_TARGET",
    "TargetSchedule",
    "TrainState",
    "UpdateFn",
    "init_train_state",
    "make_optimizer",
    "make_schedule",
    "make_update",
    "pmean_as_one",
]

Params = Any
Batch = Any
Metrics = dict[str, jax.Array]
LossFn = Callable[[Params, Batch, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]


class TrainState(NamedTuple):
    """Everything the learner carries from one update to the next."""

    params: Params  # The network parameters (any pytree).
    opt_state: optax.OptState  # The optimizer's state for `params`.
    step: jax.Array  # [] int32: updates applied so far.
    key: jax.Array  # PRNG key, split once per update; the loss gets a fresh subkey.
    # A slower copy of `params` that value targets bootstrap from (`TargetSchedule`); None
    # where the run keeps none (a None field adds nothing to a checkpoint).
    target_params: Params | None = None
    # [] float32: the peak learning rate (`OptimizerConfig.learning_rate`) as an input of the
    # update rather than a constant of its program, so that a run whose rate changes (a resume
    # with another, a PBT member's next interval) runs the same compiled programs; a
    # `make_optimizer` optimizer schedules around it. None: the optimizer's own rate. Never
    # checkpointed: a run writes its config's rate in at every start.
    learning_rate: jax.Array | None = None


class TargetSchedule(NamedTuple):
    """How a target network follows the parameters: a copy every `every` updates, or an
    exponential moving average with decay `ema` after every update; neither: no target."""

    every: int = 0  # copy the parameters into the target after every this many updates
    ema: float = 0.0  # target <- ema * target + (1 - ema) * params, after every update

    @property
    def enabled(self) -> bool:
        return self.every > 0 or self.ema > 0

    def follow(self, target: Params, params: Params, step: jax.Array) -> Params:
        """The target after the update that made `params`, the `step`-th (1-based)."""
        if self.every > 0:
            copy = step % self.every == 0
            return jax.tree.map(lambda t, p: jnp.where(copy, p, t), target, params)
        return jax.tree.map(lambda t, p: self.ema * t + (1.0 - self.ema) * p, target, params)


NO_TARGET = TargetSchedule()  # no target network


UpdateFn = Callable[[TrainState, Batch], tuple[TrainState, Metrics]]


def _scheduled_rate(config: OptimizerConfig, count: jax.Array, peak: Any) -> jax.Array:
    """The rate of update `count` (0-based) for the peak rate `peak` (a number or an array):
    linear warm-up from 0, then constant, linear or cosine decay to the final rate. Written as
    peak * a(count) + final * b(count), optax's schedules' values, so `peak` may be traced."""
    count = jnp.asarray(count, jnp.float32)
    after = jnp.maximum(count - config.warmup_steps, 0.0)  # updates since the warm-up ended
    if config.schedule == "constant":
        to_peak, to_final = jnp.ones_like(count), jnp.zeros_like(count)
    elif config.schedule == "cosine":
        # optax.cosine_decay_schedule(peak, decay_steps, alpha=final / peak)
        progress = jnp.minimum(after, config.decay_steps) / config.decay_steps
        to_peak = 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        to_final = 1.0 - to_peak
    else:  # optax.linear_schedule(peak, final, decay_steps)
        to_final = jnp.clip(after / config.decay_steps, 0.0, 1.0)
        to_peak = 1.0 - to_final
    if config.warmup_steps > 0:
        warming = count < config.warmup_steps
        to_peak = jnp.where(warming, count / config.warmup_steps, to_peak)
        to_final = jnp.where(warming, 0.0, to_final)
    return peak * to_peak + config.final_learning_rate * to_final


def make_schedule(config: OptimizerConfig) -> optax.Schedule:
    """Learning rate as a function of the update count: linear warm-up, then the decay."""
    return lambda count: _scheduled_rate(config, count, config.learning_rate)


class _ScheduleAroundPeak(optax.WrappedSchedule):
    """`make_schedule`'s rate for the peak `peak_learning_rate` passed to the optimizer's update
    (`TrainState.learning_rate`), the config's without it. Its state is optax's for a plain
    schedule, so the optimizer's state (and a checkpoint's) is the same either way."""

    def __init__(self, config: OptimizerConfig):
        super().__init__(make_schedule(config))
        self.config = config

    def __call__(self, state, peak_learning_rate=None, **extra_args) -> jax.Array:
        peak = self.config.learning_rate if peak_learning_rate is None else peak_learning_rate
        return _scheduled_rate(self.config, state.count, peak)


def _weight_matrices(params: Params) -> Params:
    # Decay only kernels (rank >= 2): decaying biases and norm scales only hurts the fit.
    return jax.tree.map(lambda x: jnp.ndim(x) >= 2, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    """The optax optimizer for `config`; its current learning rate is in its state. Its
    `update` takes the peak rate as `peak_learning_rate=` (an array: any value, one program),
    `config.learning_rate` without it.

    Order: clip the raw gradient's global norm, Adam or momentum, decoupled weight decay (AdamW /
    SGDW: proportional to the learning rate, outside Adam's normalisation), learning rate.
    """

    def chain(learning_rate) -> optax.GradientTransformation:
        parts = []
        if config.max_grad_norm > 0:
            parts.append(optax.clip_by_global_norm(config.max_grad_norm))
        if config.optimizer == "adam":
            parts.append(optax.scale_by_adam(config.adam_b1, config.adam_b2, config.adam_eps))
        elif config.momentum > 0:
            parts.append(optax.trace(decay=config.momentum, nesterov=config.nesterov))
        if config.weight_decay > 0:
            parts.append(optax.add_decayed_weights(config.weight_decay, mask=_weight_matrices))
        parts.append(optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*parts)

    # inject_hyperparams keeps the scheduled rate in the state, where `update` reads it for metrics.
    return optax.inject_hyperparams(chain)(learning_rate=_ScheduleAroundPeak(config))


def init_train_state(
    params: Params,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    target: TargetSchedule = NO_TARGET,
) -> TrainState:
    """A fresh state at step 0 for `params`; its target network (if `target` keeps one)
    starts as a copy of them."""
    return TrainState(
        params=params,
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
        key=key,
        target_params=jax.tree.map(jnp.copy, params) if target.enabled else None,
    )


def _varying(tree: Params, axis_name: str) -> Params:
    def cast(x):
        if axis_name in jax.typeof(x).manual_axis_type.varying:
            return x
        return jax.lax.pcast(x, axis_name, to="varying")

    return jax.tree.map(cast, tree)


def pmean_as_one(tree: Any, axis_name: str) -> Any:
    """`jax.lax.pmean(tree, axis_name)` in one collective per dtype rather than one per leaf.

    The leaves of each dtype are concatenated into one vector, averaged, and split back. XLA's
    combiner already merges the per-leaf all-reduces into one op, but gloo (the cross-process
    collectives on CPU) still runs it operand by operand, paying its latency once per leaf: over
    2 local processes, a 40-leaf network's gradients took 158 ms per pmean, its flat vector 4 ms.
    """
    leaves, treedef = jax.tree.flatten(tree)
    by_dtype: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        by_dtype.setdefault(jnp.result_type(leaf), []).append(i)
    averaged = list(leaves)
    for indices in by_dtype.values():
        flat = jnp.concatenate([jnp.ravel(leaves[i]) for i in indices])
        flat = jax.lax.pmean(flat, axis_name)
        offsets = np.cumsum([np.size(leaves[i]) for i in indices])[:-1]
        for i, part in zip(indices, jnp.split(flat, offsets), strict=True):
            averaged[i] = part.reshape(jnp.shape(leaves[i]))
    return jax.tree.unflatten(treedef, averaged)


def make_update(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    *,
    axis_name: str | None = None,
    target: TargetSchedule = NO_TARGET,
) -> UpdateFn:
    """The pure learner step for `loss_fn`: one gradient step, and its metrics.

    With `axis_name`, the function must run inside a named-axis context over that axis
    (`shard_map`, `pmap`): gradients and metrics are averaged across it with `pmean`, so every
    shard applies the same update and the parameters stay identical.

    Metrics: the loss's own terms, `loss`, `grad_norm` (global norm of the averaged gradient,
    before clipping) and `learning_rate` (the rate of this update, when the optimizer keeps one in
    its state as `make_optimizer`'s does).

    With a `target` schedule the state's `target_params` follow the new parameters by it (the
    state must carry them: `init_train_state(..., target)`).
    """
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True)

    def update(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
        key, loss_key = jax.random.split(state.key)
        if axis_name is not None:
            # Each shard draws its own randomness; the carried key stays replicated.
            loss_key = jax.random.fold_in(loss_key, jax.lax.axis_index(axis_name))
        params = state.params
        if axis_name is not None:
            # Differentiate per-shard copies: the gradient of a replicated input would already
            # be summed over the axis by autodiff, and the pmean below must see each shard's own.
            params = _varying(params, axis_name)
        (loss, loss_metrics), grads = value_and_grad(params, batch, loss_key)
        chex.assert_rank(loss, 0)
        metrics = {**loss_metrics, "loss": loss}
        if axis_name is not None:
            grads, metrics = pmean_as_one((grads, metrics), axis_name)
        # `make_optimizer`'s schedule around the state's peak rate, where the state has one.
        peak = {} if state.learning_rate is None else {"peak_learning_rate": state.learning_rate}
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params, **peak)
        params = optax.apply_updates(state.params, updates)
        metrics["grad_norm"] = optax.global_norm(grads)
        learning_rate = optax.tree_utils.tree_get(
            opt_state, "learning_rate", filtering=lambda _, value: isinstance(value, jax.Array)
        )
        if learning_rate is not None:
            metrics["learning_rate"] = jnp.asarray(learning_rate)
        step = state.step + 1
        target_params = state.target_params
        if target.enabled:
            if target_params is None:
                raise ValueError("a target schedule needs a state made with it (init_train_state)")
            target_params = target.follow(target_params, params, step)
        new_state = TrainState(params, opt_state, step, key, target_params, state.learning_rate)
        return new_state, metrics

    return update
