"""Evaluation of a policy on a one-player task (Atari, CartPole): episodes, statistics, intervals.

The statistics follow Agarwal et al. 2021 ("Deep RL at the edge of the statistical precipice"):
mean, median and the interquartile mean (IQM: the mean of the middle 50% of episodes, robust to a
few outlying episodes), each with a 95% percentile-bootstrap interval over episodes.

Protocols for Atari (the env is built with the protocol's options, named as envpool names them):
  STICKY_ACTIONS  Machado et al. 2018: the previous action repeats with probability 0.25,
                  no no-op starts, episodes cut at 108,000 frames (30 minutes).
  NOOP_STARTS     Mnih et al. 2015: up to 30 no-op actions at the start, no sticky actions,
                  episodes cut at 108,000 frames. The human and random reference scores in
                  `arena.atari_scores` were measured this way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from arena.atari_scores import human_normalized_score, is_atari57

__all__ = [
    "NOOP_STARTS",
    "STICKY_ACTIONS",
    "Estimate",
    "EvalProtocol",
    "EvalResult",
    "EvaluationStopped",
    "Summary",
    "evaluate_policy",
    "iqm",
    "summarize",
]


class EvaluationStopped(Exception):
    """`evaluate_policy`'s `should_stop` answered yes before its episodes ended."""


@dataclasses.dataclass(frozen=True)
class EvalProtocol:
    """How evaluation episodes are run on Atari."""

    name: str  # a short name recorded with the results
    sticky_action_prob: float  # probability that the previous action is repeated instead
    noop_max: int  # up to this many no-op actions start each episode (uniform in [1, noop_max])
    max_episode_frames: int  # episodes are cut at this many emulator frames
    frame_skip: int = 4  # emulator frames per agent step

    def __post_init__(self):
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.noop_max < 0:
            raise ValueError(f"noop_max must be >= 0, got {self.noop_max}")
        if self.frame_skip < 1 or self.max_episode_frames < self.frame_skip:
            raise ValueError("need frame_skip >= 1 and max_episode_frames >= frame_skip")

    def env_options(self) -> dict[str, Any]:
        """Keyword arguments for the env factory, named as envpool's Atari options."""
        return {
            "repeat_action_probability": self.sticky_action_prob,
            "noop_max": self.noop_max,
            "max_episode_steps": self.max_episode_frames // self.frame_skip,
        }


STICKY_ACTIONS = EvalProtocol("sticky_actions", 0.25, 0, 108_000)
NOOP_STARTS = EvalProtocol("noop_starts", 0.0, 30, 108_000)


class Estimate(NamedTuple):
    """A statistic with its 95% bootstrap interval."""

    value: float
    low: float
    high: float


class Summary(NamedTuple):
    """Mean, median and IQM of a set of episode returns (or normalised scores)."""

    mean: Estimate
    median: Estimate
    iqm: Estimate
    count: int


class EvalResult(NamedTuple):
    """What `evaluate_policy` returns."""

    returns: np.ndarray  # [N] undiscounted return of each episode
    lengths: np.ndarray  # [N] agent steps of each episode
    summary: Summary  # of the returns
    normalized: Summary | None  # of the human-normalised scores (Atari-57 games), else None
    protocol: str  # the protocol's name, or "env default"

    def as_dict(self) -> dict:
        out = {
            "episodes": int(self.returns.size),
            "protocol": self.protocol,
            "returns": _summary_dict(self.summary),
            "mean_length": float(np.mean(self.lengths)) if self.lengths.size else 0.0,
        }
        if self.normalized is not None:
            out["human_normalized"] = _summary_dict(self.normalized)
        return out


