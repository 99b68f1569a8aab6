"""A run's programs are built once a process for each config (`selfplay.programs`): the keys
that decide it and the cache that keeps them."""

import dataclasses
import threading
import time

import configs
from selfplay.agent import make_agent
from selfplay.envs import env_spec
from selfplay.programs import LIMITS, ProgramCache, program_key


def _with(config, **learner):
    return config.replace(learner=dataclasses.replace(config.learner, **learner))


def test_configs_that_differ_in_their_limits_alone_share_their_programs():
    config = configs.load_config("tic_tac_toe_alphazero")
    limits = _with(config, max_updates=7, max_seconds=12.5, max_frames=10_000)
    assert set(LIMITS) == {"max_updates", "max_seconds", "max_frames"}
    assert program_key(limits) == program_key(config)
    spec = env_spec(config.env.name)
    assert make_agent(limits, spec) is make_agent(config, spec)
    # Any other field builds anew: the learning rate (the update's), the search, the seed.
    for other in (
        configs.load_config("tic_tac_toe_alphazero", ["optimizer.learning_rate=0.5"]),
        configs.load_config("tic_tac_toe_alphazero", ["search.num_simulations=3"]),
        configs.load_config("tic_tac_toe_alphazero", ["seed=5"]),
        _with(config, batch_size=config.learner.batch_size * 2),
    ):
        assert program_key(other) != program_key(config)
    changed = configs.load_config("tic_tac_toe_alphazero", ["search.num_simulations=3"])
    assert make_agent(changed, spec) is not make_agent(config, spec)


def test_the_cache_keeps_the_newest_and_builds_a_value_once_for_threads_at_once():
    cache, builds = ProgramCache(size=2), []

    def build(value):
        def slowly():
            builds.append(value)
            time.sleep(0.05)  # the other threads ask meanwhile
            return [value]

        return slowly

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(cache.get("a", build("a")))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == ["a"] and all(value is got[0] for value in got)
    cache.get("b", build("b"))
    assert cache.get("a", build("a2")) is got[0]  # used last: "b" is the older
    cache.get("c", build("c"))  # evicts "b"
    assert cache.get("b", build("b2")) == ["b2"] and builds == ["a", "b", "c", "b2"]

    def failing():
        raise ValueError("bad config")

    try:
        cache.get("d", failing)
    except ValueError:
        pass
    assert cache.get("d", build("d")) == ["d"]  # nothing was kept for the failed build
