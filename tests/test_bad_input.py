"""Generated bad input (hypothesis): every config field of every preset, the command lines of
`podracer train` and `podracer arena`, tournaments that really play, and the search's entry
points. Each input gets one clear error (a UsageError, or exit 2, of at most three lines) or is
accepted; never another exception, a traceback or a hang. Then valid but unusual values, each a
short run or tournament. A fixed seed here (`derandomize`); a larger budget in
benchmarks/bad_input.py, which uses the same strategies and checks."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import pathlib
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import configs
from configs.experiment import ExperimentConfig

CI = settings(
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
MAX_LINES = 3


def leaf_fields(cls=ExperimentConfig, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """Every leaf field of the config as (dotted path, type hint)."""
    fields = []
    for field in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[field.name]
        if dataclasses.is_dataclass(hint):
            fields += leaf_fields(hint, f"{prefix}{field.name}.")
        else:
            fields.append((f"{prefix}{field.name}", hint))
    return fields


FIELDS = [path for path, _ in leaf_fields()]
PRESETS = configs.presets.names()

# Text a user might type for a value: numbers of every size and kind, words, JSON, unicode.
EXTREME_NUMBERS = ["0", "-1", "1e308", "-1e308", "1e-320", "nan", "inf", "-inf", "9" * 40, "-0"]
value_text = st.one_of(
    st.sampled_from(EXTREME_NUMBERS + ["", " ", "true", "no", "none", "null", "[]", "{}"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),  # unicode, control characters, empty
    st.lists(st.integers(-5, 300), max_size=4).map(json.dumps),
    st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2).map(json.dumps),
)
json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=6,
)


def check_one_clear_error(run: typing.Callable[[], typing.Any]) -> typing.Any:
    """Runs `run`: it returns, or raises a UsageError of at most MAX_LINES lines (returned)."""
    try:
        return run()
    except configs.UsageError as error:
        text = str(error)
        assert text.strip(), "an empty error"
        assert len(text.splitlines()) <= MAX_LINES, text
        return error


def check_config_round_trips(config: ExperimentConfig) -> None:
    """A config accepted is one a run can save and read back (config.json, a resume)."""
    data = json.loads(json.dumps(configs.to_dict(config)))
    again = configs.from_dict(data)
    assert json.dumps(configs.to_dict(again), sort_keys=True) == json.dumps(
        configs.to_dict(config), sort_keys=True
    )


def check_overrides(preset: str, overrides: list[str]) -> bool:
    """One example through `load_config`; True when the config was accepted."""
    result = check_one_clear_error(lambda: configs.load_config(preset, overrides))
    if isinstance(result, ExperimentConfig):
        check_config_round_trips(result)
        return True
    return False


overrides = st.lists(
    st.tuples(st.sampled_from(FIELDS), value_text).map(lambda kv: f"{kv[0]}={kv[1]}"),
    min_size=1,
    max_size=3,
)


@settings(CI, max_examples=150)
@given(preset=st.sampled_from(PRESETS), overrides=overrides)
def test_generated_overrides_of_every_field_get_one_line_or_a_valid_config(preset, overrides):
    check_overrides(preset, overrides)


WORST = ("-1", "nan", "1e308", "", "x")


def test_every_field_meets_the_worst_values():
    # Beside the sampled examples, every field meets each of the worst values, under a preset
    # that changes from field to field (every preset's fields: benchmarks/bad_input.py).
    for i, field in enumerate(FIELDS):
        for raw in WORST:
            check_overrides(PRESETS[i % len(PRESETS)], [f"{field}={raw}"])


def _mutated(data: dict, path: str, value) -> dict:
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    return data


def check_config_file(preset: str, changes: list[tuple[str, typing.Any]], folder: pathlib.Path):
    """A preset's config.json with fields replaced by generated JSON, loaded as a run's file."""
    data = configs.to_dict(configs.presets.get(preset))
    for path, value in changes:
        data = _mutated(data, path, value)
    path = folder / "config.json"
    path.write_text(json.dumps(data))
    result = check_one_clear_error(lambda: configs.load_config(str(path)))
    if isinstance(result, ExperimentConfig):
        check_config_round_trips(result)
    return result


@settings(CI, max_examples=100)
@given(
    preset=st.sampled_from(PRESETS),
    changes=st.lists(st.tuples(st.sampled_from(FIELDS), json_value), min_size=1, max_size=3),
)
def test_generated_config_files_get_one_line_or_a_valid_config(tmp_path, preset, changes):
    check_config_file(preset, changes, tmp_path)


# The command lines. Tokens a user might put together; values of every kind beside them.
TRAIN_FLAGS = [
    "--config",
    "--run-dir",
    "--quiet",
    "--distributed",
    "--coordinator",
    "--num-processes",
    "--process-id",
    "--connect-timeout",
    "--collectives-interface",
    "--local-processes",
]
ARENA_FLAGS = [
    "--game",
    "--players",
    "--games",
    "--out",
    "--format",
    "--seed",
    "--anchor",
    "--concurrent",
    "--quiet",
]
small_int_text = st.integers(-3, 5).map(str)
GAMES = ["tic_tac_toe", "connect_four", "go(board_size=5)", "2048", "kuhn_poker", "no_such_game"]
# A user's games by import path: a two-player pgx game, a one-player gymnax env, none at all.
GAMES += ["py:examples.nim_pgx:make(stones=4)", "py:examples.cartpole_gymnax:make", "py:no_such:f"]
PLAYERS = ["random", "minimax", "mcts", "mcts:4", "mcts:0", "mcts:-2", "mcts:4,uct_c=x", "uct"]
PLAYERS += ["ckpt:/nonexistent/run", "ckpt:", "human:1", "random,random", "mcts:4,,random"]


def train_token(folder: pathlib.Path):
    return st.one_of(
        st.sampled_from(TRAIN_FLAGS),
        st.sampled_from(PRESETS + ["no_such_preset", str(folder / "config.json"), "x.json"]),
        st.sampled_from([str(folder / "run"), str(folder / "file"), "host:1", "0", "2", "-1"]),
        small_int_text,
        value_text,
        st.tuples(st.sampled_from(FIELDS), value_text).map(lambda kv: f"{kv[0]}={kv[1]}"),
    )


def arena_argv(folder: pathlib.Path):
    token = st.one_of(
        st.sampled_from(ARENA_FLAGS),
        st.sampled_from(GAMES),
        st.lists(st.sampled_from(PLAYERS), min_size=1, max_size=3).map(",".join),
        st.sampled_from(["round-robin", "gauntlet", "swiss", str(folder / "arena")]),
        small_int_text,
        st.text(max_size=8),
    )
    # Mostly well-formed: --game and --players given, then a few tokens anywhere.
    return st.tuples(
        st.sampled_from(GAMES),
        st.lists(st.sampled_from(PLAYERS), min_size=1, max_size=3).map(",".join),
        st.lists(token, max_size=4),
    ).map(lambda t: ["--game", t[0], "--players", t[1], "--out", str(folder / "arena"), *t[2]])


class Started(BaseException):
    """Raised where the command would start its heavy work: the input was accepted."""


def run_command(argv: list[str]) -> tuple[int, str]:
    """`podracer ARGV` in this process: (exit code, stderr). Started counts as exit 0."""
    from podracer import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except Started:
            code = 0
    return code, err.getvalue()


# Tournaments that really play (no stand-ins): small games, cheap players that suit each, now
# and then one that does not, every option.
CHEAP_PLAYERS = {
    "tic_tac_toe": ["random", "mcts:2", "mcts:5,uct_c=0.5", "mcts:3,rollouts=2", "minimax"],
    "connect_four": ["random", "mcts:2", "mcts:3,rollouts=2", "minimax:depth=1"],
    "go(board_size=3)": ["random", "mcts:2", "minimax:depth=1"],
    "backgammon": ["random", "pubeval", "mcts:2"],
    "2048(max_tile=16)": ["random"],  # one player: each plays its episodes
}
ANY_PLAYER = sorted({p for pool in CHEAP_PLAYERS.values() for p in pool} | {"minimax:depth=2"})


def played_tournament():
    """`podracer arena` arguments (but --out) for a tournament that plays to its end or is
    refused: two to four players that suit a small game (one in 2048), now and then one that does
    not, either format, one or two games a pairing, any concurrency, anchor and seed."""

    def tournament(game):
        pool = CHEAP_PLAYERS[game]
        fewest = min(2, len(pool))
        suited = st.lists(st.sampled_from(pool), min_size=fewest, max_size=4, unique=True)
        odd = st.just([]) | st.lists(st.sampled_from(ANY_PLAYER), max_size=1)
        players = st.tuples(suited, odd).map(lambda p: list(dict.fromkeys(p[0] + p[1])))
        return players.flatmap(
            lambda players: st.tuples(
                st.just(game),
                st.just(players),
                st.sampled_from(["round-robin", "gauntlet"]),
                st.integers(1, 2),
                st.none() | st.integers(1, 8),
                st.none() | st.sampled_from(players),
                st.integers(0, 2**70),
            )
        )

    def argv(drawn):
        game, players, format, games, concurrent, anchor, seed = drawn
        args = [f"--game={game}", f"--players={','.join(players)}", f"--format={format}"]
        args += [f"--games={games}", f"--seed={seed}"]
        args += [f"--concurrent={concurrent}"] if concurrent is not None else []
        return args + ([f"--anchor={anchor}"] if anchor is not None else [])

    return st.sampled_from(list(CHEAP_PLAYERS)).flatmap(tournament).map(argv)


def check_tournament(argv: list[str], out: pathlib.Path) -> int:
    """A tournament plays and writes its results, or is refused in one clear line."""
    code = check_command(["arena", "--quiet", f"--out={out}", *argv])
    if code == 0:
        assert (out / "results.json").is_file(), argv
    return code


def check_command(argv: list[str]) -> int:
    code, err = run_command(argv)
    assert "Traceback" not in err, err
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert 1 <= len(err.strip().splitlines()) <= MAX_LINES, (argv, err)
    return code


@pytest.fixture
def stopped_before_training(monkeypatch, tmp_path):
    """`podracer train` stops where training would start: the run, the launchers and joining a
    job are stand-ins that raise Started."""
    from selfplay import launch, processes
    from selfplay import train as train_module

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setattr(train_module, "train", started)
    monkeypatch.setattr(launch, "launch_local", started)
    monkeypatch.setattr(launch, "supervise", started)
    monkeypatch.setattr(processes, "initialize", started)
    monkeypatch.setattr("selfplay.run.split_cpu", lambda count: None)
    monkeypatch.setattr("selfplay.train.enable_compilation_cache", lambda: None)
    monkeypatch.delenv("PODRACER_JOB_PROCESS", raising=False)
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "config.json").write_text("{not json")
    return tmp_path


def test_generated_train_command_lines_get_one_line_or_start(stopped_before_training):
    folder = stopped_before_training

    @settings(CI, max_examples=150)
    @given(argv=st.lists(train_token(folder), max_size=6))
    def check(argv):
        if any(a in ("-h", "--help") for a in argv):
            return
        check_command(["train", *argv])

    check()


@pytest.fixture
def stopped_before_playing(monkeypatch, tmp_path):
    """`podracer arena` stops where the first game would start, every player already made."""
    pytest.importorskip("pyspiel")
    from arena import matches, solo

    def started(*args, **kwargs):
        raise Started

    def solo_started(game, spec, *args, **kwargs):
        from arena.players import make_player

        make_player(spec, game)
        raise Started

    monkeypatch.setattr(matches, "_check_manifest", started)
    monkeypatch.setattr(solo, "evaluate_solo", solo_started)
    return tmp_path


def test_generated_arena_command_lines_get_one_line_or_start(stopped_before_playing):
    folder = stopped_before_playing

    @settings(CI, max_examples=100)
    @given(argv=arena_argv(folder))
    def check(argv):
        if any(a in ("-h", "--help") for a in argv):
            return
        check_command(["arena", *argv])

    check()


# The search: shapes, dtypes and masks given to `search.run` and `search.select_action`. One
# shape, jitted once per algorithm: the examples vary the masks, which are data.
BATCH, ACTIONS = 3, 4


def _recurrent_fn(params, key, action, embedding):
    import jax.numpy as jnp
    import mctx

    b = action.shape[0]
    out = mctx.RecurrentFnOutput(
        reward=jnp.zeros(b),
        discount=jnp.ones(b),
        prior_logits=jnp.zeros((b, ACTIONS)),
        value=jnp.zeros(b),
    )
    return out, embedding


def _root(batch: int = BATCH, actions: int = ACTIONS):
    import mctx
    import numpy as np

    return mctx.RootFnOutput(  # NumPy: constants under `jit`, no program of their own outside it
        prior_logits=np.zeros((batch, actions), np.float32),
        value=np.zeros(batch, np.float32),
        embedding=np.zeros((batch, 2), np.float32),
    )


def _search_config(algorithm: str = "muzero"):
    import search

    gumbel = algorithm == "gumbel_muzero"
    return search.SearchConfig(
        num_simulations=4,
        algorithm=algorithm,
        qtransform="completed_by_mix_value" if gumbel else None,
    )


@functools.cache
def _searched(algorithm: str):
    """(invalid [B, A]) -> (action [B], sampled [B]), jitted."""
    import jax

    import search

    def act(invalid):
        out = search.run(
            None,
            jax.random.key(0),
            _root(),
            _recurrent_fn,
            _search_config(algorithm),
            invalid_actions=invalid,
        )
        sampled = search.select_action(jax.random.key(1), out.action_weights, 1.0, invalid)
        return out.action, sampled

    return jax.jit(act)


masks = st.lists(
    st.lists(st.booleans(), min_size=ACTIONS, max_size=ACTIONS).filter(any),
    min_size=BATCH,
    max_size=BATCH,
)


@settings(CI, max_examples=30)
@given(legal=masks, algorithm=st.just("muzero"))  # and gumbel_muzero: benchmarks/bad_input.py
def test_the_search_picks_only_legal_actions_under_generated_masks(legal, algorithm):
    import numpy as np

    chosen, sampled = _searched(algorithm)(~np.asarray(legal, bool))
    for row in range(BATCH):
        assert legal[row][int(chosen[row])] and legal[row][int(sampled[row])], (legal, chosen)


WRONG_DTYPE_OF = ["logits dtype", "value dtype", "mask dtype"]
# Wrong inputs to `search.run`: (batch, actions, what is wrong, the dtype where it is one).
wrong_search_inputs = st.tuples(
    st.integers(1, 3),
    st.integers(2, 4),
    st.sampled_from(["logits rank", "value shape", "mask shape", "mask rank"] + WRONG_DTYPE_OF),
    st.sampled_from(["int32", "bool", "complex64"]),
)


def search_refuses(batch: int, actions: int, wrong: str, dtype: str) -> None:
    """Checks that `search.run` refuses the wrong input in one clear error (naming the input,
    where its dtype is wrong) before anything is traced or compiled (NumPy inputs)."""
    import jax
    import numpy as np

    import search

    root, invalid = _root(batch, actions), np.zeros((batch, actions), bool)
    named = None
    if wrong == "logits rank":
        root = root.replace(prior_logits=np.zeros((batch, actions, 1), np.float32))
    elif wrong == "value shape":
        root = root.replace(value=np.zeros(batch + 1, np.float32))
    elif wrong == "mask shape":
        invalid = np.zeros((batch, actions + 1), bool)
    elif wrong == "mask rank":
        invalid = np.zeros((actions,), bool)
    elif wrong == "logits dtype":
        named = "root.prior_logits"
        root = root.replace(prior_logits=np.zeros((batch, actions), dtype))
    elif wrong == "value dtype":
        root, named = root.replace(value=np.zeros(batch, dtype)), "root.value"
    else:  # a mask is boolean, or 0/1 in any real dtype
        invalid, named = np.zeros((batch, actions), np.complex64), "invalid_actions"
    with pytest.raises((AssertionError, ValueError, TypeError)) as raised:
        search.run(
            None, jax.random.key(0), root, _recurrent_fn, _search_config(), invalid_actions=invalid
        )
    message = str(raised.value)
    assert message.strip() and len(message.splitlines()) <= MAX_LINES, message
    assert not named or (named in message and "search.run" in message), message


@settings(CI, max_examples=20)
@given(case=wrong_search_inputs)  # more: benchmarks/bad_input.py
def test_the_search_refuses_generated_wrong_shapes_and_dtypes_with_one_clear_error(case):
    search_refuses(*case)


@pytest.mark.parametrize("algorithm", ["muzero", "gumbel_muzero"])
def test_a_model_whose_embedding_changes_shape_is_refused_and_integer_outputs_are_searched(
    algorithm,
):
    import jax
    import jax.numpy as jnp

    import search

    def searched(recurrent_fn):  # traced, never compiled: the checks are at trace time
        run = lambda: search.run(  # noqa: E731
            None, jax.random.key(0), _root(), recurrent_fn, _search_config(algorithm)
        )
        return jax.eval_shape(run)

    def wider(params, key, action, embedding):
        out, embedding = _recurrent_fn(params, key, action, embedding)
        return out, jnp.zeros(embedding.shape[:1] + (embedding.shape[1] + 1,))

    with pytest.raises(ValueError, match="recurrent_fn returned a next embedding") as raised:
        searched(wider)
    assert len(str(raised.value).splitlines()) == 1, raised.value

    def counting(params, key, action, embedding):  # a game's outcome as integers
        out, embedding = _recurrent_fn(params, key, action, embedding)
        integers = jnp.zeros(action.shape, jnp.int32)
        return out.replace(reward=integers, value=integers, discount=integers + 1), embedding

    # Integer outputs became a loop carry of another dtype than the tree's (a 5-line TypeError).
    assert searched(counting).root_value.dtype == jnp.float32


def test_select_action_takes_integer_visit_counts_and_refuses_what_it_cannot_sample():
    import jax
    import jax.numpy as jnp
    import numpy as np

    import search

    counts = np.array([[3, 1, 0], [0, 0, 4]], np.int32)  # as `tree.children_visits` holds them
    illegal = [[False, False, True], [True, False, False]]  # nested lists, as a user may pass

    @jax.jit
    def pick(visits, temperature):
        return search.select_action(jax.random.key(7), visits, temperature, illegal)

    for temperature in (0.0, 1.0):
        as_ints = pick(counts, temperature)
        assert np.array_equal(as_ints, pick(counts.astype(np.float32), temperature))
    assert np.asarray(pick(counts, 0.0)).tolist() == [0, 2]
    with pytest.raises(ValueError, match="temperature must be >= 0, got -1"):
        search.select_action(jax.random.key(0), counts, -1.0)
    with pytest.raises(AssertionError, match="shape"):  # chex: the mask's shape against [B, A]
        search.select_action(jax.random.key(0), counts, 1.0, np.zeros((2, 4), bool))
    with pytest.raises(TypeError, match="visit_probs must be a floating-point array, got bool"):
        search.select_action(jax.random.key(0), np.ones((2, 3), bool), 1.0)
    with pytest.raises(TypeError, match="invalid_actions must be boolean"):
        search.select_action(jax.random.key(0), counts, 1.0, jnp.zeros((2, 3), jnp.complex64))


def test_reuse_subtree_and_mask_invalid_logits_refuse_what_they_cannot_index_in_one_line():
    import jax
    import numpy as np

    import search

    def empty_tree():  # a search's tree of zeros, from its shapes alone (traced, not compiled)
        run = lambda: search.run(None, jax.random.key(0), _root(), _recurrent_fn, _search_config())  # noqa: E731
        shapes = jax.eval_shape(run).tree
        return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)

    tree = empty_tree()
    refusals = {
        "action must be an integer array, got float32": np.zeros(BATCH, np.float32),
        rf"action of rows \[1\] outside \[0, {ACTIONS}\): \[{ACTIONS}\]": [0, ACTIONS, 0],
        "shape": np.zeros(BATCH + 1, np.int32),
    }
    for message, action in refusals.items():
        with pytest.raises((TypeError, ValueError, AssertionError), match=message) as raised:
            search.reuse_subtree(tree, action)
        assert len(str(raised.value).splitlines()) <= MAX_LINES
    with pytest.raises(TypeError, match="logits must be a floating-point array, got int32"):
        search.mask_invalid_logits(np.zeros((BATCH, ACTIONS), np.int32), np.zeros((1, 1), bool))
    masked = search.mask_invalid_logits(np.zeros((1, 2), np.float32), [[True, False]])
    assert np.asarray(masked).tolist() == [[np.finfo(np.float32).min, 0.0]]


def test_a_row_with_no_legal_action_is_refused_eagerly_and_searched_all_legal_under_jit():
    import jax
    import numpy as np

    import search

    legal = np.ones((BATCH, ACTIONS), bool)
    legal[1] = False  # the second row has no legal action
    with pytest.raises(ValueError, match=r"rows \[1\] have no legal action") as raised:
        invalid = (~legal).tolist()  # nested lists are read as the array they spell
        search.run(
            None,
            jax.random.key(0),
            _root(),
            _recurrent_fn,
            _search_config(),
            invalid_actions=invalid,
        )
    assert len(str(raised.value).splitlines()) <= MAX_LINES
    # Under jit the values are unknown: the row is searched as if every action were legal,
    # and its visits and weights stay finite.
    chosen, sampled = _searched("muzero")(~legal)
    assert 0 <= int(chosen[1]) < ACTIONS and 0 <= int(sampled[1]) < ACTIONS
    for row in (0, 2):
        assert legal[row][int(chosen[row])]


# Valid but unusual values, each trained by a short run of the default preset through `podracer
# train` in this process: the run trains to its limit, learning at least `updates` updates (Anakin:
# whole iterations), or is refused in one line holding `refusal`. benchmarks/bad_input.py runs
# every case of the table alone, each in a process of its own; the tests run the same cases in
# UNUSUAL_GROUPS, several values that touch different parts of a run trained together (a run
# costs seconds, most of them its programs' tracing, whatever its values).
RUN_BASE = [
    "network.channels=8",
    "network.head_hidden=8",
    "learner.batch_size=8",
    "replay.min_size=16",
    "replay.capacity=4096",  # a Sebulba push is 32 sequences of up to 32 steps
    "actors.threads_per_device=2",
    "actors.envs_per_thread=4",
    "actors.unroll_length=8",
    "search.num_simulations=4",
    "learner.max_updates=2",
    "learner.max_seconds=120",
    "evaluation.every_s=0",
]


class Unusual(typing.NamedTuple):
    overrides: list[str]
    refusal: str | None = None  # None: the run trains
    updates: int = 2  # the fewest updates a run that trains has learned when it stops


DIVERGED = "the training diverged: the parameters at update"
UNUSUAL_RUNS: dict[str, Unusual] = {
    # Sizes at their smallest, or larger than what holds them
    "one environment": Unusual(["actors.threads_per_device=1", "actors.envs_per_thread=1"]),
    "one simulation": Unusual(["search.num_simulations=1"]),
    "a network one unit wide": Unusual(["network.channels=1", "network.head_hidden=1"]),
    "a batch larger than the replay": Unusual(
        ["learner.batch_size=64", "replay.capacity=32"], "exceeds the replay capacity 32"
    ),
    "a replay smaller than one window": Unusual(
        ["replay.capacity=8", "replay.min_size=8"], "smaller than one window of 10 steps"
    ),
    "a horizon longer than a game": Unusual(
        ["loss.td_steps=50", "actors.unroll_length=32", "loss.unroll_steps=12"]
    ),
    "one-step value targets": Unusual(["loss.td_steps=1"]),
    "a discount of zero": Unusual(["loss.discount=0"]),
    # The search at its edges
    "greedy search (temperature 0)": Unusual(["search.temperature=0"]),
    "Dirichlet noise alone at the root": Unusual(["search.dirichlet_fraction=1"]),
    "a search one step deep": Unusual(["search.max_depth=1"]),
    "Gumbel MuZero with one simulation": Unusual(
        [
            "search.algorithm=gumbel_muzero",
            "search.qtransform=completed_by_mix_value",
            "search.num_simulations=1",
        ]
    ),
    "Gumbel MuZero considering one action": Unusual(
        [
            "search.algorithm=gumbel_muzero",
            "search.qtransform=completed_by_mix_value",
            "search.max_num_considered_actions=1",
        ]
    ),
    "every move random": Unusual(["actors.random_move_prob=1.0"]),
    "greedy from the first move": Unusual(["actors.greedy_after_moves=1"]),
    # The optimizer at its edges
    "a learning rate of 1e-30": Unusual(["optimizer.learning_rate=1e-30"]),
    "gradients clipped to a norm of 1e-9": Unusual(["optimizer.max_grad_norm=1e-9"]),
    "a cosine schedule one step long": Unusual(
        ["optimizer.schedule=cosine", "optimizer.decay_steps=1", "optimizer.warmup_steps=1"]
    ),
    # A checkpoint asked for at every update: none may hold the diverged parameters.
    "a learning rate that diverges": Unusual(
        ["optimizer.learning_rate=1e6", "learner.checkpoint_every=1"], DIVERGED
    ),
    # The replay and the learner's pace
    "a replay that starts sampling at one step": Unusual(["replay.min_size=1"]),
    "a thousand samples per insert": Unusual(["replay.samples_per_insert=1000"]),
    "a thousandth of a sample per insert": Unusual(["replay.samples_per_insert=0.001"]),
    "uniform sampling without importance weights": Unusual(
        ["replay.priority_alpha=0", "replay.priority_beta=0"]
    ),
    "parameters never published to the actors": Unusual(["learner.publish_every=1000"]),
    "no updates prefetched": Unusual(["learner.prefetch=0"]),
    # Saving and stopping
    "a checkpoint every update, one kept": Unusual(
        ["learner.checkpoint_every=1", "learner.keep_checkpoints=1"]
    ),
    "the replay saved with every checkpoint": Unusual(
        ["replay.checkpoint=true", "learner.checkpoint_every=1"]
    ),
    "one update": Unusual(["learner.max_updates=1"], updates=1),
    # The actors' first frames may end it before the learner's first update: none are owed.
    "a budget of one frame": Unusual(["learner.max_frames=1"], updates=0),
    "a budget of a millisecond": Unusual(["learner.max_seconds=0.001"], updates=0),
    "the largest seed": Unusual(["seed=2147483647"]),  # 2**63 - 1 overflowed in an actor thread
    # Anakin
    "anakin, one environment, one simulation": Unusual(
        ["runtime=anakin", "actors.envs_per_thread=1", "search.num_simulations=1"]
    ),
    "anakin, a budget of one frame": Unusual(["runtime=anakin", "learner.max_frames=1"], updates=0),
    "anakin, a learning rate that diverges": Unusual(
        ["runtime=anakin", "optimizer.learning_rate=1e6", "learner.checkpoint_every=1"], DIVERGED
    ),
}


def test_generated_tournaments_play_or_get_one_line(tmp_path):
    outs = iter(range(10**6))

    @settings(CI, max_examples=20)
    @given(argv=played_tournament())
    def check(argv):
        check_tournament(argv, tmp_path / f"t{next(outs)}")

    check()


# Valid but unusual tournaments, each `podracer arena` in this process (a second or less): it plays
# and writes its results, or is refused in one line holding the text given.
UNUSUAL_ARENA: dict[str, tuple[list[str], str | None]] = {
    "UCT at its fewest simulations": (["--game=tic_tac_toe", "--players=mcts:2,random"], None),
    "UCT with one simulation": (  # OpenSpiel's UCT had no move: a traceback
        ["--game=tic_tac_toe", "--players=mcts:1,random"],
        "simulations must be at least 2",
    ),
    "UCT exploring at 1e308": (["--game=tic_tac_toe", "--players=mcts:2,uct_c=1e308,random"], None),
    "a gauntlet of three, one game at a time": (
        ["--game=tic_tac_toe", "--players=minimax,mcts:2,random", "--format=gauntlet"]
        + ["--concurrent=1"],
        None,
    ),
    "more games at once than games": (
        ["--game=tic_tac_toe", "--players=random,minimax", "--games=3", "--concurrent=1000"],
        None,
    ),
    "go on a 3x3 board": (["--game=go(board_size=3)", "--players=mcts:2,random"], None),
    "backgammon": (["--game=backgammon", "--players=pubeval,random"], None),
    "2048 ending at its first tile": (["--game=2048(max_tile=2)", "--players=random"], None),
    "connect four, minimax one ply deep": (
        ["--game=connect_four", "--players=minimax:depth=1,random"],
        None,
    ),
    "an anchor that is not random": (
        ["--game=tic_tac_toe", "--players=mcts:2,random", "--anchor=mcts:2"],
        None,
    ),
    "a seed past 64 bits": (
        ["--game=tic_tac_toe", "--players=mcts:2,random", f"--seed={2**70}"],
        None,
    ),
    "a negative seed": (  # numpy's traceback at the first game
        ["--game=tic_tac_toe", "--players=mcts:2,random", "--seed=-1"],
        "--seed must be at least 0",
    ),
}


def check_unusual_tournament(name: str, out: pathlib.Path) -> int:
    """UNUSUAL_ARENA[name] plays and writes its results into `out` (0), or is refused in the
    one line expected (2)."""
    args, refusal = UNUSUAL_ARENA[name]
    code, err = run_command(["arena", "--quiet", "--games=1", f"--out={out}", *args])
    assert "Traceback" not in err, err
    if refusal is None:
        assert code == 0, err
        assert (out / "results.json").is_file()
        return 0
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and refusal in lines[0], err
    return 2


@pytest.mark.parametrize("name", UNUSUAL_ARENA)
def test_valid_but_unusual_tournaments_play_or_get_one_line(name, tmp_path):
    check_unusual_tournament(name, tmp_path / "arena")


# Every case of UNUSUAL_RUNS in exactly one group (test_every_unusual_case_is_in_one_group); a
# case with a refusal, or that stops before it learns, alone.
UNUSUAL_GROUPS: list[tuple[str, ...]] = [
    ("one environment", "one simulation", "a network one unit wide"),
    ("a batch larger than the replay",),
    ("a replay smaller than one window",),
    ("a horizon longer than a game", "a discount of zero", "greedy search (temperature 0)"),
    ("one-step value targets", "Dirichlet noise alone at the root", "a search one step deep"),
    ("Gumbel MuZero with one simulation", "every move random"),
    ("Gumbel MuZero considering one action", "greedy from the first move"),
    (
        "a learning rate of 1e-30",
        "gradients clipped to a norm of 1e-9",
        "a replay that starts sampling at one step",
        "parameters never published to the actors",
    ),
    ("a cosine schedule one step long", "a thousand samples per insert", "no updates prefetched"),
    ("a learning rate that diverges",),
    ("a thousandth of a sample per insert", "uniform sampling without importance weights"),
    (
        "a checkpoint every update, one kept",
        "the replay saved with every checkpoint",
        "the largest seed",
    ),
    ("one update",),
    ("a budget of one frame", "a budget of a millisecond"),
    ("anakin, one environment, one simulation",),
    ("anakin, a budget of one frame",),
    ("anakin, a learning rate that diverges",),
]


def unusual_group(names: tuple[str, ...]) -> Unusual:
    """The cases `names` as one run: their overrides together (no field set to two values),
    the refusal of the one case that has one (alone), the fewest updates any of them owes."""
    cases = [UNUSUAL_RUNS[name] for name in names]
    overrides = [override for case in cases for override in case.overrides]
    values: dict[str, str] = {}
    for override in overrides:
        field, value = override.split("=", 1)
        assert values.setdefault(field, value) == value, (names, field)
    refusals = [case.refusal for case in cases if case.refusal is not None]
    assert not refusals or len(cases) == 1, names
    return Unusual(overrides, refusals[0] if refusals else None, min(c.updates for c in cases))


def test_every_unusual_case_is_in_one_group():
    grouped = [name for group in UNUSUAL_GROUPS for name in group]
    assert sorted(grouped) == sorted(UNUSUAL_RUNS), set(grouped) ^ set(UNUSUAL_RUNS)
    for group in UNUSUAL_GROUPS:
        unusual_group(group)


@pytest.mark.parametrize("names", UNUSUAL_GROUPS, ids=" + ".join)
def test_valid_but_unusual_values_train_or_get_one_line(names, tmp_path):
    import jax
    import numpy as np

    from selfplay.checkpoints import restore_params

    case = unusual_group(names)
    run = tmp_path / "run"
    code, err = run_command(["train", "--run-dir", str(run), "--quiet", *RUN_BASE, *case.overrides])
    assert "Traceback" not in err, err
    if case.refusal is None:
        assert code == 0, err
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        learned = max((r["step"] for r in records if "loss" in r), default=0)
        assert learned >= case.updates, records
        assert (run / "checkpoints").is_dir()  # the final checkpoint
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and case.refusal in lines[0], err
    # Nothing a diverged run reached was saved: every checkpoint holds finite parameters.
    for step in (p.name for p in (run / "checkpoints").glob("*") if p.name.isdigit()):
        params = restore_params(run, int(step))
        assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params)), step
