"""One conformance test applied to every environment adapter: random legal play, then checks."""

from typing import Any, NamedTuple

import numpy as np
import pytest

from configs.errors import UsageError
from envs import BatchedEnv, TimeStep, make_env


class Case(NamedTuple):
    name: str
    num_envs: int
    steps: int  # calls to step (or send/recv)
    options: dict[str, Any]
    min_episodes: int  # random play must finish at least this many episodes
    lengths: tuple[int, int]  # inclusive range of plausible episode lengths
    returns: frozenset[float] | None  # every possible episode return, None if not a small set
    fresh: str  # how to recognise a new episode's first observation: "reset", "cartpole",
    #   "breakout", "2048" (two tiles), "backgammon" (the starting checkers), "snake", "none"

    @property
    def id(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}({extra})" if extra else self.name


WIN_DRAW_LOSS = frozenset({-1.0, 0.0, 1.0})
WIN_LOSS = frozenset({-1.0, 1.0})
# pgx scores a backgammon win 1, a gammon 2, a backgammon 3; OpenSpiel's default scores 1.
BACKGAMMON_SCORES = frozenset({-3.0, -2.0, -1.0, 1.0, 2.0, 3.0})
FRUITS = frozenset(float(k) for k in range(31))  # Snake: +1 a fruit, at most one a step
CASES = [
    Case("openspiel:tic_tac_toe", 8, 100, {}, 60, (5, 9), WIN_DRAW_LOSS, "reset"),
    Case("openspiel:connect_four", 8, 120, {}, 25, (7, 42), WIN_DRAW_LOSS, "reset"),
    Case("pgx:tic_tac_toe", 8, 100, {}, 60, (5, 9), WIN_DRAW_LOSS, "reset"),
    Case("pgx:connect_four", 8, 120, {}, 25, (7, 42), WIN_DRAW_LOSS, "reset"),
    Case("envpool:CartPole-v1", 8, 150, {}, 30, (8, 500), None, "cartpole"),
    Case("envpool:CartPole-v1", 9, 150, {"batch_size": 4}, 15, (8, 500), None, "cartpole"),
    Case("gymnax:CartPole-v1", 8, 150, {}, 30, (8, 500), None, "cartpole"),
    # The ball starts 6 rows above the paddle's row: no episode is shorter than 6 steps.
    Case("gymnax:Breakout-MinAtar", 4, 60, {}, 10, (6, 1000), None, "breakout"),
    # Games with chance: the adapters draw the tiles and dice themselves.
    Case("pgx:2048", 8, 400, {}, 10, (20, 2000), None, "2048"),
    Case("pgx:backgammon", 8, 800, {}, 10, (40, 3000), BACKGAMMON_SCORES, "backgammon"),
    Case("openspiel:2048", 8, 300, {}, 8, (20, 2000), None, "2048"),
    Case("openspiel:backgammon", 8, 300, {}, 8, (30, 1500), WIN_DRAW_LOSS, "backgammon"),
    # A short time limit so that Atari episodes end (by truncation) within a fast test.
    Case("envpool:Pong-v5", 2, 70, {"max_episode_steps": 30}, 4, (30, 30), None, "none"),
    Case("gymnasium:CartPole-v1", 8, 150, {}, 30, (8, 500), None, "cartpole"),
    Case("gymnasium:ALE/Pong-v5", 2, 70, {"max_episode_steps": 30}, 4, (30, 30), None, "none"),
    # A user's own gymnasium.Env (tests/fakes.py): a 7-cell walk from cells 1 to 5, +1 or -1.
    Case("py:tests.fakes:make_gym_corridor", 4, 100, {}, 20, (1, 100), WIN_LOSS, "none"),
    # Legal random moves rarely box the snake in within 30 steps: the limit ends every episode.
    Case("jumanji:Snake-v1", 8, 62, {"max_episode_steps": 30}, 16, (30, 30), FRUITS, "snake"),
]


class Rollout(NamedTuple):
    case: Case
    env: BatchedEnv
    first: TimeStep  # returned by reset
    steps: list[TimeStep]  # steps[t] answers actions[t]
    actions: list[np.ndarray]  # actions[t] acts on the envs of (first + steps)[t]


