"""Board symmetries as data augmentation: the permutations, the batches, and the rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import configs
import muzero
from configs import UsageError
from envs import make_env
from envs.symmetries import board_symmetries
from selfplay.agent import make_agent
from tests.fakes import TINY


def _compose(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """Source table of applying `first`, then `then` (new cell p shows old cell first[then[p]])."""
    return first[then]


@pytest.mark.parametrize("size", [3, 4, 9])
def test_square_symmetries_are_the_dihedral_group(size):
    sym = muzero.dihedral_symmetries(size, size * size + 1)
    rows = {tuple(row) for row in sym.cell_source}
    assert sym.count == 8 and len(rows) == 8  # 8 distinct permutations
    for a in sym.cell_source:
        for b in sym.cell_source:
            assert tuple(_compose(a, b)) in rows  # closed under composition
    np.testing.assert_array_equal(sym.action_source[:, -1], size * size)  # pass stays pass
    for source, image in zip(sym.action_source, sym.action_image, strict=True):
        np.testing.assert_array_equal(source[image], np.arange(size * size + 1))  # inverses
    # A quarter turn is among them: the top-left corner goes to a corner, the centre stays.
    if size == 3:
        corners = {int(np.flatnonzero(row == 0)[0]) for row in sym.cell_source}
        assert corners == {0, 2, 6, 8}
        assert all(row[4] == 4 for row in sym.cell_source)


def test_mirror_of_columns_and_of_cells():
    columns = muzero.mirror_symmetries(6, 7, 7)
    np.testing.assert_array_equal(columns.action_image[1], np.arange(7)[::-1])
    board = np.arange(42).reshape(6, 7)
    np.testing.assert_array_equal(columns.cell_source[1].reshape(6, 7), board[:, ::-1])
    cells = muzero.mirror_symmetries(2, 3, 6)
    np.testing.assert_array_equal(cells.action_source[1], [2, 1, 0, 5, 4, 3])
    with pytest.raises(ValueError, match="columns or the 6 cells"):
        muzero.mirror_symmetries(2, 3, 5)


def test_tables_must_be_permutations_with_the_identity_first():
    with pytest.raises(ValueError, match="identity"):
        muzero.make_symmetries(np.array([[1, 0]]), np.array([[0, 1]]), 1, 2)
    with pytest.raises(ValueError, match="permutation"):
        muzero.make_symmetries(np.array([[0, 1], [0, 0]]), np.array([[0, 1], [1, 0]]), 1, 2)


def _marked_boards(n: int, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """n boards [n, size, size, 2] with one stone at a random cell, and that cell [n]."""
    cell = rng.integers(0, size * size, n)
    board = np.zeros((n, size * size, 2), np.float32)
    board[np.arange(n), cell, 0] = 1.0
    board[..., 1] = 0.5  # a constant plane (to play) must stay as it is
    return board.reshape(n, size, size, 2), cell


def test_alphazero_policy_follows_the_stones():
    rng = np.random.default_rng(0)
    sym = muzero.dihedral_symmetries(3, 9)
    observation, cell = _marked_boards(64, 3, rng)
    # NumPy inputs and one jitted augment: eager jnp ops compile one program apiece.
    batch = muzero.AlphaZeroBatch(
        observation=observation,
        policy_target=np.eye(9, dtype=np.float32)[cell],  # the policy plays where the stone is
        value_target=np.asarray(rng.normal(size=64), np.float32),
        mask=np.ones(64, np.float32),
        importance_weight=np.ones(64, np.float32),
    )
    index = np.asarray(rng.integers(0, 8, 64), np.int32)
    augment = jax.jit(lambda batch, index: muzero.augment_alphazero_batch(batch, sym, index))
    out = jax.device_get(augment(batch, index))
    moved_to = np.argmax(out.observation[..., 0].reshape(64, 9), axis=1)
    np.testing.assert_array_equal(np.argmax(out.policy_target, axis=1), moved_to)
    np.testing.assert_array_equal(moved_to, sym.action_image[index, cell])
    assert (moved_to != cell).sum() > 20  # most stones moved: not the identity everywhere
    np.testing.assert_array_equal(out.observation[..., 1], 0.5)
    np.testing.assert_array_equal(out.value_target, batch.value_target)
    identity = augment(batch, np.zeros(64, np.int32))
    jax.tree.map(np.testing.assert_array_equal, identity, batch)


def test_muzero_actions_and_policies_move_together():
    rng = np.random.default_rng(1)
    n, k = 32, 3
    sym = muzero.mirror_symmetries(6, 7, 7)
    action = rng.integers(0, 7, (n, k))
    policy = np.full((n, k + 1, 7), 0.01, np.float32)
    policy[np.arange(n)[:, None], np.arange(k), action] = 0.94  # each step's policy picks its move
    observation = rng.normal(size=(n, 6, 7, 3)).astype(np.float32)
    batch = muzero.MuZeroBatch(
        observation=observation,
        action=np.asarray(action, np.int32),
        value_target=np.zeros((n, k + 1), np.float32),
        reward_target=np.ones((n, k + 1), np.float32),
        policy_target=policy,
        policy_mask=np.ones((n, k + 1), np.float32),
        importance_weight=np.ones(n, np.float32),
    )
    index = np.arange(n) % 2  # even rows as they are, odd rows mirrored
    augment = jax.jit(lambda batch, index: muzero.augment_muzero_batch(batch, sym, index))
    out = jax.device_get(augment(batch, np.asarray(index, np.int32)))
    np.testing.assert_array_equal(np.argmax(out.policy_target[:, :k], axis=2), out.action)
    np.testing.assert_array_equal(out.action, np.where(index[:, None] == 1, 6 - action, action))
    np.testing.assert_array_equal(out.observation[1::2], observation[1::2, :, ::-1])
    np.testing.assert_array_equal(out.observation[::2], observation[::2])
    np.testing.assert_array_equal(out.reward_target, batch.reward_target)


def test_the_loss_sees_every_orientation():
    sym = muzero.dihedral_symmetries(3, 9)
    observation = np.zeros((1, 3, 3, 2), np.float32)
    observation[0, 0, :2, 0] = 1.0  # a corner and the edge beside it: only the identity fixes it
    n = 256
    batch = muzero.AlphaZeroBatch(
        observation=np.repeat(observation, n, axis=0),
        policy_target=np.full((n, 9), 1 / 9, np.float32),
        value_target=np.zeros(n, np.float32),
        mask=np.ones(n, np.float32),
        importance_weight=np.ones(n, np.float32),
    )

    def loss_fn(params, batch, key):
        return jnp.zeros(()), {"seen": batch.observation}  # what the loss sees

    loss = jax.jit(muzero.with_symmetries(loss_fn, sym, muzero.augment_alphazero_batch))
    _, metrics = loss(None, batch, jax.random.PRNGKey(3))
    boards = {board.tobytes() for board in np.asarray(metrics["seen"])}
    assert len(boards) == 8  # 256 draws cover all 8 orientations (each missed with p ~ 1e-15)


def _history(game, rng, plies: int) -> list[int]:
    """Up to `plies` random moves from the start that leave the game running."""
    state = game.new_initial_state()
    history = []
    while len(history) < plies:
        action = int(rng.choice(state.legal_actions()))
        state.apply_action(action)
        if state.is_terminal():
            break
        history.append(action)
    return history


RULES = [
    ("openspiel:tic_tac_toe", "tic_tac_toe()"),
    ("openspiel:connect_four", "connect_four()"),
    ("openspiel:go(board_size=5,komi=7.5)", "go(board_size=5,komi=7.5)"),
    ("pgx:tic_tac_toe", "tic_tac_toe()"),
    ("pgx:connect_four", "connect_four()"),
    ("pgx:go_9x9", "go(board_size=9,komi=7.5)"),
]


@pytest.mark.parametrize("env_name,openspiel_game", RULES)
def test_the_rules_respect_the_symmetries(env_name, openspiel_game):
    """A game played with every move mirrored/rotated reaches the mirrored/rotated observation
    and legal moves: the adapter's layout is the one the symmetry tables assume."""
    import pyspiel

    spec = make_env(env_name, 1).spec
    sym = board_symmetries(spec)
    assert sym is not None and sym.count == (2 if "connect_four" in env_name else 8)
    game = pyspiel.load_game(openspiel_game)
    rng = np.random.default_rng(0)
    histories = [_history(game, rng, plies) for plies in (3, 7, 12, 20)]
    if env_name.startswith("pgx:"):
        from envs import pgx_replay

        replay = pgx_replay(env_name.partition(":")[2])
        length = max(map(len, histories))

        def observe(moves_list):
            moves = np.zeros((len(moves_list), length), np.int32)
            for i, moves_i in enumerate(moves_list):
                moves[i, : len(moves_i)] = moves_i
            state = replay(moves, np.array([len(m) for m in moves_list], np.int32))
            return np.asarray(state.observation, np.float32), np.asarray(state.legal_action_mask)
    else:
        from envs import OpenSpielEnv

        adapter = OpenSpielEnv(openspiel_game, 1)

        def observe(moves_list):
            states = []
            for moves in moves_list:
                state = game.new_initial_state()
                for action in moves:
                    state.apply_action(action)
                states.append(state)
            observation, legal, _ = adapter.observe(states)
            return observation, legal

    observation, legal = observe(histories)
    for s in range(sym.count):
        turned, turned_legal = observe(
            [[int(sym.action_image[s, a]) for a in h] for h in histories]
        )
        n, h, w, c = observation.shape
        expected = observation.reshape(n, h * w, c)[:, sym.cell_source[s]].reshape(n, h, w, c)
        np.testing.assert_array_equal(turned, expected, err_msg=f"symmetry {s}")
        np.testing.assert_array_equal(turned_legal, legal[:, sym.action_source[s]])