def _summary_dict(summary: Summary) -> dict:
    return {
        k: {"value": v.value, "ci95": [v.low, v.high]}
        for k, v in summary._asdict().items()
        if k != "count"
    }


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: drop the lowest and highest floor(n/4) values, average the rest."""
    values = np.sort(np.asarray(values, dtype=np.float64), axis=axis)
    n = values.shape[axis]
    cut = n // 4
    return np.take(values, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def summarize(
    values, num_bootstrap: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Summary:
    """Mean, median and IQM of `values` [N] with percentile-bootstrap intervals over the values."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)  # [N]
    if x.size == 0:
        raise ValueError("no values to summarise")
    rng = np.random.default_rng(seed)
    resampled = x[rng.integers(0, x.size, size=(num_bootstrap, x.size))]  # [R, N]
    tail = 100 * (1 - confidence) / 2
    out = []
    for stat, boot in (
        (np.mean(x), resampled.mean(axis=1)),
        (np.median(x), np.median(resampled, axis=1)),
        (iqm(x), iqm(resampled, axis=1)),
    ):
        low, high = np.percentile(boot, [tail, 100 - tail])
        out.append(Estimate(float(stat), float(low), float(high)))
    return Summary(*out, count=int(x.size))


def evaluate_policy(
    policy: Callable[[Any], np.ndarray],
    make_env: Callable[..., Any],
    num_episodes: int,
    *,
    num_envs: int = 8,
    seed: int = 0,
    protocol: EvalProtocol | None = None,
    game: str | None = None,
    max_steps: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> EvalResult:
    """Runs `num_episodes` whole episodes of `policy` and summarises their returns.

    Args:
      policy: maps the env's TimeStep (batched, [num_envs, ...]) to actions [num_envs].
      make_env: builds a synchronous BatchedEnv: `make_env(num_envs=..., seed=..., **options)`,
        the options being `protocol.env_options()` (none without a protocol), e.g.
        `functools.partial(envs.make_env, "Pong-v5")`.
      num_episodes: episodes to collect. Each env plays its share (they differ by at most one) so
        short episodes are not over-represented, as they would be by taking the first to finish.
      num_envs: environments stepped together.
      seed: seeds the envs.
      protocol: STICKY_ACTIONS, NOOP_STARTS or your own; None leaves the env's defaults.
      game: an Atari game name (`Pong-v5`, `pong`) to add human-normalised scores.
      max_steps: stop with an error after this many batched steps (a policy that never ends).
      should_stop: asked before every batched step; once it answers yes, the episodes are
        abandoned with `EvaluationStopped` (a run that stops while it evaluates: an Atari
        episode with a search per move can take minutes).
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    num_envs = min(num_envs, num_episodes)
    options = protocol.env_options() if protocol is not None else {}
    env = make_env(num_envs=num_envs, seed=seed, **options)
    quota = np.full(num_envs, num_episodes // num_envs)
    quota[: num_episodes % num_envs] += 1
    returns: list[list[float]] = [[] for _ in range(num_envs)]
    lengths: list[list[int]] = [[] for _ in range(num_envs)]
    try:
        step = env.reset(seed)
        steps = 0
        while any(len(returns[e]) < quota[e] for e in range(num_envs)):
            if max_steps is not None and steps >= max_steps:
                raise RuntimeError(
                    f"evaluation passed {max_steps} steps with "
                    f"{sum(map(len, returns))} of {num_episodes} episodes done"
                )
            if should_stop is not None and should_stop():
                raise EvaluationStopped(f"{sum(map(len, returns))} of {num_episodes} episodes done")
            step = env.step(np.asarray(policy(step)))
            steps += 1
            ended = np.asarray(getattr(step, "episode_end", step.done))
            env_ids = np.asarray(getattr(step, "env_id", np.arange(num_envs)))
            for row in np.flatnonzero(ended):
                e = int(env_ids[row])
                if len(returns[e]) < quota[e]:
                    returns[e].append(float(step.episode_return[row]))
                    lengths[e].append(int(step.episode_length[row]))
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    all_returns = np.array([r for per_env in returns for r in per_env])
    all_lengths = np.array([n for per_env in lengths for n in per_env])
    normalized = None
    if game is not None and is_atari57(game):
        normalized = summarize([human_normalized_score(game, r) for r in all_returns], seed=seed)
    return EvalResult(
        all_returns,
        all_lengths,
        summarize(all_returns, seed=seed),
        normalized,
        protocol.name if protocol is not None else "env default",
    )
