"""search/: equal to mctx, exact-model play on tic-tac-toe, masks, batch independence, reuse."""

import ast
import functools
import pathlib

import chex
import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pgx
import pytest

import search
from tests import fakes

NUM_ACTIONS = 6


# One program: eager jnp ops compile one program apiece.
@functools.partial(jax.jit, static_argnums=(1, 2))
def _random_invalid(key, batch_size, num_actions=NUM_ACTIONS):
    """A different mask per row, never all-invalid."""
    invalid = jax.random.bernoulli(key, 0.4, (batch_size, num_actions))
    return invalid.at[jnp.arange(batch_size), jnp.arange(batch_size) % num_actions].set(False)


NUM_CHANCE = 4


def _model(algorithm, key, batch_size):
    """(params, root, recurrent_fn): a random learned model, with chance for stochastic_muzero."""
    if algorithm == "stochastic_muzero":
        return fakes.random_stochastic_model(key, batch_size, NUM_ACTIONS, NUM_CHANCE)
    return fakes.random_model(key, batch_size, NUM_ACTIONS)


@pytest.mark.parametrize(
    "algorithm, batch_size, noise",
    [
        ("muzero", 1, 0.0),  # no root noise (greedy evaluation, the arena): none drawn
        ("muzero", 32, 0.25),
        ("gumbel_muzero", 7, 0.25),
        ("stochastic_muzero", 1, 0.0),
        ("stochastic_muzero", 32, 0.25),
    ],
)
def test_equal_to_mctx_without_tree(algorithm, batch_size, noise):
    params, root, recurrent_fn = _model(algorithm, jax.random.PRNGKey(batch_size), batch_size)
    invalid = _random_invalid(jax.random.PRNGKey(1), batch_size)
    config = search.SearchConfig(
        algorithm=algorithm,
        num_simulations=12,
        max_num_considered_actions=4,
        temperature=0.7,
        dirichlet_fraction=noise,
    )
    ours_fn = jax.jit(
        lambda key: search.run(params, key, root, recurrent_fn, config, invalid_actions=invalid)
    )
    if algorithm != "gumbel_muzero":  # the Dirichlet noise's gamma draws, only where mixed in
        drawn = "random_gamma" in str(jax.make_jaxpr(ours_fn)(jax.random.PRNGKey(0)))
        assert drawn == (noise > 0)
    # mctx's policy of the algorithm, with the same settings.
    shared = dict(invalid_actions=invalid, temperature=0.7, dirichlet_fraction=noise)
    if algorithm == "muzero":
        policy = functools.partial(mctx.muzero_policy, recurrent_fn=recurrent_fn, **shared)
    elif algorithm == "stochastic_muzero":
        policy = functools.partial(
            mctx.stochastic_muzero_policy,
            decision_recurrent_fn=recurrent_fn.decision_fn,
            chance_recurrent_fn=recurrent_fn.chance_fn,
            **shared,
        )
    else:
        policy = functools.partial(
            mctx.gumbel_muzero_policy,
            recurrent_fn=recurrent_fn,
            invalid_actions=invalid,
            max_num_considered_actions=4,
        )
    reference_fn = jax.jit(
        lambda key: policy(params=params, rng_key=key, root=root, num_simulations=12)
    )

    @jax.jit
    def reference_summary(reference_tree):
        if algorithm == "stochastic_muzero":  # the root's statistics: its decision children
            reference_tree = reference_tree.replace(
                **{
                    name: getattr(reference_tree, name)[..., :NUM_ACTIONS]
                    for name in (
                        "children_index",
                        "children_prior_logits",
                        "children_visits",
                        "children_rewards",
                        "children_discounts",
                        "children_values",
                    )
                }
            )
        return reference_tree.summary()

    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours, reference = ours_fn(key), reference_fn(key)
        np.testing.assert_array_equal(ours.action, reference.action)
        summary = reference_summary(reference.search_tree)
        np.testing.assert_array_equal(ours.visit_counts, summary.visit_counts)
        # Separately compiled programs may differ in the last bit of float sums.
        np.testing.assert_allclose(
            ours.action_weights, reference.action_weights, rtol=1e-6, atol=1e-7
        )
        np.testing.assert_allclose(ours.root_value, summary.value, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.q_values, summary.qvalues, rtol=1e-5, atol=1e-6)


