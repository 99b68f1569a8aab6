"""search.engine: the same searches as mctx's loop (`engine="mctx"`), on the CPU.

Both engines run mctx's arithmetic in the same order (selection, the q-transforms, the backup's
`reward + discount * return` from the leaf up and `(value * visits + return) / (visits + 1)`), so
the actions, the visit counts and the trees' shapes (which node is whose child) are equal, and the
floats too, with one caveat: each program is compiled on its own, and LLVM may contract a multiply
and an add into one fused multiply-add (one rounding instead of two) in one program and not in the
other, depending on how XLA fused the operations around it. With XLA's default flags the two
agree bit for bit (benchmarks/search.py --engines, search/README.md); under this suite's -O0 flags
(tests/conftest.py) a backed-up value may differ in its last bit, so floats are compared to 1e-6.
"""

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

import search
from search import engine
from tests import fakes

NUM_ACTIONS, NUM_CHANCE = 6, 4


def _assert_same_search(ours, reference):
    """The same actions and visits, the same tree, and the same values up to the last bit."""
    np.testing.assert_array_equal(ours.action, reference.action)
    np.testing.assert_array_equal(ours.visit_counts, reference.visit_counts)
    for name in ("action_weights", "root_value", "q_values"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(reference, name), rtol=1e-6, atol=1e-7, err_msg=name
        )
    for path, a, b in zip(
        jax.tree_util.tree_leaves_with_path(ours.tree),
        jax.tree.leaves(ours.tree),
        jax.tree.leaves(reference.tree),
        strict=True,
    ):
        if jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=str(path[0]))
        else:  # counts, indices, embeddings of integers
            np.testing.assert_array_equal(a, b, err_msg=str(path[0]))


def _both_engines(make_run, config):
    """{engine: jitted run} for a `make_run(config) -> fn` and both engines."""
    return {name: jax.jit(make_run(config.replace(engine=name))) for name in ("podracer", "mctx")}


# One program: eager jnp ops compile one program apiece.
@functools.partial(jax.jit, static_argnums=1)
def _random_invalid(key, batch_size):
    invalid = jax.random.bernoulli(key, 0.4, (batch_size, NUM_ACTIONS))
    return invalid.at[jnp.arange(batch_size), jnp.arange(batch_size) % NUM_ACTIONS].set(False)


@pytest.mark.parametrize(
    "algorithm, decision_selection, batch_size, simulations, max_depth, masked, typed_key, "
    "backup_unrolled, levels_per_check",
    [
        ("muzero", "puct", 1, 4, None, False, True, False, 1),
        ("muzero", "puct", 7, 16, None, True, False, True, 2),
        ("gumbel_muzero", "puct", 8, 16, 2, True, False, True, 1),
        ("stochastic_muzero", "puct", 5, 12, None, True, False, False, 1),
        ("stochastic_muzero", "gumbel", 4, 16, 4, False, False, True, 3),
        # No checks: a descent and a backup of known trip counts (issue 83's GPU path).
        ("muzero", "puct", 7, 16, None, True, False, False, 0),
        ("gumbel_muzero", "puct", 8, 16, 5, True, False, False, 0),
        ("stochastic_muzero", "puct", 5, 12, 6, True, False, False, 0),
    ],
)
def test_engines_agree_on_learned_models(
    monkeypatch,
    algorithm,
    decision_selection,
    batch_size,
    simulations,
    max_depth,
    masked,
    typed_key,
    backup_unrolled,
    levels_per_check,
):
    """`typed_key`: a `jax.random.key` takes jax.random's own path in the engine (raw uint32
    keys take its threefry): the same bits either way. `backup_unrolled`: the backup in the
    straight-line code that accelerators run (on a CPU: a loop over the levels reached).
    `levels_per_check`: the descent's levels between two checks of whether a row continues
    (the levels past every row's path change nothing); 0, no check: every level to max_depth
    in a loop of known trip count, and the backup's returns in one too."""
    monkeypatch.setattr(engine, "_UNROLLED_BACKUP_ON_CPU", backup_unrolled)
    key = jax.random.PRNGKey(batch_size)
    if algorithm == "stochastic_muzero":
        params, root, model = fakes.random_stochastic_model(
            key, batch_size, NUM_ACTIONS, NUM_CHANCE
        )
    else:
        params, root, model = fakes.random_model(key, batch_size, NUM_ACTIONS)
    invalid = _random_invalid(jax.random.PRNGKey(1), batch_size) if masked else None
    config = search.SearchConfig(
        algorithm=algorithm,
        decision_selection=decision_selection,
        num_simulations=simulations,
        max_depth=max_depth,
        max_num_considered_actions=4,
        descent_levels_per_check=levels_per_check,
    )
    runs = _both_engines(
        lambda config: functools.partial(
            search.run,
            params,
            root=root,
            recurrent_fn=model,
            config=config,
            invalid_actions=invalid,
        ),
        config,
    )
    for seed in range(2):
        key = jax.random.key(seed) if typed_key else jax.random.PRNGKey(seed)
        _assert_same_search(runs["podracer"](key), runs["mctx"](key))


