"""JAX's private modules, used where JAX has no public way, all in this one module.

A job of several processes needs the coordination service's client (its key-value store carries
the processes' per-update agreement, the peer watch's port and the collectives' addresses), and
to give the CPU collectives (gloo) the address the other hosts reach before JAX's CPU backend
starts. JAX offers neither publicly, so both reach into `jax._src`, whose names change between
versions. At first use this module checks that the installed JAX has every name it uses, and says
in one line what is needed where it has not (a `UsageError`: `podracer train` exits with it);
a JAX version it has not run with gets a one-line warning.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple

import jax

from configs.errors import UsageError

__all__ = [
    "KNOWN_GOOD",
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


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _next_minor(version: tuple[int, int]) -> tuple[int, int]:
    return version[0], version[1] + 1


def _version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
