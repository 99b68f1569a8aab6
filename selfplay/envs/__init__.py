"""Environment adapters: OpenSpiel, pgx and envpool behind one batched interface.

`make_env("openspiel:connect_four", num_envs=64, seed=0)` returns a `BatchedEnv`; see
`selfplay/envs/base.py` for the conventions (same-step auto-reset, points of view, layouts).
The family modules (`openspiel`, `pgx_env`, `envpool_env`) are imported on use.
"""

from selfplay.envs.base import FAMILIES, BatchedEnv, EnvSpec, TimeStep, make_env

__all__ = ["FAMILIES", "BatchedEnv", "EnvSpec", "TimeStep", "make_env"]
