"""Population Based Training in one program (`selfplay.population`): a member's hyperparameters
as arrays train exactly as the same values written in its config, exploit and explore as Ray
Tune's PBT decides them, one checkpoint holds the population (Ctrl-C, resume, a damaged one), and
what cannot run as one program is refused in one line."""

import json
import pathlib

import jax
import numpy as np
import pytest

import configs
import muzero
from podracer import cli
from selfplay import pbt, population
from selfplay.agent import make_agent
from selfplay.anakin import make_anakin_iteration, plan_anakin
from selfplay.lifetime import StopSignal
from selfplay.metrics import read_metrics
from selfplay.run import _optimizer
from tests.test_anakin_gymnax import MUZERO, VTRACE
from tests.test_checkpoints import garble_file

LEARNING_RATE = "optimizer.learning_rate=1e-4:1e-2:log"
ENTROPY = "loss.entropy_cost=1e-3:1e-1:log"
BASELINE = "loss.baseline_cost=0.05:2:log"
# Populations of 2 exploring these three: one program, compiled once a process (the member test's).
THREE = (LEARNING_RATE, ENTROPY, BASELINE)


def _settings(config, *explore, members=4, interval=256, frames=768):
    return pbt.PopulationSettings(
        config, members, interval, frames, tuple(pbt.parse_explore(e, config) for e in explore)
    )


def _vtrace(*extra):
    return configs.load_config("cartpole_vtrace", [*VTRACE, *extra])


def test_exploit_pairs_take_the_bottom_quarter_from_the_top_and_rank_nan_last():
    rng = np.random.default_rng(0)
    pairs = population.exploit_pairs([5.0, 1.0, 9.0, 7.0], rng)
    assert pairs == [(1, 2)]  # 1 of 4: the worst takes the best
    pairs = population.exploit_pairs([5.0, np.nan, 9.0, 7.0, 1.0, 3.0, 8.0, -np.inf], rng)
    assert sorted(t for t, _ in pairs) == [1, 7]  # 2 of 8; NaN and -inf last
    assert all(s in (2, 6) for _, s in pairs)
    assert population.exploit_pairs([np.nan, -np.inf], rng) == []  # no finite top: no one


def test_explore_perturbs_or_draws_again_within_the_windows():
    config = _vtrace()
    settings = _settings(config, LEARNING_RATE, ENTROPY, members=8)
    rng = np.random.default_rng(1)
    drawn = population.draw_values(settings, rng)
    assert drawn.shape == (8, 2)
    assert np.all((drawn[:, 0] >= 1e-4) & (drawn[:, 0] <= 1e-2))
    outcomes = set()
    for _ in range(200):
        new = population.explore_values(settings, [1e-3, 1e-2], rng)
        assert 1e-4 <= new[0] <= 1e-2 and 1e-3 <= new[1] <= 1e-1
        ratio = round(new[0] / 1e-3, 6)
        outcomes.add(ratio if ratio in (0.8, 1.2) else "drawn")
    assert outcomes == {0.8, 1.2, "drawn"}


def _member_against_plain(config, keys, values, batched=None):
    """One iteration and one update of member 0 of a population of 2 (values as arrays), and of
    the plain Anakin iteration of the config with member 0's values written in, from the same
    state, carry and keys."""
    program = population.make_population_program(config, keys, 2, batched)
    values = np.asarray(values, np.float32)  # [2, K]
    member_keys = jax.random.split(jax.random.PRNGKey(3), 2)
    states, carries = program.init(values, member_keys)
    index = np.int32(program.plan.min_iterations)
    # Read back, then indexed in NumPy (each leaf's x[0] on the device compiles a program).
    first = jax.tree.map(lambda x: x[0], jax.device_get((states, carries)))  # before donation
    after, carries_after, _ = program.iterate(values, states, index, carries)
    if not program.inside:
        after, _, _ = program.learn(values, after, index, np.int32(0), carries_after)
    own = dict(zip(keys, map(float, values[0]), strict=True))
    written = configs.apply_overrides(config, [f"{k}={v!r}" for k, v in own.items()])
    spec = program.spec
    agent = make_agent(written, spec)
    plan = plan_anakin(written, agent, 1)
    from envs import jax_env_functions

    functions = jax_env_functions(written.env.name, plan.games, **written.env.options)
    update = muzero.make_update(agent.loss_fn, _optimizer(written.optimizer), target=agent.target)
    _, iteration, learn_step = make_anakin_iteration(
        written, agent, plan, functions, update, axis_name=None
    )
    lr = own.get("optimizer.learning_rate", written.optimizer.learning_rate)
    state = first[0]._replace(learning_rate=np.float32(lr))

    @jax.jit
    def plain(state, carry):
        state, carry, _ = iteration(state, index, carry, learn=program.inside)
        if not program.inside:
            state, _, _ = learn_step(state, index, 0, carry)
        return state

    expected = plain(state, first[1])
    return jax.tree.map(lambda x: x[0], jax.device_get(after.params)), expected.params


