"""`search.run`: one batched MCTS, the same as mctx's policies, plus interior masks and reuse.

Two things are added on top of `mctx.muzero_policy` / `mctx.gumbel_muzero_policy` /
`mctx.stochastic_muzero_policy`:

* **Illegal actions inside the tree.** mctx masks illegal actions only at the root
  (`invalid_actions`). Here an action is also never selected at an interior node when the model
  marked it illegal by giving it a prior logit of -inf or `jnp.finfo(dtype).min` (what
  `mask_invalid_logits` writes). In mctx a zero prior usually keeps PUCT away, but not always:
  when Q-values fall outside the q-transform's range (`by_min_max` with values below
  `min_value`), a visited legal child scores below zero and the illegal child's tie-break noise
  wins. The explicit mask makes it a guarantee for every q-transform.
* **Continuing from a tree.** `run(..., tree=t)` keeps `t`'s nodes and statistics (typically from
  `reuse_subtree`) and adds `num_simulations` more. mctx's `search` always starts from an empty
  tree, so `_simulate_from` is mctx's own loop with a per-row starting node count, built on the
  mctx internals that `search._mctx_internals` re-exports.

The simulations run in `search.engine` (`SearchConfig(engine="podracer")`, the default: the same
tree in fewer operations) or in mctx's own loop (`engine="mctx"`: a fresh Gumbel search is
`mctx.search` itself, given our masked selection functions). With no interior marks, `run`
consumes the key exactly as mctx's policies do and returns the same `action` and
`action_weights` (tested against mctx), with either engine.

Stochastic MuZero (`algorithm="stochastic_muzero"`) takes its model as a `StochasticModel`: a
decision function (state, action -> afterstate, with the afterstate's value and its chance
outcomes' logits) and a chance function (afterstate, outcome -> state, as a `recurrent_fn`). The
tree holds both kinds of node, each with A + C children as in mctx: decision nodes select by PUCT
(masked as above), chance nodes by `prior / (visits + 1)`, so the visits of a chance node's
outcomes follow their probabilities. With `decision_selection="gumbel"` (not in mctx) the
decision nodes select as Gumbel MuZero's do, and the result is Gumbel's: its action and its
improved policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import mctx
import numpy as np

from search import _inputs, _mctx_internals, engine, sampled, selection
from search.config import SearchConfig

__all__ = [
    "SampleFn",
    "SearchOutput",
    "StochasticModel",
    "mask_invalid_logits",
    "run",
    "select_action",
]

# (params, rng_key, embedding [B, ...], K) -> (actions [B, K, ...], log_probs [B, K]) or
# (actions, log_probs, proposal_log_probs [B, K]): Sampled MuZero's draws at a state
SampleFn = Callable[..., tuple]


class StochasticModel(NamedTuple):
    """A model with chance outcomes: `run`'s `recurrent_fn` for algorithm "stochastic_muzero".

    The two-player convention holds with afterstates in between: an afterstate's value is from
    the view of the player who just moved (the edge into it has reward 0 and discount 1); the
    edge from an afterstate to the next state carries that mover's reward and the discount: -1
    when the other player moves next, +1 when the same player moves again (backgammon within a
    turn), 0 after a terminal state. One-player models use their own discount there.
    """

    # (params, rng_key, action [B], state) -> (mctx.DecisionRecurrentFnOutput(chance_logits
    # [B, C], afterstate_value [B]), afterstate)
    decision_fn: mctx.DecisionRecurrentFn
    # (params, rng_key, outcome [B], afterstate) -> (mctx.ChanceRecurrentFnOutput(action_logits
    # [B, A], value [B], reward [B], discount [B]), state); illegal actions of the new state get
    # `mask_invalid_logits`' logit, as with a plain `recurrent_fn`
    chance_fn: mctx.ChanceRecurrentFn


class SearchOutput(NamedTuple):
    """The result of `search.run` for a batch of B roots over A actions."""

    action: chex.Array  # [B] int32, the action to play
    action_weights: chex.Array  # [B, A], the policy target: visit distribution (muzero,
    #                             stochastic_muzero) or Gumbel's improved policy
    #                             softmax(prior + completed Q)
    visit_counts: chex.Array  # [B, A], visits of each root child
    root_value: chex.Array  # [B], the search's value of the root, for the player to move
    q_values: chex.Array  # [B, A], reward + discount * child value (0 for unvisited children;
    #                       stochastic_muzero: the afterstate's value)
    tree: mctx.Tree  # the whole tree: pass to `reuse_subtree` to continue from a child
    #                  (stochastic_muzero: A + C children per node, decision and chance nodes)
    # sampled_muzero: the K children of the root are its sampled actions, so `action_weights`
    # (the improved policy: the visit distribution over them), `visit_counts` and `q_values`
    # are [B, K]; `action` is the chosen action itself ([B, ...]: a vector in a box), at slot
    # `action_slot`; `tree.embeddings` are `search.sampled.SampledNode`s. None otherwise.
    sampled_actions: chex.Array | None = None  # [B, K, ...] the root's sampled actions
    action_slot: chex.Array | None = None  # [B] int32, the chosen action's slot among them


def mask_invalid_logits(logits: chex.Array, invalid_actions: chex.Array | None) -> chex.Array:
    """Gives invalid actions the smallest finite logit, which the search treats as illegal.

    Args:
      logits: [B, A] prior logits.
      invalid_actions: [B, A], nonzero/True where an action is illegal; None masks nothing.
    Returns:
      [B, A] logits, max-shifted to 0, with `finfo.min` at invalid actions. A finite value keeps
      the softmax defined when every action is invalid (a terminal state).
    """
    if invalid_actions is None:
        return logits
    _inputs.check_floating("search.mask_invalid_logits", "logits", logits)
    invalid_actions = _inputs.as_mask("search.mask_invalid_logits", invalid_actions, logits.shape)
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid_actions, jnp.finfo(logits.dtype).min, logits)


def _node_invalid_actions(tree: mctx.Tree, node_index, depth) -> chex.Array:
    """[A] bool: root mask at depth 0 (as mctx), the model's illegal marks below it."""
    interior = selection.illegal_by_prior(tree.children_prior_logits[node_index])
    return jnp.where(depth == 0, tree.root_invalid_actions.astype(bool), interior)


