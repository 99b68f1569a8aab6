"""Strength over time: a training run's newest parameters, greedy, against fixed opponents.

`RunEvaluator(config, spec)` is what `podracer train` hands the run loop (a `selfplay.run.
Evaluator`): every `evaluation.every_s` seconds the loop gives it the newest parameters, and its
thread plays them, greedy (no root noise, the most visited move), with the arena's own parts:

- two-player board games: `evaluation.games` games against each of `evaluation.opponents`, half
  with each colour, through `arena.matches.play_games` with the agent as a batched
  `CheckpointPlayer` (all games waiting for it searched in one call). Logged per opponent:
  `eval/<player>/score` (1 a win, 0.5 a draw), `/win`, `/draw`, `/loss` (rates) and `/elo`, the
  agent's Elo minus the opponent's implied by the score (with one draw added as a prior, so a
  clean sweep gives a finite number: +529 for 10 of 10, -529 for 0 of 10).
- one-player environments: `evaluation.games` episodes of the greedy agent
  (`arena.evaluate.evaluate_policy`): `eval/return` (mean), `eval/return_iqm`, and on Atari
  `eval/human_normalized`.
- always `eval/seconds`, the evaluation's wall time (it shares the run's cores).

The games use the same seeds at every evaluation, so the curve moves with the parameters, not
with the dice. Default opponents: `random` and an OpenSpiel MCTS (`mcts:N`, random rollouts)
sized to the game (`DEFAULT_MCTS`); backgammon's are `random` and `pubeval`.
"""

from __future__ import annotations

import functools
import itertools
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import pyspiel

from arena.atari_scores import is_atari57
from arena.ckpt_player import PGX_TO_OPENSPIEL, CheckpointPlayer, LoadedRun
from arena.evaluate import EvaluationStopped, evaluate_policy
from arena.matches import game_seed, play_games, player_seed
from arena.players import check_distinct, make_player, parse_spec, split_specs
from configs import ExperimentConfig, UsageError
from configs.experiment import USER_ENV_PREFIX
from envs import EnvSpec, env_spec, make_env
from envs.base import ATARI_OPTIONS
from selfplay.agent import make_agent
from selfplay.evaluation import greedy_config
from selfplay.lifetime import StopSignal

__all__ = [
    "DEFAULT_MCTS",
    "RunEvaluator",
    "default_opponents",
    "elo_difference",
    "one_player_protocol",
    "preset_protocols",
]

# Simulations of the default MCTS opponent per OpenSpiel game (short name); others get 100.
DEFAULT_MCTS = {"tic_tac_toe": 50, "connect_four": 200, "go": 100}


def default_opponents(game: pyspiel.Game) -> tuple[str, ...]:
    """`random` and an OpenSpiel MCTS sized to the game; backgammon: `random` and `pubeval`
    (its classic yardstick, and far quicker than rollouts to a game's end)."""
    if game.get_type().short_name == "backgammon":
        return ("random", "pubeval")
    simulations = DEFAULT_MCTS.get(game.get_type().short_name, 100)
    return ("random", f"mcts:{simulations}")


def elo_difference(wins: int, draws: int, games: int) -> float:
    """The Elo difference implied by a score, with one draw added as a prior."""
    score = (wins + 0.5 * draws + 0.5) / (games + 1)
    return float(400.0 * np.log10(score / (1.0 - score)))


def _board_game(config: ExperimentConfig) -> pyspiel.Game:
    family, _, name = config.env.name.partition(":")
    if family == USER_ENV_PREFIX:  # a two-player game of the user's, in pgx's API
        from envs.user_openspiel import openspiel_game

        return openspiel_game(config.env.name, config.env.options)
    if family == "pgx":
        if name not in PGX_TO_OPENSPIEL:
            raise UsageError(
                f"evaluation: the arena cannot referee pgx:{name} (it plays "
                f"{', '.join(PGX_TO_OPENSPIEL)}); set evaluation.every_s=0"
            )
        name = PGX_TO_OPENSPIEL[name]
    return pyspiel.load_game(name)


