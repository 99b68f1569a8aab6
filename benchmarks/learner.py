"""Learner throughput: MuZero updates/s and samples/s on synthetic batches, one JSON line each.

    python benchmarks/learner.py                                # Atari and board networks
    python benchmarks/learner.py --network atari --batch-size 256 --steps 10 --tflops

Configurations: `atari` is MuZero's Atari network (`NetworkConfig.atari_muzero()`: 84x84x4 uint8
frames downsampled to 6x6, 16+16 residual blocks of 256 channels, 601-bin value and reward), 18
actions; `board` is a connect-four-sized network (6x7x3 planes, 7 actions, 64 channels). Both
unroll K = `--unroll-steps` (5) dynamics steps per sample. The update is the replicated one over
`--devices` local devices (all by default) with the batch already on them, so the figures are
the learner's compute, not replay or host-to-device transfer. Compilation and one warm-up step
are excluded; the timed steps end with `jax.block_until_ready`.

With `--tflops`, each line adds the update's FLOPs (XLA's cost analysis of its HLO, per device),
the achieved TFLOP/s per device, a matmul probe's achieved fp32 (default precision, i.e. TF32
on recent NVIDIA GPUs) and bf16 TFLOP/s on the same device, and the ratio of the update's rate
to the probe's fp32 rate; with `--compute-dtype bfloat16` (or `both`: one line each) the networks
compute in bf16 (`network.compute_dtype`) and the line adds the ratio to the probe's bf16 rate.
"""

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from muzero import LossConfig, MuZeroBatch, NetworkConfig, make_muzero_loss, make_muzero_networks
from muzero.config import OptimizerConfig
from muzero.distributed import make_replicated_update, replicate, shard_batch
from muzero.learner import init_train_state, make_optimizer, make_update

NETWORKS = {
    # name: (network config, observation shape, observation dtype, number of actions)
    "atari": (NetworkConfig.atari_muzero(), (84, 84, 4), np.uint8, 18),
    "board": (
        NetworkConfig(
            channels=64,
            representation_blocks=4,
            dynamics_blocks=4,
            prediction_blocks=1,
            head_hidden=64,
            value_support=0,
            reward_support=0,
        ),
        (6, 7, 3),
        np.float32,
        7,
    ),
}


def synthetic_batch(
    rng: np.random.Generator, n: int, k: int, obs_shape, obs_dtype, num_actions: int
) -> MuZeroBatch:
    """A random `MuZeroBatch` of `n` windows with `k` unroll steps, in the losses' shapes."""
    if obs_dtype == np.uint8:
        observation = rng.integers(0, 256, (n, *obs_shape), dtype=np.uint8)
    else:
        observation = rng.random((n, *obs_shape), dtype=np.float32)
    logits = rng.normal(size=(n, k + 1, num_actions)).astype(np.float32)
    policy = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return MuZeroBatch(
        observation=observation,
        action=rng.integers(0, num_actions, (n, k), dtype=np.int32),
        value_target=rng.uniform(-1, 1, (n, k + 1)).astype(np.float32),
        reward_target=rng.uniform(-1, 1, (n, k + 1)).astype(np.float32),
        policy_target=policy,
        policy_mask=np.ones((n, k + 1), np.float32),
        importance_weight=np.ones((n,), np.float32),
    )


def _flops(lowered, per_device_update, state, batch_shard) -> tuple[float | None, str]:
    """FLOPs of one device's program and where they were read, from XLA's analysis of the lowered
    HLO: the compiled program's analysis misses the convolutions XLA:GPU hands to cuDNN (it gave
    34.5 GFLOP per Atari update at batch 256 on an H100, where the HLO holds 9.69 TFLOP). Where
    the backend has no analysis of a lowered program (jax 0.11.2 on an H200 returned none), the
    same update for one device's shard is lowered for the CPU and read there: the HLO's FLOPs
    depend on the program, not the device."""
    flops = _analysed_flops(lowered.cost_analysis())
    if flops is not None:
        return flops, "lowered"
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (state, batch_shard))
    traced = jax.jit(per_device_update).trace(*shapes)
    return _analysed_flops(traced.lower(lowering_platforms=("cpu",)).cost_analysis()), "cpu"


def _analysed_flops(analysis) -> float | None:
    if isinstance(analysis, list | tuple):  # older jax: one dict per program
        analysis = analysis[0] if analysis else None
    return float(analysis["flops"]) if analysis and "flops" in analysis else None


def matmul_probe(size: int, dtype, repeats: int = 10) -> float:
    """Achieved TFLOP/s of a [size, size] @ [size, size] matmul in `dtype` on the default device."""
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (size, size), dtype)
    b = jax.random.normal(key_b, (size, size), dtype)

    @jax.jit
    def chain(a, b):
        # A dependent chain of matmuls, so the timed loop is device-bound, not dispatch-bound.
        for _ in range(repeats):
            a = (a @ b) * (1.0 / size)
        return a

    jax.block_until_ready(chain(a, b))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(chain(a, b))
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 * repeats / best / 1e12