def test_gumbel_decisions_in_a_stochastic_tree_with_one_outcome_are_gumbel_muzeros():
    """With a single certain outcome after every move, a stochastic search with Gumbel's
    decision selection is Gumbel MuZero on the same model: with one simulation per action
    (each root action visited once), its action and its improved policy are mctx's."""
    batch_size = 5
    params, root, recurrent_fn = fakes.random_model(jax.random.PRNGKey(3), batch_size, NUM_ACTIONS)
    model = _with_chance(recurrent_fn, num_chance=1)
    config = search.SearchConfig(
        algorithm="stochastic_muzero",
        decision_selection="gumbel",
        num_simulations=NUM_ACTIONS,
        max_num_considered_actions=NUM_ACTIONS,
        gumbel_scale=0.0,
    )
    assert config.uses_gumbel and config.qtransform_name == "completed_by_mix_value"
    ours = jax.jit(lambda key: search.run(params, key, root, model, config))(jax.random.PRNGKey(0))
    reference = jax.jit(
        lambda key: mctx.gumbel_muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            NUM_ACTIONS,
            max_num_considered_actions=NUM_ACTIONS,
            gumbel_scale=0.0,
        )
    )(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(ours.visit_counts, np.ones((batch_size, NUM_ACTIONS)))
    np.testing.assert_array_equal(ours.action, reference.action)
    np.testing.assert_allclose(ours.action_weights, reference.action_weights, rtol=1e-5, atol=1e-6)
    # Not the visit counts, which are uniform here: the policy improved by the Q-values.
    assert not np.allclose(ours.action_weights, 1 / NUM_ACTIONS, atol=1e-3)


@pytest.mark.parametrize("algorithm", ["muzero", "stochastic_muzero"])
def test_jit_and_no_jit_agree(algorithm):
    params, root, recurrent_fn = _model(algorithm, jax.random.PRNGKey(0), 4)
    config = search.SearchConfig(algorithm=algorithm, num_simulations=6)
    invalid = _random_invalid(jax.random.PRNGKey(2), 4)
    run = functools.partial(
        search.run, recurrent_fn=recurrent_fn, config=config, invalid_actions=invalid
    )
    eager = run(params, jax.random.PRNGKey(3), root)
    jitted = jax.jit(run)(params, jax.random.PRNGKey(3), root)
    np.testing.assert_array_equal(eager.action, jitted.action)
    np.testing.assert_allclose(eager.action_weights, jitted.action_weights, rtol=1e-6)
    np.testing.assert_allclose(eager.root_value, jitted.root_value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["muzero", "gumbel_muzero", "stochastic_muzero"])
def test_batch_rows_do_not_interact(algorithm):
    """Changing every other row (model state and mask) leaves row 0's search unchanged."""
    batch_size = 6
    params, root, recurrent_fn = _model(algorithm, jax.random.PRNGKey(0), batch_size)
    invalid = _random_invalid(jax.random.PRNGKey(1), batch_size)
    config = search.SearchConfig(algorithm=algorithm, num_simulations=10)

    @jax.jit
    def other_rows(root, invalid):
        other_root = jax.tree.map(lambda x: x.at[1:].set(-x[1:] * 3.0), root)
        return other_root, invalid.at[1:].set(~invalid[1:]).at[1:, 0].set(False)

    other_root, other_invalid = other_rows(root, invalid)
    run = jax.jit(
        functools.partial(
            search.run, params, jax.random.PRNGKey(7), recurrent_fn=recurrent_fn, config=config
        )
    )
    a = jax.tree.map(np.asarray, run(root, invalid_actions=invalid))  # read on the host
    b = jax.tree.map(np.asarray, run(other_root, invalid_actions=other_invalid))
    np.testing.assert_array_equal(a.visit_counts[0], b.visit_counts[0])
    np.testing.assert_array_equal(a.action[0], b.action[0])
    np.testing.assert_allclose(a.root_value[0], b.root_value[0], rtol=1e-6)
    assert not np.array_equal(a.visit_counts[1:], b.visit_counts[1:])


def _tempting_masked_model(batch_size, num_actions):
    """A model whose legal moves look terrible: each costs -10, far below a [-1, 1] value range.

    Under `by_min_max` normalisation a visited legal child then scores below zero, under the
    zero-prior illegal child's tie-break noise: only an explicit interior mask keeps it out.

    Row r forbids its own set of actions at every node (even actions for even rows, ...).
    """
    action_ids = np.arange(num_actions)  # NumPy: the root and its mask need no XLA program

    def illegal_for_rows(rows):  # [B] -> [B, A]
        return (action_ids[None, :] % 3) == (rows[:, None] % 3)

    def recurrent_fn(params, rng_key, action, rows):
        del params, rng_key
        took_illegal = jnp.take_along_axis(illegal_for_rows(rows), action[:, None], axis=1)[:, 0]
        output = mctx.RecurrentFnOutput(
            reward=jnp.where(took_illegal, 1.0, -10.0),
            discount=jnp.ones_like(rows, dtype=jnp.float32),
            prior_logits=search.mask_invalid_logits(
                jnp.zeros((rows.shape[0], num_actions)), illegal_for_rows(rows)
            ),
            value=jnp.full(rows.shape, 5.0),
        )
        return output, rows

    rows = np.arange(batch_size, dtype=np.int32)
    root = mctx.RootFnOutput(
        prior_logits=np.zeros((batch_size, num_actions), np.float32),
        value=np.full((batch_size,), 5.0, np.float32),
        embedding=rows,
    )
    return root, recurrent_fn, illegal_for_rows(rows)


def _with_chance(recurrent_fn, num_chance=3):
    """A `search.StochasticModel` around a plain model: the move's afterstate is (state, action),
    its uniform chance outcomes all lead where `recurrent_fn` leads, its value is that step's."""

    def decision_fn(params, rng_key, action, embedding):
        output, _ = recurrent_fn(params, rng_key, action, embedding)
        chance_logits = jnp.zeros(action.shape + (num_chance,))
        value = output.reward + output.discount * output.value
        output = mctx.DecisionRecurrentFnOutput(chance_logits=chance_logits, afterstate_value=value)
        return output, (embedding, action)

    def chance_fn(params, rng_key, outcome, afterstate):
        del outcome
        output, next_embedding = recurrent_fn(params, rng_key, afterstate[1], afterstate[0])
        return (
            mctx.ChanceRecurrentFnOutput(
                action_logits=output.prior_logits,
                value=output.value,
                reward=output.reward,
                discount=output.discount,
            ),
            next_embedding,
        )

    return search.StochasticModel(decision_fn, chance_fn)


@pytest.mark.parametrize(
    "algorithm, qtransform, decision_selection",
    [
        ("muzero", "by_min_max", "puct"),
        ("muzero", "by_parent_and_siblings", "puct"),
        ("gumbel_muzero", "completed_by_mix_value", "puct"),
        ("stochastic_muzero", "by_min_max", "puct"),
        ("stochastic_muzero", "completed_by_mix_value", "gumbel"),
    ],
)
def test_illegal_actions_never_chosen_at_root_or_inside(algorithm, qtransform, decision_selection):
    batch_size, num_actions = 5, 6
    root, recurrent_fn, illegal = _tempting_masked_model(batch_size, num_actions)
    if algorithm == "stochastic_muzero":
        recurrent_fn = _with_chance(recurrent_fn)
    config = search.SearchConfig(
        algorithm=algorithm,
        num_simulations=40,
        qtransform=qtransform,
        decision_selection=decision_selection,
    )
    out = jax.jit(functools.partial(search.run, recurrent_fn=recurrent_fn, config=config))(
        (), jax.random.PRNGKey(0), root, invalid_actions=illegal
    )
    tree = jax.tree.map(np.asarray, out.tree)  # read on the host
    exists = tree.node_visits > 0  # [B, N]
    if algorithm == "stochastic_muzero":  # decision nodes only, and their A action children
        exists = exists & tree.embeddings.is_decision_node
        tree = tree.replace(children_index=tree.children_index[..., :num_actions])
    expanded = tree.children_index != mctx.Tree.UNVISITED  # [B, N, A]
    assert not np.any(np.asarray(expanded & illegal[:, None, :] & exists[:, :, None]))
    assert not np.any(np.asarray(out.visit_counts)[np.asarray(illegal)])
    assert not np.any(np.asarray(illegal)[np.arange(batch_size), np.asarray(out.action)])
    # The search went below the root, so the interior mask was exercised.
    assert int(np.max(np.sum(exists, axis=1))) > num_actions


def test_stochastic_search_needs_a_stochastic_model():
    params, root, recurrent_fn = fakes.random_model(jax.random.PRNGKey(0), 2, NUM_ACTIONS)
    _, _, model = fakes.random_stochastic_model(jax.random.PRNGKey(0), 2, NUM_ACTIONS, NUM_CHANCE)
    stochastic = search.SearchConfig(algorithm="stochastic_muzero", num_simulations=4)
    with pytest.raises(ValueError, match="StochasticModel"):
        search.run(params, jax.random.PRNGKey(0), root, recurrent_fn, stochastic)
    with pytest.raises(ValueError, match="StochasticModel"):
        search.run(params, jax.random.PRNGKey(0), root, model, search.SearchConfig())


def test_mctx_alone_selects_illegal_interior_actions():
    """Why interior masking is needed: the same search in mctx expands illegal actions."""
    root, recurrent_fn, illegal = _tempting_masked_model(5, 6)
    qtransform = functools.partial(mctx.qtransform_by_min_max, min_value=-1.0, max_value=1.0)
    out = jax.jit(
        lambda key: mctx.muzero_policy(
            (), key, root, recurrent_fn, 40, invalid_actions=illegal, qtransform=qtransform
        )
    )(jax.random.PRNGKey(0))
    tree = jax.tree.map(np.asarray, out.search_tree)
    expanded = (tree.children_index != mctx.Tree.UNVISITED)[:, 1:]  # interior nodes only
    assert np.any(np.asarray(expanded & illegal[:, None, :]))


# --- tic-tac-toe with the real rules as the model ---------------------------------------------

TTT = pgx.make("tic_tac_toe")


_step = jax.jit(jax.vmap(TTT.step))


@functools.partial(jax.jit, static_argnums=0)
def _initial_states(batch_size):
    return jax.vmap(TTT.init)(jax.random.split(jax.random.PRNGKey(0), batch_size))


@jax.jit
def _step_rows(state, actions, playing):
    """The `playing` rows step, the others stay."""
    stepped = jax.vmap(TTT.step)(state, actions)
    return jax.tree.map(functools.partial(_where_rows, playing), stepped, state)


def _states_after(move_lists):
    """Batched pgx states reached by playing each move list from the empty board."""
    state = _initial_states(len(move_lists))
    longest = max(len(m) for m in move_lists)
    for ply in range(longest):
        actions = np.array([m[ply] if ply < len(m) else 0 for m in move_lists], np.int32)
        playing = np.array([ply < len(m) for m in move_lists])
        state = _step_rows(state, actions, playing)
    return state


def _where_rows(rows, new, old):
    return jnp.where(rows.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)


def _search_tic_tac_toe(states, prediction_fn, config, seed=0, optimized=False, tree=None):
    recurrent_fn = search.make_exact_recurrent_fn(fakes.pgx_step_fn(TTT), prediction_fn)

    def run(key, states, tree):  # the root's prediction in the search's program
        prior_logits, value = prediction_fn((), states)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=states)
        invalid = ~states.legal_action_mask
        return search.run((), key, root, recurrent_fn, config, invalid_actions=invalid, tree=tree)

    # `optimized` for thousands of positions: optimised code then pays for its compile.
    return jax.jit(run, compiler_options=fakes.OPTIMIZED if optimized else None)(
        jax.random.PRNGKey(seed), states, tree
    )


