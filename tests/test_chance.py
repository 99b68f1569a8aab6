"""Games with chance: pgx's rules split at the chance event, and the exact model's search values.

The split rules must be pgx's own `step`, outcome by outcome; the search over them must value a
move by the expectation over the chance outcomes (hand-derived values on hand-made positions).
"""

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pgx
import pytest

import search
from envs.pgx_env import _ROLLS, pgx_chance_rules


def _where_rows(rows, new, old):
    return jnp.where(rows.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)


@pytest.mark.parametrize("name, steps", [("2048", 12), ("backgammon", 25)])
def test_split_rules_are_pgx_step_outcome_by_outcome(name, steps):
    """Random games: pgx draws the tile or the roll; the split rules given that outcome agree
    with pgx's next state field by field, and gave it a positive probability."""
    game, rules = pgx.make(name), pgx_chance_rules(name)
    batch = 16
    # Each step's own work in one program each (eager jnp ops compile one program apiece).
    new_games = jax.jit(lambda key: jax.vmap(game.init)(jax.random.split(key, batch)))
    state = new_games(jax.random.PRNGKey(0))
    step, afterstate, chance_step = (
        jax.jit(jax.vmap(game.step)),
        jax.jit(rules.afterstate),
        jax.jit(rules.chance_step),
    )

    @jax.jit
    def random_move(state, key):
        key, act_key, step_key, reset_key = jax.random.split(key, 4)
        action = jax.random.categorical(act_key, jnp.where(state.legal_action_mask, 0.0, -jnp.inf))
        return key, action, jax.random.split(step_key, batch), reset_key

    @jax.jit
    def next_games(expected, reset_key):  # finished games replaced by fresh ones
        fresh = jax.vmap(game.init)(jax.random.split(reset_key, batch))
        return jax.tree.map(functools.partial(_where_rows, expected.terminated), fresh, expected)

    key = jax.random.PRNGKey(1)
    rolls = {roll: k for k, roll in enumerate(_ROLLS)}
    fields = ["_board", "rewards", "terminated", "legal_action_mask", "current_player"]
    fields += ["observation", "_step_count"]
    if name == "backgammon":
        fields += ["_turn", "_played_dice_num"]
    chance_moves = same_player_moves = 0
    for _ in range(steps):
        key, action, step_keys, reset_key = random_move(state, key)
        expected = step(state, action, step_keys)
        after, probs = afterstate(state, action)
        np.testing.assert_allclose(np.asarray(probs).sum(axis=-1), 1.0, atol=1e-5)
        if name == "2048":  # the new tile: where pgx's board differs from the afterstate's
            new = np.asarray(expected._board) != np.asarray(after.state._board)  # [B, 16]
            cell = new.argmax(axis=-1)
            tile = np.asarray(expected._board)[np.arange(batch), cell]
            outcome = np.where(new.any(axis=-1), 2 * cell + tile - 1, 0)
        else:  # the roll pgx made, where the turn ended
            dice = np.sort(np.asarray(expected._dice), axis=-1)
            outcome = np.array([rolls[tuple(d)] for d in dice])
            outcome = np.where(np.asarray(after.chance), outcome, 0)
        assert (np.asarray(probs)[np.arange(batch), outcome] > 0).all()
        result = chance_step(after, np.asarray(outcome, np.int32))
        for field in fields:
            np.testing.assert_array_equal(
                getattr(result.state, field), getattr(expected, field), err_msg=field
            )
        if name == "backgammon":  # pgx orders the two dice as rolled
            np.testing.assert_array_equal(
                np.sort(result.state._playable_dice, -1), np.sort(expected._playable_dice, -1)
            )
        mover = np.asarray(state.current_player)
        mover_reward = np.asarray(expected.rewards)[np.arange(batch), mover]
        finished = np.asarray(state.terminated)
        np.testing.assert_array_equal(result.reward, np.where(finished, 0.0, mover_reward))
        live = ~np.asarray(expected.terminated)
        same = np.asarray(expected.current_player) == mover
        np.testing.assert_array_equal(np.asarray(result.same_player)[live], same[live])
        chance_moves += int(np.asarray(after.chance).sum())
        same_player_moves += int((same & live).sum())
        state = next_games(expected, reset_key)
    assert chance_moves > batch * steps // 4
    if name == "backgammon":
        assert same_player_moves > 0  # moves within a turn: no roll, the same player again


def _exact_search(name, state, prediction_fn, simulations=400):
    """The exact model's stochastic search from `state`, two plies deep (move, chance outcome):
    each leaf is valued by `prediction_fn`, so the root's Q-values are hand-derivable."""
    rules = pgx_chance_rules(name)
    model = search.make_exact_stochastic_model(
        rules.afterstate,
        lambda afterstate, outcome: rules.chance_step(afterstate, outcome).for_search(),
        prediction_fn,
        two_player=name == "backgammon",
    )
    config = search.SearchConfig(
        algorithm="stochastic_muzero",
        num_simulations=simulations,
        max_depth=2,
        dirichlet_fraction=0.0,
        temperature=0.0,
    )

    @jax.jit
    def run(state, key):
        prior_logits, value = prediction_fn(None, state)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=state)
        return search.run(None, key, root, model, config, invalid_actions=~state.legal_action_mask)

    return run(state, jax.random.PRNGKey(0))


