"""Evaluating a trained run: its greedy agent, and an exhaustive perfect-play check for tic-tac-toe.

    config, agent, params = load_agent("runs/ttt")        # greedy: no noise, temperature 0
    report = perfect_play_report("runs/ttt")              # every opponent strategy, both seats
    report["perfect"], report["losses_as_first"], report["losses_as_second"]

`BoardActor(config, agent).act(params, key, states, rows, greedy)` runs a board-game run's agent
on OpenSpiel states in one padded batch; `search_policy` and the arena's `ckpt:` player use it.

`exhaustive_play(policy, ...)` is the game-tree walk on its own: the player under test answers
each position with `policy(states)`, while every legal reply of the opponent is explored, so the
games played cover every opponent strategy. Positions are expanded level by level (one ply at a
time) and identical positions reached by different move orders are searched once, so the agent
runs one batched search per ply over all positions of that ply.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel

from configs import ExperimentConfig, UsageError, from_dict
from configs.experiment import USER_ENV_PREFIX
from envs import EnvSpec, env_seed, env_spec
from selfplay.agent import ActOutput, Agent, make_agent
from selfplay.checkpoints import checkpoint_step, restore_params
from selfplay.programs import built_once

__all__ = [
    "BoardActor",
    "exhaustive_play",
    "greedy_config",
    "load_agent",
    "perfect_play_report",
    "search_policy",
    "tic_tac_toe_report",
]

# A batched policy of the player under test: states -> one legal action per state.
Policy = Callable[[Sequence[pyspiel.State]], Sequence[int]]

_TIC_TAC_TOE = ("openspiel:tic_tac_toe", "pgx:tic_tac_toe")
# pgx games with chance, played from OpenSpiel states translated position by position.
_CHANCE_GAMES = ("2048", "backgammon")


def greedy_config(config: ExperimentConfig, num_simulations: int | None = None) -> ExperimentConfig:
    """`config` with the search set for evaluation: no root noise, the most visited action.

    `num_simulations` replaces the training search's budget when given.
    """
    changes: dict[str, Any] = {"dirichlet_fraction": 0.0, "temperature": 0.0, "gumbel_scale": 0.0}
    if num_simulations is not None:
        changes["num_simulations"] = num_simulations
    return config.replace(
        search=config.search.replace(**changes),
        actors=dataclasses.replace(config.actors, random_move_prob=0.0),
    )


def read_run_config(run_dir: str | os.PathLike) -> ExperimentConfig:
    """The `ExperimentConfig` a run directory was trained with (its `config.json`).

    Raises UsageError, one line, for a missing directory, a missing or unreadable config.json.
    """
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"no run directory at {run_dir}")
    path = run_dir / "config.json"
    if not path.is_file():
        raise UsageError(f"{run_dir} is not a run directory: it has no config.json")
    try:
        return from_dict(json.loads(path.read_text()), saved=True)
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"{path} is not a readable config: {error}") from None


def restore_agent(
    run_dir: str | os.PathLike, config: ExperimentConfig, step: int | None = None
) -> tuple[EnvSpec, Agent, Any]:
    """The env spec, the agent of `config` and the run's parameters at `step` (None: newest).

    `config` may differ from the run's in its search settings (evaluation), never in the network.
    """
    spec = env_spec(config.env.name, seed=env_seed(config.seed), **config.env.options)
    agent = make_agent(config, spec)
    target = jax.eval_shape(agent.init, jax.random.PRNGKey(0))
    return spec, agent, restore_params(run_dir, step, target=target)


def load_agent(
    run_dir: str | os.PathLike,
    *,
    step: int | None = None,
    num_simulations: int | None = None,
    greedy: bool = True,
) -> tuple[ExperimentConfig, Agent, Any]:
    """The config, agent and parameters of a run's newest (or given) checkpoint.

    Args:
      run_dir: a run directory holding `config.json` and `checkpoints/`.
      step: the checkpoint's step; None for the newest.
      num_simulations: the search budget; None keeps the run's.
      greedy: apply `greedy_config` (evaluation); False keeps the training search settings.
    Raises:
      UsageError: no config.json, no checkpoint, or parameters that do not fit the network.
    """
    config = read_run_config(run_dir)
    if greedy:
        config = greedy_config(config, num_simulations)
    elif num_simulations is not None:
        config = config.replace(search=config.search.replace(num_simulations=num_simulations))
    _, agent, params = restore_agent(run_dir, config, step)
    return config, agent, params


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """x [N, ...] -> [rows, ...], repeating the first row (valid input; its results are dropped)."""
    return np.concatenate([x, np.repeat(x[:1], rows - len(x), axis=0)]) if rows > len(x) else x


@built_once()
def _pgx_replay(game_name: str) -> Callable[[Any, Any], Any]:
    """`pgx_replay` once per game: every actor of a game shares its compiled replay."""
    from envs.pgx_env import pgx_replay  # pgx starts JAX: only when needed

    return pgx_replay(game_name)


class BoardActor:
    """A board-game run's agent acting on OpenSpiel states, all of them in one `agent.act`.

    The agent sees what it trained on: a run on OpenSpiel (MuZero, V-trace) the adapter's
    observations and legal masks (`OpenSpielEnv.observe`); a run on pgx (AlphaZero, whose search
    steps the real rules) pgx states rebuilt by replaying each state's moves (`pgx_replay`; the
    action ids of tic_tac_toe and connect_four are OpenSpiel's), and their observations; a run on
    pgx's games with chance (2048, backgammon) pgx states translated from each OpenSpiel position
    (`envs.pgx_openspiel`), whose actions are pgx's (the caller translates them). The
    batch is padded to `rows` by repeating the first state (a valid input; its results are
    dropped), so that callers using few batch sizes compile few shapes.
    """

    def __init__(self, config: ExperimentConfig, agent: Agent):
        """`agent` is `make_agent` of `config` (any search settings); `config.env` names the game.

        Raises UsageError for a run that did not train on a board game (openspiel:, pgx:).
        """
        self.agent = agent
        self._family, _, game_name = config.env.name.partition(":")
        if self._family == "openspiel":
            from envs.openspiel import OpenSpielEnv

            self._observer = OpenSpielEnv(game_name, 1, **config.env.options)
        elif self._family == "pgx" and game_name in _CHANCE_GAMES:
            self._translate = game_name
        elif self._family == "pgx":
            self._replay = _pgx_replay(game_name)
        elif self._family != USER_ENV_PREFIX:  # a user's game keeps its pgx state (`PgxGameState`)
            raise UsageError(
                f"only a run on a board game (openspiel:, pgx:, py: in pgx's API) plays from "
                f"OpenSpiel states, not one on {config.env.name}"
            )

    def act(
        self, params: Any, key: jax.Array, states: Sequence[pyspiel.State], rows: int, greedy: bool
    ) -> tuple[ActOutput, np.ndarray]:
        """One `agent.act` over `states` padded to `rows` rows; the padding rows' results dropped.

        Args:
          params: the agent's parameters.
          key: the search's key (the same key and rows give the same results for a state).
          states: N >= 1 non-terminal OpenSpiel states of the run's game, N <= rows.
          rows: the batch the agent searches (its shape: one compilation per value).
          greedy: `agent.act`'s greedy flag for every row (the most visited action, or the
            policy's argmax for V-trace); False samples at the search's temperature.
        Returns:
          The act output of the N states and their legal mask [N, A], as numpy arrays.
        """
        count = len(states)
        if not 1 <= count <= rows:
            raise ValueError(f"act takes 1 to rows={rows} states, got {count}")
        if self._family == "openspiel":
            observation, legal_mask, _ = self._observer.observe(states)  # [N, ...], [N, A]
            env_state = None
            observation, legal_mask = _pad_rows(observation, rows), _pad_rows(legal_mask, rows)
        elif self._family == USER_ENV_PREFIX:  # the user's game's own pgx states, stacked
            padded = [state.pgx_state for state in states]
            padded += [padded[0]] * (rows - count)
            env_state = jax.tree.map(lambda *leaves: np.stack(leaves), *padded)
            return self.act_on(params, key, env_state, env_state.legal_action_mask, count, greedy)
        elif hasattr(self, "_translate"):
            from envs.pgx_openspiel import pgx_states_from_openspiel

            padded = list(states) + [states[0]] * (rows - count)
            env_state = pgx_states_from_openspiel(self._translate, padded)
            return self.act_on(params, key, env_state, env_state.legal_action_mask, count, greedy)
        else:
            max_length = states[0].get_game().max_game_length()
            moves = np.zeros((count, max_length), np.int32)  # [N, L] each game's moves so far
            lengths = np.zeros(count, np.int32)  # [N]
            for i, state in enumerate(states):
                history = state.history()
                moves[i, : len(history)] = history
                lengths[i] = len(history)
            env_state = self._replay(_pad_rows(moves, rows), _pad_rows(lengths, rows))
            observation = env_state.observation.astype(jnp.float32)  # [rows, ...]
            legal_mask = env_state.legal_action_mask  # [rows, A]
        out = self.agent.act(params, key, observation, legal_mask, np.full(rows, greedy), env_state)
        out, legal_mask = jax.device_get((out, legal_mask))
        return jax.tree.map(lambda x: x[:count], out), legal_mask[:count]

    def act_on(
        self, params: Any, key: jax.Array, env_state: Any, legal_mask: Any, count: int, greedy: bool
    ) -> tuple[ActOutput, np.ndarray]:
        """One `agent.act` on batched pgx states (already padded) with the given legal moves
        [rows, A]; the first `count` rows' results. For a caller that restricts the moves (the
        arena's backgammon, whose OpenSpiel moves are several pgx moves) or steps the states."""
        rows = int(legal_mask.shape[0])
        observation = env_state.observation.astype(jnp.float32)  # [rows, ...]
        out = self.agent.act(params, key, observation, legal_mask, np.full(rows, greedy), env_state)
        out, legal_mask = jax.device_get((out, legal_mask))
        return jax.tree.map(lambda x: x[:count], out), np.asarray(legal_mask)[:count]