def _puct_selection(rng_key, tree, node_index, depth, *, pb_c_init, pb_c_base, qtransform):
    """mctx.muzero_action_selection, with illegal interior actions masked out."""
    scores = selection.puct_scores(
        tree.children_prior_logits[node_index],
        tree.children_visits[node_index],
        tree.node_visits[node_index],
        qtransform(tree, node_index),
        jax.random.uniform(rng_key, (tree.num_actions,)),
        pb_c_init=pb_c_init,
        pb_c_base=pb_c_base,
    )
    return selection.masked_argmax(scores, _node_invalid_actions(tree, node_index, depth))


def _gumbel_interior_selection(rng_key, tree, node_index, depth, *, qtransform):
    """mctx.gumbel_muzero_interior_action_selection, with illegal interior actions masked out."""
    del rng_key
    scores = selection.gumbel_interior_scores(
        tree.children_prior_logits[node_index],
        qtransform(tree, node_index),
        tree.children_visits[node_index],
    )
    return selection.masked_argmax(scores, _node_invalid_actions(tree, node_index, depth))


def _qtransform_args(config: SearchConfig) -> dict:
    """The configured q-transform's settings, by name, for mctx's and `search.selection`'s."""
    if config.qtransform_name == "by_min_max":
        return {
            "min_value": config.qtransform_min_value,
            "max_value": config.qtransform_max_value,
        }
    if config.qtransform_name == "completed_by_mix_value":
        return {
            "value_scale": config.qtransform_value_scale,
            "maxvisit_init": config.qtransform_maxvisit_init,
        }
    return {}


def _make_qtransform(config: SearchConfig):
    """mctx's q-transform of the config, for mctx's engine."""
    transform = getattr(mctx, f"qtransform_{config.qtransform_name}")
    return functools.partial(transform, **_qtransform_args(config))


def _dirichlet_noisy_logits(rng_key, prior_logits, config: SearchConfig) -> chex.Array:
    """mctx.muzero_policy's root noise: mix softmax(prior) with Dirichlet(alpha) noise."""
    batch_size, num_actions = prior_logits.shape
    probs = jax.nn.softmax(prior_logits)
    fraction = config.dirichlet_fraction
    # At fraction 0, mctx's mixture is the prior bit for bit: the noise is not drawn (its gamma
    # draws are rejection loops, a fifth of a small acting program's compile and a wait on the
    # host at each of their steps on a GPU; greedy evaluation, the arena).
    if fraction > 0:
        noise = jax.random.dirichlet(
            rng_key, alpha=jnp.full([num_actions], config.dirichlet_alpha), shape=(batch_size,)
        )
        probs = (1 - fraction) * probs + fraction * noise
    return jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))


