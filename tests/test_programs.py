"""A run's programs are built once a process for each config (`selfplay.programs`): the keys
that decide it and the cache that keeps them."""

import dataclasses
import pathlib
import re
import threading
import time

import jax
import numpy as np

import configs
from envs import env_spec
from selfplay.agent import make_agent
from selfplay.programs import (
    AGENT_FREE_FIELDS,
    LIMITS,
    RUN_LOOP_FIELDS,
    STATE_FIELDS,
    ProgramCache,
    built_once,
    program_key,
)


def _with(config, **learner):
    return config.replace(learner=dataclasses.replace(config.learner, **learner))


def test_configs_that_differ_in_what_the_run_loop_alone_reads_share_their_programs():
    config = configs.load_config("tic_tac_toe_alphazero")
    run_loop = configs.load_config(
        "tic_tac_toe_alphazero",
        [
            "learner.max_updates=7",
            "learner.max_seconds=12.5",
            "learner.max_frames=10000",
            "learner.checkpoint_every=3",
            "learner.log_every_s=0.1",
            "learner.stall_timeout_s=1",
            "evaluation.every_s=0",
            "logging.wandb_project=other",
        ],
    )
    assert {f"learner.{name}" for name in LIMITS} <= set(RUN_LOOP_FIELDS)
    assert program_key(run_loop) == program_key(config)
    spec = env_spec(config.env.name)
    assert make_agent(run_loop, spec) is make_agent(config, spec)
    # So do those that differ in the peak learning rate, which the update takes from the train
    # state (STATE_FIELDS; a run with another rate: tests/test_train.py).
    other_rate = configs.load_config("tic_tac_toe_alphazero", ["optimizer.learning_rate=0.5"])
    assert STATE_FIELDS == ("optimizer.learning_rate",)
    assert program_key(other_rate) == program_key(config)
    # Any other field builds anew: the final learning rate (a constant of the update's
    # schedule), the search, the seed, the batch.
    for other in (
        configs.load_config("tic_tac_toe_alphazero", ["optimizer.final_learning_rate=1e-5"]),
        configs.load_config("tic_tac_toe_alphazero", ["search.num_simulations=3"]),
        configs.load_config("tic_tac_toe_alphazero", ["seed=5"]),
        _with(config, batch_size=config.learner.batch_size * 2),
    ):
        assert program_key(other) != program_key(config)
    changed = configs.load_config("tic_tac_toe_alphazero", ["search.num_simulations=3"])
    assert make_agent(changed, spec) is not make_agent(config, spec)


def test_configs_that_differ_in_their_replay_share_the_agent_and_each_gets_its_own_store():
    config = configs.load_config("tic_tac_toe_alphazero")
    other = "priority_alpha=0.2 priority_beta=0.9 samples_per_insert=2 capacity=9000"
    replay = configs.load_config("tic_tac_toe_alphazero", [f"replay.{o}" for o in other.split()])
    spec = env_spec(config.env.name)
    assert "replay" in AGENT_FREE_FIELDS
    agent = make_agent(config, spec)
    assert make_agent(replay, spec) is agent  # its act, make_batch and update
    # The replay's own programs (Anakin's iteration, the replay on the device) build anew.
    assert program_key(replay) != program_key(config)
    # The store is the run's: built from the config it is given, not the agent's.
    for run in (config, replay):
        store = agent.make_store(run, 2)
        assert store.capacity == run.replay.capacity
        assert (store.alpha, store.beta) == (run.replay.priority_alpha, run.replay.priority_beta)
        assert store.rate_limiter.samples_per_insert == run.replay.samples_per_insert


def test_configs_that_differ_in_their_optimizer_share_the_agent_and_each_gets_its_own_update():
    from selfplay import run, sebulba

    config = configs.load_config("tic_tac_toe_alphazero")
    others = "optimizer.max_grad_norm=1e-9 optimizer.schedule=cosine optimizer.decay_steps=3"
    other = configs.load_config(
        "tic_tac_toe_alphazero", [*others.split(), "learner.publish_every=9", "learner.prefetch=0"]
    )
    assert {"optimizer", "learner.publish_every", "learner.prefetch"} <= set(AGENT_FREE_FIELDS)
    spec = env_spec(config.env.name)
    agent = make_agent(config, spec)
    assert make_agent(other, spec) is agent  # its act and make_batch
    # The update is built from the agent and each run's optimizer.
    devices = tuple(jax.devices()[:1])
    optimizers = [run._optimizer(c.optimizer) for c in (config, other)]
    assert optimizers[0] is not optimizers[1]
    updates = [sebulba._replicated_update(agent, o, devices, False) for o in optimizers]
    assert updates[0] is not updates[1]
    assert sebulba._replicated_update(agent, optimizers[1], devices, False) is updates[1]


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


def test_a_function_built_once_gives_threads_asking_at_once_one_value():
    # Actor threads build their environments' functions and the fused act+step at the same
    # moment: under functools.lru_cache both missed and each got a function of its own, which
    # JAX compiled once for each (tests/test_train.py checks a whole run).
    builds = []

    @built_once(maxsize=2)
    def jitted(name: str, size: int):
        builds.append((name, size))
        time.sleep(0.05)  # the other threads ask meanwhile
        return jax.jit(lambda x: x * size)

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(jitted("tic_tac_toe", 4))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [("tic_tac_toe", 4)] and all(f is got[0] for f in got)
    assert jitted("tic_tac_toe", size=4) is not got[0]  # keyed as lru_cache: keywords apart
    assert jitted("go", 4) is jitted("go", 4) and len(builds) == 3


