"""The pure parts of an agent for each mode: how actors act and what the learner learns from.

`make_agent(config, spec)` returns an `Agent`: parameter init, the jitted `act` an actor thread
calls on its device (search for MuZero and AlphaZero, sampling from the policy for V-trace), the
loss, `make_batch`, which turns replay samples into the loss's batch on the learner device, and
what the runtime needs to know of the mode: how long the actors' trajectories are, how much
consecutive ones overlap, and which store sits between actors and learner (`make_store`). The
runtimes (`selfplay.sebulba`, `selfplay.anakin`) never branch on the mode themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import mctx
import numpy as np

import muzero
import search
from configs import ExperimentConfig, UsageError
from envs import EnvSpec
from search.sampled import take_slot
from selfplay.programs import AGENT_FREE_FIELDS, ProgramCache, built_once, program_key
from selfplay.replay import FifoQueue, Store, make_sequence_replay

__all__ = [
    "ActOutput",
    "Agent",
    "accelerator_paths",
    "build_agent",
    "compiler_options",
    "make_agent",
]


class ActOutput(NamedTuple):
    """What an actor records for one step of B environments."""

    action: chex.Array  # [B] int32; a box's: [B, D] float32
    search_policy: chex.Array  # [B, A] policy target (visits / improved policy; V-trace: probs);
    #                            Sampled MuZero: [B, K] over `sampled_actions`
    search_value: chex.Array  # [B] value of the state for the player to move
    behaviour_logits: chex.Array  # [B, A] logits of the policy that acted (V-trace); a box
    #                               policy's outputs (`muzero.BoxPolicy`, `FactorisedBoxPolicy`)
    sampled_actions: chex.Array | None = None  # [B, K, ...] Sampled MuZero's root children


class Agent(NamedTuple):
    """Everything mode-specific, as pure functions."""

    init: Callable[[chex.PRNGKey], Any]  # key -> params
    # act(params, key, observation [B, ...], legal_mask [B, A], greedy [B], env_state) -> ActOutput
    act: Callable[..., ActOutput]
    # The same function unjitted, for programs that trace it inside their own jit (Anakin's
    # iteration, the fused act+step) and pass the compile options there: jax refuses compile
    # options on a nested jit
    act_inside_jit: Callable[..., ActOutput]
    loss_fn: muzero.learner.LossFn  # (params, batch, key) -> (loss, metrics)
    # make_batch(sample leaves [L, N, ...], importance_weight [N], context) -> (batch,
    # priorities [N]); `context` (muzero.BatchContext: the newest and target parameters, a key,
    # the learner's step) is read only where reanalyse or its off-policy correction is on
    # (`reads_context`), and may be None otherwise
    make_batch: Callable[[muzero.Trajectory, chex.Array, Any], tuple[Any, chex.Array]]
    window_length: int  # L: steps per replay window (V-trace: steps per trajectory, T + 1)
    batch_axis: int  # the batch's axis for the replicated update
    uses_env_state: bool  # act needs the pgx state (AlphaZero's exact model)
    segment_length: int  # steps of each trajectory an actor pushes
    segment_overlap: int  # steps a push repeats from the previous one (V-trace's bootstrap: 1)
    # True: the learner samples windows from a replay (MuZero, AlphaZero); False: it learns from
    # each trajectory once, in order (V-trace)
    uses_replay: bool
    # make_store(config, num_streams) -> the store between `num_streams` actor threads and the
    # learner, of the run's `config` (one agent serves configs that differ in their replay:
    # `selfplay.programs.AGENT_FREE_FIELDS`)
    make_store: Callable[[ExperimentConfig, int], Store]
    # XLA compile options of `act` and of the learner's update, as (name, value) pairs (hashable:
    # jitted functions are cached per agent); empty: XLA's defaults
    compiler_options: tuple[tuple[str, str], ...] = ()
    # How the target network follows the parameters (`muzero.TargetSchedule`; none by default):
    # the runtimes build the train state and the update with it
    target: muzero.TargetSchedule = muzero.NO_TARGET
    # Whether `make_batch` reads its context (reanalyse, the off-policy correction)
    reads_context: bool = False


# One agent (its jitted `act` and `make_batch`) for each config and environment in a process.
_AGENTS = ProgramCache()


@built_once(maxsize=8)
def _networks(make: Callable, *args: Any, **kwargs: Any) -> Any:
    """The networks `make(*args, **kwargs)` builds (`muzero.make_*_networks` of a network config,
    an observation shape and the actions), once a process for each: agents of one network whose
    configs differ elsewhere (their search, loss, replay or runtime) share its functions, so that
    its parameters' program (`jax.jit(networks.init)`, a run's fresh state) is traced and compiled
    once, not once an agent."""
    return make(*args, **kwargs)


def make_agent(config: ExperimentConfig, spec: EnvSpec) -> Agent:
    """The agent of `config.mode` for an environment described by `spec`: built once a process
    for each config but its replay, its optimizer and the learner's pace
    (`selfplay.programs.program_key`, `AGENT_FREE_FIELDS`) and
    spec, so that a second run of the same config reuses the programs the first compiled."""
    key = program_key(config, without=AGENT_FREE_FIELDS)
    return _AGENTS.get((key, spec), lambda: _make_agent(config, spec))


def build_agent(config: ExperimentConfig, spec: EnvSpec) -> Agent:
    """`make_agent` without its cache, for a config whose explored fields may be traced arrays:
    a member of a population built inside the population's program (`selfplay.population`)."""
    return _make_agent(config, spec)