def _sample_legal(rng: np.random.Generator, legal_mask: np.ndarray) -> np.ndarray:
    scores = np.where(legal_mask, rng.random(legal_mask.shape), -1.0)
    return scores.argmax(axis=1).astype(np.int32)


def _play(case: Case, seed: int) -> Rollout:
    env = make_env(case.name, case.num_envs, seed=seed, **case.options)
    rng = np.random.default_rng(seed)
    ts = first = env.reset(seed)
    steps, actions = [], []
    for _ in range(case.steps):
        action = _sample_legal(rng, ts.legal_mask)
        if env.batch_size < env.num_envs:
            env.send(action, ts.env_id)
            ts = env.recv()
        else:
            ts = env.step(action)
        actions.append(action)
        steps.append(ts)
    return Rollout(case, env, first, steps, actions)


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def rollout(request):
    r = _play(request.param, seed=3)
    yield r
    r.env.close()


def _each_transition(r: Rollout):
    """Yields (before, action, after); rows of `before` are the same envs only in sync mode."""
    prev = r.first
    for action, ts in zip(r.actions, r.steps, strict=True):
        yield prev, action, ts
        prev = ts


def test_shapes_and_dtypes_match_the_spec(rollout):
    spec, b, a = rollout.env.spec, rollout.env.batch_size, rollout.env.spec.num_actions
    assert isinstance(rollout.env, BatchedEnv)
    for ts in [rollout.first, *rollout.steps]:
        assert ts.observation.shape == (b, *spec.observation_shape)
        assert ts.observation.dtype == np.dtype(spec.observation_dtype)
        assert ts.legal_mask.shape == (b, a) and ts.legal_mask.dtype == bool
        for field in ("reward", "episode_return"):
            assert getattr(ts, field).shape == (b,) and getattr(ts, field).dtype == np.float32
        for field in ("done", "truncated", "episode_end"):
            assert getattr(ts, field).shape == (b,) and getattr(ts, field).dtype == bool
        for field in ("to_play", "episode_length", "env_id"):
            assert getattr(ts, field).shape == (b,) and getattr(ts, field).dtype == np.int32
        assert ts.legal_mask.any(axis=1).all(), "every state must offer a legal action"
        assert np.isin(ts.to_play, range(spec.num_players)).all()
        assert len(set(ts.env_id.tolist())) == b and ts.env_id.max() < rollout.env.num_envs
        assert not (ts.truncated & ~ts.done).any()
        assert not (ts.episode_end & ~ts.done).any()
        if spec.num_players == 1:
            assert (ts.to_play == 0).all()
        if spec.family in ("envpool", "gymnax"):
            assert ts.legal_mask.all()


def test_episode_statistics_add_up_and_are_plausible(rollout):
    """Tracks each env's steps and player-0 return from the rewards and checks the reported ones."""
    case, spec = rollout.case, rollout.env.spec
    length = np.zeros(rollout.env.num_envs, np.int64)
    ret0 = np.zeros(rollout.env.num_envs, np.float64)
    episodes = []
    seen = set(rollout.first.env_id.tolist())
    for before, _, ts in _each_transition(rollout):
        ids = ts.env_id
        # Async: an env's first observation after reset may come in a later recv; no step yet.
        first = np.array([i not in seen for i in ids.tolist()])
        seen.update(ids.tolist())
        assert not ts.done[first].any() and (ts.reward[first] == 0).all()
        # Two-player envs are synchronous, so rows of `before` and `ts` are the same envs.
        mover = before.to_play if spec.num_players == 2 else 0
        length[ids[~first]] += 1
        ret0[ids] += np.where(mover == 0, ts.reward, -ts.reward)  # zero-sum: player 1's is -
        end = ts.episode_end
        np.testing.assert_array_equal(ts.episode_length[end], length[ids[end]])
        np.testing.assert_allclose(ts.episode_return[end], ret0[ids[end]], atol=1e-5)
        assert (ts.episode_return[~end] == 0).all() and (ts.episode_length[~end] == 0).all()
        episodes += list(zip(ts.episode_return[end], ts.episode_length[end], strict=True))
        length[ids[ts.done]] = 0
        ret0[ids[ts.done]] = 0.0
    assert len(episodes) >= case.min_episodes, f"only {len(episodes)} episodes of {spec.name}"
    lengths = np.array([n for _, n in episodes])
    assert lengths.min() >= case.lengths[0] and lengths.max() <= case.lengths[1]
    if case.returns is not None:
        assert {float(g) for g, _ in episodes} <= case.returns
    if spec.env_id == "CartPole-v1":  # +1 per step survived
        np.testing.assert_allclose([g for g, _ in episodes], lengths)