def run(
    params: Any,
    rng_key: chex.PRNGKey,
    root: mctx.RootFnOutput,
    recurrent_fn: mctx.RecurrentFn | StochasticModel,
    config: SearchConfig,
    *,
    invalid_actions: chex.Array | None = None,
    tree: mctx.Tree | None = None,
    sample_fn: SampleFn | None = None,
    action_bounds: tuple[Any, Any] | None = None,
) -> SearchOutput:
    """Runs one batched search from `root` (or continues `tree`) and picks an action per row.

    Args:
      params: passed to `recurrent_fn` unchanged (network parameters, or anything).
      rng_key: consumed.
      root: `mctx.RootFnOutput(prior_logits [B, A], value [B], embedding [B, ...])` for the
        current states, value from the view of the player to move.
      recurrent_fn: `(params, rng_key, action [B], embedding) -> (mctx.RecurrentFnOutput,
        next_embedding)`. To mark actions illegal inside the tree, give them `finfo.min` prior
        logits (`mask_invalid_logits`). For two-player zero-sum games use discount -1 between
        plies and 0 after a terminal state (`make_exact_recurrent_fn` does this). With
        algorithm "stochastic_muzero", a `StochasticModel` instead.
      config: the search settings.
      invalid_actions: [B, A] bool/0-1, True where illegal at the root; None: all legal. Each
        row needs a legal action: given concrete arrays, a row without one is a `ValueError`;
        under `jit` (where the values are not known) such a row is searched as if every action
        were legal, as pgx marks a finished game.
      tree: a tree to continue, from `reuse_subtree` (muzero algorithm only). Its root row must
        describe the same state as `root`; a row with no nodes starts fresh from `root`.
      sample_fn: algorithm "sampled_muzero" only, and needed there: `(params, rng_key,
        embedding, K) -> (actions [B, K, ...], log_probs [B, K])`, K actions drawn from a
        proposal beta at a state and the model's log pi of each; or a third output,
        `proposal_log_probs` [B, K], log beta where beta is not pi (a constant per row for a set
        drawn without replacement; `search.sample_categorical` returns all three). Actions are
        integer indices or float vectors. `root.prior_logits` is then ignored (may be None), and
        `recurrent_fn` takes the actions themselves ([B, ...]); its `prior_logits` are ignored.
      action_bounds: (low, high), broadcast against one action: where `sample_fn`'s root
        samples are concrete (not under `jit`), samples outside them are refused naming the
        rows, as NaN samples are at any time they are concrete.
    Returns:
      `SearchOutput`. With `tree=None`, `action` and `action_weights` equal those of
      `mctx.muzero_policy` / `mctx.gumbel_muzero_policy` / `mctx.stochastic_muzero_policy`
      given the same key and settings.
    """
    if (config.algorithm == "sampled_muzero") != (sample_fn is not None):
        raise ValueError(
            "search.run: algorithm 'sampled_muzero' searches the actions a sample_fn draws, and "
            f"only it takes one; got algorithm {config.algorithm!r} with sample_fn "
            f"{'given' if sample_fn is not None else 'None'}"
        )
    if sample_fn is not None:
        if tree is not None or invalid_actions is not None:
            raise ValueError(
                "search.run: algorithm 'sampled_muzero' takes neither tree= nor invalid_actions= "
                "(a sample_fn draws legal actions only; mask its logits)"
            )
        return _sampled_muzero(
            params, rng_key, root, recurrent_fn, sample_fn, config, action_bounds
        )
    chex.assert_rank(root.prior_logits, 2)
    batch_size, num_actions = root.prior_logits.shape
    chex.assert_shape(root.value, (batch_size,))
    # The tree keeps the search's logits and values in the root's dtypes: an integer or boolean
    # root would truncate every value backed up into it.
    _inputs.check_floating("search.run", "root.prior_logits", root.prior_logits)
    _inputs.check_floating("search.run", "root.value", root.value)
    if invalid_actions is not None:
        invalid_actions = _inputs.as_mask("search.run", invalid_actions, (batch_size, num_actions))
        invalid_actions = _with_a_legal_action_per_row(invalid_actions)
    qtransform = _make_qtransform(config)
    max_depth = config.max_depth or config.num_simulations
    stochastic = config.algorithm == "stochastic_muzero"
    if stochastic != isinstance(recurrent_fn, StochasticModel):
        raise ValueError(
            "search.run: algorithm 'stochastic_muzero' takes its model as a "
            "search.StochasticModel (decision and chance functions), and only it does; got "
            f"algorithm {config.algorithm!r} with a {type(recurrent_fn).__name__}"
        )
    if stochastic:
        if tree is not None:
            raise ValueError(
                "search.run: tree= (subtree reuse) needs algorithm='muzero'; a stochastic "
                "search's kept child would be an afterstate, not the position reached"
            )
        assert isinstance(recurrent_fn, StochasticModel)
        model = StochasticModel(  # an afterstate is a node of its own kind: its shapes are free
            _inputs.checked_step("search.run", "decision_fn", recurrent_fn.decision_fn, root.value),
            _inputs.checked_step(
                "search.run", "chance_fn", recurrent_fn.chance_fn, root.value, root.embedding
            ),
        )
        return _stochastic_muzero(
            params, rng_key, root, model, config, qtransform, invalid_actions, max_depth
        )
    assert not isinstance(recurrent_fn, StochasticModel)
    recurrent_fn = _inputs.checked_step(
        "search.run", "recurrent_fn", recurrent_fn, root.value, root.embedding
    )
    if config.algorithm == "gumbel_muzero":
        if tree is not None:
            raise ValueError(
                "search.run: tree= (subtree reuse) needs algorithm='muzero'; Gumbel MuZero's "
                "sequential halving schedules a fixed budget from an unvisited root"
            )
        return _gumbel_muzero(
            params, rng_key, root, recurrent_fn, config, qtransform, invalid_actions, max_depth
        )
    return _muzero(
        params, rng_key, root, recurrent_fn, config, qtransform, invalid_actions, max_depth, tree
    )