def one_player_protocol(config: ExperimentConfig, spec: EnvSpec) -> str:
    """What a one-player run's returns measure, in words a peer's figure can be set beside: how
    the evaluator acts and on which episodes, when it plays, what its frames count, and what the
    self-play return is."""
    evaluation, search = config.evaluation, config.search
    simulations = evaluation.num_simulations or search.num_simulations
    if config.mode == "vtrace":
        acting = "greedy: the policy's most probable action, no search"
        training = "the sampled policy"
    elif search.algorithm == "gumbel_muzero":
        acting = f"greedy: the search's choice without Gumbel noise, {simulations} simulations"
        training = f"Gumbel noise (scale {search.gumbel_scale:g})"
    else:
        acting = (
            f"greedy: the most visited action of a search without root noise, {simulations} "
            f"simulations"
        )
        training = (
            f"root noise (fraction {search.dirichlet_fraction:g}), actions sampled at "
            f"temperature {search.temperature:g}"
        )
    limit = (
        f"cut at the time limit of {spec.max_episode_steps} steps (a truncation)"
        if spec.max_episode_steps
        else "with no time limit"
    )
    when = []
    if evaluation.every_s > 0:
        when.append(f"every {evaluation.every_s:g} s (the newest parameters)")
    if evaluation.at_frames:
        marks = ", ".join(f"{m:,}" for m in evaluation.at_frames)
        when.append(f"at frames {marks} (the parameters of the first update at or past each)")
    atari = spec.family == "envpool" and is_atari57(spec.env_id)
    options = {**ATARI_OPTIONS, **config.env.options}  # envpool's defaults where not given
    skip = options["frame_skip"] if atari else 1
    frames = (
        f"agent steps over all environments, each {skip} emulator frames"
        if skip > 1
        else "environment steps over all environments"
    )
    game = ""
    if atari:
        game = (
            f" (the game score, unclipped, of whole games; up to {options['noop_max']} no-ops at "
            f"the start, sticky actions with probability {options['repeat_action_probability']:g})"
        )
    return (
        f"{acting}; {evaluation.games} whole episodes of {spec.name}{game}, {limit}, seeded "
        f"with the run's seed (the same episodes every time); {' and '.join(when) or 'never'}. "
        f"Frames: {frames}. The self-play return: the training episodes ({training}) that ended "
        f"in each metrics window."
    )


def preset_protocols() -> list[str]:
    """One Markdown line per one-player preset: its name and `one_player_protocol` (the docs'
    results page lists them; `python -m arena.progress` prints them)."""
    import configs.presets

    lines = []
    for name in configs.presets.names():
        config = configs.presets.get(name)
        if config.name != name:
            continue  # an earlier name of a preset listed under its own
        try:
            spec = env_spec(config.env.name, **config.env.options)
        except ModuleNotFoundError:  # an extra this install lacks: its envs are not listed
            continue
        if spec.num_players == 1:
            lines.append(f"- `{name}`: {one_player_protocol(config, spec)}")
    return lines


