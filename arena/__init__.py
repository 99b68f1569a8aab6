"""Arena: players, matches, tournaments and ratings (`podracer arena`), and one-player evaluation.

import arena
game = arena.load_game("tic_tac_toe")
records = arena.run_tournament(game, ["minimax", "mcts:50", "random"], 10, out_dir="runs/t")
ratings = arena.fit_ratings(records)
"""

from arena.atari_scores import ATARI_SCORES, human_normalized_score
from arena.ckpt_player import CheckpointPlayer
from arena.evaluate import (
    NOOP_STARTS,
    STICKY_ACTIONS,
    Estimate,
    EvalProtocol,
    EvalResult,
    EvaluationStopped,
    Summary,
    evaluate_policy,
    iqm,
    summarize,
)
from arena.matches import GameRecord, load_game, play_game, run_tournament, schedule
from arena.players import (
    BatchedPlayer,
    Player,
    PlayerSpec,
    describe_players,
    is_batched,
    make_player,
    parse_spec,
    register_player,
    registered_players,
    split_specs,
)
from arena.progress import RunEvaluator
from arena.pubeval import PubevalPlayer, pubeval
from arena.ratings import (
    Outcome,
    Ratings,
    crosstable,
    fit_ratings,
    format_table,
    pairing_scores,
    plot_rating_curve,
    plot_ratings,
    results_dict,
    write_results,
)
from arena.solo import SoloResult, evaluate_solo, format_solo_table

__all__ = [
    "pubeval",
    "SoloResult",
    "evaluate_solo",
    "format_solo_table",
    "ATARI_SCORES",
    "NOOP_STARTS",
    "STICKY_ACTIONS",
    "BatchedPlayer",
    "CheckpointPlayer",
    "Estimate",
    "EvalProtocol",
    "EvalResult",
    "EvaluationStopped",
    "GameRecord",
    "Outcome",
    "Player",
    "PlayerSpec",
    "PubevalPlayer",
    "Ratings",
    "RunEvaluator",
    "Summary",
    "crosstable",
    "pairing_scores",
    "describe_players",
    "evaluate_policy",
    "fit_ratings",
    "format_table",
    "human_normalized_score",
    "iqm",
    "is_batched",
    "load_game",
    "make_player",
    "parse_spec",
    "play_game",
    "plot_rating_curve",
    "plot_ratings",
    "register_player",
    "registered_players",
    "results_dict",
    "run_tournament",
    "schedule",
    "split_specs",
    "summarize",
    "write_results",
]
