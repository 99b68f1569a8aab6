"""Time limits reach the learner as truncations, not as the game's end: from Sebulba's actors
and from Anakin's rollout (gymnax CartPole cut after 4 steps, before a random policy falls)."""

import jax
import numpy as np

import configs
import muzero
from envs import env_spec
from selfplay import actors, anakin
from selfplay.agent import make_agent
from selfplay.lifetime import StopSignal
from selfplay.params import ParameterServer

LIMITED = [
    "mode=muzero",
    "loss.two_player=false",
    "env.name=gymnax:CartPole-v1",
    'env.options={"max_episode_steps": 4}',
    "actors.envs_per_thread=4",
    "actors.unroll_length=8",
    "loss.unroll_steps=2",
    "loss.td_steps=3",
    "network.mlp_sizes=[8]",
    "network.latent_size=8",
    "network.head_hidden=8",
    "search.num_simulations=2",
    "evaluation.every_s=0",
]


def _check(trajectory):
    """Every episode end of the [T, B] trajectory is a truncation at the 4-step limit."""
    ended = np.asarray(trajectory.discount) == 0
    truncated = np.asarray(trajectory.truncated) > 0
    assert truncated.any()
    np.testing.assert_array_equal(truncated, ended)


def test_sebulba_actors_record_the_time_limit_as_a_truncation(monkeypatch):
    config = configs.load_config("cartpole_vtrace", LIMITED)
    agent = make_agent(config, env_spec(config.env.name, **config.env.options))
    device = jax.local_devices()[0]
    server = ParameterServer([device])
    server.publish(jax.jit(agent.init)(jax.random.PRNGKey(0)), version=0)
    stop, pushed = StopSignal(), []

    def record(store, trajectory, stream, stop):
        pushed.append(trajectory)
        stop.set("one push")

    monkeypatch.setattr(actors, "push", record)
    actors.actor_loop(
        0,
        device,
        config,
        agent,
        server,
        None,
        actors.ActorStats("test"),
        stop,
        jax.random.PRNGKey(1),
    )
    _check(pushed[0])


def test_anakins_rollout_records_the_time_limit_as_a_truncation():
    config = configs.load_config("cartpole_vtrace", [*LIMITED, "runtime=anakin"])
    optimizer = muzero.make_optimizer(config.optimizer)
    program = anakin.make_anakin_program(config, optimizer, anakin.anakin_devices(config))
    params = jax.jit(program.agent.init)(jax.random.key(0))
    state = muzero.replicate(
        muzero.init_train_state(params, optimizer, jax.random.key(1)), program.mesh
    )
    carry = anakin.initial_carries(program.init_carry, params, program.mesh, jax.random.key(2))
    for index in range(2):
        state, carry, _ = jax.jit(program.iterate, static_argnums=3)(
            state, np.int32(index), carry, False
        )
    recorded = 2 * program.plan.moves  # the ring's rows 0 .. 2T - 1: the two iterations' steps
    _check(jax.tree.map(lambda x: x[0, :recorded], carry.ring))  # [2T, B]
