"""What each command needs installed beyond the search library, and one line when it is missing.

A plain `pip install podracer` is `search` alone (jax, chex, numpy, mctx). Training needs the
`train` extra, the arena the `train` and `openspiel` extras, `podracer pbt` the `train` and `pbt`
(Ray Tune) extras, and each environment family its own (`envs.registry.require_family`);
`.[all]` is everything.
"""

from __future__ import annotations

import importlib.util

from configs.errors import UsageError

__all__ = ["EXTRAS", "require"]

# Extra -> the top-level modules it installs that the commands import.
EXTRAS = {
    "train": ("flax", "optax", "orbax", "tensorboardX", "matplotlib", "tqdm"),
    "openspiel": ("pyspiel", "open_spiel"),
    "pbt": ("ray",),
}


def require(extra: str, what: str) -> None:
    """UsageError naming the extra to install when any of its modules is missing."""
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"{what} needs {', '.join(missing)}, not installed here: "
            f"pip install 'podracer[{extra}]' (or '.[all]' from a checkout)"
        )