def _sampled_muzero(
    params, rng_key, root, recurrent_fn, sample_fn, config: SearchConfig, action_bounds
) -> SearchOutput:
    """Sampled MuZero: MuZero's search (`_muzero`: PUCT, Dirichlet noise over the root's K
    children, masks, either engine) over a tree whose K children per node are the actions the
    node drew, with the corrected prior (`search.sampled`). Each node keeps its draws beside its
    embedding (`SampledNode`); the model steps with the action in the chosen slot.

    The key `_muzero` gets is `rng_key` itself, so that with K = A actions drawn without
    replacement (every action once, in order) the search is MuZero's from the same key; the
    root's draws take a key folded from it, each expansion splits its own.
    """
    value = _inputs.as_array(root.value)
    chex.assert_rank(value, 1)
    _inputs.check_floating("search.run", "root.value", value)
    batch_size = value.shape[0]
    num_samples = config.num_samples

    def draw(params, key, embedding, concrete_checks: bool):
        drawn = sample_fn(params, key, embedding, num_samples)
        if not isinstance(drawn, tuple) or len(drawn) not in (2, 3):
            raise ValueError(
                "search.run: sample_fn must return (actions, log_probs) or (actions, log_probs, "
                f"proposal_log_probs), got {type(drawn).__name__}"
            )
        actions, log_probs, proposal = drawn if len(drawn) == 3 else (*drawn, drawn[1])
        actions, log_probs, proposal = map(_inputs.as_array, (actions, log_probs, proposal))
        sampled.check_samples(
            "search.run",
            actions,
            log_probs,
            proposal,
            (batch_size, num_samples),
            action_bounds if concrete_checks else None,
        )
        prior_logits, repeat = sampled.corrected_prior_logits(actions, log_probs, proposal)
        return actions, prior_logits.astype(value.dtype), repeat

    root_actions, root_logits, repeat = draw(
        params, jax.random.fold_in(rng_key, 1), root.embedding, True
    )
    model_step = _inputs.checked_step(
        "search.run", "recurrent_fn", recurrent_fn, value, root.embedding
    )

    def tree_step(params, key, slot, node: sampled.SampledNode):
        model_key, sample_key = jax.random.split(key)
        output, embedding = model_step(
            params, model_key, sampled.take_slot(node.actions, slot), node.embedding
        )
        actions, prior_logits, _ = draw(params, sample_key, embedding, False)
        output = mctx.RecurrentFnOutput(
            reward=output.reward,
            discount=output.discount,
            prior_logits=prior_logits,
            value=output.value,
        )
        return output, sampled.SampledNode(embedding, actions)

    tree_root = mctx.RootFnOutput(
        prior_logits=root_logits,
        value=value,
        embedding=sampled.SampledNode(root.embedding, root_actions),
    )
    max_depth = config.max_depth or config.num_simulations
    output = _muzero(
        params,
        rng_key,
        tree_root,
        tree_step,
        config,
        _make_qtransform(config),
        repeat,
        max_depth,
        None,
    )
    return output._replace(
        action=sampled.take_slot(root_actions, output.action),
        sampled_actions=root_actions,
        action_slot=output.action,
    )


def _with_a_legal_action_per_row(invalid_actions: chex.Array) -> chex.Array:
    """[B, A] `invalid_actions`, refused where concrete and a row has no legal action; under
    `jit`, such a row all legal (`run`'s contract)."""
    if not isinstance(invalid_actions, jax.core.Tracer):
        rows = np.flatnonzero(np.all(np.asarray(invalid_actions).astype(bool), axis=-1))
        if rows.size:
            raise ValueError(
                f"search.run: invalid_actions rows {rows[:8].tolist()} have no legal action; "
                "mark at least one action legal per row (a finished game: all, as pgx does)"
            )
    none_legal = jnp.all(invalid_actions.astype(bool), axis=-1, keepdims=True)  # [B, 1]
    return jnp.where(none_legal, jnp.zeros_like(invalid_actions), invalid_actions)


def _root_invalid(invalid_actions: chex.Array | None, prior_logits: chex.Array) -> chex.Array:
    """[B, A] the root's mask as mctx takes it: `invalid_actions`, or all legal (zeros)."""
    return jnp.zeros_like(prior_logits) if invalid_actions is None else invalid_actions


def _muzero(
    params, rng_key, root, recurrent_fn, config, qtransform, invalid_actions, max_depth, tree
) -> SearchOutput:
    """mctx.muzero_policy, with illegal interior actions masked and an optional tree to grow."""
    # Key use mirrors mctx.muzero_policy so that the fresh search matches it exactly.
    rng_key, dirichlet_key, search_key = jax.random.split(rng_key, 3)
    noisy_logits = _dirichlet_noisy_logits(dirichlet_key, root.prior_logits, config)
    root = root.replace(prior_logits=mask_invalid_logits(noisy_logits, invalid_actions))
    invalid_actions = _root_invalid(invalid_actions, root.prior_logits)
    if tree is None:
        # Not `mctx.search`: it wraps the root's and the interior's selection in a `lax.cond` at
        # every level of every simulation, and PUCT has one selection for both; that cond cost
        # about 3% of the search's throughput on a CPU (benchmarks/search.py, BENCHMARKS.md). The
        # loop below is mctx's, key for key, so the result is mctx's.
        start = _mctx_internals.instantiate_tree_from_root(
            root, config.num_simulations, root_invalid_actions=invalid_actions, extra_data=None
        )
    else:
        start = _prepare_continued_tree(tree, root, invalid_actions, config.num_simulations)
    if config.engine == "mctx":
        selection_fn = functools.partial(
            _puct_selection,
            pb_c_init=config.pb_c_init,
            pb_c_base=config.pb_c_base,
            qtransform=qtransform,
        )
        search_tree = _simulate_from(
            params, search_key, start, recurrent_fn, selection_fn, config.num_simulations, max_depth
        )
    else:
        root_rule, interior_rule = _puct_rules(config, root.prior_logits.shape[-1], invalid_actions)
        search_tree = _engine_search(
            params,
            search_key,
            start,
            recurrent_fn,
            config,
            max_depth,
            root_rule=root_rule,
            interior_rules=(interior_rule,),
        )
    return _visit_output(rng_key, search_tree.summary(), config, search_tree)


def _engine_search(
    params, rng_key, start: mctx.Tree, recurrent_fn, config, max_depth, *, root_rule, interior_rules
) -> mctx.Tree:
    """`search.engine`'s simulations on `start` (a fresh or continued mctx tree), as an mctx tree.

    New nodes go after the existing ones: from slot 1 in a fresh tree (mctx's `sim + 1`), from
    each row's node count in a continued one.
    """
    fields = {name: getattr(start, name) for name in engine.Tree._fields}
    first_new_node = jnp.sum(start.node_visits > 0, axis=-1).astype(jnp.int32)  # [B]
    grown = engine.run_simulations(
        params,
        rng_key,
        engine.Tree(**fields),
        recurrent_fn,
        root_rule=root_rule,
        interior_rules=interior_rules,
        num_simulations=config.num_simulations,
        max_depth=max_depth,
        first_new_node=first_new_node,
        levels_per_check=config.descent_levels_per_check,
    )
    return start.replace(**grown._asdict())


