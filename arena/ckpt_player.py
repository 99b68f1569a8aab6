"""The `ckpt:RUN_DIR` player: a trained run's agent, searching every waiting game in one call.

    ckpt:runs/c4                      the newest checkpoint, the run's simulations, greedy
    ckpt:runs/c4,sims=200,step=5000   a given checkpoint and search budget
    ckpt:runs/c4,temperature=0.5      sample moves from the visit counts at this temperature
                                      (V-trace runs: any temperature > 0 samples the policy)

The run's `config.json` says which agent to build (`selfplay.make_agent`); the parameters come from
`checkpoints/` (`selfplay.restore_params`, at the step `selfplay.checkpoints.checkpoint_step`
resolves). The search is evaluation's (`selfplay.evaluation.greedy_config`: no root Dirichlet
noise) at the spec's temperature. The agent acts through `selfplay.evaluation.BoardActor`, as in
evaluation: MuZero and V-trace runs trained on OpenSpiel see the training adapter's observations
(`OpenSpielEnv.observe`); AlphaZero runs trained on pgx (tic_tac_toe, connect_four, whose action
ids equal OpenSpiel's) get pgx states rebuilt by replaying each game's moves, since their search
steps the real rules. Runs trained on pgx's games with chance get each OpenSpiel position
translated (`envs.pgx_openspiel`): 2048's moves are renamed, and a backgammon move
(OpenSpiel's: a whole roll's checkers) is searched one checker at a time as pgx plays it, each
search limited to the checkers that begin one of OpenSpiel's legal moves, until one is complete.
Loaded runs are cached, so the tournament's many `make_player` calls and a player against itself
at another setting read the checkpoint once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import pyspiel

from arena.players import BatchedPlayer, PlayerSpec, _float, _int, _no_settings, register_player
from configs import ExperimentConfig, UsageError
from configs.experiment import USER_ENV_PREFIX
from envs import EnvSpec
from selfplay import Agent, make_agent
from selfplay.checkpoints import checkpoint_step
from selfplay.evaluation import BoardActor, greedy_config, read_run_config, restore_agent

__all__ = ["CheckpointPlayer", "LoadedRun", "load_run"]

# pgx games the arena can referee with OpenSpiel: pgx id -> OpenSpiel game (the first two with
# the same action ids; the games with chance translated position by position).
PGX_TO_OPENSPIEL = {
    "tic_tac_toe": "tic_tac_toe()",
    "connect_four": "connect_four()",
    "2048": "2048(max_tile=131072)",
    "backgammon": "backgammon()",
}
# Games matched by their short name: any of OpenSpiel's settings of them (2048's max_tile).
_BY_SHORT_NAME = ("2048", "backgammon")


class LoadedRun(NamedTuple):
    """A run's config, environment spec and parameters at one checkpoint."""

    run_dir: Path  # absolute
    step: int  # the checkpoint's step
    config: ExperimentConfig  # as trained (search settings untouched)
    env_spec: EnvSpec  # of the environment it trained on
    params: Any  # the network's parameters, with the network's structure


def load_run(run_dir: str | os.PathLike, step: int | None = None) -> LoadedRun:
    """Loads a run's config and the parameters of its newest (or given) checkpoint.

    Raises UsageError, one line, for a missing directory or config.json, no (such) checkpoint,
    or an unreadable one or one whose parameters do not fit the config's network.
    """
    run_dir = Path(run_dir).absolute()
    read_run_config(run_dir)  # a missing or bad config.json is named before any checkpoint error
    step = checkpoint_step(run_dir, step)
    return _load_cached(run_dir, step, _stamp(run_dir, step))


def _stamp(run_dir: Path, step: int) -> tuple[int, int]:
    """Part of the cache keys: a run rewritten in the same folder is loaded again."""
    return (
        (run_dir / "config.json").stat().st_mtime_ns,
        (run_dir / "checkpoints" / str(step)).stat().st_mtime_ns,
    )


@functools.lru_cache(maxsize=4)
def _load_cached(run_dir: Path, step: int, stamp: tuple[int, int]) -> LoadedRun:
    del stamp
    config = read_run_config(run_dir)
    spec, _, params = restore_agent(run_dir, config, step)
    return LoadedRun(run_dir, step, config, spec, params)


