"""Worker launched by test_replication.py and test_distributed.py in a fresh interpreter.

The device count (XLA_FLAGS) and `jax.distributed` must be set up before JAX starts, so these
checks cannot run in the pytest process. Usage:

    python _distributed_worker.py replicate OUT.npz
    python _distributed_worker.py process PORT PROCESS_ID NUM_PROCESSES OUT.npz

Both run a few updates of the regression problem with the replicated update and, on one device,
with the plain update on the same global batch, and save both parameter sets to OUT.npz.
`process` also runs the update under `shard_map` without manual-axis type checks (as Anakin runs
it, for mctx), the processes' agreement (`Lockstep`) and the global batch's assembly.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


def _optimizer():
    from muzero.config import OptimizerConfig
    from muzero.learner import make_optimizer

    # SGD (unlike Adam) is sensitive to the gradient's scale, so a sum in place of a mean shows;
    # clipping (not reached), weight decay and a schedule on, so every part of the step runs.
    return make_optimizer(
        OptimizerConfig(
            optimizer="sgd",
            learning_rate=5e-2,
            schedule="cosine",
            warmup_steps=1,
            decay_steps=10,
            max_grad_norm=100.0,
            weight_decay=1e-2,
        )
    )


def _init_state(params, optimizer):
    from muzero.learner import init_train_state

    # Jitted: eagerly, the optimizer's init compiles one small program per leaf.
    init = jax.jit(init_train_state, static_argnums=1)
    return init(params, optimizer, jax.random.key(1))


def _flat(tree) -> dict[str, np.ndarray]:
    return {
        jax.tree_util.keystr(path): np.asarray(x)
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
    }


def _reference(params, batches, loss_fn=None):
    """The plain single-device update on each global batch in turn."""
    import _regression

    from muzero.learner import make_update

    optimizer = _optimizer()
    update = jax.jit(make_update(loss_fn or _regression.loss_fn, optimizer))
    state = _init_state(params, optimizer)
    for batch in batches:
        state, metrics = update(state, batch)
    return state.params, metrics


def replicate_main(out: str) -> None:
    import _regression

    from muzero.distributed import make_replicated_update, replicate, shard_batch, unreplicate

    devices = jax.devices()
    assert len(devices) == 4, devices
    params = _regression.init_params(jax.random.key(0))
    optimizer = _optimizer()
    results = {}
    for batch_axis, time in [(0, None), (1, 3)]:
        keys = jax.random.split(jax.random.key(10 + batch_axis), STEPS)
        batches = [_regression.make_batch(k, 16, time) for k in keys]
        ref_params, ref_metrics = _reference(params, batches)
        update = make_replicated_update(
            _regression.loss_fn, optimizer, devices, batch_axis=batch_axis
        )
        state = replicate(_init_state(params, optimizer), devices)
        for batch in batches:
            state, metrics = update(state, shard_batch(batch, devices, batch_axis))
        tag = f"axis{batch_axis}"
        for name, x in _flat(unreplicate(state.params)).items():
            results[f"{tag}/replicated/{name}"] = x
        for name, x in _flat(ref_params).items():
            results[f"{tag}/single/{name}"] = x
        for name, x in _flat(params).items():
            results[f"{tag}/initial/{name}"] = x
        # Every device's own copy, to check they are bit-identical.
        for i, shard in enumerate(state.params["w1"].addressable_shards):
            results[f"{tag}/device{i}/w1"] = np.asarray(shard.data)
        for name in ("loss", "grad_norm", "learning_rate"):
            results[f"{tag}/metric/replicated/{name}"] = np.asarray(metrics[name])
            results[f"{tag}/metric/single/{name}"] = np.asarray(ref_metrics[name])
        results[f"{tag}/step"] = np.asarray(unreplicate(state.step))
    results.update(_muzero_results())
    results.update(_replica_checks(state.params))
    np.savez(out, **results)


def _replica_checks(replicated) -> dict[str, np.ndarray]:
    """`check_replicas_agree` on identical copies (passes) and on copies where device 2's
    differs (names it): the error message, or "" where it passed."""
    from selfplay.processes import check_replicas_agree

    w1 = replicated["w1"]
    copies = [np.asarray(shard.data) for shard in w1.addressable_shards]
    copies[2] = copies[2] + 1e-6  # one device's copy drifted
    drifted = jax.make_array_from_single_device_arrays(
        w1.shape,
        w1.sharding,
        [jax.device_put(x, s.device) for x, s in zip(copies, w1.addressable_shards, strict=True)],
    )
    messages = {}
    for name, params in [("same", replicated), ("drifted", {**replicated, "w1": drifted})]:
        try:
            check_replicas_agree(params)
            messages[f"check/{name}"] = np.asarray("")
        except RuntimeError as error:
            messages[f"check/{name}"] = np.asarray(str(error))
    return messages


def _muzero_results() -> dict[str, np.ndarray]:
    """The same comparison through the real MuZero loss on a tiny MLP model (K = 2)."""
    from muzero.config import LossConfig, NetworkConfig
    from muzero.distributed import make_replicated_update, replicate, shard_batch, unreplicate
    from muzero.losses import make_muzero_loss
    from muzero.networks import make_muzero_networks
    from muzero.types import MuZeroBatch

    devices = jax.devices()
    k, n, num_actions = 2, 8, 3
    config = NetworkConfig(
        mlp_sizes=(16,), latent_size=8, head_hidden=8, value_support=3, reward_support=3
    )
    networks = make_muzero_networks(config, (6,), num_actions)
    loss_fn = make_muzero_loss(networks, LossConfig(unroll_steps=k))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(STEPS):
        policy = rng.random((n, k + 1, num_actions)).astype(np.float32)
        batches.append(
            MuZeroBatch(
                observation=rng.random((n, 6), dtype=np.float32),
                action=rng.integers(0, num_actions, (n, k), dtype=np.int32),
                value_target=rng.uniform(-2, 2, (n, k + 1)).astype(np.float32),
                reward_target=rng.uniform(-1, 1, (n, k + 1)).astype(np.float32),
                policy_target=policy / policy.sum(-1, keepdims=True),
                policy_mask=(rng.random((n, k + 1)) < 0.8).astype(np.float32),
                importance_weight=rng.uniform(0.5, 1.0, (n,)).astype(np.float32),
            )
        )
    params = jax.jit(networks.init)(jax.random.key(0))  # eager init compiles op by op
    ref_params, ref_metrics = _reference(params, batches, loss_fn)
    optimizer = _optimizer()
    update = make_replicated_update(loss_fn, optimizer, devices)
    state = replicate(_init_state(params, optimizer), devices)
    for batch in batches:
        state, metrics = update(state, shard_batch(batch, devices))
    results = {f"muzero/replicated/{k}": v for k, v in _flat(unreplicate(state.params)).items()}
    results.update({f"muzero/single/{k}": v for k, v in _flat(ref_params).items()})
    results.update({f"muzero/initial/{k}": v for k, v in _flat(params).items()})
    for name in ref_metrics:
        results[f"muzero/metric/replicated/{name}"] = np.asarray(metrics[name])
        results[f"muzero/metric/single/{name}"] = np.asarray(ref_metrics[name])
    return results


def _unchecked_update(params, optimizer, devices, process_id: int) -> dict:
    """The regression update under `shard_map(check_vma=False)`, as Anakin runs its updates
    (mctx cannot be typed with varying manual axes), on the batches `process_main` feeds: its
    parameters must equal the plain update's on the global batch too."""
    import _regression
    from jax.sharding import PartitionSpec as P

    import muzero

    mesh = muzero.make_mesh(devices)
    sharded = jax.jit(
        jax.shard_map(
            muzero.make_update(_regression.loss_fn, optimizer, axis_name=muzero.AXIS),
            mesh=mesh,
            in_specs=(P(), P(muzero.AXIS)),
            out_specs=(P(), P()),
            check_vma=False,
        )
    )
    state = muzero.replicate(_init_state(params, optimizer), mesh)
    for step in range(STEPS):
        local = _regression.make_batch(jax.random.key(100 * step + process_id), 8)
        state, _ = sharded(state, muzero.shard_batch(local, mesh))
    return {f"unchecked/{k}": v for k, v in _flat(muzero.unreplicate(state.params)).items()}


