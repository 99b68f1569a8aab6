"""The environment layer: one batched interface over every family, and your own environment.

Names: `"<family>:<id>"` for the families (`openspiel:connect_four`, `pgx:tic_tac_toe`,
`envpool:Pong-v5`, `gymnax:Breakout-MinAtar`, `gymnasium:CartPole-v1`, `jumanji:Snake-v1`,
`brax:halfcheetah`), or
`"py:<module>:<callable>"` for an environment of yours in one of the ecosystem's APIs (pgx,
jumanji, gymnax, Gymnasium), recognised by its methods (`envs.user`): nothing of ours to
subclass. `make_env(name, num_envs, seed)` returns a `BatchedEnv` (`envs/base.py` holds the
conventions: batched, same-step auto-reset, points of view, channels-last images); the JAX
families (and `py:` in their APIs) also give pure, jittable `reset(key)` / `step(state,
actions)` functions (`jax_env_functions`) for a loop inside one jit (Anakin), and a
deterministic game in pgx's API its rules as AlphaZero's model (`exact_step`). The family
modules are imported on first use of one of their names, so that a run on one family never
loads the libraries of the others. This package imports no runtime: `selfplay` steps it.
"""

import importlib

from envs.base import FAMILIES, JAX_FAMILIES, BatchedEnv, EnvSpec, TimeStep
from envs.registry import (
    env_family,
    env_seed,
    env_spec,
    exact_step,
    jax_env_functions,
    make_env,
    parse_env_name,
)
from envs.user import UserEnv, load_user_env

# The families' adapters (their classes and pure functions), imported on first use: a run on one
# family never loads the others' libraries. Each is documented in its module (envs.pgx_env, ...).
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
    "GymnasiumEnv": "envs.gymnasium_env",
    "JumanjiEnv": "envs.jumanji_env",
    "JumanjiEnvState": "envs.jumanji_env",
    "JumanjiFunctions": "envs.jumanji_env",
    "jumanji_functions": "envs.jumanji_env",
    "jumanji_spec": "envs.jumanji_env",
    "BraxEnv": "envs.brax_env",
    "BraxEnvState": "envs.brax_env",
    "BraxFunctions": "envs.brax_env",
    "brax_functions": "envs.brax_env",
    "brax_spec": "envs.brax_env",
}

__all__ = [
    "env_family",
    "env_seed",
    "exact_step",
    "FAMILIES",
    "JAX_FAMILIES",
    "BatchedEnv",
    "EnvSpec",
    "TimeStep",
    "env_spec",
    "jax_env_functions",
    "make_env",
    "parse_env_name",
    "UserEnv",
    "load_user_env",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
