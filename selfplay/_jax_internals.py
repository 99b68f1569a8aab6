"""JAX's private modules, used where JAX has no public way, all in this one module.

A job of several processes needs the coordination service's client (its key-value store carries
the processes' per-update agreement, the peer watch's port and the collectives' addresses), and
to give the CPU collectives (gloo) the address the other hosts reach before JAX's CPU backend
starts. JAX offers neither publicly, so both reach into `jax._src`, whose names change between
versions. At first use this module checks that the installed JAX has every name it uses, and says
in one line what is needed where it has not (a `UsageError`: `podracer train` exits with it);
a JAX version it has not run with gets a one-line warning.

One more reach is optional: JAX writes its persistent compilation cache from a job's process 0
only, so the programs of another process's own devices are compiled again at each start of the
job (`cache_programs_of_this_process`). Where this JAX lacks what that needs, the job runs as
JAX alone would, with a one-line warning.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from typing import Any, NamedTuple

import jax

from configs.errors import UsageError

__all__ = [
    "KNOWN_GOOD",
    "cache_programs_of_this_process",
    "coordination_client",
    "distributed_state",
    "make_gloo_collectives",
    "use_cpu_collectives",
]

# The JAX versions (major, minor) this module's private names are used with: 0.10 (the test
# suite's) and 0.11 (the GPU machines').
KNOWN_GOOD = ((0, 10), (0, 11))


class _Private(NamedTuple):
    distributed: Any  # jax._src.distributed: the job's state (client, coordinator address)
    xla_bridge: Any  # jax._src.xla_bridge: the backends' factories
    jaxlib: Any  # jax._src.lib._jax: jaxlib's C++ bindings (gloo's collectives)


def _load() -> _Private:
    """The private modules, each name this module uses looked up now (AttributeError or
    ImportError where this JAX lacks one)."""
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax

    private = _Private(distributed, xla_bridge, _jax)
    for module, name in (
        (distributed, "global_state"),
        (xla_bridge, "_backend_factories"),
        (xla_bridge, "register_backend_factory"),
        (xla_bridge, "make_cpu_client"),
        (_jax, "make_gloo_tcp_collectives"),
    ):
        getattr(module, name)
    return private


@functools.cache
def _private() -> _Private:
    """`_load()`, checked once per process against the JAX version."""
    known = " and ".join(f"{major}.{minor}" for major, minor in KNOWN_GOOD)
    try:
        private = _load()
    except (ImportError, AttributeError) as error:
        raise UsageError(
            f"jax {jax.__version__} lacks the private names several processes need ({error}); "
            f"they are known in jax {known}: pip install 'jax>={_version_text(KNOWN_GOOD[0])},"
            f"<{_version_text(_next_minor(KNOWN_GOOD[-1]))}'"
        ) from None
    if _major_minor(jax.__version__) not in KNOWN_GOOD:
        warnings.warn(
            f"several processes use JAX's private modules, known to work with jax {known}; "
            f"this is jax {jax.__version__}",
            stacklevel=3,
        )
    return private


def distributed_state() -> Any:
    """JAX's state of the job this process joined: `.client`, `.coordinator_address`,
    `.process_id`, `.num_processes`."""
    return _private().distributed.global_state


def coordination_client() -> Any:
    """The job's coordination-service client (`key_value_set`, `blocking_key_value_get`, ...)."""
    return distributed_state().client


def make_gloo_collectives(client: Any, hostname: str) -> Any:
    """gloo's CPU collectives over TCP, listening on `hostname`, joined through `client`."""
    return _private().jaxlib.make_gloo_tcp_collectives(distributed_client=client, hostname=hostname)


def use_cpu_collectives(collectives: Any) -> None:
    """Makes JAX's CPU backend, once it starts, use `collectives` (at the priority and with the
    failure mode of the factory it replaces)."""
    xla_bridge = _private().xla_bridge
    default = xla_bridge._backend_factories["cpu"]
    xla_bridge.register_backend_factory(
        "cpu",
        lambda: xla_bridge.make_cpu_client(collectives=collectives),
        priority=default.priority,
        fail_quietly=default.fail_quietly,
    )


# What `cache_programs_of_this_process` reads of the function it wraps: the arguments JAX's own
# write (`compiler._cache_write`) takes from it.
_COMPILE_AND_WRITE_PARAMETERS = (
    "backend",
    "executable_devices",
    "host_callbacks",
    "module_name",
    "cache_key",
)


@functools.cache
def cache_programs_of_this_process() -> bool:
    """Lets this process of a job, not only process 0, write JAX's persistent compilation cache
    for the programs that run on its own devices alone; whether it could (once a process).

    JAX writes the cache from process 0 only (so that the processes of a job do not all write
    one shared folder at once), and a CPU program's key holds its devices' ids: the programs of
    process 1's devices (its actors, its own replay) were compiled again at every start of the
    job, a resume included. A program over the devices of several processes has the same key in
    each of them and stays process 0's to write. The write is JAX's own (`compilation_cache.
    put_executable_and_time`), under JAX's conditions (no host callbacks, the minimum compile
    time), and never fails a compile: an error is a warning, as JAX's is. Where this JAX lacks
    the names it wraps, a one-line warning and JAX's behaviour."""
    try:
        from jax._src import compilation_cache, compiler
        from jax._src import config as jax_config

        original = compiler._compile_and_write_cache
        signature = inspect.signature(original)
        missing = set(_COMPILE_AND_WRITE_PARAMETERS) - set(signature.parameters)
        if missing:
            raise AttributeError(f"_compile_and_write_cache has no {sorted(missing)}")
        compilation_cache.put_executable_and_time  # noqa: B018 (looked up now: AttributeError)
        min_compile_s = jax_config.persistent_cache_min_compile_time_secs
    except (ImportError, AttributeError) as error:
        warnings.warn(
            f"jax {jax.__version__}: processes other than 0 write no compilation cache ({error})",
            stacklevel=2,
        )
        return False
    state = _private().distributed.global_state

    @functools.wraps(original)
    def compile_and_write_cache(*args, **kwargs):
        started = time.monotonic()
        executable = original(*args, **kwargs)  # compiles; writes where this is process 0
        compile_s = time.monotonic() - started
        if state.process_id == 0:
            return executable
        try:
            call = signature.bind(*args, **kwargs).arguments
            process = call["backend"].process_index()
            if (
                not call["host_callbacks"]
                and compile_s >= min_compile_s.value
                and all(device.process_index == process for device in call["executable_devices"])
            ):
                compilation_cache.put_executable_and_time(
                    call["cache_key"],
                    call["module_name"],
                    executable,
                    call["backend"],
                    int(compile_s),
                )
        except Exception as error:  # noqa: BLE001 (the cache is an optimisation: JAX warns too)
            warnings.warn(f"compilation cache not written: {error}", stacklevel=2)
        return executable

    compiler._compile_and_write_cache = compile_and_write_cache
    return True


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _next_minor(version: tuple[int, int]) -> tuple[int, int]:
    return version[0], version[1] + 1


def _version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