def _make_agent(config: ExperimentConfig, spec: EnvSpec) -> Agent:
    two_player = spec.num_players == 2
    if config.mode == "vtrace" and two_player:
        raise UsageError(
            f"V-trace is a one-player agent and {spec.name} is a two-player game: use mode=muzero "
            f"or mode=alphazero"
        )
    if config.loss.two_player != two_player:
        raise UsageError(
            f"loss.two_player is {config.loss.two_player} but {spec.name} is a "
            f"{spec.num_players}-player game; set loss.two_player={two_player}"
        )
    if config.mode == "vtrace" and muzero.switched_on(config.actors.random_move_prob):
        raise UsageError(
            "actors.random_move_prob is for the search agents (muzero, alphazero); "
            "V-trace already samples its moves from its policy: set it to 0"
        )
    if config.learner.augment_symmetries:
        _check_symmetries(config, spec)
    _check_chance(config, spec)
    if config.mode == "muzero":
        agent = _muzero_agent(config, spec, two_player)
    elif config.mode == "stochastic_muzero":
        agent = _stochastic_muzero_agent(config, spec, two_player)
    elif config.mode == "alphazero":
        agent = _alphazero_agent(config, spec, two_player)
    else:
        agent = _vtrace_agent(config, spec)
    options = compiler_options(config)  # the builders return `act` unjitted: jitted once here
    return agent._replace(
        act=jax.jit(agent.act, compiler_options=dict(options)), compiler_options=options
    )


# `devices.cpu_convolutions="eigen"`: YNNPACK keeps XLA's other defaults (reductions, dots), and
# convolutions go to XLA's own Eigen kernels.
_EIGEN_CONVOLUTIONS = {
    "xla_cpu_experimental_ynn_fusion_type": (
        "LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
    )
}


def compiler_options(config: ExperimentConfig) -> tuple[tuple[str, str], ...]:
    """The XLA compile options `config.devices` asks for, as (name, value) pairs for `jax.jit`'s
    `compiler_options` (`dict(...)`); empty for XLA's defaults, on an accelerator (the options are
    XLA:CPU's), or where this jaxlib does not know the option (with a warning: the run goes on at
    XLA's defaults)."""
    if config.devices.cpu_convolutions == "xla" or jax.default_backend() != "cpu":
        return ()
    options = tuple(_EIGEN_CONVOLUTIONS.items())
    return options if _compiles_with(options) else ()


def accelerator_paths(config: ExperimentConfig, devices) -> bool:
    """Whether `devices` take the paths built for accelerators (the fused pgx act+step, Anakin's
    updates inside the iteration's jit): `devices.accelerator_paths`, where "auto" means off on
    CPUs and on elsewhere."""
    choice = config.devices.accelerator_paths
    return choice == "on" or (choice == "auto" and devices[0].platform != "cpu")