def bench(name: str, args, probe: dict | None, compute_dtype: str = "float32") -> dict:
    network_config, obs_shape, obs_dtype, num_actions = NETWORKS[name]
    network_config = dataclasses.replace(network_config, compute_dtype=compute_dtype)
    devices = jax.local_devices()[: args.devices or None]
    networks = make_muzero_networks(network_config, obs_shape, num_actions)
    loss_fn = make_muzero_loss(networks, LossConfig(unroll_steps=args.unroll_steps))
    optimizer = make_optimizer(
        OptimizerConfig(learning_rate=1e-4, max_grad_norm=5.0, weight_decay=1e-4)
    )
    params = jax.jit(networks.init)(jax.random.key(0))
    num_params = sum(x.size for x in jax.tree.leaves(params))
    single_state = init_train_state(params, optimizer, jax.random.key(1))
    state = replicate(single_state, devices)
    host_batch = synthetic_batch(
        np.random.default_rng(0),
        args.batch_size,
        args.unroll_steps,
        obs_shape,
        obs_dtype,
        num_actions,
    )
    single_batch = jax.tree.map(lambda x: x[: args.batch_size // len(devices)], host_batch)
    batch = shard_batch(host_batch, devices)
    update = make_replicated_update(loss_fn, optimizer, devices)

    start = time.perf_counter()
    lowered = update.lower(state, batch)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    state, metrics = compiled(state, batch)  # warm-up: first-run allocations
    jax.block_until_ready((state, metrics))
    start = time.perf_counter()
    for _ in range(args.steps):
        state, metrics = compiled(state, batch)
    # Dispatch is asynchronous: wait for the last update before reading the clock.
    jax.block_until_ready((state, metrics))
    seconds = time.perf_counter() - start

    updates_per_s = args.steps / seconds
    result = {
        "network": name,
        "compute_dtype": compute_dtype,
        "batch_size": args.batch_size,
        "unroll_steps": args.unroll_steps,
        "devices": len(devices),
        "device_kind": devices[0].device_kind,
        "params": int(num_params),
        "compile_s": round(compile_s, 2),
        "steps": args.steps,
        "seconds_per_update": round(seconds / args.steps, 5),
        "updates_per_s": round(updates_per_s, 4),
        "samples_per_s": round(updates_per_s * args.batch_size, 2),
        "loss": round(float(metrics["loss"]), 4),
    }
    if args.tflops:
        # Of one device's program: the batch shard it computes.
        flops, source = _flops(lowered, make_update(loss_fn, optimizer), single_state, single_batch)
        result["flops_from"] = source
        if flops is not None:
            achieved = flops * updates_per_s / 1e12
            result["gflops_per_update_per_device"] = round(flops / 1e9, 2)
            result["tflops_per_device"] = round(achieved, 4)
            if probe:
                result.update(probe)
                result["ratio_to_matmul_fp32"] = round(achieved / probe["matmul_tflops_fp32"], 4)
                if compute_dtype == "bfloat16":
                    result["ratio_to_matmul_bf16"] = round(
                        achieved / probe["matmul_tflops_bf16"], 4
                    )
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=[*NETWORKS, "all"], default="all")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch per update")
    parser.add_argument("--unroll-steps", type=int, default=5, help="K dynamics steps")
    parser.add_argument("--steps", type=int, default=5, help="timed updates")
    parser.add_argument("--devices", type=int, default=0, help="local devices (0: all)")
    parser.add_argument(
        "--compute-dtype",
        choices=["float32", "bfloat16", "both"],
        default="float32",
        help="network.compute_dtype of the timed update (both: one line each)",
    )
    parser.add_argument(
        "--tflops",
        action="store_true",
        help="report FLOPs per update and TFLOP/s against a matmul probe",
    )
    parser.add_argument(
        "--probe-size",
        type=int,
        default=0,
        help="matmul probe size (0: 8192 on GPU/TPU, 1024 on CPU)",
    )
    args = parser.parse_args(argv)

    probe = None
    if args.tflops:
        size = args.probe_size or (1024 if jax.default_backend() == "cpu" else 8192)
        probe = {
            "matmul_size": size,
            "matmul_tflops_fp32": round(matmul_probe(size, jnp.float32), 3),
            "matmul_tflops_bf16": round(matmul_probe(size, jnp.bfloat16), 3),
        }
    names = list(NETWORKS) if args.network == "all" else [args.network]
    dtypes = ["float32", "bfloat16"] if args.compute_dtype == "both" else [args.compute_dtype]
    for name in names:
        for compute_dtype in dtypes:
            print(json.dumps(bench(name, args, probe, compute_dtype)), flush=True)


if __name__ == "__main__":
    main()