def _illegal_rows(rows: engine.NodeRows) -> chex.Array:
    """[B, A] bool: the actions a node's model marked illegal (the engine's interior mask)."""
    return selection.illegal_by_prior(rows.prior_logits)


def _value_score_fn(config: SearchConfig):
    """The configured q-transform on a node's statistics (`search.selection`'s, mctx's maths)."""
    transform = getattr(selection, config.qtransform_name)
    return functools.partial(transform, **_qtransform_args(config))


def _puct_rules(
    config: SearchConfig, num_actions: int, root_invalid_actions: chex.Array
) -> tuple[engine.Rule, engine.Rule]:
    """PUCT at the root, masked by `root_invalid_actions` [B, A], and at interior decision
    nodes, masked where the model marked an action illegal."""
    root_invalid = root_invalid_actions.astype(bool)
    return (
        _puct_rule(config, num_actions, lambda rows: root_invalid),
        _puct_rule(config, num_actions, _illegal_rows),
    )


def _puct_rule(config: SearchConfig, num_actions: int, invalid_fn) -> engine.Rule:
    """The engine's PUCT over a node's first `num_actions` children (a stochastic tree's
    decision part), never choosing where `invalid_fn(rows)` [B, A] is True."""
    value_score = _value_score_fn(config)

    def select(rows: engine.NodeRows, uniform):
        rows = rows.children(slice(0, num_actions))
        scores = selection.puct_scores(
            rows.prior_logits,
            rows.visits,
            rows.node_visits,
            value_score(rows),
            uniform,
            pb_c_init=config.pb_c_init,
            pb_c_base=config.pb_c_base,
        )
        return selection.masked_argmax(scores, invalid_fn(rows))

    return engine.Rule(select, noise_size=num_actions)


def _chance_rule(num_actions: int) -> engine.Rule:
    """The engine's selection at a chance node, over the children after the first
    `num_actions`: the outcome with the largest prior / (visits + 1) (mctx's)."""

    def select(rows: engine.NodeRows, uniform):
        outcomes = rows.children(slice(num_actions, None))
        scores = jax.nn.softmax(outcomes.prior_logits) / (outcomes.visits + 1)
        return jnp.argmax(scores, axis=-1).astype(jnp.int32) + num_actions

    return engine.Rule(select)


def _gumbel_rules(
    config: SearchConfig, num_actions: int, gumbel: chex.Array, invalid_actions: chex.Array
) -> tuple[engine.Rule, engine.Rule]:
    """The engine's Gumbel MuZero over a node's first `num_actions` children: sequential
    halving at the root (`gumbel` [B, A], root mask `invalid_actions` [B, A]) and the
    deterministic selection below, never choosing an action the model marked illegal."""
    value_score = _value_score_fn(config)
    table = selection.considered_visits_table(
        config.max_num_considered_actions, config.num_simulations
    )
    num_valid = jnp.sum(1 - invalid_actions, axis=-1).astype(jnp.int32)  # [B]
    num_considered = jnp.minimum(config.max_num_considered_actions, num_valid)
    root_invalid = invalid_actions.astype(bool)

    def at_root(rows: engine.NodeRows, uniform):
        rows = rows.children(slice(0, num_actions))
        scores = selection.gumbel_root_scores(
            rows, value_score(rows), gumbel, num_considered, table
        )
        return selection.masked_argmax(scores, root_invalid)

    def below(rows: engine.NodeRows, uniform):
        rows = rows.children(slice(0, num_actions))
        scores = selection.gumbel_interior_scores(rows.prior_logits, value_score(rows), rows.visits)
        return selection.masked_argmax(scores, _illegal_rows(rows))

    return engine.Rule(at_root), engine.Rule(below)


def _visit_output(rng_key, summary, config, search_tree) -> SearchOutput:
    """The output of a search that acts by its visit counts (at `config.temperature`)."""
    return SearchOutput(
        action=select_action(rng_key, summary.visit_probs, config.temperature),
        action_weights=summary.visit_probs,
        visit_counts=summary.visit_counts,
        root_value=summary.value,
        q_values=summary.qvalues,
        tree=search_tree,
    )


def _gumbel_muzero(
    params, rng_key, root, recurrent_fn, config, qtransform, invalid_actions, max_depth
) -> SearchOutput:
    """mctx.gumbel_muzero_policy, with the interior selection masking illegal actions."""
    root = root.replace(prior_logits=mask_invalid_logits(root.prior_logits, invalid_actions))
    rng_key, gumbel_key = jax.random.split(rng_key)
    gumbel = config.gumbel_scale * jax.random.gumbel(
        gumbel_key, shape=root.prior_logits.shape, dtype=root.prior_logits.dtype
    )
    invalid_actions = _root_invalid(invalid_actions, root.prior_logits)
    extra_data = mctx.GumbelMuZeroExtraData(root_gumbel=gumbel)
    if config.engine == "mctx":
        search_tree = mctx.search(
            params,
            rng_key,
            root=root,
            recurrent_fn=recurrent_fn,
            root_action_selection_fn=functools.partial(
                mctx.gumbel_muzero_root_action_selection,
                num_simulations=config.num_simulations,
                max_num_considered_actions=config.max_num_considered_actions,
                qtransform=qtransform,
            ),
            interior_action_selection_fn=functools.partial(
                _gumbel_interior_selection, qtransform=qtransform
            ),
            num_simulations=config.num_simulations,
            max_depth=max_depth,
            invalid_actions=invalid_actions,
            extra_data=extra_data,
        )
    else:
        root_rule, interior_rule = _gumbel_rules(
            config, root.prior_logits.shape[-1], gumbel, invalid_actions
        )
        start = _mctx_internals.instantiate_tree_from_root(
            root,
            config.num_simulations,
            root_invalid_actions=invalid_actions,
            extra_data=extra_data,
        )
        search_tree = _engine_search(
            params,
            rng_key,
            start,
            recurrent_fn,
            config,
            max_depth,
            root_rule=root_rule,
            interior_rules=(interior_rule,),
        )
    return _gumbel_output(
        search_tree, gumbel, root.prior_logits, qtransform, invalid_actions, search_tree
    )