@pytest.mark.parametrize("batched", [True, False])  # vmapped, or side by side (convolutions)
def test_a_vtrace_member_trains_as_its_values_written_in_its_config(batched):
    config = _vtrace()
    keys = [pbt.parse_explore(e, config).key for e in THREE]
    values = [[3e-3, 0.05, 0.7], [1e-4, 1e-3, 0.1]]
    got, expected = _member_against_plain(config, keys, values, batched)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7), got, expected)


def test_a_muzero_member_trains_as_its_values_written_in_its_config():
    config = configs.load_config(
        "cartpole_vtrace", [*MUZERO, "learner.batch_size=8", "loss.unroll_steps=1"]
    )
    keys = ["search.temperature", "loss.value_loss_weight", "loss.policy_loss_weight"]
    got, expected = _member_against_plain(config, keys, [[0.5, 0.3, 2.0], [1.0, 1.0, 1.0]])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6), got, expected)


def test_the_population_program_takes_the_configs_cpu_compile_options():
    # devices.cpu_convolutions=eigen is a run's XLA:CPU option: the population's programs too.
    config = _vtrace("devices.cpu_convolutions=eigen")
    expected = dict(make_agent(config, population.env_spec(config.env.name)).compiler_options)
    if not expected:
        pytest.skip("this jaxlib lacks the option: no compile options to pass")
    program = population.make_population_program(config, [LEARNING_RATE.split("=")[0]], 2)
    values = np.full((2, 1), 1e-3, np.float32)
    # The jit's own parameters (a jaxpr around it would make it a nested jit, which jax refuses).
    traced = program.init.trace(values, jax.random.split(jax.random.PRNGKey(0), 2))
    assert dict(traced._params["compiler_options_kvs"]) == expected


def test_a_population_exploits_saves_one_checkpoint_stops_and_resumes(tmp_path):
    config = _vtrace()
    settings = _settings(config, *THREE, members=2)
    run_dir = tmp_path / "pop"
    stop = StopSignal()
    # Stopped mid-run: the population is saved and says so.
    original = population._interval_end

    def stop_after_first(*args, **kwargs):
        fitness = original(*args, **kwargs)
        stop.set("test")
        return fitness

    population._interval_end = stop_after_first
    try:
        first = population.run_in_program(settings, run_dir, stop=stop)
    finally:
        population._interval_end = original
    assert not first.finished and first.stopped_by == "test"
    events = pbt.read_events(run_dir)
    assert [e["event"] for e in events][:1] == ["start"] and events[-1]["event"] == "stopped"
    assert sum(e["event"] == "exploit" for e in events) == 1  # one decision: 1 of 2
    exploit = next(e for e in events if e["event"] == "exploit")
    assert exploit["target_fitness"] <= exploit["source_fitness"]
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert len(saved) == 1
    # Resumed: it goes on from the saved population to the end.
    result = population.run_in_program(settings, run_dir)
    assert result.finished and result.frames >= settings.max_frames
    events = pbt.read_events(run_dir)
    assert [e["event"] for e in events].count("resume") == 1 and events[-1]["event"] == "end"
    resumed_at = next(e for e in events if e["event"] == "resume")["frames"]
    assert resumed_at == first.frames
    for i in range(settings.population):
        records = read_metrics(pbt.member_dir(run_dir, i))
        assert [r["frames"] for r in records] == sorted({r["frames"] for r in records})
        assert records[-1]["frames"] == result.frames
        assert "explore/optimizer.learning_rate" in records[-1]
    # The values a target trained with after the exploit are the explored ones.
    target = exploit["target"]
    after = [e for e in events if e["event"] == "interval" and e["member"] == target][1]["values"]
    assert after == pytest.approx(exploit["new"])