def _most_visited(visits: np.ndarray, prior_logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """[B] the legal action with the most visits, ties broken by the prior, then the lowest index.

    The search's own greedy choice breaks ties at random (with the key and the row), so the same
    position could get different moves in different batches; this one depends on the position.
    """
    visits = visits / np.maximum(visits.sum(-1, keepdims=True), 1e-9)  # [B, A]
    prior = np.exp(prior_logits - prior_logits.max(-1, keepdims=True))
    prior = prior / prior.sum(-1, keepdims=True)
    # A prior adds less than one visit in a thousand, so it only orders equal visit counts.
    score = np.where(legal, visits + 1e-4 * prior, -np.inf)
    return np.argmax(score, axis=-1).astype(np.int32)


def search_policy(
    config: ExperimentConfig, agent: Agent, params: Any, *, seed: int = 0, batch_size: int = 128
) -> Policy:
    """The agent's batched search as a `Policy` over OpenSpiel states of the run's game.

    The agent acts through a `BoardActor`: MuZero (OpenSpiel-trained) sees the adapter's
    observations; AlphaZero (pgx-trained) gets pgx states rebuilt by replaying each state's moves.
    States are searched `batch_size` at a time (the last batch padded), so the search compiles
    once; the move is `_most_visited`'s, which depends on the position only. Raises UsageError
    for a run that did not train on a board game.
    """
    actor = BoardActor(config, agent)
    key = jax.random.PRNGKey(seed)

    def search(states: Sequence[pyspiel.State]) -> np.ndarray:
        out, legal_mask = actor.act(params, key, states, batch_size, greedy=True)
        return _most_visited(out.search_policy, out.behaviour_logits, legal_mask)

    def policy(states: Sequence[pyspiel.State]) -> np.ndarray:
        states = list(states)
        chunks = [search(states[i : i + batch_size]) for i in range(0, len(states), batch_size)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int32)

    return policy


def exhaustive_play(
    policy: Policy, game: pyspiel.Game | str = "tic_tac_toe", players: Sequence[int] = (0, 1)
) -> dict[str, Any]:
    """Plays `policy` against every sequence of opponent moves, in each seat of `players`.

    Returns per seat ("first" for player 0, "second" for player 1) the counts of games won,
    drawn and lost by the policy (each distinct game counted once), and `positions`: the
    distinct positions the policy was asked to move in, `policy_calls`: the batched calls.
    """
    if isinstance(game, str):
        game = pyspiel.load_game(game)
    if game.num_players() != 2:
        raise UsageError(f"exhaustive_play needs a two-player game, got {game}")
    report: dict[str, Any] = {"positions": 0, "policy_calls": 0}
    for player in players:
        seat = ("first", "second")[player]
        counts = {"wins": 0, "draws": 0, "losses": 0}
        # Distinct positions (by their serialized board and mover) -> (state, games reaching it).
        frontier: dict[str, tuple[pyspiel.State, int]] = {"": (game.new_initial_state(), 1)}
        while frontier:
            movers = [(s, n) for s, n in frontier.values() if s.current_player() == player]
            others = [(s, n) for s, n in frontier.values() if s.current_player() != player]
            children: list[tuple[pyspiel.State, int]] = []
            if movers:
                actions = policy([s for s, _ in movers])
                report["policy_calls"] += 1
                report["positions"] += len(movers)
                for (state, n), action in zip(movers, actions, strict=True):
                    if int(action) not in state.legal_actions():
                        raise ValueError(f"the policy played illegal move {action} in\n{state}")
                    children.append((state.child(int(action)), n))
            for state, n in others:  # the opponent: every legal reply
                children.extend((state.child(a), n) for a in state.legal_actions())
            frontier = {}
            for state, n in children:
                if state.is_terminal():
                    outcome = state.returns()[player]
                    counts["wins" if outcome > 0 else "losses" if outcome < 0 else "draws"] += n
                    continue
                key = f"{state.current_player()}:{state}"
                old = frontier.get(key)
                frontier[key] = (state, n + (old[1] if old else 0))
        for name, value in counts.items():
            report[f"{name}_as_{seat}"] = value
    return report


def perfect_play_report(
    run_dir: str | os.PathLike,
    *,
    step: int | None = None,
    num_simulations: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Checks a tic-tac-toe run's greedy agent against every opponent strategy, in both seats.

    Returns `tic_tac_toe_report`'s dict for the run's newest (or given) checkpoint, with `step`.
    Raises UsageError, one line, for a missing or bad run directory or checkpoint.
    """
    read_run_config(run_dir)  # a missing or bad config.json is named before any checkpoint error
    step = checkpoint_step(run_dir, step)  # resolved first: the report names the step it loads
    config, agent, params = load_agent(run_dir, step=step, num_simulations=num_simulations)
    return {**tic_tac_toe_report(config, agent, params, seed=seed), "step": step}


def tic_tac_toe_report(
    config: ExperimentConfig, agent: Agent, params: Any, *, seed: int = 0
) -> dict[str, Any]:
    """`exhaustive_play` of the agent's search (use a `greedy_config`) in both seats.

    Returns a dict with `perfect` (no game lost as first or as second player), the counts
    `losses_as_first`, `losses_as_second`, `wins_as_*`, `draws_as_*`, `positions` (distinct
    positions searched), `policy_calls`, and the `mode` and `num_simulations` evaluated. Reusing
    one `agent` for several `params` (checkpoints) compiles its search once.
    """
    if config.env.name not in _TIC_TAC_TOE:
        raise UsageError(
            f"the perfect-play check is for tic-tac-toe "
            f"({' or '.join(_TIC_TAC_TOE)}), not {config.env.name}"
        )
    report = exhaustive_play(search_policy(config, agent, params, seed=seed), "tic_tac_toe")
    return {
        "perfect": report["losses_as_first"] == 0 and report["losses_as_second"] == 0,
        **report,
        "mode": config.mode,
        "num_simulations": config.search.num_simulations,
    }
