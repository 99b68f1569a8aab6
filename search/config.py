"""`SearchConfig`: every setting of a search in one frozen, validated object."""

from __future__ import annotations

import dataclasses
import math

__all__ = ["ALGORITHMS", "DECISION_SELECTIONS", "ENGINES", "QTRANSFORMS", "SearchConfig"]

ALGORITHMS = ("muzero", "gumbel_muzero", "stochastic_muzero", "sampled_muzero")
ENGINES = ("podracer", "mctx")
DECISION_SELECTIONS = ("puct", "gumbel")
QTRANSFORMS = ("by_parent_and_siblings", "by_min_max", "completed_by_mix_value")
_DEFAULT_QTRANSFORM = {
    "muzero": "by_parent_and_siblings",
    "gumbel_muzero": "completed_by_mix_value",
    "stochastic_muzero": "by_parent_and_siblings",
    "sampled_muzero": "by_parent_and_siblings",
}


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Settings of one batched Monte-Carlo tree search (see `search.run`)."""

    # "muzero": PUCT at every node (MuZero/AlphaZero); "gumbel_muzero": Gumbel MuZero;
    # "stochastic_muzero": decision nodes (PUCT, or Gumbel's: `decision_selection`) and chance
    # nodes between them (Stochastic MuZero; AlphaZero with chance outcomes), for a model given
    # as `search.StochasticModel`; "sampled_muzero": PUCT over `num_samples` actions each node
    # draws from the caller's `sample_fn` (Sampled MuZero: continuous or very large spaces).
    algorithm: str = "muzero"
    # Simulations per search; each adds (at most) one node to the tree.
    num_simulations: int = 32
    # K, the actions each node of a "sampled_muzero" search draws (its children); the others
    # ignore it. The paper's Pendulum and MuJoCo runs take 20 or fewer.
    num_samples: int = 16
    # Deepest a simulation may go, in edges from the root; None means num_simulations.
    max_depth: int | None = None
    # PUCT constant c1 (MuZero paper, Appendix B).
    pb_c_init: float = 1.25
    # PUCT constant c2.
    pb_c_base: float = 19652.0
    # Concentration of the Dirichlet noise mixed into the root prior (PUCT's selection only).
    dirichlet_alpha: float = 0.3
    # Share of Dirichlet noise in the root prior; 0 turns exploration noise off (PUCT only).
    dirichlet_fraction: float = 0.25
    # Acting temperature over visit counts (PUCT only); 0 is greedy. A number, or a traced
    # scalar array (each member's own where a population trains as one program), which
    # `select_action` takes as it is and the caller checks.
    temperature: float = 1.0
    # Selection at the decision nodes of "stochastic_muzero" (the others ignore it; for a
    # deterministic model Gumbel's is algorithm "gumbel_muzero"): "puct" (the paper's and
    # mctx's), or "gumbel": Gumbel MuZero's (sequential halving among sampled actions at the
    # root, its deterministic selection below, the improved policy softmax(logits + completed Q)
    # as the policy target and the action). With few simulations PUCT's visits follow the
    # prior, so its target cannot correct a wrong prior; Gumbel's improves on it at any budget.
    decision_selection: str = "puct"
    # Actions sampled at the root by Gumbel's sequential halving (Gumbel's selection only).
    max_num_considered_actions: int = 16
    # Scale of the Gumbel noise; 0 for deterministic evaluation (Gumbel's selection only).
    gumbel_scale: float = 1.0
    # How Q-values are normalised for selection; None picks the algorithm's default.
    qtransform: str | None = None
    # by_min_max: the lowest value the model can produce (-1 for a two-player game's outcome).
    qtransform_min_value: float = -1.0
    # by_min_max: the highest value the model can produce.
    qtransform_max_value: float = 1.0
    # completed_by_mix_value: scale of the completed Q-values (Gumbel paper's c_scale).
    qtransform_value_scale: float = 0.1
    # completed_by_mix_value: offset added to the largest visit count (Gumbel paper's c_visit).
    qtransform_maxvisit_init: float = 50.0
    # Who runs the simulations: "podracer" (search.engine: the same tree as mctx's from the same
    # keys, in fewer operations per simulation) or "mctx" (mctx's own loop).
    engine: str = "podracer"
    # Levels the "podracer" engine descends between two checks of whether any row still
    # descends. On a GPU each check copies a flag to the host and waits for it (XLA runs a loop
    # whose stop depends on data that way), leaving the card idle; more levels per check mean
    # fewer waits, at the cost of computing up to that many levels more for rows that stopped
    # (their results are unchanged). 0: no check at all: every simulation descends `max_depth`
    # levels (at most the tree's size) in a loop with a known trip count, rows that stopped
    # masked, and backs up in a loop of known trip count too, so the card never waits on the
    # host; set `max_depth` near the depth a search reaches. The tree is the same for any value.
    descent_levels_per_check: int = 1

    def __post_init__(self):
        _check(self.algorithm in ALGORITHMS, self, "algorithm", f"must be one of {ALGORITHMS}")
        _check(self.engine in ENGINES, self, "engine", f"must be one of {ENGINES}")
        _check_int(self, "num_simulations", minimum=1)
        _check_int(self, "num_samples", minimum=1)
        _check_int(self, "descent_levels_per_check", minimum=0)
        if self.max_depth is not None:
            _check_int(self, "max_depth", minimum=1)
        _check(
            self.decision_selection in DECISION_SELECTIONS,
            self,
            "decision_selection",
            f"must be one of {DECISION_SELECTIONS}",
        )
        _check_int(self, "max_num_considered_actions", minimum=1)
        for name in (
            "pb_c_init",
            "pb_c_base",
            "dirichlet_alpha",
            "qtransform_value_scale",
            "qtransform_maxvisit_init",
        ):
            _check_number(self, name, minimum=0.0, strict=name in ("pb_c_base", "dirichlet_alpha"))
        _check_number(self, "dirichlet_fraction", minimum=0.0)
        _check(self.dirichlet_fraction <= 1.0, self, "dirichlet_fraction", "must be in [0, 1]")
        if not _is_traced(self.temperature):
            _check_number(self, "temperature", minimum=0.0)
        _check_number(self, "gumbel_scale", minimum=0.0)
        _check_number(self, "qtransform_min_value")
        _check_number(self, "qtransform_max_value")
        _check(
            self.qtransform_max_value > self.qtransform_min_value,
            self,
            "qtransform_max_value",
            "must be greater than qtransform_min_value",
        )
        _check(
            self.qtransform is None or self.qtransform in QTRANSFORMS,
            self,
            "qtransform",
            f"must be None or one of {QTRANSFORMS}",
        )
        # Gumbel MuZero's policy improvement (and its improved-policy target) is defined over
        # completed Q-values; min-max or parent-and-siblings scores would silently change it.
        _check(
            not self.uses_gumbel or self.qtransform in (None, "completed_by_mix_value"),
            self,
            "qtransform",
            "must be None or 'completed_by_mix_value' with algorithm 'gumbel_muzero' or "
            "decision_selection 'gumbel' (Gumbel's selection)",
        )

    @property
    def uses_gumbel(self) -> bool:
        """Whether the search selects, targets and acts as Gumbel MuZero does: its `action` is
        its own choice, its `action_weights` the improved policy (not visit counts)."""
        if self.algorithm == "stochastic_muzero":
            return self.decision_selection == "gumbel"
        return self.algorithm == "gumbel_muzero"

    @property
    def qtransform_name(self) -> str:
        """The q-transform in use: the configured one or the algorithm's default."""
        if self.qtransform:
            return self.qtransform
        return "completed_by_mix_value" if self.uses_gumbel else _DEFAULT_QTRANSFORM[self.algorithm]

    def replace(self, **changes) -> SearchConfig:
        """A new config with `changes` applied (and validated)."""
        return dataclasses.replace(self, **changes)


def _check(ok: bool, config: SearchConfig, field: str, message: str) -> None:
    if not ok:
        raise ValueError(f"SearchConfig.{field} {message}, got {getattr(config, field)!r}")


def _is_traced(value) -> bool:
    """A JAX array or tracer (anything with a dtype), not a Python number."""
    return hasattr(value, "dtype") and not isinstance(value, int | float)


def _check_int(config: SearchConfig, field: str, minimum: int) -> None:
    value = getattr(config, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"SearchConfig.{field} must be an integer >= {minimum}, got {value!r}")


def _check_number(
    config: SearchConfig, field: str, minimum: float | None = None, strict: bool = False
) -> None:
    value = getattr(config, field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"SearchConfig.{field} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        bound = ">" if strict else ">="
        raise ValueError(f"SearchConfig.{field} must be {bound} {minimum}, got {value!r}")
