"""Your own environment by import path: `py:<module>:<callable>`, in the ecosystem's own API.

`env.name=py:my_envs:make` imports `my_envs` (from the working folder or `PYTHONPATH`) and calls
`make(**env.options)`. What it returns is recognised by its methods, never by a class of ours:

- **pgx**: `init(key)`, `step(state, action[, key])`, `num_players`; its state has
  `current_player`, `legal_action_mask`, `rewards`, `terminated`, `truncated`, `observation`.
  Both runtimes; MuZero, V-trace, and AlphaZero with its own `step` as the exact model.
- **jumanji**: `reset(key) -> (state, TimeStep)`, `step(state, action)`, `action_spec`,
  `observation_spec`. Both runtimes; MuZero, V-trace.
- **gymnax**: `reset(key, params)`, `step(key, state, action, params)`, `default_params`,
  `action_space`, `observation_space`; or an `(env, params)` pair. Both runtimes; MuZero, V-trace.
- **Gymnasium**: `reset(seed=...)`, `step(action)`, `action_space`, `observation_space` (a
  `gymnasium.Env`, or a vector env with `num_envs`). Stepped on the host: Sebulba; MuZero, V-trace.

The object is built once a process for each name and options (`load_user_env`), so that the
jitted functions built from it compile once; a Gymnasium environment is built once more for each
copy a batch needs (`UserEnv.make`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from configs.caching import built_once
from configs.errors import UsageError

__all__ = ["APIS", "UserEnv", "load_user_env", "recognise_api", "same_observations", "traced"]

# The ecosystem APIs a user's environment may speak, by what their objects have.
APIS = ("pgx", "jumanji", "gymnax", "gymnasium")
_METHODS = {
    "pgx": ("init", "step", "num_players"),
    "jumanji": ("reset", "step", "action_spec", "observation_spec"),
    "gymnax": ("reset", "step", "default_params", "action_space", "observation_space"),
    "gymnasium": ("reset", "step", "action_space", "observation_space"),
}


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: the key of jit's caches
class UserEnv:
    """A user's environment, recognised: which API it speaks and the object itself."""

    name: str  # "py:<module>:<callable>", as given
    api: str  # one of APIS
    env: Any  # the object the callable returned (of an (env, params) pair, the env)
    params: Any  # gymnax's params: the pair's second, or `env.default_params`; None otherwise
    make: Callable[[], Any]  # calls the callable again with the same options (Gymnasium copies)

    @property
    def vectorised(self) -> bool:
        """A Gymnasium vector env (it steps `num_envs` copies itself)."""
        return self.api == "gymnasium" and hasattr(self.env, "num_envs")


def load_user_env(name: str, options: dict[str, Any] | None = None) -> UserEnv:
    """The environment `py:<module>:<callable>` returns for `options`, recognised; UsageError,
    one line, for a module or callable that does not exist, a callable that raises (its message
    kept) or an object that speaks none of the APIs (naming what it lacks)."""
    try:
        key = json.dumps(options or {}, sort_keys=True)
    except TypeError as e:
        raise UsageError(f"env.options for {name} must be JSON values: {e}") from None
    return _load(name, key)


@built_once()
def _load(name: str, options_key: str) -> UserEnv:
    factory = _import_callable(name)
    options = json.loads(options_key)

    def make() -> Any:
        try:
            return factory(**options)
        except UsageError:
            raise
        except Exception as e:  # the user's own error, kept in one line
            message = " ".join(str(e).split()) or "(no message)"
            raise UsageError(f"{name} raised {type(e).__name__}: {message}") from None

    made = make()
    params = None
    if isinstance(made, tuple) and len(made) == 2 and _lacks(made[0], "gymnax") == []:
        made, params = made
    api = recognise_api(made, name)
    if api == "gymnax" and params is None:
        params = made.default_params
    return UserEnv(name=name, api=api, env=made, params=params, make=make)


def _import_callable(name: str) -> Callable[..., Any]:
    _, _, path = name.partition(":")
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(
            f"bad environment name {name!r}: expected 'py:<module>:<callable>', "
            "e.g. py:my_envs:make"
        )
    # The working folder first, as `python -m` would: a user's module beside their config.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise UsageError(
                f"{name}: no module named {module_name!r} in the working folder or on "
                "PYTHONPATH (run from the folder that holds it, or add that folder to PYTHONPATH)"
            ) from None
        raise UsageError(f"{name}: importing {module_name} failed: {e}") from None
    except Exception as e:
        message = " ".join(str(e).split())
        raise UsageError(
            f"{name}: importing {module_name} raised {type(e).__name__}: {message}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UsageError(f"{name}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise UsageError(f"{name}: {attribute!r} is a {type(target).__name__}, not a callable")
    return target


def _lacks(obj: Any, api: str) -> list[str]:
    return [method for method in _METHODS[api] if not hasattr(obj, method)]


def recognise_api(obj: Any, name: str = "the environment") -> str:
    """Which of `APIS` `obj` speaks, by its methods (pgx, jumanji and gymnax before Gymnasium,
    whose methods are a subset of gymnax's); UsageError naming what each API lacks otherwise."""
    for api in APIS:
        if api == "gymnasium" and hasattr(obj, "default_params"):
            continue  # a gymnax env missing something, not a Gymnasium one
        if not _lacks(obj, api):
            return api
    missing = "; ".join(f"{api} lacks {', '.join(_lacks(obj, api))}" for api in APIS)
    raise UsageError(
        f"{name} returned a {type(obj).__name__}, which speaks none of the APIs pgx, jumanji, "
        f"gymnax, Gymnasium: {missing}"
    )


def traced(name: str, trace: Callable[[], Any], what: str = "step") -> Any:
    """`trace()` (a `jax.eval_shape` of a user's `what`, "step" or "reset": shapes only, no
    compute), or a UsageError, one line, where JAX cannot trace it (Python control flow or NumPy
    on traced values): the adapters of the JAX APIs step inside `jit` on both runtimes."""
    import jax  # the JAX adapters': this module loads without JAX

    untraceable = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerArrayConversionError,
        jax.errors.TracerBoolConversionError,
        jax.errors.TracerIntegerConversionError,
    )
    try:
        return trace()
    except untraceable as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(
            f"{name}: its {what} cannot be traced by JAX ({type(e).__name__}: {first}): write it "
            "in JAX, or give it as a Gymnasium environment and use runtime=sebulba"
        ) from None


def same_observations(name: str, at_reset: Any, at_step: Any) -> None:
    """UsageError, one line, unless the observations `reset` and `step` give (shape-dtype
    structs, as `jax.eval_shape` returns them) have the same structure, shapes and dtypes: a
    batch of environments keeps one array for them."""
    import jax

    def described(tree: Any) -> str:
        return str(jax.tree.map(lambda x: f"{x.dtype}{list(x.shape)}", tree))

    if jax.tree.structure(at_reset) != jax.tree.structure(at_step) or any(
        a.shape != b.shape or a.dtype != b.dtype
        for a, b in zip(jax.tree.leaves(at_reset), jax.tree.leaves(at_step), strict=True)
    ):
        raise UsageError(
            f"{name}: its observation changes between steps: {described(at_reset)} after reset, "
            f"{described(at_step)} after step; every step must give the same shapes and dtypes"
        )