def _uniform_zero(params, states):
    batch_size = states.current_player.shape[0]
    return jnp.zeros((batch_size, 9)), jnp.zeros(batch_size)


# Positions where the player to move can win at once, or else must block one threat.
WIN_OR_BLOCK = [
    (0, 3, 1, 4),
    (2, 4, 6, 0, 1),
    (0, 1, 4, 2),
    (1, 0, 4, 3),
    (0, 3, 4, 5),
    (0, 8, 1, 7),
    (6, 0, 7, 1),
    (0, 1, 3, 2),
    (4, 0, 8, 2),
    (1, 4, 2, 0),
    (4, 2, 6, 0),
    (4, 0, 2, 6),
    (0, 4, 8, 2),
    (4, 0, 1, 7, 3),
    (4, 8, 3, 5),
]


def test_uniform_prior_zero_value_finds_wins_and_blocks():
    answers = []
    for moves in WIN_OR_BLOCK:
        board = fakes.relative_board(moves)
        wins, threats = fakes.immediate_wins(board, 1), fakes.immediate_wins(board, 2)
        assert wins or len(threats) == 1, moves  # each position has one kind of right answer
        answers.append(set(wins) if wins else set(threats))
    assert (
        sum(1 for moves in WIN_OR_BLOCK if not fakes.immediate_wins(fakes.relative_board(moves), 1))
        >= 6
    )  # blocks are tested, not only wins
    states = _states_after(WIN_OR_BLOCK)
    config = search.SearchConfig(num_simulations=400, dirichlet_fraction=0.0, temperature=0.0)
    out = _search_tic_tac_toe(states, _uniform_zero, config)
    for moves, answer, action in zip(WIN_OR_BLOCK, answers, np.asarray(out.action), strict=True):
        assert int(action) in answer, (moves, answer, int(action))


