"""Arena throughput: games per second of a player against itself, batched vs one game at a time.

    .venv/bin/python benchmarks/arena.py --game tic_tac_toe --games 64 --simulations 16
    .venv/bin/python benchmarks/arena.py --run-dir runs/c4 --games 32   # a trained checkpoint

Two batched players, each against itself:
- a uniform search: one jitted mctx search (Gumbel MuZero) over a uniform model (zero prior
  logits masked to the legal moves, zero values), what batching buys without a network;
- the checkpoint agent (`ckpt:RUN_DIR`, greedy, the run's simulations unless `--ckpt-sims`) of
  `--run-dir`, on the run's own game; without `--run-dir` a tiny tic-tac-toe MuZero run (3
  updates) is trained in a temporary folder first; `--run-dir ''` skips it.
"One at a time" plays the games in sequence, one search per move (batch 1); "batched" plays them
all in lock step, one search per ply for every game. `--also SPEC` adds an OpenSpiel bot (e.g.
mcts:50) against itself, one game at a time, for scale. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
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

from arena.ckpt_player import PGX_TO_OPENSPIEL, CheckpointPlayer  # noqa: E402
from arena.matches import load_game, play_games, player_seed  # noqa: E402
from arena.players import BatchedPlayer, make_player  # noqa: E402

# The tiny run trained when no --run-dir is given: enough to have a real checkpoint, not to play.
TINY_RUN = (
    "tic_tac_toe_muzero",
    [
        "learner.max_updates=3",
        "replay.min_size=64",
        "actors.envs_per_thread=4",
        "actors.threads_per_device=1",
        "learner.batch_size=16",
        "learner.checkpoint_every=3",
    ],
)


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
            root = mctx.RootFnOutput(
                prior_logits=jnp.zeros((batch, num_actions)), value=zeros, embedding=zeros
            )

            def recurrent_fn(params, rng_key, action, embedding):
                del params, rng_key, action
                # Two-player convention: discount -1 between plies.
                return mctx.RecurrentFnOutput(
                    reward=zeros,
                    discount=-jnp.ones(batch),
                    prior_logits=jnp.zeros((batch, num_actions)),
                    value=zeros,
                ), embedding

            out = mctx.gumbel_muzero_policy(
                params=(),
                rng_key=key,
                root=root,
                recurrent_fn=recurrent_fn,
                num_simulations=simulations,
                invalid_actions=~legal,
            )
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


def _warm_up(player, game, largest: int) -> None:
    """Compiles every padded batch size up to `largest` games, outside the timings."""
    size = 1
    while size < 2 * largest:
        player.step_many([game.new_initial_state() for _ in range(size)])
        size *= 2


def _ckpt_game(run_dir: str) -> pyspiel.Game:
    """The OpenSpiel game a run trained on (pgx runs: the game with the same action ids)."""
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    family, _, name = config["env"]["name"].partition(":")
    return load_game(PGX_TO_OPENSPIEL.get(name, name) if family == "pgx" else name)


def _ckpt_results(run_dir: str, games: int, simulations: int | None, seed: int) -> dict:
    """Games/s of the ckpt agent against itself: one game at a time (batch 1) and batched."""
    game = _ckpt_game(run_dir)
    spec = f"ckpt:{run_dir}" + (f",sims={simulations}" if simulations else "")
    batched = make_player(spec, game, seed)
    single = CheckpointPlayer(
        spec, batched.run, game, seed, simulations, agent=batched.agent, min_batch=1
    )
    _warm_up(batched, game, games)
    _warm_up(single, game, 1)
    one = _self_play(game, single, games, 1, seed)
    many = _self_play(game, batched, games, games, seed)
    return {
        "ckpt_game": str(game),
        "ckpt_mode": batched.run.config.mode,
        "ckpt_step": batched.run.step,
        "ckpt_simulations": batched.config.search.num_simulations,
        "ckpt_one_at_a_time_games_per_s": one,
        "ckpt_batched_games_per_s": many,
        "ckpt_batched_speedup": many / one,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="tic_tac_toe")
    parser.add_argument("--games", type=int, default=64, help="games per measurement")
    parser.add_argument("--simulations", type=int, default=16, help="search simulations per move")
    parser.add_argument("--also", default="mcts:50", help="an unbatched spec to time too, or ''")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--run-dir",
        default=None,
        help="a trained run for the ckpt agent (default: train a tiny one; '' "
        "skips the ckpt agent)",
    )
    parser.add_argument(
        "--ckpt-sims",
        type=int,
        default=None,
        help="the ckpt agent's simulations (default: the run's)",
    )
    args = parser.parse_args(argv)
    game = load_game(args.game)
    player = UniformSearchPlayer("uniform_search", game, args.seed, args.simulations)
    _warm_up(player, game, args.games)
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
    if args.run_dir is None:
        import configs
        from selfplay.train import train

        run_dir = os.path.join(tempfile.mkdtemp(prefix="arena-bench-"), "tiny")
        train(configs.load_config(TINY_RUN[0], TINY_RUN[1]), run_dir, progress=False)
        result["ckpt_run"] = f"tiny {TINY_RUN[0]} (3 updates)"
        result.update(_ckpt_results(run_dir, args.games, args.ckpt_sims, args.seed))
    elif args.run_dir:
        result["ckpt_run"] = args.run_dir
        result.update(_ckpt_results(args.run_dir, args.games, args.ckpt_sims, args.seed))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}))
    return result


if __name__ == "__main__":
    main()