def test_random_search_never_exploits_and_a_damaged_checkpoint_is_set_aside(tmp_path, capsys):
    config = _vtrace()
    settings = _settings(config, *THREE, members=2, frames=512)
    run_dir = tmp_path / "search"
    population.run_in_program(settings, run_dir, exploit=False)
    events = pbt.read_events(run_dir)
    assert "exploit" not in {e["event"] for e in events}
    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert len(steps) == 2
    for path in (run_dir / "checkpoints" / str(steps[-1]) / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":  # as tests/test_run_dir.py damages one
            garble_file(path)
    capsys.readouterr()
    longer = settings._replace(max_frames=768)
    result = population.run_in_program(longer, run_dir, exploit=False)
    assert result.finished
    assert f"checkpoint {steps[-1]} is damaged" in capsys.readouterr().out
    assert (run_dir / "checkpoints-damaged").is_dir()
    resumed = [e for e in pbt.read_events(run_dir) if e["event"] == "resume"]
    assert resumed[-1]["frames"] == 256  # from the older checkpoint


@pytest.mark.parametrize(
    "preset, extra, message",
    [
        ("cartpole_vtrace", [], "--in-process runs Anakin presets"),
        (
            "cartpole_vtrace",
            [
                "runtime=anakin",
                "env.name=gymnax:CartPole-v1",
                "--explore=replay.samples_per_insert=1:4",
            ],
            "shapes the program",
        ),  # fmt: skip
    ],
)
def test_what_cannot_run_as_one_program_is_refused_in_one_line(
    preset, extra, message, capsys, tmp_path
):
    flags = [e for e in extra if e.startswith("--")]
    overrides = [e for e in extra if not e.startswith("--")]
    code = cli.main(
        [
            "pbt",
            "--in-process",
            f"--config={preset}",
            "--population=2",
            "--interval-frames=100",
            "--max-frames=200",
            f"--explore={LEARNING_RATE}",
            *flags,
            f"--run-dir={tmp_path / 'pop'}",
            *overrides,
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "pop").exists()


def test_podracer_pbt_runs_an_anakin_preset_as_one_program_and_as_random_search(
    capsys, tmp_path, monkeypatch
):
    from selfplay import run

    drawn = []  # the folders whose learning curves were drawn
    monkeypatch.setattr(run, "plot_run", drawn.append)
    run_dir = tmp_path / "pop"
    args = [
        "pbt",
        "--config=cartpole_vtrace",
        "--population=2",
        "--interval-frames=256",
        "--max-frames=512",
        *[f"--explore={e}" for e in THREE],
        f"--run-dir={run_dir}",
        *VTRACE,
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "in one program" in out and "best member" in out
    start = pbt.read_events(run_dir)[0]
    assert start["event"] == "start" and start["in_program"] is True
    assert json.loads((run_dir / "pbt.json").read_text())["population"] == 2
    assert drawn == [pbt.member_dir(run_dir, 0), pbt.member_dir(run_dir, 1)]  # once it finished
    # Again with the folder alone: a finished population stays finished, its best member the
    # one its last interval logged.
    last = {e["member"]: e["fitness"] for e in pbt.read_events(run_dir) if e["event"] == "interval"}
    best = max(last, key=last.get)
    assert cli.main(["pbt", f"--run-dir={run_dir}"]) == 0
    assert f"best member {best}: fitness {last[best]:.4g}" in capsys.readouterr().out
    assert pathlib.Path(run_dir / "checkpoints").is_dir()
    # A larger budget goes on, taking first the decision its last interval skipped; a smaller
    # one is refused.
    assert cli.main(["pbt", f"--run-dir={run_dir}", "--max-frames=256"]) == 2
    assert "may raise that budget, not lower it" in capsys.readouterr().err
    before = [e["frames"] for e in pbt.read_events(run_dir) if e["event"] == "exploit"]
    assert before == [256]  # none at the last interval's end
    assert cli.main(["pbt", f"--run-dir={run_dir}", "--max-frames=768"]) == 0
    assert "finished at 768 frames" in capsys.readouterr().out
    events = pbt.read_events(run_dir)
    extend = next(i for i, e in enumerate(events) if e["event"] == "extend")
    assert events[extend]["from"] == 512 and events[extend]["max_frames"] == 768
    exploits = [e for e in events[extend:] if e["event"] == "exploit"]
    assert [e["frames"] for e in exploits] == [512]  # before the new interval, with its fitness
    last = {e["member"]: e["fitness"] for e in events[:extend] if e["event"] == "interval"}
    assert exploits[0]["source_fitness"] == last[exploits[0]["source"]]
    assert events[-1]["event"] == "end"
    assert json.loads((run_dir / "pbt.json").read_text())["max_frames"] == 768

    # --random-search: the same program (in this process, built once), never exploiting.
    drawn.clear()
    run_dir = tmp_path / "search"
    args = [
        "pbt",
        "--random-search",
        "--no-plot",
        "--config=cartpole_vtrace",
        "--population=2",
        "--interval-frames=256",
        "--max-frames=512",
        *[f"--explore={e}" for e in THREE],
        f"--run-dir={run_dir}",
        *VTRACE,
    ]
    assert cli.main(["pbt", "--ray", *args[1:]]) == 2  # one program only
    assert "--random-search runs in one program" in capsys.readouterr().err
    assert cli.main(args) == 0
    assert "random search (no exploits)" in capsys.readouterr().out
    events = pbt.read_events(run_dir)
    assert events[0]["exploit"] is False and "exploit" not in {e["event"] for e in events}
    assert drawn == []  # --no-plot
    # Resumed with the folder alone, it stays random search; the flag again is refused.
    calls = []
    original = population.run_in_program

    def recording(settings, run_dir, **options):
        calls.append(options)
        return original(settings, run_dir, **options)

    monkeypatch.setattr(population, "run_in_program", recording)
    assert cli.main(["pbt", f"--run-dir={run_dir}"]) == 0
    assert calls == [{"exploit": False, "plot": True}]  # --no-plot is a flag of each call
    assert cli.main(["pbt", "--random-search", f"--run-dir={run_dir}"]) == 2
    assert "without --random-search" in capsys.readouterr().err