# The board's 8 rotations and reflections, each as the cells it reads: board[perm] is the image.
_ROTATE = np.array([6, 3, 0, 7, 4, 1, 8, 5, 2])
_MIRROR = np.array([2, 1, 0, 5, 4, 3, 8, 7, 6])
_SYMMETRIES = [
    functools.reduce(lambda p, q: p[q], [np.arange(9)] + [_ROTATE] * r + [_MIRROR] * m)
    for r in range(4)
    for m in range(2)
]


def test_exact_minimax_value_plays_optimally_everywhere():
    """With the exact value as value function, the move is optimal in every reachable position,
    one of each class of the board's 8 symmetries (the same game, turned or mirrored)."""
    positions = fakes.reachable_positions()
    assert len(positions) == 4520
    assert len({tuple(perm) for perm in _SYMMETRIES}) == 8
    classes = {}
    for board, moves in positions:
        images = {tuple(np.asarray(board)[perm]) for perm in _SYMMETRIES}
        classes.setdefault(min(images), (board, moves))
    positions = list(classes.values())
    assert len(positions) == 627  # the non-terminal positions up to symmetry
    table = jax.device_put(fakes.minimax_value_table())

    def minimax_prediction(params, states):
        index = fakes.relative_board_index(states.observation)
        return jnp.zeros((index.shape[0], 9)), table[index]

    states = _states_after([moves for _, moves in positions])
    # Backed-up averages include the opponent's explored blunders; 128 simulations are enough
    # for them to concentrate on the best replies everywhere (64 leave about 10 positions wrong).
    config = search.SearchConfig(num_simulations=128, dirichlet_fraction=0.0, temperature=0.0)
    out = _search_tic_tac_toe(states, minimax_prediction, config, optimized=True)
    actions = np.asarray(out.action)
    wrong = [
        (board, int(a))
        for (board, _), a in zip(positions, actions, strict=True)
        if int(a) not in fakes.optimal_moves(board)
    ]
    assert not wrong, f"{len(wrong)} suboptimal moves, e.g. {wrong[:3]}"
    # The root value agrees in sign with the exact value wherever the game is decided.
    exact = np.array([fakes.negamax(board) for board, _ in positions])
    decided = exact != 0
    assert np.all(np.sign(np.asarray(out.root_value))[decided] == exact[decided])