@functools.cache
def _compiles_with(options: tuple[tuple[str, str], ...]) -> bool:
    try:
        jax.jit(lambda x: x + 1, compiler_options=dict(options)).lower(np.float32(0)).compile()
    except jax.errors.JaxRuntimeError as error:
        warnings.warn(
            f"devices.cpu_convolutions has no effect with this jaxlib ({error})", stacklevel=3
        )
        return False
    return True


def _check_chance(config: ExperimentConfig, spec: EnvSpec) -> None:
    """One line for a model that cannot describe the game: a deterministic search over a game
    with chance, a chance search over one without, MuZero where the mover may move again."""
    algorithm = config.search.algorithm
    if config.mode == "alphazero" and spec.chance and algorithm != "stochastic_muzero":
        raise UsageError(
            f"search.algorithm={algorithm} searches deterministic moves, but {spec.name} has "
            "chance between a move and the next position: set search.algorithm="
            "stochastic_muzero (its chance nodes take the real outcomes)"
        )
    if config.mode == "alphazero" and not spec.chance and algorithm == "stochastic_muzero":
        raise UsageError(
            f"search.algorithm=stochastic_muzero: {spec.name} has no chance for its chance "
            "nodes; use search.algorithm=muzero"
        )
    if config.mode == "muzero" and spec.num_players == 2 and not spec.alternating:
        raise UsageError(
            f"mode=muzero: its learned model takes turns ply by ply, but in {spec.name} the "
            "mover may move again; use mode=stochastic_muzero (which learns who moves next) or "
            "mode=alphazero"
        )


def _check_symmetries(config: ExperimentConfig, spec: EnvSpec) -> None:
    from envs.symmetries import board_symmetries

    if config.mode in ("vtrace", "stochastic_muzero"):
        raise UsageError(
            "learner.augment_symmetries is for the search agents with a deterministic model "
            f"(muzero, alphazero): set it to false for mode={config.mode}"
        )
    if board_symmetries(spec) is None:
        raise UsageError(
            f"learner.augment_symmetries: no board symmetries are known for "
            f"{spec.name} (known: tic_tac_toe, connect_four, go): set it to false"
        )


def _augmented(loss_fn, config: ExperimentConfig, spec: EnvSpec, augment):
    """`loss_fn` over randomly oriented boards when the config asks for it."""
    if not config.learner.augment_symmetries:
        return loss_fn
    from envs.symmetries import board_symmetries

    return muzero.with_symmetries(loss_fn, board_symmetries(spec), augment)


def _select(key, out: search.SearchOutput, config: ExperimentConfig, legal_mask, greedy):
    """The search's action, or the most visited one where `greedy` (late in a board game); with
    `actors.random_move_prob`, a uniformly random legal move instead, where not greedy."""
    if config.search.uses_gumbel:
        action = out.action  # Gumbel's own choice; with gumbel_scale 0 it is deterministic
    else:
        temperature = jnp.where(greedy, 0.0, config.search.temperature)[:, None]  # [B, 1]
        action = search.select_action(key, out.visit_counts, temperature, ~legal_mask)
    prob = config.actors.random_move_prob
    if muzero.switched_on(prob):
        explore_key, random_key = jax.random.split(jax.random.fold_in(key, 1))
        uniform_legal = jnp.where(legal_mask, 0.0, -jnp.inf)  # [B, A]
        random_action = jax.random.categorical(random_key, uniform_legal).astype(action.dtype)
        explore = (jax.random.uniform(explore_key, greedy.shape) < prob) & ~greedy  # [B]
        action = jnp.where(explore, random_action, action)
    return action