def test_games_without_known_symmetries_and_vtrace_are_refused():
    chess = configs.load_config(
        "tic_tac_toe_muzero", ["env.name=openspiel:breakthrough", "learner.augment_symmetries=true"]
    )
    with pytest.raises(
        UsageError, match="no board symmetries are known for openspiel:breakthrough"
    ):
        make_agent(chess, make_env(chess.env.name, 1).spec)
    vtrace = configs.load_config("cartpole_vtrace", ["learner.augment_symmetries=true"])
    with pytest.raises(UsageError, match="search agents"):
        make_agent(vtrace, make_env(vtrace.env.name, 1).spec)
    with pytest.raises(UsageError, match="augment_symmetries must be true or false"):
        configs.load_config("tic_tac_toe_muzero", ["learner.augment_symmetries=3"])
    with pytest.raises(ValueError, match="augment_symmetries must be true or false"):
        configs.LearnerConfig(augment_symmetries=1)


@pytest.mark.parametrize("preset", ["tic_tac_toe_muzero", "tic_tac_toe_alphazero"])
def test_augmented_loss_trains(preset):
    """The agent's augmented loss is finite and differentiable, and it sees turned boards: on
    random boards its value differs from the plain loss's."""
    plain_config = configs.load_config(preset, [*TINY, "learner.augment_symmetries=false"])
    config = configs.load_config(preset, [*TINY, "learner.augment_symmetries=true"])
    spec = make_env(config.env.name, 1).spec
    agent, plain = make_agent(config, spec), make_agent(plain_config, spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    length, n = agent.window_length, 16
    window = muzero.Trajectory(
        observation=rng.integers(0, 2, (length, n, *spec.observation_shape)).astype(np.float32),
        action=rng.integers(0, 9, (length, n)).astype(np.int32),
        reward=np.zeros((length, n), np.float32),
        discount=np.ones((length, n), np.float32),
        search_policy=np.full((length, n, 9), 1 / 9, np.float32),
        search_value=np.zeros((length, n), np.float32),
        legal_mask=np.ones((length, n, 9), bool),
        to_play=np.zeros((length, n), np.int32),
        behaviour_logits=np.zeros((length, n, 9), np.float32),
        policy_version=np.zeros((length, n), np.int32),
    )
    batch, _ = agent.make_batch(window, np.ones(n, np.float32), None)
    # Jitted: op by op, each of the many small ops would compile on its own.
    (loss, _), grads = jax.jit(jax.value_and_grad(agent.loss_fn, has_aux=True))(
        params, batch, jax.random.PRNGKey(1)
    )
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
    plain_loss, _ = jax.jit(plain.loss_fn)(params, batch, jax.random.PRNGKey(1))
    assert loss != pytest.approx(float(plain_loss), rel=1e-6)  # random boards, turned: differs