class RunEvaluator:
    """Evaluates a run's parameters (see the module docstring); built before the run starts, so
    that a bad opponent spec is refused with one line before anything is trained."""

    def __init__(self, config: ExperimentConfig, spec: EnvSpec):
        evaluation = config.evaluation
        self.every_s = evaluation.every_s
        self.config, self.spec = config, spec
        self.seed = config.seed
        self.simulations = evaluation.num_simulations or None
        self.two_player = spec.num_players == 2
        # Greedy: no root noise, no random moves, the most visited move.
        self.agent = make_agent(greedy_config(config, self.simulations), spec)
        # What the figures measure (written to the run directory's evaluation.txt).
        self.protocol = "" if self.two_player else one_player_protocol(config, spec)
        self.games = (
            evaluation.games + evaluation.games % 2 if self.two_player else evaluation.games
        )
        if self.two_player:
            self.game = _board_game(config)
            opponents = evaluation.opponents or default_opponents(self.game)
            self.opponents = tuple(split_specs(",".join(opponents)))
            check_distinct(list(self.opponents), "evaluation.opponents: each opponent")
            if any(parse_spec(opponent).name == "human" for opponent in self.opponents):
                raise UsageError(
                    "evaluation.opponents: the in-run evaluation plays unattended, in a thread of "
                    "the run, so a human cannot be one; play the run's checkpoints with "
                    "podracer arena --players ckpt:RUN_DIR,human"
                )
            for opponent in self.opponents:  # a bad spec is named now, not in the run's thread
                make_player(opponent, self.game, 0)
        elif evaluation.opponents:
            raise UsageError(
                f"evaluation.opponents: {spec.name} is a one-player environment; its evaluation "
                f"plays episodes of the greedy agent (remove the opponents)"
            )
        elif self.agent.uses_env_state:
            raise UsageError(
                f"evaluation: episodes of {spec.name} with an exact-model search are not "
                f"supported; set evaluation.every_s=0"
            )

    def evaluate(self, params: Any, step: int, stop: StopSignal) -> dict[str, Any]:
        """The figures of `params` (and `eval/seconds`, the evaluation's wall time: its cost,
        taken from the run's cores); nothing if `stop` is set before the games end."""
        started = time.monotonic()
        if self.two_player:
            values = self._against_opponents(params, step, stop)
        else:
            values = self._episodes(params, stop)
        return {**values, "eval/seconds": time.monotonic() - started} if values else values

    def _against_opponents(self, params: Any, step: int, stop: StopSignal) -> dict[str, Any]:
        run = LoadedRun(pathlib.Path("."), step, self.config, self.spec, params)
        agent = CheckpointPlayer(
            "agent", run, self.game, self.seed, self.simulations, agent=self.agent
        )
        values: dict[str, Any] = {}
        summary = []
        agent_seats = [r % 2 for r in range(self.games)]  # colours alternate
        for j, opponent in enumerate(self.opponents):
            seeds = [game_seed(self.seed, 0, j + 1, r) for r in range(self.games)]
            tables = []
            for seed, seat in zip(seeds, agent_seats, strict=True):
                other = make_player(opponent, self.game, player_seed(seed, 1 - seat))
                tables.append([agent, other] if seat == 0 else [other, agent])
            outcomes = np.zeros(self.games)  # [G] the agent's return in each game

            def finished(k: int, state: pyspiel.State, table, outcomes=outcomes) -> None:
                del table
                outcomes[k] = state.returns()[agent_seats[k]]

            if not play_games(self.game, tables, seeds, finished, should_stop=stop.is_set):
                return {}  # the run stopped mid-evaluation: nothing to log
            wins, draws = int((outcomes > 0).sum()), int((outcomes == 0).sum())
            losses = self.games - wins - draws
            score = (wins + 0.5 * draws) / self.games
            values.update(
                {
                    f"eval/{opponent}/score": score,
                    f"eval/{opponent}/win": wins / self.games,
                    f"eval/{opponent}/draw": draws / self.games,
                    f"eval/{opponent}/loss": losses / self.games,
                    f"eval/{opponent}/elo": elo_difference(wins, draws, self.games),
                }
            )
            summary.append(f"{opponent} {wins}-{draws}-{losses}")
        if summary:
            values["eval"] = "  ".join(summary)
        return values

    def _episodes(self, params: Any, stop: StopSignal) -> dict[str, Any]:
        keys = _step_keys(self.seed)
        act = self.agent.act

        def policy(timestep) -> np.ndarray:
            rows = np.asarray(timestep.observation).shape[0]
            out = act(
                params,
                next(keys),
                timestep.observation,
                timestep.legal_mask,
                np.ones(rows, bool),
                None,
            )
            return np.asarray(out.action)

        env_id = self.spec.env_id
        atari = self.spec.family == "envpool" and is_atari57(env_id)
        try:
            result = evaluate_policy(
                policy,
                functools.partial(make_env, self.config.env.name, **self.config.env.options),
                self.games,
                num_envs=min(self.games, 8),
                seed=self.seed,
                game=env_id if atari else None,
                should_stop=stop.is_set,
            )
        except EvaluationStopped:
            return {}  # the run stopped mid-evaluation: nothing to log
        values: dict[str, Any] = {
            "eval/return": result.summary.mean.value,
            "eval/return_iqm": result.summary.iqm.value,
        }
        if result.normalized is not None:
            values["eval/human_normalized"] = result.normalized.mean.value
        values["eval"] = f"return {result.summary.mean.value:.4g}"
        return values


def _step_keys(seed: int) -> Iterator[jax.Array]:
    """A fresh key for each step of an evaluation, the same sequence for the same seed: a
    search that draws (Sampled MuZero's actions, Gumbel's and the tie-breaks) draws anew at every
    state, as in training, and an evaluation is repeatable."""
    key = jax.random.PRNGKey(seed)
    for step in itertools.count():
        yield jax.random.fold_in(key, step)


if __name__ == "__main__":
    print("\n".join(preset_protocols()))