def process_main(port: str, process_id: str, num_processes: str, out: str) -> None:
    process_id, num_processes = int(process_id), int(num_processes)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )
    import _regression

    from muzero.distributed import (
        global_devices,
        make_replicated_update,
        replicate,
        shard_batch,
        unreplicate,
    )

    devices = global_devices()
    assert len(devices) == num_processes * jax.local_device_count(), devices
    params = _regression.init_params(jax.random.key(0))
    optimizer = _optimizer()
    update = make_replicated_update(_regression.loss_fn, optimizer, devices)
    state = replicate(_init_state(params, optimizer), devices)
    global_batches = []
    for step in range(STEPS):
        # Each process feeds different data: only a cross-process pmean keeps params equal.
        local = [
            _regression.make_batch(jax.random.key(100 * step + p), 8) for p in range(num_processes)
        ]
        global_batches.append(jax.tree.map(lambda *xs: np.concatenate(xs), *local))
        state, metrics = update(state, shard_batch(local[process_id], devices))
    ref_params, _ = _reference(params, global_batches)
    results = {f"replicated/{k}": v for k, v in _flat(unreplicate(state.params)).items()}
    results.update(_unchecked_update(params, optimizer, devices, process_id))
    results.update({f"single/{k}": v for k, v in _flat(ref_params).items()})
    results.update({f"initial/{k}": v for k, v in _flat(params).items()})
    results["loss"] = np.asarray(unreplicate(metrics["loss"]))
    results.update(_lockstep_rounds(process_id))
    # A local batch on a device and the same batch in host memory make one global batch alike.
    from jax.experimental import multihost_utils

    local = jnp.arange(3 * 4 * 2).reshape(3, 4, 2) + 100 * process_id  # [T, B, 2]
    for source, batch in [("device", local), ("host", np.asarray(local))]:
        global_batch = shard_batch(batch, devices, batch_axis=1)
        results[f"shard/{source}"] = multihost_utils.process_allgather(global_batch, tiled=True)
    np.savez(out, **results)
    jax.distributed.shutdown()