def test_auto_reset_gives_the_new_episode_in_the_same_step(rollout):
    case = rollout.case
    starts = 0
    for _, _, ts in _each_transition(rollout):
        done = ts.done
        starts += done.sum()
        if case.fresh == "reset":  # a board game starts from the same empty board
            fresh = rollout.first.observation[0]
            assert (ts.observation[done] == fresh).all()
            assert ts.legal_mask[done].all()
        elif case.fresh == "cartpole":  # CartPole starts uniformly within +-0.05
            assert (np.abs(ts.observation[done]) <= 0.05).all()
        elif case.fresh == "2048" and done.any():  # two tiles, each a 2 or a 4
            tiles = ts.observation[done].reshape(int(done.sum()), -1)
            if rollout.env.spec.family == "pgx":  # one-hot planes of log2(tile): 1 or 2
                planes = ts.observation[done].reshape(int(done.sum()), 16, -1)
                assert (planes[:, :, 1:3].sum(axis=(1, 2)) == 2).all()
                assert (planes[:, :, 3:].sum(axis=(1, 2)) == 0).all()
            else:  # OpenSpiel: the tiles' values
                assert ((tiles > 0).sum(axis=1) == 2).all() and np.isin(tiles, [0, 2, 4]).all()
        elif case.fresh == "backgammon":  # every checker on its starting point, none off
            # pgx: the mover's view (its board's 28 entries); OpenSpiel: x's then o's points
            # (192 entries), either player to start: one of the boards the resets began with.
            board = slice(0, 28) if rollout.env.spec.family == "pgx" else slice(0, 192)
            boards = {tuple(row[board]) for row in rollout.first.observation}
            assert len(boards) <= 2
            assert all(tuple(row[board]) in boards for row in ts.observation[done])
        elif case.fresh == "breakout":  # planes paddle, ball, trail, bricks: a full wall of bricks
            paddle, bricks = ts.observation[done, ..., 0], ts.observation[done, ..., 3]
            assert (paddle.sum(axis=(1, 2)) == 1).all() and (paddle[:, 9, 4] == 1).all()
            assert (bricks[:, 1:4] == 1).all() and (bricks.sum(axis=(1, 2)) == 30).all()
        elif case.fresh == "snake":  # jumanji's [12, 12, 5] grid, then a plane of the step count
            grid = ts.observation[done].reshape(-1, 12 * 12, 6)
            body, head, tail, fruit = (grid[..., i] for i in range(4))
            assert (body.sum(axis=1) == 1).all(), "a new snake is its head alone"
            assert (head == body).all() and (tail == body).all()
            assert (fruit.sum(axis=1) == 1).all() and not (fruit * body).any()
            assert (grid[..., 5] == 0).all()
    assert starts >= case.min_episodes


def test_two_player_rewards_go_to_the_mover_who_wins(rollout):
    spec = rollout.env.spec
    if spec.num_players != 2:
        pytest.skip("one-player env")
    wins = same_player = 0
    for before, _, ts in _each_transition(rollout):
        # In these games only the mover's own move can end the game, with a line, or by bearing
        # off the last checker (worth 1, 2 or 3 in pgx's backgammon).
        assert (ts.reward[~ts.done] == 0).all()
        assert np.isin(ts.reward[ts.done], [0.0, 1.0, 2.0, 3.0]).all()
        won = ts.reward > 0
        wins += won.sum()
        expected = np.where(before.to_play == 0, ts.reward, -ts.reward)
        np.testing.assert_array_equal(ts.episode_return[won], expected[won])
        same_player += (ts.to_play == before.to_play)[~ts.done].sum()
        if spec.alternating:  # players alternate within an episode
            np.testing.assert_array_equal(ts.to_play[~ts.done], 1 - before.to_play[~ts.done])
    assert wins > 0
    # Backgammon: the mover moves again within a turn (pgx: one move per die; OpenSpiel: doubles).
    assert spec.alternating or same_player > 0