def _nim(num_actions=3):
    """Nim as an exact model: take 1 to `num_actions` stones from a pile [B]; whoever takes the
    last one wins (reward 1). Taking more than the pile holds is illegal."""

    def legal(pile):
        return jnp.arange(1, num_actions + 1)[None, :] <= pile[:, None]

    def step_fn(pile, action):
        next_pile = pile - (action + 1)
        terminal = next_pile == 0
        return next_pile, terminal.astype(jnp.float32), terminal, legal(next_pile)

    def uniform_zero(params, pile):  # plain MCTS: every child ties until it is visited
        return jnp.zeros(pile.shape + (num_actions,)), jnp.zeros(pile.shape)

    return search.make_exact_recurrent_fn(step_fn, uniform_zero), uniform_zero, legal


def test_engines_agree_on_nim_with_subtree_reuse():
    """The exact model with a uniform prior and zero values: every new node's children tie, so
    the actions depend on every bit of PUCT's tie-break noise. The continued search after
    `reuse_subtree` starts from trees that already hold nodes, one row from an empty tree."""
    recurrent_fn, uniform_zero, legal = _nim()
    config = search.SearchConfig(num_simulations=12, temperature=0.0)

    def make_move(config):
        def move(key, piles, tree, keep):
            prior_logits, value = uniform_zero((), piles)
            root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=piles)
            out = search.run(
                (), key, root, recurrent_fn, config, invalid_actions=~legal(piles), tree=tree
            )
            kept = search.reuse_subtree(out.tree, out.action, keep=keep, max_nodes=16)
            return out, kept, piles - (out.action + 1)

        return move

    piles, keep = np.array([9, 7, 12], np.int32), np.array([True, True, False])
    results = {}
    for name, move in _both_engines(make_move, config).items():
        first, kept, after = move(jax.random.PRNGKey(1), piles, None, keep)
        second, _, _ = move(jax.random.PRNGKey(2), after, kept, keep)
        results[name] = (first, second)
    for ours, reference in zip(results["podracer"], results["mctx"], strict=True):
        _assert_same_search(ours, reference)
    root_visits = np.asarray(results["podracer"][1].tree.node_visits)[:, 0]
    assert (root_visits[:2] > config.num_simulations + 1).all()  # rows 0 and 1 reused
    assert root_visits[2] == config.num_simulations + 1  # row 2 started afresh


def _dice_race(num_actions=3, goal=6):
    """A one-player race with chance: move 1 + action squares, then a coin adds 0 or 1 (its
    odds depend on the action); the last action is illegal on odd squares; reaching `goal`
    ends the game with reward 1. The state is the square [B]; the afterstate (square, action)
    differs in structure, so the search keeps mctx's two embeddings per node."""

    def legal(square):
        return jnp.ones(square.shape + (num_actions,), bool).at[:, -1].set(square % 2 == 0)

    def afterstate_fn(square, action):
        heads = 0.2 + 0.3 * action / (num_actions - 1)
        return (square, action), jnp.stack([1 - heads, heads], axis=-1)

    def chance_step_fn(afterstate, outcome):
        square, action = afterstate
        next_square = square + 1 + action + outcome
        terminal = next_square >= goal
        return next_square, terminal.astype(jnp.float32), terminal, legal(next_square), terminal

    def prediction_fn(params, square):
        logits = jnp.stack([jnp.sin(square * (i + 1.0)) for i in range(num_actions)], axis=-1)
        return logits, jnp.tanh(square / goal)

    model = search.make_exact_stochastic_model(
        afterstate_fn, chance_step_fn, prediction_fn, two_player=False, discount=0.9
    )
    return model, prediction_fn, legal


def test_engines_agree_on_an_exact_model_with_chance():
    model, prediction_fn, legal = _dice_race()

    @jax.jit
    def root_and_invalid(squares):
        prior_logits, value = prediction_fn(None, squares)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=squares)
        return root, ~legal(squares)

    root, invalid = root_and_invalid(np.arange(5, dtype=np.int32))
    config = search.SearchConfig(algorithm="stochastic_muzero", num_simulations=16)
    runs = _both_engines(
        lambda config: functools.partial(
            search.run, None, root=root, recurrent_fn=model, config=config
        ),
        config,
    )
    for name in runs:
        runs[name] = functools.partial(runs[name], invalid_actions=invalid)
    key = jax.random.PRNGKey(3)
    ours, reference = runs["podracer"](key), runs["mctx"](key)
    _assert_same_search(ours, reference)
    assert isinstance(ours.tree.embeddings, type(reference.tree.embeddings))


def test_the_engines_threefry_is_jax_randoms():
    key = jax.random.PRNGKey(7)

    @jax.jit
    def jax_randoms(key):  # one program: eager jnp ops compile one program apiece
        keys = jax.random.split(key, 9)
        uniform = jax.vmap(lambda k: jax.random.uniform(k, (7,)))(keys)
        return jax.random.split(key, 5), keys, jax.vmap(jax.random.split)(keys), uniform

    split, keys, both, uniform = jax.tree.map(np.asarray, jax_randoms(key))
    np.testing.assert_array_equal(jax.jit(engine.split_key, static_argnums=1)(key, 5), split)
    first, second = jax.jit(lambda k: engine._split_rows(engine._row_keys(k)))(keys)
    np.testing.assert_array_equal(np.stack(first, axis=-1), both[:, 0])
    np.testing.assert_array_equal(np.stack(second, axis=-1), both[:, 1])
    np.testing.assert_array_equal(
        jax.jit(lambda k: engine._uniform_rows(engine._row_keys(k), 7))(keys), uniform
    )


def test_bad_engine_names_the_field():
    with pytest.raises(ValueError, match="SearchConfig.engine must be one of"):
        search.SearchConfig(engine="alphago")