# --- subtree reuse ----------------------------------------------------------------------------


def _assert_consistent(tree):
    """Every existing non-root node is its parent's child through its own action."""
    tree = jax.tree.map(np.asarray, tree)
    for row in range(tree.node_visits.shape[0]):
        for node in np.nonzero(tree.node_visits[row] > 0)[0]:
            if node == 0:
                assert tree.parents[row, 0] == mctx.Tree.NO_PARENT
                continue
            parent, action = tree.parents[row, node], tree.action_from_parent[row, node]
            assert 0 <= parent < node
            assert tree.children_index[row, parent, action] == node


def test_reuse_keeps_child_statistics_and_adds_exactly_num_simulations():
    states = _states_after([(), (4,), (0, 4), (4, 0, 8)])
    config = search.SearchConfig(num_simulations=48, dirichlet_fraction=0.0, temperature=0.0)
    first = _search_tic_tac_toe(states, _uniform_zero, config)
    action = first.action
    kept_on_device = jax.jit(search.reuse_subtree)(first.tree, action)
    first, kept = jax.tree.map(np.asarray, (first, kept_on_device))  # read on the host
    rows = np.arange(4)
    child = first.tree.children_index[rows, 0, first.action]
    assert np.all(np.asarray(child) > 0)

    np.testing.assert_array_equal(kept.node_visits[:, 0], first.tree.node_visits[rows, child])
    np.testing.assert_array_equal(
        kept.children_visits[:, 0], first.tree.children_visits[rows, child]
    )
    np.testing.assert_allclose(kept.node_values[:, 0], first.tree.node_values[rows, child])
    _assert_consistent(kept)
    # Exactly the child's subtree survives.
    assert np.all(np.sum(kept.node_visits > 0, axis=1) < np.sum(first.tree.node_visits > 0, axis=1))

    next_states = _step(states, action)
    continued = _search_tic_tac_toe(
        next_states, _uniform_zero, config.replace(num_simulations=16), seed=1, tree=kept_on_device
    )
    continued = jax.tree.map(np.asarray, continued)
    np.testing.assert_array_equal(continued.tree.node_visits[:, 0], kept.node_visits[:, 0] + 16)
    np.testing.assert_array_equal(
        np.sum(continued.visit_counts, axis=1), kept.node_visits[:, 0] + 16 - 1
    )
    assert continued.tree.node_visits.shape[1] == kept.node_visits.shape[1] + 16
    _assert_consistent(continued.tree)