def test_time_limit_truncates(rollout):
    ends = np.concatenate([ts.done for ts in rollout.steps])
    truncated = np.concatenate([ts.truncated for ts in rollout.steps])
    if "max_episode_steps" in rollout.case.options:
        assert ends.any() and (truncated == ends).all()
    else:
        assert not truncated.any()


def test_same_seed_same_trajectory(rollout):
    if rollout.env.batch_size < rollout.env.num_envs:
        pytest.skip("async batches arrive in thread order")
    again = _play(rollout.case, seed=3)
    try:
        for ts1, ts2 in zip(
            [rollout.first, *rollout.steps], [again.first, *again.steps], strict=True
        ):
            for field, x1, x2 in zip(TimeStep._fields, ts1, ts2, strict=True):
                np.testing.assert_array_equal(x1, x2, err_msg=field)
    finally:
        again.env.close()


def test_illegal_or_malformed_actions_raise(rollout):
    env = rollout.env
    if env.batch_size < env.num_envs:
        pytest.skip("the async rollout's envs are in flight")
    ts = env.reset(5)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(env.num_envs + 1, np.int32))
    with pytest.raises(ValueError, match="must be in"):
        env.step(np.full(env.num_envs, env.spec.num_actions, np.int32))
    if env.spec.chance:  # an action illegal somewhere, in the env where it is
        env_index, action = np.argwhere(~ts.legal_mask)[0]
        actions = np.argmax(ts.legal_mask, axis=1).astype(np.int32)
        actions[env_index] = action
        with pytest.raises(ValueError, match="illegal"):
            env.step(actions)
    elif env.spec.num_players == 2:
        # Take cell/column 0 in every env, then 0 again where it is no longer legal.
        ts = env.step(np.zeros(env.num_envs, np.int32))
        if not ts.legal_mask[:, 0].all():
            with pytest.raises(ValueError, match="illegal"):
                env.step(np.zeros(env.num_envs, np.int32))
        else:  # connect four: a column takes six discs
            for _ in range(5):
                ts = env.step(np.zeros(env.num_envs, np.int32))
            assert not ts.legal_mask[:, 0].any()
            with pytest.raises(ValueError, match="illegal"):
                env.step(np.zeros(env.num_envs, np.int32))


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("connect_four", "expected '<family>:<id>'"),
        ("gym:CartPole-v1", "family one of openspiel, pgx, envpool, gymnax"),
        ("openspiel:tic_tac_to", "did you mean tic_tac_toe"),
        ("openspiel:leduc_poker", "imperfect information"),
        ("openspiel:kuhn_poker", "imperfect information"),
        ("openspiel:goofspiel", "simultaneous moves"),
        ("openspiel:go(board_siz=9)", "Unknown parameter 'board_siz'"),
        ("pgx:tic-tac-toe", "did you mean tic_tac_toe"),
        ("pgx:kuhn_poker", "imperfect information"),
        ("envpool:CartPole-v2", "did you mean CartPole-v1"),
        ("envpool:Pendulum-v1", "only discrete actions"),
        ("gymnax:CartPole-v2", "did you mean CartPole-v1"),
        ("gymnax:breakout-minatar", "did you mean Breakout-MinAtar"),
        ("gymnasium:CartPole-v2", "did you mean CartPole-v1"),
        ("gymnasium:ALE/Pongg-v5", "did you mean ALE/Pong-v5"),
    ],
)
def test_bad_names_give_one_clear_line(name, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        make_env(name, num_envs=2, seed=0)
    assert "\n" not in str(info.value)
    assert name.partition(":")[2] in str(info.value) or name in str(info.value)


def test_bad_options_give_usage_errors():
    with pytest.raises(UsageError, match="unknown option.*colour"):
        make_env("openspiel:tic_tac_toe", 2, 0, colour="red")
    with pytest.raises(UsageError, match="bad envpool option"):
        make_env("envpool:CartPole-v1", 2, 0, colour="red")
    with pytest.raises(UsageError, match="unknown option.*colour.*accepted: max_episode_steps"):
        make_env("gymnax:CartPole-v1", 2, 0, colour="red")
    with pytest.raises(UsageError, match="num_envs"):
        make_env("openspiel:tic_tac_toe", 0, 0)
