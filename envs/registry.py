"""Environments by name, `"<family>:<id>"` or a user's own `"py:<module>:<callable>"`: the one
place that parses such names and picks the adapter. The families' modules are imported on use, so
that a run on one never loads the libraries of the others.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from configs.errors import UsageError
from configs.experiment import MAX_SEED, USER_ENV_PREFIX
from envs.base import FAMILIES, JAX_FAMILIES, BatchedEnv, EnvSpec

__all__ = [
    "env_family",
    "exact_step",
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
    "gymnasium": ("gymnasium", "gymnasium"),
    "jumanji": ("jumanji", "jumanji"),
    "brax": ("brax", "brax"),
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
    """`(family, id)` of `"<family>:<id>"`, or `("py", "<module>:<callable>")` of a user's own;
    UsageError, one line, for anything else, or for a family whose library is not installed."""
    family, sep, env_id = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or family not in (*FAMILIES, USER_ENV_PREFIX) or not env_id:
        raise UsageError(
            f"bad environment name {name!r}: expected '<family>:<id>' with family one of "
            f"{', '.join(FAMILIES)} (e.g. openspiel:connect_four, pgx:tic_tac_toe, "
            "envpool:CartPole-v1, gymnax:Breakout-MinAtar, gymnasium:CartPole-v1, "
            "jumanji:Snake-v1), or your own as 'py:<module>:<callable>'"
        )
    if family != USER_ENV_PREFIX:
        require_family(family)
    return family, env_id


def env_family(name: str, options: dict[str, Any] | None = None) -> str:
    """The family whose adapter runs `name`: its prefix, or for `py:` the API the user's
    environment speaks (importing and building it, once a process). UsageError as
    `parse_env_name`, or `envs.user.load_user_env` for a user's environment."""
    family, _ = parse_env_name(name)
    if family != USER_ENV_PREFIX:
        return family
    from envs.user import load_user_env

    return load_user_env(name, options).api


def _source(name: str, options: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """`(family, source, adapter options)`: a family's id and its options as given, or a user's
    environment (`envs.user.UserEnv`) with none left (its callable took them)."""
    family, env_id = parse_env_name(name)
    if family != USER_ENV_PREFIX:
        return family, env_id, options
    from envs.user import load_user_env

    user = load_user_env(name, options)
    return user.api, user, {}


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
      - `gymnasium:<id>` (any registered id, e.g. `gymnasium:CartPole-v1`,
        `gymnasium:ALE/Pong-v5`): `max_episode_steps`, and for Atari ids envpool's preprocessing
        options (`episodic_life`, `reward_clip`, `repeat_action_probability`, ...).
      - `jumanji:<id>` (e.g. `jumanji:Snake-v1`): `max_episode_steps`.
      - `brax:<env>` (e.g. `brax:halfcheetah`): `max_episode_steps` (default 1,000).
      - `py:<module>:<callable>`: a user's own environment (`envs.user`), options passed to the
        callable as keyword arguments.
    The families' modules are imported here, on use, so that a run on one never loads the others.
    """
    family, env_id, options = _source(name, options)
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
    if family == "jumanji":
        from envs.jumanji_env import JumanjiEnv

        _check_options(name, options, {"max_episode_steps"})
        return JumanjiEnv(env_id, num_envs, seed, **options)
    if family == "brax":
        from envs.brax_env import BraxEnv

        _check_options(name, options, {"max_episode_steps"})
        return BraxEnv(env_id, num_envs, seed, **options)
    if family == "gymnasium":
        from envs.gymnasium_env import GymnasiumEnv

        return GymnasiumEnv(env_id, num_envs, seed, **options)
    from envs.envpool_env import EnvPoolEnv

    return EnvPoolEnv(env_id, num_envs, seed, **options)


def jax_env_functions(name: str, num_envs: int, **options: Any) -> Any:
    """Pure, jittable `reset(key) -> (state, TimeStep)` and `step(state, actions [B]) -> (state,
    TimeStep)` for `num_envs` environments of a JAX-native family (pgx, gymnax, jumanji, brax, or a
    user's environment in one of their APIs), with same-step auto-reset: what the Anakin runtime
    steps inside its jit. UsageError for other families."""
    family, env_id, options = _source(name, options)
    if family == "pgx":
        from envs.pgx_env import pgx_functions

        _check_options(name, options, set())
        return pgx_functions(env_id, num_envs)
    if family == "gymnax":
        from envs.gymnax_env import gymnax_functions

        _check_options(name, options, {"max_episode_steps"})
        return gymnax_functions(env_id, num_envs, **options)
    if family == "jumanji":
        from envs.jumanji_env import jumanji_functions

        _check_options(name, options, {"max_episode_steps"})
        return jumanji_functions(env_id, num_envs, **options)
    if family == "brax":
        from envs.brax_env import brax_functions

        _check_options(name, options, {"max_episode_steps"})
        return brax_functions(env_id, num_envs, **options)
    what = "a Gymnasium environment, stepped" if not isinstance(env_id, str) else "stepped"
    raise UsageError(
        f"{name} is {what} on the host, not inside a jit: runtime=anakin needs an environment "
        f"JAX can trace ({', '.join(f'{f}:...' for f in JAX_FAMILIES)}, or py: in their APIs); "
        "use runtime=sebulba"
    )


def exact_step(name: str, **options: Any) -> Any:
    """The real rules of a deterministic game as AlphaZero's model: `step(state, action [B]) ->
    envs.pgx_env.ExactStep` over the batched states `make_env(name, ...)` keeps (pgx's games,
    or a user's game in pgx's API). ValueError for a game with chance; UsageError for others."""
    family, source, options = _source(name, options)
    if family != "pgx":
        raise UsageError(
            f"{name} has no exact model: AlphaZero searches with the rules of a pgx game "
            "(pgx:..., or py: in pgx's API)"
        )
    from envs.pgx_env import pgx_exact_step

    _check_options(name, options, set())
    return pgx_exact_step(source)


def env_seed(seed: int, index: int = 0) -> int:
    """The seed of actor thread `index`'s environments in a run of `seed` (0 to MAX_SEED):
    `seed * 1000 + index`, kept below 2**31 - 1, as envpool asserts of its seeds."""
    return (seed * 1000 + index) % MAX_SEED


def env_spec(name: str, seed: int = 0, **options: Any) -> EnvSpec:
    """The `EnvSpec` of `make_env(name, ...)`, from one environment opened and closed again."""
    _, source, _ = _source(name, options)
    # A user's vector env steps its own number of envs (the batch must match it).
    num_envs = source.env.num_envs if getattr(source, "vectorised", False) else 1
    env = make_env(name, num_envs, seed=seed, **options)
    try:
        return env.spec
    finally:
        env.close()


def _check_options(name: str, options: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise UsageError(f"unknown option(s) {', '.join(unknown)} for {name}; accepted: {accepted}")