def _check_game(config: ExperimentConfig, game: pyspiel.Game, text: str) -> None:
    """UsageError unless the run trained on the arena's game (by OpenSpiel's canonical name; a
    game of the user's by its import path and options)."""
    family, _, name = config.env.name.partition(":")
    if family == USER_ENV_PREFIX:
        played = (getattr(game, "podracer_name", None), getattr(game, "podracer_options", None))
        if played != (config.env.name, config.env.options):
            raise UsageError(
                f"player {text!r}: the checkpoint was trained on {config.env.name} with options "
                f"{config.env.options} but the arena plays {game.get_type().long_name}"
                f"{'' if played[1] is None else f' with options {played[1]}'}"
            )
        return
    if family == "openspiel":
        trained = str(pyspiel.load_game(name))
    elif family == "pgx":
        if name not in PGX_TO_OPENSPIEL:
            raise UsageError(
                f"player {text!r}: the run trained on pgx:{name}, which the arena "
                f"cannot referee; pgx runs can play {', '.join(PGX_TO_OPENSPIEL)}"
            )
        trained = PGX_TO_OPENSPIEL[name]
    else:
        raise UsageError(
            f"player {text!r}: the run trained on {config.env.name}, not a "
            "two-player board game (evaluate one-player agents with evaluate_policy)"
        )
    short = game.get_type().short_name
    same = trained == str(game) or (short in _BY_SHORT_NAME and trained.startswith(short + "("))
    if not same:
        raise UsageError(
            f"player {text!r}: the checkpoint was trained on {config.env.name} "
            f"but the arena plays {game}"
        )


def _act_config(
    config: ExperimentConfig, simulations: int | None, temperature: float
) -> ExperimentConfig:
    """The run's config with the arena's search: evaluation's (no root noise), at `temperature`."""
    greedy = greedy_config(config, simulations)
    if temperature == 0.0:
        return greedy
    # Sampling: visit counts at this temperature (PUCT), Gumbel noise as trained (Gumbel MuZero).
    return greedy.replace(
        search=greedy.search.replace(
            temperature=temperature, gumbel_scale=config.search.gumbel_scale
        )
    )


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


