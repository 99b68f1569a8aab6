"""Connect four: train for a fixed time, then play OpenSpiel's MCTS bot (random rollouts).

The self-play target: after at most 30 minutes of training on 2 CPU cores, the agent wins at
least 90% of its games against `mcts:1000` (OpenSpiel's MCTSBot, 1,000 simulations, one random
rollout per leaf, uct_c 2), half of them as the first player.

    .venv/bin/python benchmarks/connect_four_vs_mcts.py                      # 30 min, 20 games
    .venv/bin/python benchmarks/connect_four_vs_mcts.py --minutes 1 --games 2   # pipeline check
    .venv/bin/python benchmarks/connect_four_vs_mcts.py --run-dir runs/c4 --minutes 0  # eval only

Training is `selfplay.train.train` on `--config` (default connect_four_alphazero) with
`learner.max_seconds` set from `--minutes` (the training clock starts when the learner does, after
start-up); a run directory that already holds checkpoints is continued. The match is
`arena.run_tournament(game, ["ckpt:RUN", "mcts:SIMS"], games)` with colours alternating; its games
are saved in RUN/arena-vs-mcts/, or RUN/arena-vs-mctsSIMS-simsN/ for another bot or `--sims N`
(a stopped match continues in its own folder). Prints one JSON line: wins,
draws and losses of the agent, `win_rate` (wins / games) and `target_met` (win_rate >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# Run as `python benchmarks/...`, this folder is first on sys.path and benchmarks/arena.py would
# hide the `arena` package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import arena  # noqa: E402
import configs  # noqa: E402
from selfplay.train import train  # noqa: E402

TARGET_WIN_RATE = 0.9


def _match_folder(mcts_sims: int, sims: int | None) -> str:
    """The match's folder in the run: one per pairing, since the arena continues a tournament
    only with the players it began with (the default pairing keeps its first name)."""
    if mcts_sims == 1000 and not sims:
        return "arena-vs-mcts"
    return f"arena-vs-mcts{mcts_sims}" + (f"-sims{sims}" if sims else "")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        default="connect_four_alphazero",
        help="preset or config .json to train (default connect_four_alphazero)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, repeatable (e.g. --set search.num_simulations=64)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=30.0,
        help="training time (default 30); 0 evaluates --run-dir as it is",
    )
    parser.add_argument(
        "--run-dir", default=None, help="run directory (default runs/c4-vs-mcts-TIME)"
    )
    parser.add_argument(
        "--games",
        type=int,
        default=20,
        help="games against the MCTS bot, colours alternating (default 20)",
    )
    parser.add_argument("--mcts-sims", type=int, default=1000, help="MCTS bot simulations")
    parser.add_argument(
        "--sims", type=int, default=None, help="the agent's search simulations (default: the run's)"
    )
    parser.add_argument("--seed", type=int, default=0, help="match seed")
    args = parser.parse_args(argv)
    if args.minutes < 0:
        raise SystemExit("--minutes must be >= 0")
    run_dir = args.run_dir or os.path.join("runs", f"c4-vs-mcts-{time.strftime('%Y%m%d-%H%M%S')}")

    result: dict = {"benchmark": "connect_four_vs_mcts", "run_dir": run_dir}
    if args.minutes > 0:
        config = configs.load_config(
            args.config, [*args.set, f"learner.max_seconds={args.minutes * 60}"]
        )
        if config.env.name not in ("pgx:connect_four", "openspiel:connect_four"):
            raise SystemExit(f"{args.config} trains {config.env.name}, not connect four")
        start = time.monotonic()
        run = train(config, run_dir, progress=sys.stderr.isatty())
        result.update(
            {
                "config": config.name,
                "mode": config.mode,
                "train_wall_s": round(time.monotonic() - start, 1),
                "updates": run.updates,
                "frames": run.frames,
                "stopped_by": run.stopped_by,
            }
        )

    agent = f"ckpt:{run_dir}" + (f",sims={args.sims}" if args.sims else "")
    bot = f"mcts:{args.mcts_sims}"
    start = time.monotonic()
    records = arena.run_tournament(
        "connect_four",
        [agent, bot],
        args.games,
        out_dir=os.path.join(run_dir, _match_folder(args.mcts_sims, args.sims)),
        format="gauntlet",
        seed=args.seed,
    )
    seat_of_agent = [r.players.index(agent) for r in records]
    outcomes = [r.returns[seat] for r, seat in zip(records, seat_of_agent, strict=True)]
    wins = sum(o > 0 for o in outcomes)
    draws = sum(o == 0 for o in outcomes)
    result.update(
        {
            "agent": agent,
            "opponent": bot,
            "games": len(records),
            "wins": wins,
            "draws": draws,
            "losses": len(records) - wins - draws,
            "wins_as_first": sum(
                o > 0 for o, s in zip(outcomes, seat_of_agent, strict=True) if s == 0
            ),
            "win_rate": wins / len(records),
            "target_met": wins / len(records) >= TARGET_WIN_RATE,
            "match_wall_s": round(time.monotonic() - start, 1),
        }
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