def test_2048_best_move_depends_on_the_tile_that_comes():
    """Left and right both merge two 2s (reward 4) and leave one empty cell. After right, a 2
    there (probability 0.9) leaves a move and a 4 ends the game; after left, the reverse. With a
    value of 1 for any live position: Q(left) = 4 + 0.1, Q(right) = 4 + 0.9, and the search
    moves right. (Were 4s the likely tile, left would be the move.)"""
    board = np.array([[1, 5, 1, 1], [8, 7, 3, 8], [5, 1, 6, 2], [3, 7, 8, 6]]).reshape(1, 16)
    game = pgx.make("2048")

    @jax.jit
    def position(board):  # one program (eager jnp ops compile one program apiece)
        state = jax.vmap(game.init)(jax.random.split(jax.random.PRNGKey(0), 1))
        legal = jax.vmap(lambda b: pgx.play2048._legal_action_mask(b.reshape(4, 4)))(board)
        return state.replace(_board=board, legal_action_mask=legal)

    state = position(board.astype(np.int32))
    legal = state.legal_action_mask
    np.testing.assert_array_equal(legal, [[True, False, True, False]])  # left, right

    def live_is_one(params, state):  # prior uniform; a live position is worth 1
        batch = state.current_player.shape[0]
        return jnp.zeros((batch, 4)), jnp.ones(batch)

    out = _exact_search("2048", state, live_is_one)
    np.testing.assert_allclose(np.asarray(out.q_values)[0, [0, 2]], [4.1, 4.9], atol=0.03)
    assert int(out.action[0]) == 2
    # The chance node's visits follow the tile's probabilities: 9 to 1 between the 2 and the 4.
    tree = out.tree
    right = int(np.asarray(tree.children_index)[0, 0, 2])
    visits = np.asarray(tree.children_visits)[0, right, 4:]  # its 32 outcomes
    assert visits.sum() > 100 and set(np.flatnonzero(visits)) <= {0, 1}  # cell 0: a 2 or a 4
    assert abs(visits[0] / visits.sum() - 0.9) < 0.02


def test_backgammon_values_follow_the_dice_and_who_moves_next():
    """Two hand-made positions valued by `6 in dice`: +1 where the player to move has a 6 to
    play, -1 otherwise.

    Row 0, the start with a roll of 6-1: playing the 1 leaves the same player to move with the 6
    (Q = +1); playing the 6 leaves the 1 (Q = -1). Row 1, the start with only a 1 left to play:
    every move ends the turn, the opponent rolls, and Q = -(P(6) - P(no 6)) = -(11 - 25) / 36."""
    game = pgx.make("backgammon")
    from pgx import backgammon

    @jax.jit
    def positions():  # one program (eager jnp ops compile one program apiece)
        state = jax.vmap(game.init)(jax.random.split(jax.random.PRNGKey(0), 2))
        board = state._board[0]
        playable = jnp.array([[5, 0, -1, -1], [-1, 0, -1, -1]], jnp.int32)  # dice 0..5: 1..6
        legal = jax.vmap(backgammon._legal_action_mask)(jnp.stack([board, board]), playable)
        state = state.replace(
            _dice=jnp.array([[5, 0], [5, 0]], jnp.int32),
            _playable_dice=playable,
            _played_dice_num=jnp.array([0, 1], jnp.int32),
            legal_action_mask=legal,
        )
        return state.replace(observation=jax.vmap(game.observe)(state))

    state = positions()
    legal = state.legal_action_mask

    def six_to_play(params, state):
        batch = state.current_player.shape[0]
        six = jnp.any(state._playable_dice == 5, axis=-1)
        return jnp.zeros((batch, 156)), jnp.where(six, 1.0, -1.0)

    out = _exact_search("backgammon", state, six_to_play, simulations=600)
    q, legal = np.asarray(out.q_values), np.asarray(legal)
    visited = np.asarray(out.visit_counts) > 0
    die_one = (np.arange(156) % 6) == 0
    assert visited[0, legal[0] & die_one].any() and visited[0, legal[0] & ~die_one].any()
    np.testing.assert_allclose(q[0, visited[0] & die_one], 1.0, atol=1e-6)
    np.testing.assert_allclose(q[0, visited[0] & ~die_one], -1.0, atol=1e-6)
    assert die_one[int(out.action[0])]
    many = np.asarray(out.visit_counts)[1] >= 40
    assert many.sum() >= 2
    np.testing.assert_allclose(q[1, many], 14 / 36, atol=0.06)