def _muzero_agent(config: ExperimentConfig, spec: EnvSpec, two_player: bool) -> Agent:
    loss, horizon = config.loss, config.loss.value_prefix_horizon
    policy = _sampled_policy(config, spec)
    networks = _networks(
        muzero.make_muzero_networks,
        config.network,
        spec.observation_shape,
        policy.num_outputs if policy is not None else spec.num_actions,
        value_prefix=horizon > 0,
        projection=muzero.switched_on(loss.consistency_weight),
        action_dims=spec.num_actions if spec.is_box else 0,
    )
    root_fn = muzero.make_root_fn(networks, value_prefix_horizon=horizon)
    recurrent_fn = muzero.make_recurrent_fn(
        networks, discount=loss.discount, two_player=two_player, value_prefix_horizon=horizon
    )
    loss_fn = _augmented(
        muzero.make_muzero_loss(networks, loss, sampled_policy=policy),
        config,
        spec,
        muzero.augment_muzero_batch,
    )
    reanalyse_search = _reanalyse_search_config(config)
    if policy is None:
        act = _learned_model_act(config, root_fn, recurrent_fn)

        def search_fn(params, key, observation, legal_mask):
            root = root_fn(params, observation.astype(jnp.float32))
            out = search.run(
                params, key, root, recurrent_fn, reanalyse_search, invalid_actions=~legal_mask
            )
            return out.action_weights, out.root_value

    else:
        model = _sampled_model(root_fn, recurrent_fn, policy)
        act = _sampled_act(config, model)

        def search_fn(params, key, observation, legal_mask):
            del legal_mask  # a sampled policy draws legal actions only
            root = model.root_fn(params, observation.astype(jnp.float32))
            out = search.run(
                params,
                key,
                root,
                model.recurrent_fn,
                reanalyse_search,
                sample_fn=model.sample_fn,
            )
            return out.action_weights, out.root_value, out.sampled_actions

    def value_fn(params, observation):
        latent = networks.represent(params, observation.astype(jnp.float32))
        return networks.value_transform.decode_logits(networks.predict(params, latent)[1])

    def make_batch(window, importance_weight, context):
        fresh = _reanalysed(config, window, context, search_fn, value_fn, window.observation)
        batch = muzero.muzero_batch(
            fresh.window,
            importance_weight,
            unroll_steps=loss.unroll_steps,
            td_steps=loss.td_steps,
            discount=loss.discount,
            two_player=two_player,
            bootstrap_value=fresh.bootstrap_value,
            window_td_steps=fresh.window_td_steps,
            value_prefix_horizon=horizon,
            unroll_observations=muzero.switched_on(loss.consistency_weight),
        )
        priorities = muzero.value_priorities(window.search_value[0], batch.value_target[:, 0])
        return batch, priorities

    return _search_agent(
        config,
        networks.init,
        act,
        loss_fn,
        make_batch,
        window_length=loss.window_length,
        uses_env_state=False,
    )


def _sampled_policy(config: ExperimentConfig, spec: EnvSpec) -> Any:
    """The policy Sampled MuZero draws from and learns (`NetworkConfig.box_policy` over a box,
    `muzero.CategoricalPolicy` over a discrete space), or None for a search over every action;
    UsageError where the two do not fit."""
    sampled = config.search.algorithm == "sampled_muzero"
    if spec.is_box and not sampled:
        hint = (
            "mode=vtrace (its Gaussian policy)"
            if config.mode != "vtrace"
            else "a V-trace preset for boxes"
        )
        raise UsageError(
            f"{spec.name} has continuous actions (a box of {spec.num_actions}); the searches "
            f"over every action cannot take them: set search.algorithm=sampled_muzero, or use "
            f"{hint}"
        )
    if not sampled:
        return None
    if config.mode != "muzero":
        raise UsageError(
            f"search.algorithm=sampled_muzero is a learned model's search: mode=muzero, got "
            f"mode={config.mode}"
        )
    if spec.num_players != 1:
        raise UsageError(
            f"search.algorithm=sampled_muzero is for one-player environments; {spec.name} has "
            f"{spec.num_players} players"
        )
    if config.learner.augment_symmetries:
        raise UsageError(
            "learner.augment_symmetries maps a board's action indices, not sampled actions: "
            "turn it off with search.algorithm=sampled_muzero"
        )
    if muzero.switched_on(config.actors.random_move_prob):
        raise UsageError(
            "actors.random_move_prob draws uniform indices; Sampled MuZero explores through its "
            "samples and the root's Dirichlet noise: set it to 0"
        )
    if spec.is_box:
        return _box_policy(config, spec)
    if config.search.num_samples > spec.num_actions:
        raise UsageError(
            f"search.num_samples={config.search.num_samples} distinct actions of {spec.name}'s "
            f"{spec.num_actions}: take at most {spec.num_actions}"
        )
    return muzero.CategoricalPolicy(spec.num_actions)


