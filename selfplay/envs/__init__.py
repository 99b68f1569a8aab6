"""Environment adapters: OpenSpiel, pgx, envpool and gymnax behind one batched interface.

`make_env("openspiel:connect_four", num_envs=64, seed=0)` returns a `BatchedEnv`; see
`selfplay/envs/base.py` for the conventions (same-step auto-reset, points of view, layouts) and
`selfplay/envs/registry.py` for the names. The JAX-native families also offer pure, jittable
`reset`/`step` functions for a loop inside one jit: `pgx_functions` for games and
`gymnax_functions` for single-agent envs (`gymnax:CartPole-v1`, `gymnax:Breakout-MinAtar`, ...).
The family modules (`openspiel`, `pgx_env`, `envpool_env`, `gymnax_env`) are imported on first use
of one of their names, so that a run on one family never loads the libraries of the others.
"""

import importlib

from selfplay.envs.base import FAMILIES, BatchedEnv, EnvSpec, TimeStep
from selfplay.envs.registry import (
    env_seed,
    env_spec,
    jax_env_functions,
    make_env,
    parse_env_name,
)

_LAZY = {
    "OpenSpielEnv": "selfplay.envs.openspiel",
    "load_openspiel_game": "selfplay.envs.openspiel",
    "PgxEnv": "selfplay.envs.pgx_env",
    "PgxEnvState": "selfplay.envs.pgx_env",
    "PgxFunctions": "selfplay.envs.pgx_env",
    "ExactStep": "selfplay.envs.pgx_env",
    "pgx_exact_step": "selfplay.envs.pgx_env",
    "pgx_chance_rules": "selfplay.envs.pgx_env",
    "ChanceRules": "selfplay.envs.pgx_env",
    "ChanceStep": "selfplay.envs.pgx_env",
    "PgxAfterstate": "selfplay.envs.pgx_env",
    "pgx_replay": "selfplay.envs.pgx_env",
    "pgx_functions": "selfplay.envs.pgx_env",
    "EnvPoolEnv": "selfplay.envs.envpool_env",
    "GymnaxEnv": "selfplay.envs.gymnax_env",
    "GymnaxEnvState": "selfplay.envs.gymnax_env",
    "GymnaxFunctions": "selfplay.envs.gymnax_env",
    "gymnax_functions": "selfplay.envs.gymnax_env",
    "gymnax_spec": "selfplay.envs.gymnax_env",
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
    raise AttributeError(f"module 'selfplay.envs' has no attribute {name!r}")