class CheckpointPlayer(BatchedPlayer):
    """A trained agent's search over OpenSpiel states; all waiting games in one `agent.act`.

    Batches are padded to the next power of two, at least `min_batch`, so that jit compiles a few
    shapes only (one for up to `min_batch` games; a benchmark of one game at a time passes 1).
    `act_calls` and `states_searched` count the searches run and the real states they covered.
    The inputs and the padding rows (copies of the first state) are `BoardActor`'s.
    `agent`, when given, must be `make_agent` of the run's config with this search (`ckpt` specs
    pass a cached one, so that players of one spec share its compiled search).
    """

    def __init__(
        self,
        spec: str,
        run: LoadedRun,
        game: pyspiel.Game,
        seed: int,
        simulations: int | None = None,
        temperature: float = 0.0,
        agent: Agent | None = None,
        min_batch: int = 8,
    ):
        super().__init__(spec)
        if min_batch < 1:
            raise ValueError(f"min_batch must be >= 1, got {min_batch}")
        self.min_batch = min_batch
        _check_game(run.config, game, spec)
        self.run = run
        self.config = _act_config(run.config, simulations, temperature)
        self.agent = agent if agent is not None else make_agent(self.config, run.env_spec)
        self._greedy = temperature == 0.0
        self._key = jax.random.PRNGKey(seed % 2**32)
        self.act_calls = 0
        self.states_searched = 0
        self._actor = BoardActor(run.config, self.agent)
        self._pgx_game = (
            run.config.env.name.partition(":")[2]
            if run.config.env.name.startswith("pgx:")
            else None
        )

    def step_many(self, states: Sequence[pyspiel.State]) -> list[int]:
        count = len(states)
        if count == 0:
            return []
        rows = _next_power_of_two(max(count, self.min_batch))
        if self._pgx_game == "backgammon":
            actions = self._backgammon_moves(states, rows)
        else:
            self._key, key = jax.random.split(self._key)
            out, _ = self._actor.act(self.run.params, key, states, rows, self._greedy)
            self.act_calls += 1
            self.states_searched += count
            actions = out.action.tolist()
            if self._pgx_game == "2048":
                from envs.pgx_openspiel import PGX_TO_OPENSPIEL_2048

                actions = [PGX_TO_OPENSPIEL_2048[a] for a in actions]
        for state, action in zip(states, actions, strict=True):
            if action not in state.legal_actions():
                raise RuntimeError(f"{self.spec!r} chose illegal action {action} in:\n{state}")
        return [int(a) for a in actions]

    def _backgammon_moves(self, states: Sequence[pyspiel.State], rows: int) -> list[int]:
        """OpenSpiel moves (a roll's checkers) chosen one pgx move (one checker) at a time."""
        from envs.pgx_openspiel import (
            advance_backgammon,
            backgammon_micro_moves,
            pgx_states_from_openspiel,
        )

        count = len(states)
        padded = list(states) + [states[0]] * (rows - count)
        env_state = pgx_states_from_openspiel("backgammon", padded)
        # Per row: each legal OpenSpiel move and the pgx moves that make it, still possible.
        candidates = [backgammon_micro_moves(state) for state in padded]
        for depth in range(4):  # a roll moves at most 4 checkers
            live = [row for row in range(count) if len(set(candidates[row].values())) > 1]
            if not live:
                break
            allowed = np.zeros((rows, 156), bool)  # pgx's moves beginning a candidate here
            for row in range(rows):
                for moves in candidates[row].values():
                    if len(moves) > depth:
                        allowed[row, moves[depth]] = True
                if not allowed[row].any():
                    allowed[row, 0] = True  # a finished row: any legal input, result unused
            legal = allowed & np.asarray(env_state.legal_action_mask)
            legal = np.where(legal.any(axis=1, keepdims=True), legal, allowed)
            self._key, key = jax.random.split(self._key)
            out, _ = self._actor.act_on(self.run.params, key, env_state, legal, rows, self._greedy)
            self.act_calls += 1
            self.states_searched += len(live)
            chosen = np.zeros(rows, np.int32)
            for row in live:
                move = int(out.action[row])
                kept = {
                    a: m for a, m in candidates[row].items() if len(m) > depth and m[depth] == move
                }
                if kept:  # the search's move (always one of the allowed) narrows the candidates
                    candidates[row] = kept
                    chosen[row] = move
            env_state = advance_backgammon(env_state, chosen)
        return [min(candidates[row]) for row in range(count)]


@functools.lru_cache(maxsize=8)
def _cached_agent(
    run_dir: Path, step: int, stamp: tuple[int, int], simulations: int | None, temperature: float
) -> Agent:
    run = _load_cached(run_dir, step, stamp)
    return make_agent(_act_config(run.config, simulations, temperature), run.env_spec)


def _make_ckpt(spec: PlayerSpec, game: pyspiel.Game, seed: int) -> CheckpointPlayer:
    _no_settings(spec, ("sims", "temperature", "step"), arg=True)
    if not spec.arg:
        raise UsageError(f"player {spec.text!r}: give the run directory, e.g. ckpt:runs/c4")
    sims = spec.options.get("sims")
    step = spec.options.get("step")
    simulations = None if sims is None else _int(spec, "sims", sims, 1)
    temperature = _float(spec, "temperature", spec.options.get("temperature", "0"))
    config = read_run_config(Path(spec.arg).absolute())
    # Checked before the checkpoint is read: a wrong game is named even without checkpoints.
    _check_game(config, game, spec.text)
    if sims is not None and config.mode == "vtrace":
        raise UsageError(f"player {spec.text!r}: sims does not apply to a V-trace run (no search)")
    run = load_run(spec.arg, None if step is None else _int(spec, "step", step, 0))
    agent = _cached_agent(
        run.run_dir, run.step, _stamp(run.run_dir, run.step), simulations, temperature
    )
    return CheckpointPlayer(spec.text, run, game, seed, simulations, temperature, agent)


register_player(
    "ckpt",
    _make_ckpt,
    "ckpt:RUN_DIR[,sims=N][,temperature=0][,step=S]: a trained run's agent (newest "
    "checkpoint, the run's simulations, no noise, greedy at temperature 0)",
)