def _box_policy(config: ExperimentConfig, spec: EnvSpec) -> Any:
    """The policy over `spec`'s box that `config.network.box_policy` names."""
    assert spec.action_bounds is not None
    network = config.network
    return muzero.make_box_policy(network.box_policy, spec.action_bounds, network.box_bins)


class _SampledModel(NamedTuple):
    """MuZero's learned model as Sampled MuZero's search takes it: each node's embedding is the
    pair (the model's embedding, the policy head's outputs there), so that `sample_fn` draws
    from the outputs the step already computed; the dynamics take a box's actions in [-1, 1]."""

    root_fn: Callable
    recurrent_fn: Callable
    sample_fn: Callable


def _sampled_model(root_fn, recurrent_fn, policy) -> _SampledModel:
    def sampled_root_fn(params, observation):
        root = root_fn(params, observation)
        return root.replace(embedding=(root.embedding, root.prior_logits))

    def sampled_recurrent_fn(params, rng_key, action, node):
        output, embedding = recurrent_fn(params, rng_key, policy.dynamics_input(action), node[0])
        return output, (embedding, output.prior_logits)

    def sample_fn(params, rng_key, node, num_samples):
        del params
        return policy.sample(rng_key, node[1], num_samples)

    return _SampledModel(sampled_root_fn, sampled_recurrent_fn, sample_fn)


def _sampled_act(config: ExperimentConfig, model: _SampledModel):
    """`act` of Sampled MuZero: the search's K drawn actions, one of them played (by its visits
    at the search's temperature; greedy: the most visited)."""

    def act(params, key, observation, legal_mask, greedy, env_state=None):
        del legal_mask, env_state
        search_key, select_key = jax.random.split(key)
        root = model.root_fn(params, observation)
        out = search.run(
            params, search_key, root, model.recurrent_fn, config.search, sample_fn=model.sample_fn
        )
        temperature = jnp.where(greedy, 0.0, config.search.temperature)[:, None]  # [B, 1]
        slot = search.select_action(select_key, out.visit_counts, temperature)  # [B]
        action = take_slot(out.sampled_actions, slot)  # [B, ...] the slot's draw
        policy_outputs = root.embedding[1]  # [B, the policy's outputs]
        return ActOutput(
            action, out.action_weights, out.root_value, policy_outputs, out.sampled_actions
        )

    return act


def _reanalyse_search_config(config: ExperimentConfig) -> search.SearchConfig:
    """The fresh searches' config: the run's, at `reanalyse.num_simulations` if set."""
    simulations = config.reanalyse.num_simulations or config.search.num_simulations
    return dataclasses.replace(config.search, num_simulations=simulations)


def _reanalysed(
    config: ExperimentConfig, window, context, search_fn, value_fn, search_positions
) -> muzero.Reanalysed:
    """The window with the fresh targets the config asks for (as it was, with none)."""
    if not _reads_context(config):
        return muzero.Reanalysed(window, None, None)
    return muzero.reanalyse_window(
        window,
        context,
        search_fn,
        value_fn,
        config.reanalyse,
        search_positions=search_positions,
        value_positions=window.observation,
        unroll_steps=config.loss.unroll_steps if config.mode == "muzero" else 0,
        td_steps=config.loss.td_steps,
        td_steps_decay_every=config.loss.td_steps_decay_every,
    )


def _reads_context(config: ExperimentConfig) -> bool:
    reanalyse = config.reanalyse
    return bool(
        reanalyse.fraction or reanalyse.value != "stored" or config.loss.td_steps_decay_every
    )


def _learned_model_act(config: ExperimentConfig, root_fn, recurrent_fn):
    """`act` of an agent searching a learned model (MuZero's, Stochastic MuZero's)."""

    def act(params, key, observation, legal_mask, greedy, env_state=None):
        del env_state
        search_key, select_key = jax.random.split(key)
        root = root_fn(params, observation)
        out = search.run(
            params, search_key, root, recurrent_fn, config.search, invalid_actions=~legal_mask
        )
        action = _select(select_key, out, config, legal_mask, greedy)
        return ActOutput(action, out.action_weights, out.root_value, root.prior_logits)

    return act