def _gumbel_output(
    decisions: mctx.Tree, gumbel, prior_logits, qtransform, invalid_actions, tree
) -> SearchOutput:
    """Gumbel MuZero's result from the root's decision children (`decisions`; `tree` is the
    whole tree returned): the best of the most visited actions by gumbel + logits + completed Q
    (as mctx), and the improved policy softmax(logits + completed Q) as the weights."""
    summary = decisions.summary()
    considered_visit = jnp.max(summary.visit_counts, axis=-1, keepdims=True)
    completed_q = jax.vmap(qtransform, in_axes=[0, None])(decisions, decisions.ROOT_INDEX)
    to_argmax = selection.score_considered(
        considered_visit, gumbel, prior_logits, completed_q, summary.visit_counts
    )
    action = selection.masked_argmax(to_argmax, invalid_actions.astype(bool))
    action_weights = jax.nn.softmax(
        mask_invalid_logits(prior_logits + completed_q, invalid_actions)
    )
    return SearchOutput(
        action=action,
        action_weights=action_weights,
        visit_counts=summary.visit_counts,
        root_value=summary.value,
        q_values=summary.qvalues,
        tree=tree,
    )


def _stochastic_muzero(
    params,
    rng_key,
    root: mctx.RootFnOutput,
    model: StochasticModel,
    config: SearchConfig,
    qtransform,
    invalid_actions,
    max_depth: int,
) -> SearchOutput:
    """mctx.stochastic_muzero_policy, with illegal actions masked at interior decision nodes.

    Three departures that leave the result unchanged: mctx calls the decision function once on
    the roots only to learn C and the afterstate's structure (here `jax.eval_shape`, no
    computation); where a state and an afterstate have the same structure (a learned model's
    latents) each node keeps one embedding, not one of each (`_SharedEmbedding`: mctx's tree holds
    both at every node, one of them never read, and writes and gathers both at every simulation);
    and the simulations run in `_simulate_from`, without the per-level `lax.cond` between root and
    interior selection (one selection here).
    """
    batch_size, num_actions = root.prior_logits.shape
    gumbel = config.decision_selection == "gumbel"
    # Key use mirrors mctx.stochastic_muzero_policy so that the search matches it exactly.
    rng_key, noise_key, search_key = jax.random.split(rng_key, 3)
    if gumbel:  # no Dirichlet noise: Gumbel's own, in the root's selection and its action
        prior_logits = mask_invalid_logits(root.prior_logits, invalid_actions)  # [B, A]
        root_gumbel = config.gumbel_scale * jax.random.gumbel(
            noise_key, shape=prior_logits.shape, dtype=prior_logits.dtype
        )  # [B, A]
    else:
        noisy_logits = _dirichlet_noisy_logits(noise_key, root.prior_logits, config)
        prior_logits = mask_invalid_logits(noisy_logits, invalid_actions)  # [B, A]
    dummy_action = jnp.zeros([batch_size], jnp.int32)
    decision_shape, afterstate_shape = jax.eval_shape(
        model.decision_fn, params, rng_key, dummy_action, root.embedding
    )
    num_chance = decision_shape.chance_logits.shape[-1]  # C
    chance_padding = jnp.full([batch_size, num_chance], -jnp.inf, prior_logits.dtype)
    is_decision = jnp.ones([batch_size], bool)
    shared = _same_structure(root.embedding, afterstate_shape)
    if shared:
        embedding: Any = _SharedEmbedding(root.embedding, is_decision)
        recurrent_fn = _shared_stochastic_recurrent_fn(model, num_actions, num_chance)
    else:
        embedding = _mctx_internals.StochasticRecurrentState(
            state_embedding=root.embedding,
            afterstate_embedding=jax.tree.map(
                lambda x: jnp.zeros(x.shape, x.dtype), afterstate_shape
            ),
            is_decision_node=is_decision,
        )
        recurrent_fn = _mctx_internals.make_stochastic_recurrent_fn(
            model.decision_fn, model.chance_fn, num_actions, num_chance
        )
    root = root.replace(
        prior_logits=jnp.concatenate([prior_logits, chance_padding], axis=-1),  # [B, A + C]
        embedding=embedding,
    )
    invalid_actions = _root_invalid(invalid_actions, prior_logits)
    # The root's mask over A + C children; only its first A (the decision part) is ever read.
    root_invalid = jnp.concatenate(
        [invalid_actions, jnp.zeros([batch_size, num_chance], invalid_actions.dtype)], axis=-1
    )
    extra_data = mctx.GumbelMuZeroExtraData(root_gumbel=root_gumbel) if gumbel else None
    start = _mctx_internals.instantiate_tree_from_root(
        root, config.num_simulations, root_invalid_actions=root_invalid, extra_data=extra_data
    )
    if config.engine == "mctx":
        if gumbel:
            decision_selection = functools.partial(
                _gumbel_selection, config=config, qtransform=qtransform
            )
        else:
            decision_selection = functools.partial(
                _puct_selection,
                pb_c_init=config.pb_c_init,
                pb_c_base=config.pb_c_base,
                qtransform=qtransform,
            )
        selection_fn = _mctx_internals.make_stochastic_action_selection_fn(
            decision_selection, num_actions
        )
        search_tree = _simulate_from(
            params, search_key, start, recurrent_fn, selection_fn, config.num_simulations, max_depth
        )
    else:
        # Decision and chance nodes alternate with depth: the root decides, depth 1 is chance.
        if gumbel:
            root_rule, decision_rule = _gumbel_rules(
                config, num_actions, root_gumbel, invalid_actions
            )
        else:
            root_rule, decision_rule = _puct_rules(config, num_actions, invalid_actions)
        search_tree = _engine_search(
            params,
            search_key,
            start,
            recurrent_fn,
            config,
            max_depth,
            root_rule=root_rule,
            interior_rules=(_chance_rule(num_actions), decision_rule),
        )
    decisions = _mctx_internals.mask_tree(search_tree, num_actions, "decision")
    if gumbel:
        return _gumbel_output(
            decisions, root_gumbel, prior_logits, qtransform, invalid_actions, search_tree
        )
    return _visit_output(rng_key, decisions.summary(), config, search_tree)