# The modules whose functions a run's programs are built from (traced inside `jit`).
_PROGRAM_SOURCES = [
    "muzero",
    "search",
    "selfplay/agent.py",
    "selfplay/anakin.py",
    "selfplay/device_replay.py",
    "selfplay/rollout.py",
    "selfplay/actors.py",
    "selfplay/sebulba.py",
    "selfplay/learner_input.py",
    "envs",
]


def _lines_matching(sources: list[str], pattern: re.Pattern) -> list[str]:
    """'file:line: text' for each line of the Python files of `sources` (files and folders of
    the repository) that `pattern` finds something in."""
    root = pathlib.Path(__file__).parents[1]
    files = [
        file
        for source in sources
        for file in ([root / source] if source.endswith(".py") else (root / source).rglob("*.py"))
    ]
    assert len(files) > 20
    return [
        f"{file.relative_to(root)}:{number}: {line.strip()}"
        for file in files
        for number, line in enumerate(file.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_module_that_builds_programs_reads_a_field_left_out_of_the_key():
    # A program that read one of them would be shared by configs that differ there: stale.
    sections = [path for path in RUN_LOOP_FIELDS if "." not in path]  # name, evaluation, ...
    fields = [path.rpartition(".")[2] for path in RUN_LOOP_FIELDS if "." in path]
    names = "|".join(fields)
    run_loop = rf"\bconfig\.({'|'.join(sections)})\b|\.({names})\b|[\"']({names})[\"']"
    # The state's fields (the peak learning rate) reach the programs through the train state
    # alone (`TrainState.learning_rate`), never as `config.optimizer.learning_rate`.
    state = "|".join(rf"\b{re.escape(path)}\b" for path in STATE_FIELDS)
    found = _lines_matching(_PROGRAM_SOURCES, re.compile(f"{run_loop}|{state}"))
    assert not found, found


# The modules the agent's programs are built from (`selfplay.agent.make_agent`).
_AGENT_SOURCES = ["muzero", "search", "selfplay/agent.py", "envs"]


def test_no_module_the_agents_programs_are_built_from_reads_a_field_left_out_of_its_key():
    # The agent is shared by configs that differ in AGENT_FREE_FIELDS: a program of it that
    # read one would be stale. Its store reads the run's config (`make_store(run, ...)`), the
    # update is built from the agent and the run's optimizer.
    sections = [path for path in AGENT_FREE_FIELDS if "." not in path]
    fields = [path.rpartition(".")[2] for path in AGENT_FREE_FIELDS if "." in path]
    # `config.optimizer == "adam"` in muzero's optimizer is its own config's field (its name).
    section = "|".join(rf"\bconfig\.{name}\b(?!\s*[!=]=)" for name in sections)
    pattern = re.compile(f"{section}|\\b({'|'.join(fields)})\\b")
    found = _lines_matching(_AGENT_SOURCES, pattern)
    assert not found, found


def test_fresh_runs_of_one_network_build_its_parameters_program_once(tmp_path):
    """Two fresh runs whose configs differ in the optimizer and the search: two agents of one
    network, which share its functions (`selfplay.agent._networks`), so the second builds its
    parameters with the program the first traced and compiled, and compiles only the optimizer's
    state around them."""
    import muzero
    from selfplay import run as run_module
    from tests import fakes

    def fresh_start(overrides, run_dir):
        config = configs.load_config("tic_tac_toe_muzero", [*fakes.TINY, *overrides])
        agent = make_agent(config, env_spec(config.env.name))
        optimizer = muzero.make_optimizer(config.optimizer)
        started = run_module.start_run(config, agent, optimizer, run_dir)
        started.checkpointer.close()
        assert started.resumed_from is None  # fresh: nothing to resume
        return agent, started.state

    first_agent, first = fresh_start([], tmp_path / "first")
    with fakes.lowered_programs() as lowered, fakes.compiled_programs() as compiled:
        overrides = ["optimizer.optimizer=sgd", "optimizer.learning_rate=0.0123"]
        second_agent, second = fresh_start(
            [*overrides, "search.num_simulations=3"], tmp_path / "second"
        )
    assert second_agent is not first_agent and second_agent.init is first_agent.init
    # At most the optimizer's state around the parameters is lowered and compiled (none where an
    # earlier test left it in the process).
    assert set(lowered) <= {"jit(<lambda>)"} and set(compiled) <= {"jit(<lambda>)"}, (
        lowered,
        compiled,
    )
    # The same parameters (one seed, one program), each run its own optimizer and peak rate.
    leaves = zip(jax.tree.leaves(first.params), jax.tree.leaves(second.params), strict=True)
    assert all(bool((a == b).all()) for a, b in leaves)
    assert jax.tree.structure(first.opt_state) != jax.tree.structure(second.opt_state)
    assert second.learning_rate == np.float32(0.0123) != first.learning_rate


def test_two_recorders_of_one_event_open_at_once_each_record_and_close_their_own():
    """`tests.fakes`'s recorders nest (a test's inside `benchmarks/suite_costs.py`'s, say): the
    inner one closing while both hold equal lists leaves the outer one recording."""
    from tests import fakes

    with fakes.lowered_programs() as outer:
        with fakes.lowered_programs() as inner:
            pass  # both lists empty, equal

        def only_in_this_test(x):
            return x * 3 + 1

        jax.jit(only_in_this_test)(np.float32(1.0))
    assert inner == [] and outer == ["jit(only_in_this_test)"]