def _stochastic_muzero_agent(config: ExperimentConfig, spec: EnvSpec, two_player: bool) -> Agent:
    """Stochastic MuZero: MuZero's agent with a model of afterstates and chance codes
    (`muzero.stochastic`); its chance encoder reads the observations of the K + 1 unrolled steps,
    which every window keeps."""
    networks = _networks(
        muzero.make_stochastic_networks,
        config.network,
        spec.observation_shape,
        spec.num_actions,
        config.stochastic.num_chance_codes,
    )
    model = muzero.make_stochastic_model(
        networks, discount=config.loss.discount, two_player=two_player, alternating=spec.alternating
    )
    act = _learned_model_act(config, muzero.make_stochastic_root_fn(networks), model)
    loss_fn = muzero.make_stochastic_loss(
        networks, config.loss, config.stochastic, learn_turns=two_player and not spec.alternating
    )

    def make_batch(window, importance_weight, context):
        del context  # reads none: the config refuses reanalyse with Stochastic MuZero
        batch = muzero.stochastic_batch(
            window,
            importance_weight,
            unroll_steps=config.loss.unroll_steps,
            td_steps=config.loss.td_steps,
            discount=config.loss.discount,
            two_player=two_player,
            alternating=spec.alternating,
        )
        priorities = muzero.value_priorities(window.search_value[0], batch.value_target[:, 0])
        return batch, priorities

    return _search_agent(
        config,
        networks.init,
        act,
        loss_fn,
        make_batch,
        window_length=config.loss.window_length,
        uses_env_state=False,
    )


def _exact_model(config: ExperimentConfig, spec: EnvSpec, prediction_fn, two_player: bool):
    """AlphaZero's model over pgx's rules: the search's `recurrent_fn`, or for a game with chance
    the `search.StochasticModel` of its rules split at the chance event."""
    if spec.chance:
        from envs import pgx_chance_rules

        rules = pgx_chance_rules(spec.env_id)

        def chance_step_fn(afterstate, outcome):
            result = rules.chance_step(afterstate, outcome)
            return (
                result.state,
                result.reward,
                result.terminal,
                result.legal_mask,
                result.same_player,
            )

        return search.make_exact_stochastic_model(
            rules.afterstate,
            chance_step_fn,
            prediction_fn,
            two_player=two_player,
            discount=config.loss.discount,
        )
    from envs import exact_step as exact_rules

    exact_step = exact_rules(config.env.name, **config.env.options)

    def step_fn(state, action):  # search.StepFn over the real rules
        result = exact_step(state, action)
        return result.state, result.reward, result.terminal, result.legal_mask

    return search.make_exact_recurrent_fn(
        step_fn, prediction_fn, two_player=two_player, discount=config.loss.discount
    )


def _alphazero_agent(config: ExperimentConfig, spec: EnvSpec, two_player: bool) -> Agent:
    networks = _networks(
        muzero.make_alphazero_networks,
        config.network,
        spec.observation_shape,
        spec.num_actions,
    )
    loss_fn = _augmented(
        muzero.make_alphazero_loss(networks, config.loss),
        config,
        spec,
        muzero.augment_alphazero_batch,
    )

    def prediction_fn(params, state):
        logits, value_logits = networks.predict(params, state.observation.astype(jnp.float32))
        return logits, networks.value_transform.decode_logits(value_logits)

    recurrent_fn = _exact_model(config, spec, prediction_fn, two_player)

    def act(params, key, observation, legal_mask, greedy, env_state):
        del observation
        search_key, select_key = jax.random.split(key)
        prior_logits, value = prediction_fn(params, env_state)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=env_state)
        out = search.run(
            params, search_key, root, recurrent_fn, config.search, invalid_actions=~legal_mask
        )
        action = _select(select_key, out, config, legal_mask, greedy)
        return ActOutput(action, out.action_weights, out.root_value, prior_logits)

    reanalyse_search = _reanalyse_search_config(config)

    def search_fn(params, key, state, legal_mask):
        prior_logits, value = prediction_fn(params, state)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=state)
        out = search.run(
            params, key, root, recurrent_fn, reanalyse_search, invalid_actions=~legal_mask
        )
        return out.action_weights, out.root_value

    def value_fn(params, observation):
        _, value_logits = networks.predict(params, observation.astype(jnp.float32))
        return networks.value_transform.decode_logits(value_logits)

    def make_batch(window, importance_weight, context):
        # The first state of each window, with its n-step (to the game's end) value target.
        # Its fresh search runs from the stored game state with the exact rules; the target
        # network evaluates the stored observations.
        if config.reanalyse.searches and window.state is None:
            raise ValueError("AlphaZero's reanalyse needs the windows' game states")
        fresh = _reanalysed(config, window, context, search_fn, value_fn, window.state)
        batch = muzero.alphazero_batch(
            fresh.window,
            importance_weight,
            td_steps=config.loss.td_steps,
            discount=config.loss.discount,
            two_player=two_player,
            bootstrap_value=fresh.bootstrap_value,
            window_td_steps=fresh.window_td_steps,
            alternating=spec.alternating,
        )
        return batch, muzero.value_priorities(window.search_value[0], batch.value_target)

    return _search_agent(
        config,
        networks.init,
        act,
        loss_fn,
        make_batch,
        window_length=config.loss.td_steps + 1,
        uses_env_state=True,
    )


