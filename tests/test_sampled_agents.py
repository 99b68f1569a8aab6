"""Continuous actions in the agents: the squashed Gaussian (`muzero.BoxPolicy`), gymnax's boxes,
Sampled MuZero's agent (act, targets, loss) and the Gaussian V-trace, and what is refused."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import configs
import muzero
from envs import env_spec
from envs.gymnax_env import gymnax_functions
from selfplay.agent import make_agent
from selfplay.train import train

TINY = [
    "actors.envs_per_thread=4",
    "actors.unroll_length=4",
    "network.mlp_sizes=[16,16]",
    "network.latent_size=16",
    "network.head_hidden=16",
    "learner.log_every_s=0.05",
    "learner.checkpoint_every=10",
    "evaluation.every_s=0",
    "devices.cpu_devices=1",
]
SAMPLED = [
    *TINY,
    "search.num_samples=4",
    "search.num_simulations=4",
    "network.value_support=5",
    "network.reward_support=2",
    "loss.unroll_steps=2",
    "loss.td_steps=2",
    "learner.batch_size=8",
    "replay.min_size=16",
    "replay.samples_per_insert=1",
]


def test_the_squashed_gaussian_is_a_density_over_the_box_and_samples_inside_it():
    policy = muzero.BoxPolicy((-2.0,), (2.0,))
    outputs = np.array([[0.7, -0.4], [-1.2, -0.5]], np.float32)  # mean, raw log-std per row
    grid = np.linspace(-2.0, 2.0, 20001, dtype=np.float32)[1:-1]  # [G]

    @jax.jit  # one program (eager jnp ops compile one apiece)
    def check(key):
        density = jnp.exp(
            policy.log_prob(outputs, jnp.broadcast_to(grid[None, :, None], (2, 19999, 1)))
        )
        actions, log_probs = policy.sample(key, outputs, 512)  # [2, 512, 1]
        return density, actions, log_probs, policy.log_prob(outputs, actions)

    density, actions, log_probs, again = jax.device_get(check(jax.random.PRNGKey(0)))
    np.testing.assert_allclose(density.sum(axis=-1) * (grid[1] - grid[0]), 1.0, atol=2e-3)
    assert actions.shape == (2, 512, 1) and bool(np.all(np.abs(actions) < 2.0))
    np.testing.assert_allclose(log_probs, again, rtol=1e-4, atol=1e-4)
    # the samples' mean follows the mean output (tanh(0.7) * 2 > 0 > tanh(-1.2) * 2)
    assert float(actions[0].mean()) > 0.5 > -0.5 > float(actions[1].mean())
    with pytest.raises(ValueError, match="finite bounds low < high"):
        muzero.BoxPolicy((1.0,), (1.0,))


def test_the_factorised_categorical_draws_its_grid_at_the_softmaxs_rates():
    policy = muzero.FactorisedBoxPolicy((-2.0, 0.0), (2.0, 1.0), bins=5)
    outputs = np.array([[0.0, 1.0, 2.0, 0.0, -1.0, 3.0, 0.0, 0.0, 0.0, 0.0]], np.float32)

    @jax.jit
    def check(key):
        actions, log_probs = policy.sample(key, outputs, 4000)  # [1, 4000, 2]
        return actions, log_probs, policy.log_prob(outputs, actions), policy.mode(outputs)

    actions, log_probs, again, mode = jax.device_get(check(jax.random.PRNGKey(0)))
    grid = np.linspace(-2.0, 2.0, 5)
    counts = np.array([np.mean(actions[0, :, 0] == value) for value in grid])
    np.testing.assert_allclose(counts, jax.nn.softmax(outputs[0, :5]), atol=0.03)
    assert set(np.unique(actions[0, :, 1])) <= set(np.linspace(0.0, 1.0, 5).astype(np.float32))
    np.testing.assert_allclose(log_probs, again, rtol=1e-5)
    np.testing.assert_allclose(mode, [[0.0, 0.0]])  # the most probable value of each dimension
    with pytest.raises(ValueError, match="bins must be an integer >= 2"):
        muzero.FactorisedBoxPolicy((0.0,), (1.0,), bins=1)


def test_gymnax_boxes_step_with_vectors_and_say_their_bounds():
    spec = env_spec("gymnax:Pendulum-v1")
    assert spec.is_box and spec.num_actions == 1 and spec.action_bounds == ((-2.0,), (2.0,))
    assert env_spec("gymnax:MountainCarContinuous-v0").action_bounds == ((-1.0,), (1.0,))
    assert not env_spec("gymnax:CartPole-v1").is_box
    functions = gymnax_functions("Pendulum-v1", 3)
    state, _ = functions.reset(jax.random.PRNGKey(0))
    # all torque one way, then the other: different rewards from the same state
    step = jax.jit(functions.step)
    _, pushed = step(state, np.full((3, 1), 2.0, np.float32))
    _, still = step(state, np.zeros((3, 1), np.float32))
    assert pushed.reward.shape == (3,) and pushed.legal_mask.shape == (3, 1)
    assert not np.allclose(pushed.observation, still.observation)


def _sampled_config(*extra):
    return configs.load_config("pendulum_sampled_muzero", [*SAMPLED, *extra])


def test_sampled_muzeros_agent_acts_in_the_box_and_learns_the_searchs_policy():
    config = _sampled_config("reanalyse.fraction=0.5")
    spec = env_spec(config.env.name)
    agent = make_agent(config, spec)
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    observation = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    legal = np.ones((5, 1), bool)
    key = jax.random.PRNGKey(2)
    out = jax.device_get(agent.act(params, key, observation, legal, np.zeros(5, bool)))
    assert out.action.shape == (5, 1) and out.sampled_actions.shape == (5, 4, 1)
    assert bool(np.all(np.abs(out.action) <= 2.0))
    np.testing.assert_allclose(out.search_policy.sum(-1), 1.0, rtol=1e-5)
    # the action played is one of the search's draws
    assert bool(np.all(np.any(out.sampled_actions[..., 0] == out.action, axis=-1)))
    greedy = jax.device_get(agent.act(params, key, observation, legal, np.ones(5, bool)))
    # greedy: a most visited draw (ties broken at random)
    chosen = greedy.sampled_actions[..., 0] == greedy.action  # [B, K]
    weight = np.max(np.where(chosen, greedy.search_policy, -1.0), axis=-1)
    np.testing.assert_allclose(weight, greedy.search_policy.max(axis=-1))

    # a window of L = K + n + 1 steps, its batch and the paper's policy loss over the draws
    length = config.loss.window_length
    window = muzero.Trajectory(
        observation=np.random.default_rng(3).normal(size=(length, 2, 3)).astype(np.float32),
        action=np.tile(out.action[:2][None], (length, 1, 1)),
        reward=-np.ones((length, 2), np.float32),
        discount=np.ones((length, 2), np.float32),
        search_policy=np.tile(out.search_policy[:2][None], (length, 1, 1)),
        search_value=np.zeros((length, 2), np.float32),
        legal_mask=np.ones((length, 2, 1), bool),
        to_play=np.zeros((length, 2), np.int32),
        behaviour_logits=np.zeros((length, 2, 2), np.float32),
        policy_version=np.zeros((length, 2), np.int32),
        sampled_actions=np.tile(out.sampled_actions[:2][None], (length, 1, 1, 1)),
    )
    context = muzero.BatchContext(params, params, jax.random.PRNGKey(5), np.int32(0))
    batch, _ = jax.device_get(agent.make_batch(window, np.ones(2, np.float32), context))
    # reanalyse (the preset's fraction 0.5: the first window) searched afresh: new draws
    fresh, stored = batch.policy_actions[0, 0, :, 0], window.sampled_actions[0, 0, :, 0]
    assert not np.allclose(fresh, stored)
    np.testing.assert_array_equal(
        batch.policy_actions[1, 0, :, 0], window.sampled_actions[0, 1, :, 0]
    )
    assert batch.policy_actions.shape == (2, config.loss.unroll_steps + 1, 4, 1)
    assert batch.action.shape == (2, config.loss.unroll_steps, 1)
    (loss, metrics), grads = jax.jit(jax.value_and_grad(agent.loss_fn, has_aux=True))(
        params, batch, jax.random.PRNGKey(4)
    )
    assert np.isfinite(float(loss)) and float(metrics["policy_loss"]) != 0.0
    assert any(np.abs(g).sum() > 0 for g in jax.device_get(jax.tree.leaves(grads)))


def test_sampled_muzero_trains_on_boxes_in_both_runtimes(tmp_path):
    # brax's physics inside Anakin's jit (its cheapest env); gymnax's Pendulum under Sebulba,
    # with the categorical-per-dimension head
    for name, extra in [
        ("brax", ["env.name=brax:fast", 'env.options={"max_episode_steps": 20}']),
        (
            "sebulba",
            ["runtime=sebulba", "actors.threads_per_device=1", "network.box_policy=categorical"],
        ),
    ]:
        config = _sampled_config("learner.max_updates=3", *extra)
        result = train(config, tmp_path / name, progress=False)
        assert result.stopped_by == "max_updates" and result.updates >= 3, name


def test_the_gaussian_vtrace_moves_its_mean_toward_the_rewarded_torque():
    """V-trace's loss with a box policy on a one-step bandit (reward -(a - 1)^2 in [-2, 2]):
    the actions of a wide behaviour policy, learned off-policy; the greedy torque moves from 0
    toward 1."""
    policy = muzero.BoxPolicy((-2.0,), (2.0,))
    nets = muzero.make_actor_critic_networks(
        muzero.NetworkConfig(mlp_sizes=(16,), zero_init_heads=True), (2,), policy.num_outputs
    )
    loss_fn = muzero.make_vtrace_loss(nets, muzero.LossConfig(discount=0.0), box_policy=policy)
    t, b = 2, 64
    rng = np.random.default_rng(0)
    action = rng.uniform(-1.9, 1.9, (t, b, 1)).astype(np.float32)
    batch = muzero.VTraceBatch(
        observation=np.ones((t, b, 2), np.float32),
        action=action,
        reward=-((action[..., 0] - 1.0) ** 2),
        discount=np.zeros((t, b), np.float32),
        behaviour_logits=np.zeros((t, b, 2), np.float32),
    )
    optimizer = optax.adam(1e-2)

    @jax.jit
    def train_and_act(key):
        params = nets.init(key)

        def step(carry, _):
            params, opt_state = carry
            grads, _ = jax.grad(loss_fn, has_aux=True)(params, batch, key)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), None

        start = policy.mode(nets.apply(params, batch.observation[0])[0])
        (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), None, length=150)
        return start, policy.mode(nets.apply(params, batch.observation[0])[0])

    start, end = jax.device_get(train_and_act(jax.random.PRNGKey(0)))
    np.testing.assert_allclose(start, 0.0, atol=1e-6)  # zero-initialised heads: the centre
    assert 0.5 < float(end.mean()) < 1.5, float(end.mean())


def test_a_discrete_space_is_searched_by_its_sampled_subset():
    config = configs.load_config(
        "pendulum_sampled_muzero",
        [*SAMPLED, "env.name=gymnax:Acrobot-v1", "search.num_samples=2"],
    )
    agent = make_agent(config, env_spec(config.env.name))
    params = jax.jit(agent.init)(jax.random.PRNGKey(0))
    out = jax.device_get(
        agent.act(
            params,
            jax.random.PRNGKey(1),
            np.zeros((3, 6), np.float32),
            np.ones((3, 3), bool),
            np.zeros(3, bool),
        )
    )
    assert out.sampled_actions.shape == (3, 2) and out.action.dtype == np.int32
    assert bool(np.all(out.sampled_actions[:, 0] < out.sampled_actions[:, 1]))  # distinct


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("pendulum_sampled_muzero", ["search.algorithm=muzero"], "continuous actions"),
        (
            "pendulum_sampled_muzero",
            ["env.name=gymnax:Acrobot-v1", "search.num_samples=4"],
            "search.num_samples=4 distinct actions of gymnax:Acrobot-v1's 3",
        ),
        (
            "pendulum_sampled_muzero",
            ["actors.random_move_prob=0.1"],
            "actors.random_move_prob draws uniform indices",
        ),
        ("pendulum_vtrace", ["search.algorithm=sampled_muzero"], "mode=vtrace does not search"),
    ],
)
def test_what_sampled_muzero_refuses_gets_one_line(preset, overrides, message):
    config = configs.load_config(preset, [*SAMPLED, *overrides])
    with pytest.raises(configs.UsageError, match=message):
        make_agent(config, env_spec(config.env.name))
