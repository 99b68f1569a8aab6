"""Arena throughput: games per second of a player against itself, batched vs one game at a time.

    .venv/bin/python benchmarks/arena.py --game tic_tac_toe --games 64 --simulations 16

The batched player is a stand-in for the checkpoint agent: one jitted mctx search (Gumbel MuZero)
over a uniform model (zero prior logits masked to the legal moves, zero values) for all the games
waiting for it, so it measures what batching buys on the host-device path without a trained
network. TODO(ckpt): add the `ckpt:RUN_DIR` agent here once training checkpoints exist.
"One at a time" plays the games in sequence, one search per move; "batched" plays them all in
lock step, one search per ply for every game. `--also SPEC` adds an OpenSpiel bot (e.g. mcts:50)
against itself, one game at a time, for scale. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# Run as `python benchmarks/arena.py`, this folder is first on sys.path and this file's name would
# hide the `arena` package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mctx  # noqa: E402
import numpy as np  # noqa: E402
import pyspiel  # noqa: E402

from arena.matches import load_game, play_games, player_seed  # noqa: E402
from arena.players import BatchedPlayer, make_player  # noqa: E402


class UniformSearchPlayer(BatchedPlayer):
    """mctx Gumbel MuZero search with a uniform model over OpenSpiel states (benchmark only)."""

    def __init__(self, spec: str, game: pyspiel.Game, seed: int, simulations: int):
        super().__init__(spec)
        self._num_actions = game.num_distinct_actions()
        self._key = jax.random.key(seed)
        num_actions = self._num_actions

        def search(key, legal):  # legal: [B, A] bool
            batch = legal.shape[0]
            zeros = jnp.zeros(batch)
            root = mctx.RootFnOutput(prior_logits=jnp.zeros((batch, num_actions)), value=zeros,
                                     embedding=zeros)

            def recurrent_fn(params, rng_key, action, embedding):
                del params, rng_key, action
                # Two-player convention: discount -1 between plies.
                return mctx.RecurrentFnOutput(
                    reward=zeros, discount=-jnp.ones(batch),
                    prior_logits=jnp.zeros((batch, num_actions)), value=zeros), embedding

            out = mctx.gumbel_muzero_policy(
                params=(), rng_key=key, root=root, recurrent_fn=recurrent_fn,
                num_simulations=simulations, invalid_actions=~legal)
            return out.action  # [B]

        self._search = jax.jit(search)

    def step_many(self, states):
        count = len(states)
        # Batches padded to a power of two: a few compiled shapes as games finish.
        padded = 1 << (count - 1).bit_length()
        legal = np.zeros((padded, self._num_actions), bool)
        legal[count:, 0] = True
        for row, state in enumerate(states):
            legal[row, state.legal_actions()] = True
        self._key, key = jax.random.split(self._key)
        actions = np.asarray(self._search(key, legal))[:count]
        return [int(a) for a in actions]


def _self_play(game, player, num_games: int, concurrent: int, seed: int) -> float:
    """Plays `num_games` games of `player` against itself, `concurrent` at a time; games/s."""
    done = []
    start = time.perf_counter()
    for first in range(0, num_games, concurrent):
        count = min(concurrent, num_games - first)
        seeds = list(range(seed + first, seed + first + count))
        play_games(game, [[player, player]] * count, seeds, lambda k, state, table: done.append(k))
    seconds = time.perf_counter() - start
    assert len(done) == num_games
    return num_games / seconds


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="tic_tac_toe")
    parser.add_argument("--games", type=int, default=64, help="games per measurement")
    parser.add_argument("--simulations", type=int, default=16, help="search simulations per move")
    parser.add_argument("--also", default="mcts:50", help="an unbatched spec to time too, or ''")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    game = load_game(args.game)
    player = UniformSearchPlayer("uniform_search", game, args.seed, args.simulations)
    # Compile every padded batch size once, outside the timings.
    size = 1
    while size < 2 * args.games:
        player.step_many([game.new_initial_state() for _ in range(size)])
        size *= 2
    result = {
        "benchmark": "arena",
        "game": str(game),
        "player": f"uniform mctx gumbel search, {args.simulations} simulations",
        "games": args.games,
        "device": jax.devices()[0].device_kind,
        "one_at_a_time_games_per_s": _self_play(game, player, args.games, 1, args.seed),
        "batched_games_per_s": _self_play(game, player, args.games, args.games, args.seed),
    }
    result["batched_speedup"] = result["batched_games_per_s"] / result["one_at_a_time_games_per_s"]
    if args.also:
        bot = make_player(args.also, game, player_seed(args.seed, 0))
        other = make_player(args.also, game, player_seed(args.seed, 1))
        count = min(args.games, 16)
        done = []
        start = time.perf_counter()
        for k in range(count):
            play_games(game, [[bot, other]], [args.seed + k], lambda *a: done.append(a))
        result[f"{args.also}_one_at_a_time_games_per_s"] = count / (time.perf_counter() - start)
    result["todo"] = "ckpt:RUN_DIR agent (batched MuZero/AlphaZero search) once checkpoints exist"
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}))
    return result


if __name__ == "__main__":
    main()