def _search_agent(
    config: ExperimentConfig,
    init,
    act,
    loss_fn,
    make_batch,
    *,
    window_length: int,
    uses_env_state: bool,
) -> Agent:
    """A search agent (MuZero, AlphaZero): actors push segments of `actors.unroll_length` steps
    to a prioritised replay, the learner samples windows of `window_length` from it."""
    learner = config.learner
    return Agent(
        init=init,
        act=act,
        act_inside_jit=act,
        loss_fn=loss_fn,
        make_batch=jax.jit(make_batch),
        window_length=window_length,
        batch_axis=0,
        uses_env_state=uses_env_state,
        segment_length=config.actors.unroll_length,
        segment_overlap=0,
        uses_replay=True,
        make_store=lambda run, num_streams: make_sequence_replay(run, window_length, num_streams),
        target=muzero.TargetSchedule(learner.target_update_every, learner.target_ema),
        reads_context=_reads_context(config),
    )


def _vtrace_agent(config: ExperimentConfig, spec: EnvSpec) -> Agent:
    if spec.is_box and config.search.algorithm == "sampled_muzero":
        raise UsageError(
            "search.algorithm=sampled_muzero is MuZero's search; mode=vtrace does not search: "
            "set mode=muzero, or leave search.algorithm at its default"
        )
    # A box's policy (`NetworkConfig.box_policy`), its parameters from the policy head.
    box = _box_policy(config, spec) if spec.is_box else None
    networks = _networks(
        muzero.make_actor_critic_networks,
        config.network,
        spec.observation_shape,
        box.num_outputs if box is not None else spec.num_actions,
    )
    loss_fn = muzero.make_vtrace_loss(networks, config.loss, box_policy=box)

    def act(params, key, observation, legal_mask, greedy, env_state=None):
        del env_state
        logits, value = networks.apply(params, observation)
        if box is not None:  # the box policy's parameters; the policy target is unused
            sampled = box.sample(key, logits, 1)[0][:, 0]  # [B, D]
            action = jnp.where(greedy[:, None], box.mode(logits), sampled)
            return ActOutput(action, jnp.ones_like(value)[:, None], value, logits)
        logits = jnp.where(legal_mask, logits, jnp.finfo(logits.dtype).min)
        sampled = jax.random.categorical(key, logits).astype(jnp.int32)
        action = jnp.where(greedy, jnp.argmax(logits, axis=-1).astype(jnp.int32), sampled)
        return ActOutput(action, jax.nn.softmax(logits), value, logits)

    def make_batch(trajectory, importance_weight, context):
        del importance_weight, context
        return muzero.VTraceBatch.from_trajectory(trajectory), None

    # Trajectories of T + 1 steps that overlap by one: the last step bootstraps the previous.
    length = config.actors.unroll_length + 1
    return Agent(
        init=networks.init,
        act=act,
        act_inside_jit=act,
        loss_fn=loss_fn,
        make_batch=jax.jit(make_batch),
        window_length=length,
        batch_axis=1,
        uses_env_state=False,
        segment_length=length,
        segment_overlap=1,
        uses_replay=False,
        make_store=lambda run, num_streams: FifoQueue(run.replay.queue_size),
    )
