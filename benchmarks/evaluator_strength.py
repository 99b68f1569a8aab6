"""Does the run's evaluator see a tic-tac-toe agent get stronger? One JSON line per seed.

    .venv/bin/python benchmarks/evaluator_strength.py                 # 400 updates, seed 0
    .venv/bin/python benchmarks/evaluator_strength.py --updates 800 --seeds 0 1 2

Trains `tic_tac_toe_alphazero` (small: 16 channels, batches of 64, 32 simulations) for
`--updates` updates with the run's own evaluator (`arena.RunEvaluator`, every 0.2 s, 80 games
against `random`). The evaluated move is the policy network's (`evaluation.num_simulations=1`),
so what the network learned shows, not what the search finds. The same evaluator scores the
parameters the run starts from and those it ends with (a count of updates, not of seconds: a
slow machine learns as much). Each line: the scores before and after, their rise, the score
against the ceiling of 1 (every game won), and the evaluations logged during the run (in update
order). It was a test until 2026-11-26 (issue 39: a learning figure, not a behaviour); the bar
it kept: a rise of more than 0.15 after 400 updates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402

import configs  # noqa: E402
from arena import progress  # noqa: E402
from envs import env_spec  # noqa: E402
from selfplay.checkpoints import restore_params  # noqa: E402
from selfplay.lifetime import StopSignal  # noqa: E402
from selfplay.metrics import read_metrics  # noqa: E402
from selfplay.train import train  # noqa: E402

RISE_BAR = 0.15


def measure(updates: int, seed: int, run_dir: Path) -> dict:
    config = configs.load_config(
        "tic_tac_toe_alphazero",
        [
            f"seed={seed}",
            f"learner.max_updates={updates}",
            f"learner.checkpoint_every={max(1, updates // 2)}",
            "learner.max_seconds=0",
            "evaluation.every_s=0.2",
            "evaluation.games=80",
            "evaluation.opponents=[random]",
            "evaluation.num_simulations=1",
            "search.num_simulations=32",
            "replay.min_size=256",
            "learner.batch_size=64",
            "network.channels=16",
            "optimizer.learning_rate=3e-3",
            "actors.envs_per_thread=32",
        ],
    )
    # The run's own evaluator, first on the parameters the run starts from: its searches are
    # compiled before the run, so its evaluations during the run take milliseconds.
    evaluator = progress.RunEvaluator(config, env_spec(config.env.name))
    init_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)[0]  # as selfplay.run's
    start = jax.jit(evaluator.agent.init)(init_key)
    before = evaluator.evaluate(start, 0, StopSignal())["eval/random/score"]
    began = time.monotonic()
    train(config, run_dir, progress=False, make_evaluator=lambda config, spec: evaluator)
    seconds = time.monotonic() - began
    logged = [(r["step"], r["eval/random/score"]) for r in read_metrics(run_dir) if "eval" in r]
    end = restore_params(run_dir, target=start)
    after = evaluator.evaluate(end, updates, StopSignal())["eval/random/score"]
    return {
        "seed": seed,
        "updates": updates,
        "score_before": round(before, 3),
        "score_after": round(after, 3),
        "rise": round(after - before, 3),
        "rise_bar": RISE_BAR,
        "bar_met": after - before > RISE_BAR,
        "ratio_to_ceiling": round(after / 1.0, 3),
        "evaluations_logged": len(logged),
        "logged_in_update_order": [s for s, _ in logged] == sorted(s for s, _ in logged),
        "seconds": round(seconds, 1),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as root:
            print(json.dumps(measure(args.updates, seed, Path(root) / "run")), flush=True)


if __name__ == "__main__":
    main()
