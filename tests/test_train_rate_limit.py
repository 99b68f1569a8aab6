"""`train` ends: the rate limiter cannot stall it before the first sample; a caller can stop it.

The rate limiter lets every actor push a whole replay window before the learner's first sample.

A window spans several pushed segments of one actor's stream (`ceil(window / unroll_length)`), so
a limiter that stops the actors after fewer pushes leaves the learner waiting for a window that
no actor may write: both sides wait for ever.
"""

import configs
from selfplay.lifetime import StopSignal
from selfplay.train import train
from tests import fakes

# Windows of td_steps + 1 = 10 steps from pushes of 2 steps x 4 envs: 5 pushes per stream before
# the first window, more than one learner batch (16) of inserts at 1 sample per insert.
TINY = [
    "learner.batch_size=16",
    "replay.min_size=8",
    "replay.capacity=4000",
    "replay.samples_per_insert=1",
    "actors.threads_per_device=2",
    "actors.envs_per_thread=4",
    "actors.unroll_length=2",
    "search.num_simulations=4",
    "network.channels=8",
    "network.head_hidden=8",
    "network.representation_blocks=1",
    "learner.log_every_s=0.5",
    "learner.checkpoint_every=1000",
]


def test_windows_longer_than_the_inserts_allowed_before_sampling_still_train(tmp_path):
    config = configs.load_config(
        "tic_tac_toe_alphazero", [*TINY, "learner.max_updates=3", "learner.max_seconds=150"]
    )
    result = train(config, tmp_path / "run", progress=False)
    assert result.stopped_by == "max_updates"
    assert result.updates == 3


def test_the_callers_stop_signal_ends_the_run(tmp_path):
    config = configs.load_config(
        "tic_tac_toe_alphazero", [*TINY, "learner.max_updates=100000", "learner.max_seconds=150"]
    )
    stop = StopSignal()  # not set when train starts: falsy, still the one used
    with fakes.stop_once_logged(tmp_path / "run", '"loss"', stop):  # a run of minutes, cut
        result = train(config, tmp_path / "run", progress=False, stop=stop)
    assert result.stopped_by == "stopped by the caller"
    assert 0 < result.updates < 100000
