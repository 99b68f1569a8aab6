"""The one shared module of fakes for unit tests. Product code never imports it."""


# --- arena: players that interrupt or batch, and a one-player env with known episodes ----------

from typing import NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

from arena.players import BatchedPlayer, Player  # noqa: E402


class CountdownInterrupt:
    """Shared by players made from one registration: raises KeyboardInterrupt (as Ctrl-C would) on
    the `after`-th move made by any of them, once; later moves are normal."""

    def __init__(self, after: int):
        self.left = after

    def tick(self):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


class InterruptingPlayer(Player):
    """Plays the first legal move; ticks a CountdownInterrupt before each move."""

    def __init__(self, spec: str, countdown: CountdownInterrupt):
        super().__init__(spec)
        self.countdown = countdown

    def step(self, state):
        self.countdown.tick()
        return state.legal_actions()[0]


class RecordingBatchedPlayer(BatchedPlayer):
    """Uniformly random legal moves for many games at once; records each call's batch size."""

    def __init__(self, spec: str, seed: int):
        super().__init__(spec)
        self.rng = np.random.default_rng(seed)
        self.batch_sizes: list[int] = []

    def step_many(self, states):
        self.batch_sizes.append(len(states))
        return [int(self.rng.choice(s.legal_actions())) for s in states]


class EpisodeStep(NamedTuple):
    """The fields of selfplay's TimeStep that evaluation reads."""

    observation: np.ndarray  # [B] steps taken in the current episode
    done: np.ndarray  # [B]
    episode_end: np.ndarray  # [B]
    episode_return: np.ndarray  # [B]
    episode_length: np.ndarray  # [B]
    env_id: np.ndarray  # [B]


class FakeEpisodeEnv:
    """One-player batched env: env e's episodes last e + 1 steps and return 10 * e + k for its k-th
    episode (k = 0, 1, ...), auto-resetting on the step that ends one. Records its options."""

    def __init__(self, num_envs: int, seed: int = 0, **options):
        self.num_envs = num_envs
        self.options = options
        self.seed = seed
        self.closed = False
        self._t = np.zeros(num_envs, np.int64)
        self._k = np.zeros(num_envs, np.int64)

    def _step(self, ended, returns, lengths):
        return EpisodeStep(self._t.copy(), ended, ended, returns, lengths,
                           np.arange(self.num_envs))

    def reset(self, seed):
        self._t[:] = 0
        self._k[:] = 0
        zeros = np.zeros(self.num_envs)
        return self._step(np.zeros(self.num_envs, bool), zeros, zeros.astype(np.int64))

    def step(self, actions):
        assert np.asarray(actions).shape == (self.num_envs,)
        self._t += 1
        ended = self._t == np.arange(self.num_envs) + 1
        returns = np.where(ended, 10.0 * np.arange(self.num_envs) + self._k, 0.0)
        lengths = np.where(ended, self._t, 0)
        self._k += ended
        self._t[ended] = 0
        return self._step(ended, returns, lengths)

    def close(self):
        self.closed = True