def _gumbel_selection(rng_key, tree, node_index, depth, *, config: SearchConfig, qtransform):
    """Gumbel MuZero's selection at a decision node of a stochastic tree: sequential halving at
    the root (its Gumbel noise in `tree.extra_data`), the deterministic selection below."""
    at_root = mctx.gumbel_muzero_root_action_selection(
        rng_key,
        tree,
        node_index,
        num_simulations=config.num_simulations,
        max_num_considered_actions=config.max_num_considered_actions,
        qtransform=qtransform,
    )
    below = _gumbel_interior_selection(rng_key, tree, node_index, depth, qtransform=qtransform)
    return jnp.where(depth == 0, at_root, below)


class _SharedEmbedding(NamedTuple):
    """A node's one embedding: a state at a decision node, an afterstate at a chance node.

    mctx's selection reads only `is_decision_node` of a node's embedding; its recurrent wrapper
    keeps a state and an afterstate at every node (`StochasticRecurrentState`).
    """

    embedding: Any  # [B, ...]
    is_decision_node: chex.Array  # [B] bool


def _same_structure(state: Any, afterstate_shape: Any) -> bool:
    state_shape = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    same_tree: bool = jax.tree.structure(state_shape) == jax.tree.structure(afterstate_shape)  # type: ignore[operator]
    return same_tree and all(
        a.shape == b.shape and a.dtype == b.dtype
        for a, b in zip(
            jax.tree.leaves(state_shape), jax.tree.leaves(afterstate_shape), strict=True
        )
    )


def _shared_stochastic_recurrent_fn(model: StochasticModel, num_actions: int, num_chance: int):
    """mctx's `_make_stochastic_recurrent_fn` over `_SharedEmbedding`s: the same outputs.

    As mctx, both functions run for every row (which one a row needs depends on its node) and
    each row keeps one result; the other function reads the embedding of the other kind, and
    its result is dropped, as mctx drops the result of the function it runs on a node's unused
    slot.
    """

    def recurrent_fn(params, rng_key, action_or_chance, node: _SharedEmbedding):
        batch_size = node.is_decision_node.shape[0]
        decision, afterstate = model.decision_fn(params, rng_key, action_or_chance, node.embedding)
        chance, state = model.chance_fn(
            params, rng_key, action_or_chance - num_actions, node.embedding
        )
        if_decision = mctx.RecurrentFnOutput(
            prior_logits=jnp.concatenate(
                [jnp.full([batch_size, num_actions], -jnp.inf), decision.chance_logits], axis=-1
            ),
            value=decision.afterstate_value,
            reward=jnp.zeros_like(decision.afterstate_value),
            discount=jnp.ones_like(decision.afterstate_value),
        )
        if_chance = mctx.RecurrentFnOutput(
            prior_logits=jnp.concatenate(
                [chance.action_logits, jnp.full([batch_size, num_chance], -jnp.inf)], axis=-1
            ),
            value=chance.value,
            reward=chance.reward,
            discount=chance.discount,
        )

        def pick(at_decision, at_chance):
            rows = node.is_decision_node.reshape((-1,) + (1,) * (at_decision.ndim - 1))
            return jnp.where(rows, at_decision, at_chance)

        output = jax.tree.map(pick, if_decision, if_chance)
        embedding = jax.tree.map(pick, afterstate, state)
        return output, _SharedEmbedding(embedding, jnp.logical_not(node.is_decision_node))

    return recurrent_fn


