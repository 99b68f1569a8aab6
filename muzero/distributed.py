"""Data-parallel replication of the learner step over devices, and over hosts.

The global batch is split along its batch axis over a 1-D mesh of learner devices; parameters and
optimizer state are replicated; inside `jax.shard_map` each device computes the gradient of its
shard and `pmean` over the mesh axis averages them, so all devices apply the same update.

On one host::

    devices = jax.local_devices()                       # or the learner subset of them
    update = make_replicated_update(loss_fn, optimizer, devices, batch_axis=1)  # [T, B] batches
    state = replicate(init_train_state(params, optimizer, key), devices)
    state, metrics = update(state, shard_batch(batch, devices, batch_axis=1))
    params = unreplicate(state).params                   # e.g. to publish to the actors

On several hosts, start the same program once per host (process), and before any other JAX call::

    jax.distributed.initialize(coordinator_address="host0:1234",  # process 0's address
                               num_processes=N, process_id=i)    # i = 0 .. N-1, one per host
    devices = global_devices([0, 1])    # local devices 0 and 1 of every host, e.g. the learners

Then run exactly the code above on every process, in the same order: `jax.devices()` spans all
processes, the mesh spans all hosts' learner devices, and the `pmean` crosses hosts. Each process
passes its *own local* batch to `shard_batch` (the global batch is their concatenation: N times
the local size), and the same initial state to `replicate` (use the same seed everywhere).
`unreplicate` returns this host's copy. On CPU the cross-process collectives use gloo
(`jax_cpu_collectives_implementation`, the default in recent jax); on GPU, NCCL.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from muzero.learner import NO_TARGET, Batch, LossFn, TargetSchedule, UpdateFn, make_update

__all__ = [
    "AXIS",
    "from_process_local",
    "global_devices",
    "make_mesh",
    "make_replicated_update",
    "replicate",
    "shard_batch",
    "unreplicate",
]

AXIS = "data"  # The mesh axis the batch is split over and the gradients averaged over.

Devices = Sequence[jax.Device] | Mesh


def global_devices(local_ids: Sequence[int] | None = None) -> list[jax.Device]:
    """The devices at `local_ids` (indices into each process's local devices) of every process.

    With `None`, all devices of all processes. The order (process, then local index) is the order
    of the shards along the global batch.
    """
    devices = []
    for process in range(jax.process_count()):
        local = jax.local_devices(process_index=process)
        ids = range(len(local)) if local_ids is None else local_ids
        for i in ids:
            if not 0 <= i < len(local):
                raise ValueError(
                    f"local device index {i} out of range: process {process} has "
                    f"{len(local)} devices"
                )
            devices.append(local[i])
    return devices


def make_mesh(devices: Devices) -> Mesh:
    """A 1-D mesh over `devices` with the axis `AXIS` (a mesh is returned as is)."""
    if isinstance(devices, Mesh):
        if devices.axis_names != (AXIS,):
            raise ValueError(f"mesh axes must be ({AXIS!r},), got {devices.axis_names}")
        return devices
    if len(devices) == 0:
        raise ValueError("devices must not be empty")
    return Mesh(np.asarray(devices), (AXIS,))


def _batch_spec(batch_axis: int) -> P:
    return P(*([None] * batch_axis), AXIS)


def from_process_local(tree, sharding: NamedSharding):
    """Global arrays laid out by `sharding`, from each process's part of every leaf (the whole
    leaf where `sharding` replicates it). Typed PRNG keys travel as their key data."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def put(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            # make_array_from_process_local_data takes no typed keys.
            data = put(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        if isinstance(x, jax.Array):
            return _from_local_device_array(x, sharding)
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree.map(put, tree)


def _from_local_device_array(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """The global array whose local part is `x`, an array already on a device: its pieces are
    copied device to device (none where `x` already sits on the piece's device) and nothing waits
    for `x` to be computed. A trip through the host here held the learner's input thread until
    each batch was built, which cost 2 processes a fifth of their updates."""
    mesh = sharding.mesh
    here = jax.process_index()
    global_shape = list(x.shape)
    for dim, names in enumerate(sharding.spec):
        if names is None:
            continue
        names = names if isinstance(names, tuple) else (names,)
        shards = int(np.prod([mesh.shape[name] for name in names]))
        # This process's shards along `dim`: its devices' distinct coordinates on those axes.
        coords = {
            tuple(c[mesh.axis_names.index(n)] for n in names)
            for c, d in np.ndenumerate(mesh.devices)
            if d.process_index == here
        }
        global_shape[dim] = x.shape[dim] * shards // len(coords)
    indices = {
        device: index
        for device, index in sharding.addressable_devices_indices_map(tuple(global_shape)).items()
        if index is not None
    }
    # The global index where this process's part starts, along each dimension.
    starts = [min((index[dim].start or 0) for index in indices.values()) for dim in range(x.ndim)]
    pieces = []
    for device, index in indices.items():
        local = tuple(
            slice((sl.start or 0) - start, (sl.stop or size) - start)
            for sl, start, size in zip(index, starts, global_shape, strict=True)
        )
        whole = all(part == slice(0, n) for part, n in zip(local, x.shape, strict=True))
        piece = x if whole else x[local]
        pieces.append(jax.device_put(piece, device))
    return jax.make_array_from_single_device_arrays(tuple(global_shape), sharding, pieces)


def replicate(tree, devices: Devices):
    """Copies `tree` (e.g. a `TrainState`) to every device; every process must pass the same."""
    sharding = NamedSharding(make_mesh(devices), P())
    if jax.process_count() == 1:
        # A copy, never an alias (device_put aliases the first device's buffer even with
        # may_alias=False): the replicated update donates its state, and must not delete the
        # caller's arrays with it.
        tree = _copy_arrays(tree)
    return from_process_local(tree, sharding)


@jax.jit
def _copy_arrays(tree):
    # One program for the whole tree: a copy leaf by leaf outside `jit` compiles one for each
    # shape of leaf. (`jnp.copy` is a real copy in `jit`: an output never forwards an input.)
    return jax.tree.map(jnp.copy, tree)


def unreplicate(tree):
    """This process's copy of a replicated `tree`, on its first device in the mesh."""
    return jax.tree.map(lambda x: x.addressable_shards[0].data, tree)


def shard_batch(batch: Batch, devices: Devices, batch_axis: int = 0) -> Batch:
    """Splits this process's `batch` along `batch_axis` over its devices in the mesh.

    Every leaf needs the batch on `batch_axis`, of a size divisible by the number of this
    process's devices in the mesh. Across processes, the result is the global batch.
    """
    mesh = make_mesh(devices)
    local = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    for path, x in jax.tree_util.tree_leaves_with_path(batch):
        shape = np.shape(x)
        if len(shape) <= batch_axis or shape[batch_axis] % local:
            raise ValueError(
                f"batch leaf {jax.tree_util.keystr(path) or 'batch'} with shape {shape} needs a "
                f"batch axis {batch_axis} of a size divisible by {local} local devices"
            )
    return from_process_local(batch, NamedSharding(mesh, _batch_spec(batch_axis)))


def make_replicated_update(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    devices: Devices,
    *,
    batch_axis: int = 0,
    donate: bool = True,
    compiler_options: dict[str, str] | None = None,
    target: TargetSchedule = NO_TARGET,
) -> UpdateFn:
    """The jitted data-parallel `update(state, batch)` over `devices` (of one or more hosts).

    `state` comes from `replicate`, `batch` from `shard_batch` with the same `batch_axis`
    (0 for [B, ...] batches, 1 for time-major [T, B, ...]). Returns the new replicated state and
    the metrics averaged over all devices. With `donate`, the input state's buffers are reused for
    the output: do not use the old state after the call. `compiler_options` go to XLA (`jax.jit`).
    `target` is the target network's schedule (`muzero.make_update`).
    """
    mesh = make_mesh(devices)
    update = make_update(loss_fn, optimizer, axis_name=AXIS, target=target)
    sharded = jax.shard_map(
        update,
        mesh=mesh,
        in_specs=(P(), _batch_spec(batch_axis)),
        out_specs=(P(), P()),
    )
    return jax.jit(
        sharded, donate_argnums=(0,) if donate else (), compiler_options=compiler_options
    )
