"""Nim in pgx's API: a two-player game of a user's own, for AlphaZero and the arena.

A pile of stones; each player in turn takes 1, 2 or 3 of them, and whoever takes the last stone
wins. From a pile that is a multiple of 4 the player to move loses against perfect play, so
perfect play takes `pile % 4` stones. Train AlphaZero on it, with the game's own `step` as the
search's exact model, and play it in the arena (from this checkout's root, or with this folder on
PYTHONPATH):

    podracer train --config tic_tac_toe_alphazero --run-dir runs/nim \
        env.name=py:examples.nim_pgx:make
    podracer arena --game py:examples.nim_pgx:make --players ckpt:runs/nim,mcts:200,random,human

`make(**env.options)` returns the game; Podracer recognises pgx's API by its methods (`init`,
`step`, `num_players`) and its state's fields (`current_player`, `legal_action_mask`, `rewards`,
`terminated`, `truncated`, `observation`). pgx's `Env` base class supplies `init` and `step`
(illegal moves lose, finished games stay finished) around `_init`, `_step` and `_observe`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pgx.core as core
from pgx._src.struct import dataclass

__all__ = ["Nim", "make"]

MAX_TAKE = 3


@dataclass
class State(core.State):
    current_player: jax.Array = jnp.int32(0)
    observation: jax.Array = jnp.zeros(0, jnp.float32)
    rewards: jax.Array = jnp.float32([0.0, 0.0])
    terminated: jax.Array = jnp.bool_(False)
    truncated: jax.Array = jnp.bool_(False)
    legal_action_mask: jax.Array = jnp.ones(MAX_TAKE, jnp.bool_)
    _step_count: jax.Array = jnp.int32(0)
    pile: jax.Array = jnp.int32(0)  # stones left

    @property
    def env_id(self) -> str:
        return "nim"


class Nim(core.Env):
    """Take 1 to 3 stones (actions 0 to 2) from a pile of `stones`; the last stone wins."""

    def __init__(self, stones: int = 10):
        super().__init__()
        self.stones = stones
        self.max_game_length = stones  # a move takes at least one stone

    def _init(self, key: jax.Array) -> State:
        pile = jnp.int32(self.stones)
        return State(
            current_player=jnp.int32(jax.random.bernoulli(key)),  # pgx draws who moves first
            legal_action_mask=jnp.arange(1, MAX_TAKE + 1) <= pile,
            pile=pile,
        )

    def _step(self, state: core.State, action: jax.Array, key) -> State:
        del key  # no chance: the step is the exact model AlphaZero searches with
        assert isinstance(state, State)
        pile = state.pile - (action + 1)
        won = pile == 0
        mover = state.current_player
        rewards = jnp.where(won, jnp.where(jnp.arange(2) == mover, 1.0, -1.0), 0.0)
        return state.replace(  # type: ignore[attr-defined]
            current_player=1 - mover,
            pile=pile,
            legal_action_mask=jnp.arange(1, MAX_TAKE + 1) <= pile,
            rewards=rewards.astype(jnp.float32),
            terminated=won,
        )

    def _observe(self, state: core.State, player_id: jax.Array) -> jax.Array:
        assert isinstance(state, State)
        return jax.nn.one_hot(state.pile, self.stones + 1, dtype=jnp.float32)  # [stones + 1]

    def render(self, state: State) -> str:
        """What the arena's human player sees."""
        pile = int(state.pile)
        return f"{pile} stone{'s' if pile != 1 else ''}: {'o ' * pile}(take 1-{MAX_TAKE})"

    def action_to_string(self, state: State, action: int) -> str:
        """How the arena names a move (a human may type it, or its id)."""
        return f"take {action + 1}"

    @property
    def id(self) -> str:
        return "nim"

    @property
    def version(self) -> str:
        return "v0"

    @property
    def num_players(self) -> int:
        return 2


def make(stones: int = 10) -> Nim:
    """The game; `env.options` may set `stones`."""
    return Nim(stones)