def test_reuse_fixed_shape_loop_and_reset_rows():
    """A jitted move loop keeps its tree shape with max_nodes; keep=False restarts a row."""
    config = search.SearchConfig(num_simulations=16, dirichlet_fraction=0.0, temperature=0.0)
    recurrent_fn = search.make_exact_recurrent_fn(fakes.pgx_step_fn(TTT), _uniform_zero)
    max_nodes = config.num_simulations + 1

    @jax.jit
    def move(states, tree, key, keep):
        prior_logits, value = _uniform_zero((), states)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=states)
        out = search.run(
            (),
            key,
            root,
            recurrent_fn,
            config,
            invalid_actions=~states.legal_action_mask,
            tree=tree,
        )
        tree = search.reuse_subtree(out.tree, out.action, keep=keep, max_nodes=max_nodes)
        return jax.vmap(TTT.step)(states, out.action), tree, out

    states = _states_after([(), ()])
    fresh = _search_tic_tac_toe(states, _uniform_zero, config)
    center = np.array([4, 4], np.int32)
    tree = jax.jit(functools.partial(search.reuse_subtree, max_nodes=max_nodes))(
        fresh.tree, center, keep=np.array([True, False])
    )
    assert int(np.asarray(tree.node_visits)[1, 0]) == 0  # row 1 restarts
    states = _step(states, center)
    for step in range(3):
        before = np.asarray(tree.node_visits)[:, 0]
        states, tree, out = move(states, tree, jax.random.PRNGKey(step), np.array([True, True]))
        np.testing.assert_array_equal(
            np.sum(np.asarray(out.visit_counts), axis=1),
            np.maximum(before, 1) + config.num_simulations - 1,
        )
        assert tree.node_visits.shape == (2, max_nodes)


def test_reuse_is_refused_for_gumbel():
    params, root, recurrent_fn = fakes.random_model(jax.random.PRNGKey(0), 2, NUM_ACTIONS)
    config = search.SearchConfig(num_simulations=4)
    out = jax.jit(functools.partial(search.run, recurrent_fn=recurrent_fn, config=config))(
        params, jax.random.PRNGKey(0), root
    )
    kept = jax.jit(search.reuse_subtree)(out.tree, out.action)
    with pytest.raises(ValueError, match="muzero"):
        search.run(
            params,
            jax.random.PRNGKey(0),
            root,
            recurrent_fn,
            config.replace(algorithm="gumbel_muzero"),
            tree=kept,
        )


# --- acting and config ------------------------------------------------------------------------


