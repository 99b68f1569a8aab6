"""Environments by name, `"<family>:<id>"`: the one place that parses such names and picks the
family's adapter. The families' modules are imported on use, so that a run on one never loads the
libraries of the others.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from configs.errors import UsageError
from configs.experiment import MAX_SEED
from envs.base import FAMILIES, BatchedEnv, EnvSpec

__all__ = [
    "env_seed",
    "env_spec",
    "jax_env_functions",
    "make_env",
    "parse_env_name",
    "require_family",
]


# Each family's library and the install extra that brings it.
_LIBRARIES = {
    "openspiel": ("pyspiel", "openspiel"),
    "pgx": ("pgx", "pgx"),
    "gymnax": ("gymnax", "gymnax"),
    "envpool": ("envpool", "envpool"),
}


def require_family(family: str) -> None:
    """UsageError, one line naming the extra to install, when `family`'s library is missing."""
    library, extra = _LIBRARIES[family]
    if importlib.util.find_spec(library) is None:
        raise UsageError(
            f"{family}: environments need the {library} package, which is not installed: "
            f"pip install 'podracer[{extra}]' (or '.[all]' from a checkout)"
        )


def parse_env_name(name: str) -> tuple[str, str]:
    """`(family, id)` of `"<family>:<id>"`; UsageError, one line, for anything else, or for a
    family whose library is not installed."""
    family, sep, env_id = name.partition(":")
    if not sep or family not in FAMILIES or not env_id:
        raise UsageError(
            f"bad environment name {name!r}: expected '<family>:<id>' with family one of "
            f"{', '.join(FAMILIES)} (e.g. openspiel:connect_four, pgx:tic_tac_toe, "
            "envpool:CartPole-v1, gymnax:Breakout-MinAtar)"
        )
    require_family(family)
    return family, env_id


def make_env(name: str, num_envs: int, seed: int = 0, **options: Any) -> BatchedEnv:
    """Builds `num_envs` environments named `"<family>:<id>"`; UsageError on a bad name or option.

    Families and their options:
      - `openspiel:<game string>` (e.g. `openspiel:go(board_size=9)`): `to_play_plane`,
        `max_episode_steps`.
      - `pgx:<env id>` (e.g. `pgx:connect_four`): no options.
      - `gymnax:<env id>` (e.g. `gymnax:CartPole-v1`, `gymnax:Breakout-MinAtar`), discrete
        actions only: `max_episode_steps` (overrides the env's time limit).
      - `envpool:<task id>` (e.g. `envpool:Pong-v5`): `batch_size` (async when < num_envs) and any
        `envpool.make` option (`episodic_life`, `reward_clip`, `repeat_action_probability`, ...).
    The families' modules are imported here, on use, so that a run on one never loads the others.
    """
    family, env_id = parse_env_name(name)
    if family == "openspiel":
        from envs.openspiel import OpenSpielEnv

        allowed = {"to_play_plane", "max_episode_steps"}
        _check_options(name, options, allowed)
        return OpenSpielEnv(env_id, num_envs, seed, **options)
    if family == "pgx":
        from envs.pgx_env import PgxEnv

        _check_options(name, options, set())
        return PgxEnv(env_id, num_envs, seed)
    if family == "gymnax":
        from envs.gymnax_env import GymnaxEnv

        _check_options(name, options, {"max_episode_steps"})
        return GymnaxEnv(env_id, num_envs, seed, **options)
    from envs.envpool_env import EnvPoolEnv

    return EnvPoolEnv(env_id, num_envs, seed, **options)


def jax_env_functions(name: str, num_envs: int, **options: Any) -> Any:
    """Pure, jittable `reset(key) -> (state, TimeStep)` and `step(state, actions [B]) -> (state,
    TimeStep)` for `num_envs` environments of a JAX-native family (pgx, gymnax), with same-step
    auto-reset: what the Anakin runtime steps inside its jit. UsageError for other families."""
    family, env_id = parse_env_name(name)
    if family == "pgx":
        from envs.pgx_env import pgx_functions

        _check_options(name, options, set())
        return pgx_functions(env_id, num_envs)
    if family == "gymnax":
        from envs.gymnax_env import gymnax_functions

        _check_options(name, options, {"max_episode_steps"})
        return gymnax_functions(env_id, num_envs, **options)
    raise UsageError(
        f"{name} is stepped on the host, not inside a jit: runtime=anakin needs a JAX-native "
        f"environment (pgx:..., gymnax:...); use runtime=sebulba"
    )


def env_seed(seed: int, index: int = 0) -> int:
    """The seed of actor thread `index`'s environments in a run of `seed` (0 to MAX_SEED):
    `seed * 1000 + index`, kept below 2**31 - 1, as envpool asserts of its seeds."""
    return (seed * 1000 + index) % MAX_SEED


def env_spec(name: str, seed: int = 0, **options: Any) -> EnvSpec:
    """The `EnvSpec` of `make_env(name, ...)`, from one environment opened and closed again."""
    env = make_env(name, 1, seed=seed, **options)
    try:
        return env.spec
    finally:
        env.close()


def _check_options(name: str, options: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise UsageError(f"unknown option(s) {', '.join(unknown)} for {name}; accepted: {accepted}")
