"""`podracer arena`: a tournament between players of a two-player game, and its rating table."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from configs import UsageError
from podracer import extras
from podracer.cli import OneLineParser

__all__ = ["make_parser", "run"]


def make_parser() -> argparse.ArgumentParser:
    extras.require("openspiel", "podracer arena")
    extras.require("train", "podracer arena (its checkpoint players)")
    from arena.matches import FORMATS
    from arena.players import describe_players

    parser = OneLineParser(
        prog="podracer arena",
        description="Play a round-robin or gauntlet tournament and fit Elo ratings with 95% CIs, "
        "and each pairing's expected score with its interval; in a one-player game (2048), each "
        "player's episodes: the mean score and its IQM with 95% intervals, the highest tiles. "
        "Games with chance (backgammon, 2048) draw their dice and tiles from the game's seed. "
        "Run again with the same --out to continue a stopped tournament.",
        epilog=describe_players(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--game",
        required=True,
        help="OpenSpiel game, e.g. tic_tac_toe, connect_four, 'go(board_size=9)', backgammon, "
        "'2048(max_tile=131072)' (OpenSpiel's 2048 ends at max_tile, 2048 by default), or a "
        "two-player game of yours in pgx's API by import path, e.g. py:my_games:make or "
        "'py:my_games:make(size=5)' (its options)",
    )
    parser.add_argument(
        "--players",
        required=True,
        help="comma-separated player specs, e.g. minimax,mcts:200,uct_c=1.4,random",
    )
    parser.add_argument(
        "--games",
        type=int,
        default=10,
        help="games per pairing, colours alternating (default 10); in a one-player game (2048) "
        "the episodes each player plays",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default runs/arena-GAME-TIME); an existing "
        "tournament there is continued",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="round-robin",
        help="round-robin (every pair) or gauntlet (the first player against each other)",
    )
    parser.add_argument("--seed", type=int, default=0, help="tournament seed (default 0)")
    parser.add_argument(
        "--anchor", default=None, help="player rated 0 (default random if playing, else the first)"
    )
    parser.add_argument(
        "--concurrent",
        type=int,
        default=None,
        help="games of a pairing played at once (default: all for batched players, else 1)",
    )
    parser.add_argument("--quiet", action="store_true", help="no line per finished game")
    return parser


def run(args: argparse.Namespace) -> int:
    from selfplay.collector import collector_paused, quiet_garbage_collector

    with collector_paused():
        from arena.matches import load_game, run_tournament
        from arena.players import split_specs
        from arena.ratings import (
            default_anchor,
            fit_ratings,
            format_scores,
            format_table,
            results_dict,
            write_results,
        )
    quiet_garbage_collector()  # the players' searches compile next
    game = load_game(args.game)
    specs = split_specs(args.players)
    if args.games < 1:
        raise UsageError(f"--games must be at least 1, got {args.games}")
    if args.seed < 0:  # numpy's generators take none
        raise UsageError(f"--seed must be at least 0, got {args.seed}")
    if game.num_players() == 1:
        return _run_solo(game, specs, args)
    if args.concurrent is not None and args.concurrent < 1:
        raise UsageError(f"--concurrent must be at least 1, got {args.concurrent}")
    if args.anchor is not None and args.anchor not in specs:
        raise UsageError(f"--anchor {args.anchor!r} is not one of --players ({', '.join(specs)})")
    out = (
        Path(args.out)
        if args.out
        else Path("runs", f"arena-{game.get_type().short_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    )

    count = [0]

    def progress(record):
        count[0] += 1
        if not args.quiet:
            print(
                f"game {count[0]}: {record.players[0]} vs {record.players[1]}: "
                f"{record.result} in {len(record.actions)} moves",
                file=sys.stderr,
            )

    try:
        records = run_tournament(
            game,
            specs,
            args.games,
            out,
            format=args.format,
            seed=args.seed,
            max_concurrent=args.concurrent,
            on_game=progress,
        )
    except KeyboardInterrupt:
        print(
            f"stopped: {count[0]} new game(s) saved in {out / 'games.jsonl'}; run the same "
            "command again to continue",
            file=sys.stderr,
        )
        raise
    ratings = fit_ratings(
        records, players=[s for s in specs], anchor=args.anchor or default_anchor(specs)
    )
    results = results_dict(ratings, records, game=str(game), format=args.format, seed=args.seed)
    paths = write_results(out, results)
    print(format_table(results))
    print(format_scores(results))
    print(
        f"results: {paths['json']} (also {paths['csv'].name}, {paths['crosstable'].name}, "
        f"{paths['png'].name}); games: {out / 'games.jsonl'}"
    )
    return 0


def _run_solo(game, specs: list[str], args: argparse.Namespace) -> int:
    """A one-player game: each player's episodes, their scores and (2048) highest tiles."""
    import json

    from arena.players import check_distinct
    from arena.solo import evaluate_solo, format_solo_table

    check_distinct(specs)
    out = (
        Path(args.out)
        if args.out
        else Path("runs", f"arena-{game.get_type().short_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    )

    def progress(record):
        if not args.quiet:
            tile = record["highest_tile"]
            print(
                f"{record['player']} episode {record['episode']}: score {record['score']:g} in "
                f"{record['length']} moves" + ("" if tile is None else f", highest tile {tile}"),
                file=sys.stderr,
            )

    results = [
        evaluate_solo(game, spec, args.games, seed=args.seed, out_dir=out, on_episode=progress)
        for spec in specs
    ]
    print(format_solo_table(results))
    path = out / "results.json"
    summary = {
        "game": str(game),
        "seed": args.seed,
        "players": {r.player: r.as_dict() for r in results},
        "model": "mean, median and IQM of the episodes' scores; 95% percentile-bootstrap "
        "intervals over episodes",
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"results: {path}; episodes: {out / 'episodes.jsonl'}")
    return 0