def test_select_action_greedy_and_temperature():
    counts = np.array([[1.0, 5.0, 2.0, 0.0]] * 4000, np.float32)
    select_action = jax.jit(search.select_action)
    greedy = select_action(jax.random.PRNGKey(0), counts, 0.0)
    assert np.all(np.asarray(greedy) == 1)
    sampled = np.asarray(select_action(jax.random.PRNGKey(1), counts, 1.0))
    frequencies = np.bincount(sampled, minlength=4) / len(sampled)
    np.testing.assert_allclose(frequencies, [1 / 8, 5 / 8, 2 / 8, 0.0], atol=0.03)
    hot = np.asarray(select_action(jax.random.PRNGKey(2), counts, 2.0))
    assert np.mean(hot == 1) < np.mean(sampled == 1)  # flatter at a higher temperature
    masked = select_action(
        jax.random.PRNGKey(3),
        counts,
        1.0,
        invalid_actions=np.array([[False, True, False, False]] * 4000),
    )
    assert not np.any(np.asarray(masked) == 1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("algorithm", "alphago"),
        ("num_simulations", 0),
        ("num_simulations", 2.5),
        ("max_depth", 0),
        ("pb_c_base", 0.0),
        ("dirichlet_alpha", -1.0),
        ("dirichlet_fraction", 1.5),
        ("temperature", -0.1),
        ("max_num_considered_actions", 0),
        ("gumbel_scale", float("nan")),
        ("qtransform", "by_magic"),
        ("qtransform_max_value", -5.0),
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"SearchConfig.{field}"):
        search.SearchConfig(**{field: value})


def test_gumbel_refuses_a_q_transform_that_is_not_completed():
    with pytest.raises(ValueError, match="SearchConfig.qtransform .*gumbel_muzero"):
        search.SearchConfig(algorithm="gumbel_muzero", qtransform="by_min_max")
    with pytest.raises(ValueError, match="SearchConfig.qtransform .*decision_selection 'gumbel'"):
        search.SearchConfig(
            algorithm="stochastic_muzero", decision_selection="gumbel", qtransform="by_min_max"
        )
    gumbel = search.SearchConfig(algorithm="gumbel_muzero")
    assert gumbel.qtransform_name == "completed_by_mix_value"


def test_gumbel_decision_selection_is_the_stochastic_searchs_only():
    with pytest.raises(ValueError, match="SearchConfig.decision_selection must be one of"):
        search.SearchConfig(algorithm="stochastic_muzero", decision_selection="ucb")
    puct = search.SearchConfig(algorithm="stochastic_muzero")
    assert not puct.uses_gumbel and puct.qtransform_name == "by_parent_and_siblings"
    # A deterministic search ignores it, as it ignores the other algorithms' settings.
    muzero = search.SearchConfig(algorithm="muzero", decision_selection="gumbel")
    assert not muzero.uses_gumbel and muzero.qtransform_name == "by_parent_and_siblings"


def test_config_is_frozen_and_replace_validates():
    config = search.SearchConfig()
    with pytest.raises(AttributeError):
        config.num_simulations = 3  # type: ignore[misc]
    assert config.replace(num_simulations=7).num_simulations == 7
    with pytest.raises(ValueError, match="num_simulations"):
        config.replace(num_simulations=-1)
    chex.assert_trees_all_equal(config.qtransform_name, "by_parent_and_siblings")


# --- mctx internals ---------------------------------------------------------------------------

_REPO = pathlib.Path(__file__).resolve().parent.parent
_PACKAGES = ["search", "muzero", "configs", "selfplay", "arena", "benchmarks", "tests"]


def _imports_mctx_private(path: pathlib.Path) -> list[str]:
    """The `mctx._src...` modules that `path` imports (`import`, `from ... import`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from mctx import _src` names the private package as an imported name.
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [m for m in modules if m == "mctx._src" or m.startswith("mctx._src.")]
    return found


def test_only_mctx_internals_module_imports_mctx_private_api():
    """mctx is pinned for its private `_src`: one module may use it, so an upgrade has one place."""
    allowed = _REPO / "search" / "_mctx_internals.py"
    offenders = {}
    for package in _PACKAGES:
        for path in sorted((_REPO / package).rglob("*.py")):
            private = _imports_mctx_private(path)
            if private and path != allowed:
                offenders[str(path.relative_to(_REPO))] = sorted(set(private))
    assert not offenders, f"import mctx._src only in search/_mctx_internals.py: {offenders}"
    assert _imports_mctx_private(allowed), "search/_mctx_internals.py no longer imports mctx._src"