def _simulate_from(
    params, rng_key, tree, recurrent_fn, selection_fn, num_simulations, max_depth
) -> mctx.Tree:
    """mctx's simulation loop, started from a tree that may already hold nodes.

    New nodes are written after the existing ones: node index `num_existing + sim` for each row.
    With a fresh tree `num_existing` is 1, which is exactly mctx's `sim + 1`.
    """
    batch_size = tree.node_values.shape[0]
    batch_range = jnp.arange(batch_size)
    num_existing = jnp.sum(tree.node_visits > 0, axis=-1).astype(jnp.int32)  # [B]

    def body(sim, loop_state):
        rng_key, tree = loop_state
        rng_key, simulate_key, expand_key = jax.random.split(rng_key, 3)
        simulate_keys = jax.random.split(simulate_key, batch_size)
        parent_index, action = _mctx_internals.simulate(
            simulate_keys, tree, selection_fn, max_depth
        )
        next_node_index = tree.children_index[batch_range, parent_index, action]
        next_node_index = jnp.where(
            next_node_index == mctx.Tree.UNVISITED, num_existing + sim, next_node_index
        )
        tree = _mctx_internals.expand(
            params, expand_key, tree, recurrent_fn, parent_index, action, next_node_index
        )
        tree = _mctx_internals.backward(tree, next_node_index)
        return rng_key, tree

    _, tree = jax.lax.fori_loop(0, num_simulations, body, (rng_key, tree))
    return tree


def _prepare_continued_tree(
    tree: mctx.Tree, root: mctx.RootFnOutput, invalid_actions, num_simulations: int
) -> mctx.Tree:
    """Makes room for `num_simulations` new nodes and refreshes the root from `root`.

    A kept root keeps its visits, value and children statistics; its prior is replaced by the
    (noised, masked) `root.prior_logits` and its embedding by `root.embedding`. A row whose tree
    is empty gets a fresh root, as `instantiate_tree_from_root` would make it.
    """
    batch_size, capacity = tree.node_values.shape
    chex.assert_shape(root.prior_logits, (batch_size, tree.num_actions))

    def grow(x, fill):
        pad = jnp.full((batch_size, num_simulations) + x.shape[2:], fill, dtype=x.dtype)
        return jnp.concatenate([x, pad], axis=1)

    tree = tree.replace(
        node_visits=grow(tree.node_visits, 0),
        raw_values=grow(tree.raw_values, 0),
        node_values=grow(tree.node_values, 0),
        parents=grow(tree.parents, mctx.Tree.NO_PARENT),
        action_from_parent=grow(tree.action_from_parent, mctx.Tree.NO_PARENT),
        children_index=grow(tree.children_index, mctx.Tree.UNVISITED),
        children_prior_logits=grow(tree.children_prior_logits, 0),
        children_values=grow(tree.children_values, 0),
        children_visits=grow(tree.children_visits, 0),
        children_rewards=grow(tree.children_rewards, 0),
        children_discounts=grow(tree.children_discounts, 0),
        embeddings=jax.tree.map(lambda x: grow(x, 0), tree.embeddings),
        root_invalid_actions=invalid_actions,
    )
    has_root = tree.node_visits[:, 0] > 0  # [B]
    root_value = jnp.where(has_root, tree.node_values[:, 0], root.value)
    tree = tree.replace(
        node_visits=tree.node_visits.at[:, 0].set(jnp.maximum(tree.node_visits[:, 0], 1)),
        raw_values=tree.raw_values.at[:, 0].set(
            jnp.where(has_root, tree.raw_values[:, 0], root.value)
        ),
        node_values=tree.node_values.at[:, 0].set(root_value),
        children_prior_logits=tree.children_prior_logits.at[:, 0].set(root.prior_logits),
        embeddings=jax.tree.map(lambda x, r: x.at[:, 0].set(r), tree.embeddings, root.embedding),
    )
    del capacity
    return tree


def select_action(
    rng_key: chex.PRNGKey,
    visit_probs: chex.Array,
    temperature: float,
    invalid_actions: chex.Array | None = None,
) -> chex.Array:
    """Picks an action per row from visit counts (or their distribution).

    Samples proportionally to `visits ** (1 / temperature)`; temperature 0 is greedy (the most
    visited action; ties between the most visited are broken at random, as mctx's are). Uses the
    key exactly as mctx.muzero_policy does.

    Args:
      rng_key: consumed.
      visit_probs: [B, A] visit counts (integers or floats) or visit distribution.
      temperature: >= 0; a Python number or an array that broadcasts against [B, A] (a scalar,
        or [B, 1] for a temperature per row).
      invalid_actions: [B, A], True (or nonzero) where an action must never be picked.
    Returns:
      [B] int32 actions.
    """
    visit_probs = _inputs.as_array(visit_probs)
    chex.assert_rank(visit_probs, 2)
    if jnp.issubdtype(visit_probs.dtype, jnp.integer):
        visit_probs = visit_probs.astype(jnp.float32)  # counts, as `tree.children_visits` holds
    _inputs.check_floating("search.select_action", "visit_probs", visit_probs)
    if isinstance(temperature, (int, float)) and not temperature >= 0:  # NaN included
        raise ValueError(f"search.select_action: temperature must be >= 0, got {temperature}")
    if invalid_actions is not None:
        invalid_actions = _inputs.as_mask(
            "search.select_action", invalid_actions, visit_probs.shape
        )
    logits = jnp.log(jnp.maximum(visit_probs, jnp.finfo(visit_probs.dtype).tiny))
    logits = logits - jnp.max(logits, keepdims=True, axis=-1)
    logits = logits / jnp.maximum(jnp.finfo(logits.dtype).tiny, temperature)
    if invalid_actions is not None:
        logits = jnp.where(invalid_actions, -jnp.inf, logits)
    return jax.random.categorical(rng_key, logits).astype(jnp.int32)