# Each process's (stop reason, ready, log due, frames, replay inserts) in the rounds of
# `_lockstep_rounds`.
LOCKSTEP_ROUNDS = [
    lambda p: (None, True, p == 0, 10 + p, 100 * p),  # all go on; a log due on process 0's clock
    lambda p: (None, p == 0, p == 1, 20, 5),  # process 1 holds no batch: nobody learns
    lambda p: ("boom" if p == 1 else None, True, False, 30, 7 + p),  # process 1 stops the job
    lambda p: ("max_updates", True, False, 40, 9),  # a shared limit reads the same everywhere
]


def _lockstep_rounds(process_id: int) -> dict[str, np.ndarray]:
    from selfplay.processes import Lockstep

    results = {}
    first, second = Lockstep(shared=("max_updates",)), Lockstep()
    for i, round_of in enumerate(LOCKSTEP_ROUNDS):
        agreed = first.agree(*round_of(process_id))
        other = second.agree(None, True, False, i)  # a second agreement keeps its own rounds
        results[f"lockstep/{i}/reason"] = np.asarray(agreed.stop_reason or "")
        results[f"lockstep/{i}/flags"] = np.asarray([agreed.ready, agreed.log_due])
        results[f"lockstep/{i}/frames"] = np.asarray([agreed.frames, *agreed.frames_by_process])
        results[f"lockstep/{i}/inserts"] = np.asarray(agreed.inserts_by_process)
        results[f"lockstep/{i}/other_frames"] = np.asarray(other.frames)
    return results


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"replicate": replicate_main, "process": process_main}[mode](*args)
