"""Environment adapters: OpenSpiel, pgx, envpool and gymnax behind one batched interface.

`make_env("openspiel:connect_four", num_envs=64, seed=0)` returns a `BatchedEnv`; see
`envs/base.py` for the conventions (same-step auto-reset, points of view, layouts) and
`envs/registry.py` for the names. The JAX-native families also offer pure, jittable
`reset`/`step` functions for a loop inside one jit: `pgx_functions` for games and
`gymnax_functions` for single-agent envs (`gymnax:CartPole-v1`, `gymnax:Breakout-MinAtar`, ...).
The family modules (`openspiel`, `pgx_env`, `envpool_env`, `gymnax_env`) are imported on first use
of one of their names, so that a run on one family never loads the libraries of the others.
"""

import importlib

from envs.base import FAMILIES, BatchedEnv, EnvSpec, TimeStep
from envs.registry import (
    env_seed,
    env_spec,
    jax_env_functions,
    make_env,
    parse_env_name,
)

_LAZY = {
    "OpenSpielEnv": "envs.openspiel",
    "load_openspiel_game": "envs.openspiel",
    "PgxEnv": "envs.pgx_env",
    "PgxEnvState": "envs.pgx_env",
    "PgxFunctions": "envs.pgx_env",
    "ExactStep": "envs.pgx_env",
    "pgx_exact_step": "envs.pgx_env",
    "pgx_chance_rules": "envs.pgx_env",
    "ChanceRules": "envs.pgx_env",
    "ChanceStep": "envs.pgx_env",
    "PgxAfterstate": "envs.pgx_env",
    "pgx_replay": "envs.pgx_env",
    "pgx_functions": "envs.pgx_env",
    "EnvPoolEnv": "envs.envpool_env",
    "GymnaxEnv": "envs.gymnax_env",
    "GymnaxEnvState": "envs.gymnax_env",
    "GymnaxFunctions": "envs.gymnax_env",
    "gymnax_functions": "envs.gymnax_env",
    "gymnax_spec": "envs.gymnax_env",
}

__all__ = [
    "env_seed",
    "FAMILIES",
    "BatchedEnv",
    "EnvSpec",
    "TimeStep",
    "env_spec",
    "jax_env_functions",
    "make_env",
    "parse_env_name",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
