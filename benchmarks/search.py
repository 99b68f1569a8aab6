"""Search benchmarks: `search.run` against raw mctx, and subtree reuse against none.

    .venv/bin/python benchmarks/search.py              # the three algorithms at 256 x 50, 200 games
    .venv/bin/python benchmarks/search.py --algorithm muzero --reuse-games 0 --clock cpu
    .venv/bin/python benchmarks/search.py --algorithm none --reuse-simulations 128
    .venv/bin/python benchmarks/search.py --algorithm none --reuse-games 0 --per-simulation
    .venv/bin/python benchmarks/search.py --algorithm muzero --reuse-games 0 --engine mctx
    .venv/bin/python benchmarks/search.py --algorithm none --reuse-games 0 --hlo-ops

**Throughput** (one JSON line per `--algorithm`): searches per second (batch rows searched per
second) of `search.run` and of `mctx.muzero_policy` (or `search.run` with Gumbel MuZero and
`mctx.gumbel_muzero_policy`, Stochastic MuZero and `mctx.stochastic_muzero_policy`) with the same
settings, the same model and the same keys. The model is the real MuZero network from `muzero` at
connect-four size ([6, 7, 3] planes, 7 actions, 32 channels, 2 blocks, scalar value and reward
heads) in the two-player convention (Stochastic MuZero: `muzero.make_stochastic_networks` at the
same sizes, with 32 chance codes); the roots are
computed once outside the timing, so only the search is timed. Both functions are jitted and
compiled before timing; every timed call ends in `jax.block_until_ready`. The two are measured in
one process, interleaved over `--rounds` rounds (A B, then B A, ...) so that machine noise hits
both alike, and each reports its median round. `ratio` is ours / mctx. On a CPU machine shared
with other jobs, `--clock cpu` times this process's CPU seconds instead of wall seconds. `--engine`
picks the engine of ours (`SearchConfig.engine`: "podracer", `search.engine`; or "mctx", mctx's own
loop under our masks); the reference is always raw mctx. `--levels-per-check 1 2 4` prints a line
per value of `SearchConfig.descent_levels_per_check` (the levels our engine descends between two
checks of whether a row continues: each check is a wait on the host on a GPU; 0 checks never:
every simulation descends `--max-depth` levels in a loop of known trip count). `--graphs on`
compiles both searches with XLA's command buffers for loops (`GRAPH_COMPILER_OPTIONS`: the loops
run as CUDA graphs, without the host between levels), `both` a line with and one without.

**Operations per simulation** (`--hlo-ops`, one JSON line per algorithm): the CPU proxy for a
GPU's kernel launches per simulation. Both engines' searches over tiny linear models (the tree's
own operations; the network's are the same in both) are compiled, and the body of the loop over
simulations is read from the compiled HLO: its operations (a fusion, a scatter, a copy count one;
tuples, constants and parameters none), loops of a known trip count (jax's threefry on the CPU)
counted that many times, and the operations of each loop over depth (the descent; mctx's backup)
per level. `per_simulation` adds the loops over depth at the deepest level a simulation of that
search reached, averaged over its simulations (measured on the search's own tree).

**Cost per simulation** (`--per-simulation`, one JSON line): seconds per simulation of
`mctx.muzero_policy` (MuZero's networks), `mctx.stochastic_muzero_policy` and `search.run`'s
Stochastic MuZero (Stochastic MuZero's networks at the same sizes), at the same batch and
simulations, interleaved as above; and where the difference goes: one call of each model's
functions on the batch (MuZero's `recurrent_fn`; Stochastic MuZero's decision and chance
functions, both of which mctx calls at every simulation for every row, keeping one), and the same
searches over tiny linear models (the tree's own cost).

**Reuse** (`--reuse-games N`, one JSON line): N connect-four games (pgx rules as the exact model,
uniform prior, zero value; or `--reuse-evaluator rollout`: one random playout per leaf) between
two searches with the same `--reuse-simulations` per move; one keeps the subtree under each move
played (its own and the opponent's) with `search.reuse_subtree`, the other starts each search
from scratch. Each side moves first in half the games. The first
`--opening-plies` moves of each side are sampled at temperature 1 from the visit counts (so the
games differ), later moves are greedy; no Dirichlet noise. All games run in lock step in one
jitted `lax.scan` over plies. Reports the reusing side's wins/draws/losses, its score
(win 1, draw 1/2) and a 95% normal interval of the score.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import math
import os
import re
import statistics
import sys
import time

# Run as `python benchmarks/search.py`, this folder is first on sys.path and this file's name would
# hide the `search` package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mctx  # noqa: E402
import numpy as np  # noqa: E402
import pgx  # noqa: E402

import search  # noqa: E402
from muzero import (  # noqa: E402
    NetworkConfig,
    make_muzero_networks,
    make_recurrent_fn,
    make_root_fn,
    make_stochastic_model,
    make_stochastic_networks,
    make_stochastic_root_fn,
)

OBSERVATION_SHAPE = (6, 7, 3)  # connect four: rows, columns, planes
NUM_ACTIONS = 7
NUM_CODES = 32  # Stochastic MuZero's chance codes (2048's tile placements)
NETWORK = NetworkConfig(
    channels=32,
    representation_blocks=2,
    dynamics_blocks=2,
    prediction_blocks=1,
    head_hidden=32,
    value_support=0,
    reward_support=0,
)


# --- throughput: search.run vs mctx --------------------------------------------------------------


# XLA:GPU's command buffers (CUDA graphs) for everything a search runs, its loops included: by
# default XLA records fusions and library calls but runs a `while_loop` from the host, copying
# each iteration's predicate back and waiting for it; WHILE and CONDITIONAL record the loops too
# (CUDA's conditional graph nodes), so a search runs without the host between its levels. XLA's
# default list and the two (per compilation an option takes the whole list, not "+WHILE");
# benchmarks/gpu.sh's GRAPHS sets the same for a whole process.
GRAPH_COMPILER_OPTIONS = {
    "xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,"
    "DYNAMIC_SLICE_FUSION,CONDITIONAL,WHILE",
    "xla_gpu_graph_min_graph_size": 1,
}


def make_searches(
    algorithm: str,
    num_simulations: int,
    engine: str = "podracer",
    compiler_options: dict | None = None,
    **config_changes,
):
    """(ours, reference, params, root_fn): two jitted `(key, root, invalid) -> action` fns,
    both compiled with `compiler_options`; `config_changes` go to our search's `SearchConfig`
    (the reference is mctx's as it is)."""
    if algorithm == "stochastic_muzero":
        networks = make_stochastic_networks(NETWORK, OBSERVATION_SHAPE, NUM_ACTIONS, NUM_CODES)
        recurrent_fn = make_stochastic_model(networks, two_player=True)
        root_fn = make_stochastic_root_fn(networks)
    else:
        networks = make_muzero_networks(NETWORK, OBSERVATION_SHAPE, NUM_ACTIONS)
        recurrent_fn = make_recurrent_fn(networks, two_player=True)
        root_fn = make_root_fn(networks)
    params = jax.jit(networks.init)(jax.random.PRNGKey(0))
    config = search.SearchConfig(
        algorithm=algorithm, num_simulations=num_simulations, engine=engine, **config_changes
    )

    def ours(key, root, invalid):
        out = search.run(params, key, root, recurrent_fn, config, invalid_actions=invalid)
        return out.action, out.action_weights

    if algorithm == "sampled_muzero":
        # K = A draws without replacement from the network's own policy at each node (legal
        # moves only: the illegal ones' logits masked), against our MuZero search of the same
        # network over every action: the cost of drawing and keeping the samples.
        muzero_config = config.replace(algorithm="muzero")
        sampled_config = config.replace(num_samples=NUM_ACTIONS)

        def sampled_recurrent_fn(params, key, action, node):
            out, embedding = recurrent_fn(params, key, action, node[0])
            return out, (embedding, out.prior_logits)

        def draw(params, key, node, num_samples):
            return search.sample_categorical(key, node[1], num_samples)

        def ours(key, root, invalid):
            logits = search.mask_invalid_logits(root.prior_logits, invalid)
            sampled_root = root.replace(embedding=(root.embedding, logits))
            out = search.run(
                params, key, sampled_root, sampled_recurrent_fn, sampled_config, sample_fn=draw
            )
            return out.action, out.action_weights

        def reference(key, root, invalid):
            out = search.run(
                params, key, root, recurrent_fn, muzero_config, invalid_actions=invalid
            )
            return out.action, out.action_weights

    elif algorithm == "muzero":

        def reference(key, root, invalid):
            out = mctx.muzero_policy(
                params,
                key,
                root,
                recurrent_fn,
                num_simulations,
                invalid_actions=invalid,
                max_depth=config.max_depth,
                dirichlet_fraction=config.dirichlet_fraction,
                dirichlet_alpha=config.dirichlet_alpha,
                pb_c_init=config.pb_c_init,
                pb_c_base=config.pb_c_base,
                temperature=config.temperature,
            )
            return out.action, out.action_weights
    elif algorithm == "stochastic_muzero":

        def reference(key, root, invalid):
            out = mctx.stochastic_muzero_policy(
                params,
                key,
                root,
                recurrent_fn.decision_fn,
                recurrent_fn.chance_fn,
                num_simulations,
                invalid_actions=invalid,
                max_depth=config.max_depth,
                dirichlet_fraction=config.dirichlet_fraction,
                dirichlet_alpha=config.dirichlet_alpha,
                pb_c_init=config.pb_c_init,
                pb_c_base=config.pb_c_base,
                temperature=config.temperature,
            )
            return out.action, out.action_weights
    else:

        def reference(key, root, invalid):
            out = mctx.gumbel_muzero_policy(
                params,
                key,
                root,
                recurrent_fn,
                num_simulations,
                invalid_actions=invalid,
                max_depth=config.max_depth,
                max_num_considered_actions=config.max_num_considered_actions,
                gumbel_scale=config.gumbel_scale,
            )
            return out.action, out.action_weights

    return (
        jax.jit(ours, compiler_options=compiler_options),
        jax.jit(reference, compiler_options=compiler_options),
        params,
        root_fn,
    )


def connect_four_roots(root_fn, params, batch_size: int, seed: int = 0):
    """Roots of random connect-four-like positions: (root, invalid [B, A] with full columns)."""
    key_board, key_full = jax.random.split(jax.random.PRNGKey(seed))
    cells = jax.random.randint(key_board, (batch_size, 6, 7), 0, 3)  # 0 empty, 1 mine, 2 theirs
    planes = jnp.stack([cells == 1, cells == 2, jnp.ones_like(cells, bool)], axis=-1)
    invalid = jax.random.bernoulli(key_full, 0.15, (batch_size, NUM_ACTIONS))
    invalid = invalid.at[:, 3].set(False)  # never a row with no legal move
    root = jax.jit(root_fn)(params, planes.astype(jnp.float32))
    return jax.block_until_ready(root), invalid


def _timed(fn, keys, root, invalid, clock=time.perf_counter) -> float:
    start = clock()
    for key in keys:
        # Block on each call: the figure is the latency of whole searches, as an actor sees them.
        jax.block_until_ready(fn(key, root, invalid))
    return clock() - start


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def throughput(
    algorithm: str,
    batch_size: int,
    num_simulations: int,
    rounds: int,
    min_seconds: float,
    clock: str = "wall",
    engine: str = "podracer",
    levels_per_check: int = 1,
    graphs: bool = False,
    max_depth: int | None = None,
) -> dict:
    ours, reference, params, root_fn = make_searches(
        algorithm,
        num_simulations,
        engine,
        GRAPH_COMPILER_OPTIONS if graphs else None,
        descent_levels_per_check=levels_per_check,
        max_depth=max_depth,
    )
    root, invalid = connect_four_roots(root_fn, params, batch_size)
    warm_key = jax.random.PRNGKey(1)
    for fn in (ours, reference):  # compile and warm up, excluded from the timing
        jax.block_until_ready(fn(warm_key, root, invalid))
    one_call = min(
        _timed(ours, [warm_key], root, invalid), _timed(reference, [warm_key], root, invalid)
    )
    calls = max(1, math.ceil(min_seconds / max(one_call, 1e-9)))
    rates = {"ours": [], "mctx": []}
    for r in range(rounds):
        keys = list(jax.random.split(jax.random.PRNGKey(100 + r), calls))
        order = [("ours", ours), ("mctx", reference)]
        for name, fn in order if r % 2 == 0 else order[::-1]:  # A B, B A, ...: cancels drift
            seconds = _timed(fn, keys, root, invalid, CLOCKS[clock])
            rates[name].append(batch_size * calls / seconds)
    ours_rate, mctx_rate = statistics.median(rates["ours"]), statistics.median(rates["mctx"])
    line = {
        "benchmark": "search_throughput",
        "algorithm": algorithm,
        "engine": engine,
        "levels_per_check": levels_per_check,
        "max_depth": max_depth,
        "graphs": graphs,
        "ours": round(ours_rate, 2),
        "mctx": round(mctx_rate, 2),
        "ratio": round(ours_rate / mctx_rate, 4),
        # Per round (the two measured back to back): how much of the ratio is noise.
        "ratio_per_round": [
            round(a / b, 3) for a, b in zip(rates["ours"], rates["mctx"], strict=True)
        ],
        "batch_size": batch_size,
        "simulations": num_simulations,
        "rounds": rounds,
        "calls_per_round": calls,
        "clock": clock,
        "platform": jax.devices()[0].platform,
        "model": "muzero resnet 32ch, 2+2+1 blocks, [6,7,3] -> 7 actions"
        + (f", {NUM_CODES} chance codes" if algorithm == "stochastic_muzero" else ""),
    }
    if algorithm == "sampled_muzero":  # the reference is our MuZero search, not mctx
        line["muzero"] = line.pop("mctx")
        line["reference"] = "search.run muzero, the same network, every action"
        line["num_samples"] = NUM_ACTIONS
    return line


def _linear_models(batch_size: int, latent: int = 8):
    """Tiny linear models (MuZero's, Stochastic MuZero's): the searches' cost without networks."""
    keys = jax.random.split(jax.random.PRNGKey(5), 4)
    move = jax.random.normal(keys[0], (NUM_ACTIONS, latent, latent)) * 0.3
    chance = jax.random.normal(keys[1], (NUM_CODES, latent, latent)) * 0.3
    heads = jax.random.normal(keys[2], (latent, NUM_ACTIONS + NUM_CODES + 2))
    embedding = jax.random.normal(keys[3], (batch_size, latent))

    def read(x):
        out = x @ heads
        return out[:, :NUM_ACTIONS], out[:, NUM_ACTIONS:-2], jnp.tanh(out[:, -2]), out[:, -1]

    def recurrent_fn(params, key, action, x):
        x = jnp.tanh(jnp.einsum("bi,bij->bj", x, move[action]))
        logits, _, value, reward = read(x)
        out = mctx.RecurrentFnOutput(
            reward=reward, discount=-jnp.ones_like(reward), prior_logits=logits, value=value
        )
        return out, x

    def decision_fn(params, key, action, x):
        x = jnp.tanh(jnp.einsum("bi,bij->bj", x, move[action]))
        _, chance_logits, value, _ = read(x)
        return mctx.DecisionRecurrentFnOutput(
            chance_logits=chance_logits, afterstate_value=value
        ), x

    def chance_fn(params, key, outcome, x):
        x = jnp.tanh(jnp.einsum("bi,bij->bj", x, chance[outcome]))
        logits, _, value, reward = read(x)
        out = mctx.ChanceRecurrentFnOutput(
            action_logits=logits, value=value, reward=reward, discount=-jnp.ones_like(reward)
        )
        return out, x

    logits, _, value, _ = read(embedding)
    root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=embedding)
    return root, recurrent_fn, search.StochasticModel(decision_fn, chance_fn)


def cost_per_simulation(
    batch_size: int, num_simulations: int, rounds: int, min_seconds: float, clock: str = "wall"
) -> dict:
    """Seconds per simulation of MuZero's and Stochastic MuZero's searches (see the docstring)."""
    muzero_ours, muzero_mctx, muzero_params, muzero_root_fn = make_searches(
        "muzero", num_simulations
    )
    stochastic_ours, stochastic_mctx, stochastic_params, stochastic_root_fn = make_searches(
        "stochastic_muzero", num_simulations
    )
    # Gumbel's selection at the decision nodes (no mctx peer): its cost against PUCT's in the
    # same stochastic tree, with the same networks and parameters.
    stochastic_gumbel, _, _, _ = make_searches(
        "stochastic_muzero", num_simulations, decision_selection="gumbel"
    )
    muzero_root, invalid = connect_four_roots(muzero_root_fn, muzero_params, batch_size)
    stochastic_root, _ = connect_four_roots(stochastic_root_fn, stochastic_params, batch_size)
    linear_root, linear_fn, linear_model = _linear_models(batch_size)
    config = search.SearchConfig(num_simulations=num_simulations)
    stochastic_config = config.replace(algorithm="stochastic_muzero")
    linear_muzero = jax.jit(
        lambda key, root, invalid: (
            mctx.muzero_policy(
                None, key, root, linear_fn, num_simulations, invalid_actions=invalid
            ).action
        )
    )
    linear_stochastic = jax.jit(
        lambda key, root, invalid: (
            mctx.stochastic_muzero_policy(
                None,
                key,
                root,
                linear_model.decision_fn,
                linear_model.chance_fn,
                num_simulations,
                invalid_actions=invalid,
            ).action
        )
    )
    linear_ours = jax.jit(
        lambda key, root, invalid: (
            search.run(
                None, key, root, linear_model, stochastic_config, invalid_actions=invalid
            ).action
        )
    )
    # The models' own cost: one expansion's calls on the batch, as each simulation makes them.
    muzero_networks = make_muzero_networks(NETWORK, OBSERVATION_SHAPE, NUM_ACTIONS)
    stochastic_networks = make_stochastic_networks(
        NETWORK, OBSERVATION_SHAPE, NUM_ACTIONS, NUM_CODES
    )
    muzero_step = make_recurrent_fn(muzero_networks, two_player=True)
    stochastic_step = make_stochastic_model(stochastic_networks, two_player=True)
    actions = jnp.arange(batch_size, dtype=jnp.int32) % NUM_ACTIONS

    def one_muzero_expansion(key, root, invalid):
        del key, invalid
        return muzero_step(muzero_params, None, actions, root.embedding)

    def one_stochastic_expansion(key, root, invalid):
        del key, invalid
        decision, afterstate = stochastic_step.decision_fn(
            stochastic_params, None, actions, root.embedding
        )
        chance, state = stochastic_step.chance_fn(stochastic_params, None, actions, afterstate)
        return decision, chance, state

    timed = {
        "muzero_mctx": (muzero_mctx, muzero_root, num_simulations),
        "stochastic_mctx": (stochastic_mctx, stochastic_root, num_simulations),
        "stochastic_ours": (stochastic_ours, stochastic_root, num_simulations),
        "stochastic_gumbel_ours": (stochastic_gumbel, stochastic_root, num_simulations),
        "muzero_model_call": (jax.jit(one_muzero_expansion), muzero_root, 1),
        "stochastic_model_calls": (jax.jit(one_stochastic_expansion), stochastic_root, 1),
        "linear_muzero_mctx": (linear_muzero, linear_root, num_simulations),
        "linear_stochastic_mctx": (linear_stochastic, linear_root, num_simulations),
        "linear_stochastic_ours": (linear_ours, linear_root, num_simulations),
    }
    warm = jax.random.PRNGKey(1)
    calls = {}
    for name, (fn, root, _) in timed.items():
        jax.block_until_ready(fn(warm, root, invalid))  # compile, excluded
        one = _timed(fn, [warm], root, invalid)
        calls[name] = max(1, math.ceil(min_seconds / max(one, 1e-9)))
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    names = list(timed)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, root, per_call = timed[name]
            keys = list(jax.random.split(jax.random.PRNGKey(200 + r), calls[name]))
            total = _timed(fn, keys, root, invalid, CLOCKS[clock])
            seconds[name].append(total / calls[name] / per_call)
    per = {name: statistics.median(values) for name, values in seconds.items()}
    ms = {f"{name}_ms": round(1000 * value, 4) for name, value in per.items()}
    return {
        "benchmark": "search_cost_per_simulation",
        **ms,
        # Per simulation, Stochastic MuZero's search over MuZero's (mctx both), at equal sims.
        "stochastic_over_muzero": round(per["stochastic_mctx"] / per["muzero_mctx"], 3),
        "ours_over_mctx_stochastic": round(per["stochastic_ours"] / per["stochastic_mctx"], 3),
        # Gumbel's selection at the decision nodes over PUCT's, both ours, at equal sims.
        "gumbel_over_puct_stochastic": round(
            per["stochastic_gumbel_ours"] / per["stochastic_ours"], 3
        ),
        # One expansion's model calls: both of Stochastic MuZero's functions over MuZero's one.
        "model_calls_ratio": round(per["stochastic_model_calls"] / per["muzero_model_call"], 3),
        # Of a stochastic simulation, the share that is the two model calls mctx makes.
        "stochastic_model_share": round(per["stochastic_model_calls"] / per["stochastic_mctx"], 3),
        "muzero_model_share": round(per["muzero_model_call"] / per["muzero_mctx"], 3),
        # The trees' own cost (tiny linear models): stochastic over muzero.
        "tree_ratio": round(per["linear_stochastic_mctx"] / per["linear_muzero_mctx"], 3),
        "batch_size": batch_size,
        "simulations": num_simulations,
        "rounds": rounds,
        "clock": clock,
        "platform": jax.devices()[0].platform,
        "chance_codes": NUM_CODES,
    }


# --- operations per simulation in the compiled HLO --------------------------------------------

_FREE_OPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}


def _hlo_computations(text: str) -> dict[str, list[tuple[str, str]]]:
    """{computation name: [(opcode, instruction text)]} of a compiled module's HLO text."""
    computations: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        if line.endswith("{") and not line.startswith(" ") and "->" in line:
            words = line.split()
            current = (words[1] if words[0] == "ENTRY" else words[0]).lstrip("%")
            computations[current] = []
        elif line.startswith("}"):
            current = None
        elif current is not None and " = " in line:
            rhs = line.split(" = ", 1)[1]
            opcode = re.search(r"(?<![\w.%-])([a-z][a-z0-9-]*)\(", rhs)
            computations[current].append((opcode.group(1) if opcode else "?", rhs))
    return computations


def _count_ops(computations, name: str) -> tuple[int, list[int]]:
    """(operations of `name` with loops of known trip count unrolled, [operations per iteration
    of each loop of unknown trip count inside it])."""
    total, loops = 0, []
    for opcode, rhs in computations[name]:
        if opcode in _FREE_OPS:
            continue
        if opcode == "while":
            body, body_loops = _count_ops(computations, re.search(r"body=%?([\w.-]+)", rhs)[1])
            cond, _ = _count_ops(computations, re.search(r"condition=%?([\w.-]+)", rhs)[1])
            trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', rhs)
            if trips:
                total += int(trips[1]) * (body + cond)
            else:
                loops.append(body + cond)
            loops += body_loops
        elif opcode == "call":
            called, called_loops = _count_ops(
                computations, re.search(r"to_apply=%?([\w.-]+)", rhs)[1]
            )
            total, loops = total + called, loops + called_loops
        elif opcode == "conditional":
            branches = re.findall(r"%([\w.-]+)", rhs.split("branch_computations=")[-1])
            counted = [_count_ops(computations, b) for b in branches if b in computations]
            most = max(counted, key=lambda c: c[0])
            total, loops = total + 1 + most[0], loops + most[1]
        else:
            total += 1
    return total, loops


def simulation_ops(compiled_text: str, num_simulations: int) -> tuple[int, list[int]]:
    """The operations of one simulation: the body of the loop that runs `num_simulations`."""
    computations = _hlo_computations(compiled_text)
    marker = f'"known_trip_count":{{"n":"{num_simulations}"}}'
    for instructions in computations.values():
        for opcode, rhs in instructions:
            if opcode == "while" and marker in rhs:
                return _count_ops(computations, re.search(r"body=%?([\w.-]+)", rhs)[1])
    raise RuntimeError(f"no loop of {num_simulations} iterations in the compiled search")


def _mean_deepest_level(tree, num_simulations: int) -> float:
    """Over the simulations of a fresh search: the depth of the node it created, deepest row."""
    parents = np.asarray(tree.parents)  # [B, N]; node s + 1 is simulation s's
    depth = np.zeros_like(parents)
    for node in range(1, parents.shape[1]):
        depth[:, node] = depth[np.arange(len(parents)), np.maximum(parents[:, node], 0)] + 1
    return float(depth[:, 1 : num_simulations + 1].max(axis=0).mean())


def hlo_ops(algorithm: str, batch_size: int, num_simulations: int) -> dict:
    """Operations per simulation of raw mctx's search and of both engines (tiny linear models)."""
    root, recurrent_fn, model = _linear_models(batch_size)
    model_fn = model if algorithm == "stochastic_muzero" else recurrent_fn
    invalid = jnp.zeros((batch_size, NUM_ACTIONS), bool)
    key = jax.random.PRNGKey(0)

    def ours(engine):
        config = search.SearchConfig(
            algorithm=algorithm, num_simulations=num_simulations, engine=engine
        )
        return lambda key, root: search.run(
            None, key, root, model_fn, config, invalid_actions=invalid
        )

    def raw_mctx(key, root):
        if algorithm == "muzero":
            return mctx.muzero_policy(
                None, key, root, recurrent_fn, num_simulations, invalid_actions=invalid
            )
        if algorithm == "gumbel_muzero":
            return mctx.gumbel_muzero_policy(
                None, key, root, recurrent_fn, num_simulations, invalid_actions=invalid
            )
        return mctx.stochastic_muzero_policy(
            None,
            key,
            root,
            model.decision_fn,
            model.chance_fn,
            num_simulations,
            invalid_actions=invalid,
        )

    levels = _mean_deepest_level(jax.jit(ours("podracer"))(key, root).tree, num_simulations)
    line: dict = {"benchmark": "search_hlo_ops", "algorithm": algorithm}
    for name, fn in (
        ("mctx", raw_mctx),
        ("engine_mctx", ours("mctx")),
        ("podracer", ours("podracer")),
    ):
        text = jax.jit(fn).lower(key, root).compile().as_text()
        outer, per_level = simulation_ops(text, num_simulations)
        line[name] = {
            "outside_depth_loops": outer,
            "per_level": per_level,
            "per_simulation": round(outer + levels * sum(per_level)),
        }
    return {
        **line,
        "ratio": round(line["podracer"]["per_simulation"] / line["mctx"]["per_simulation"], 3),
        "mean_deepest_level": round(levels, 2),
        "batch_size": batch_size,
        "simulations": num_simulations,
        "platform": jax.devices()[0].platform,
        "model": "tiny linear (8 latents), 7 actions"
        + (f", {NUM_CODES} chance codes" if algorithm == "stochastic_muzero" else ""),
    }


def _device_kernels(trace_dir: str) -> dict:
    """Kernels on the accelerator's streams in a jax.profiler trace: their count, their summed
    time and the span from the first's start to the last's end (microseconds). Empty on a CPU."""
    (path,) = glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.trace.json.gz"))
    with gzip.open(path) as file:
        events = json.load(file)["traceEvents"]
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name")
    }
    kernels = [
        e
        for e in events
        if e.get("ph") == "X"
        and names.get((e["pid"], None), "").startswith("/device:GPU")
        and names.get((e["pid"], e.get("tid")), "").startswith("Stream")
        and not e["name"].startswith(("Memcpy", "Memset"))
    ]
    if not kernels:
        return {}
    start = min(e["ts"] for e in kernels)
    end = max(e["ts"] + e["dur"] for e in kernels)
    return {
        "kernels": len(kernels),
        "kernel_us": round(sum(e["dur"] for e in kernels), 1),
        "span_us": round(end - start, 1),
    }


def profile(
    algorithm: str,
    batch_size: int,
    num_simulations: int,
    trace_root: str,
    levels_per_check: int = 1,
) -> dict:
    """One search of each engine and of raw mctx under jax.profiler (traces in `trace_root`),
    and the kernels per simulation read from each trace (accelerators only)."""
    line: dict = {
        "benchmark": "search_profile",
        "algorithm": algorithm,
        "levels_per_check": levels_per_check,
    }
    for engine in ("podracer", "mctx"):
        ours, reference, params, root_fn = make_searches(
            algorithm, num_simulations, engine, descent_levels_per_check=levels_per_check
        )
        root, invalid = connect_four_roots(root_fn, params, batch_size)
        searches = {engine: ours} if engine == "mctx" else {engine: ours, "raw_mctx": reference}
        for name, fn in searches.items():
            key = jax.random.PRNGKey(1)
            jax.block_until_ready(fn(key, root, invalid))  # compiled and warm
            trace_dir = os.path.join(trace_root, f"{algorithm}_{name}_{levels_per_check}")
            with jax.profiler.trace(trace_dir):
                jax.block_until_ready(fn(key, root, invalid))
            found = _device_kernels(trace_dir)
            if found:
                found["kernels_per_simulation"] = round(found["kernels"] / num_simulations, 1)
                found["busy"] = round(found["kernel_us"] / found["span_us"], 3)
            line[name] = found or None
    return {
        **line,
        "batch_size": batch_size,
        "simulations": num_simulations,
        "platform": jax.devices()[0].platform,
        "traces": trace_root,
    }


# --- reuse vs no reuse on connect four ------------------------------------------------------------


def _uniform_zero(params, state):
    """prediction_fn: uniform prior, zero value (the exact rules do all the work)."""
    del params
    batch_size = state.current_player.shape[0]
    return jnp.zeros((batch_size, NUM_ACTIONS)), jnp.zeros((batch_size,))


def _pgx_step_fn(env):
    """search.StepFn over pgx: (state, action) -> (next, mover's reward, terminal, legal)."""
    step = jax.vmap(env.step)

    def step_fn(state, action):
        mover = state.current_player
        next_state = step(state, action)
        reward = jnp.take_along_axis(next_state.rewards, mover[:, None], axis=1)[:, 0]
        return next_state, reward, next_state.terminated, next_state.legal_action_mask

    return step_fn


def _rollout_recurrent_fn(env, step_fn):
    """The exact model whose leaf value is one uniformly random playout to the end of the game."""
    exact = search.make_exact_recurrent_fn(step_fn, _uniform_zero)
    vstep = jax.vmap(env.step)

    def playout_value(rng_key, state):  # [B]: the playout's result for the player to move
        player = state.current_player

        def body(carry):
            state, rng_key, value = carry
            rng_key, action_key = jax.random.split(rng_key)
            action = jax.random.categorical(
                action_key, jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
            )
            state = vstep(state, action)
            return (
                state,
                rng_key,
                value + jnp.take_along_axis(state.rewards, player[:, None], axis=1)[:, 0],
            )

        carry = (state, rng_key, jnp.zeros(player.shape))
        return jax.lax.while_loop(lambda c: ~jnp.all(c[0].terminated), body, carry)[2]

    def recurrent_fn(params, rng_key, action, state):
        output, next_state = exact(params, rng_key, action, state)
        value = playout_value(rng_key, next_state)
        # A terminal state (discount 0) keeps value 0: its outcome is already in the reward.
        return output.replace(value=jnp.where(output.discount == 0, 0.0, value)), next_state

    return recurrent_fn


def make_reuse_match(
    num_games: int,
    num_simulations: int,
    max_nodes: int,
    opening_plies: int,
    evaluator: str = "zero",
):
    """A jitted `play(key) -> (reuse_return [G], mean kept root visits)` over `num_games` games.

    Game g's reusing side moves first when g is even. All games advance in lock step, so at ply t
    the reusing side is to move in the games of parity t % 2: each half of the batch keeps its
    own (static-shape) slice, and a scan step plays two plies with the halves' roles swapped.
    """
    env = pgx.make("connect_four")
    step_fn = _pgx_step_fn(env)
    if evaluator == "rollout":
        recurrent_fn = _rollout_recurrent_fn(env, step_fn)
    else:
        recurrent_fn = search.make_exact_recurrent_fn(step_fn, _uniform_zero)
    config = search.SearchConfig(
        num_simulations=num_simulations, dirichlet_fraction=0.0, temperature=0.0
    )
    half = num_games // 2
    max_plies = 6 * 7

    def search_half(key, state, tree, temperature):
        prior_logits, value = _uniform_zero((), state)
        root = mctx.RootFnOutput(prior_logits=prior_logits, value=value, embedding=state)
        invalid = ~state.legal_action_mask
        run_key, act_key = jax.random.split(key)
        out = search.run(
            (), run_key, root, recurrent_fn, config, invalid_actions=invalid, tree=tree
        )
        action = search.select_action(
            act_key, out.visit_counts, temperature, invalid_actions=invalid
        )
        return out, action

    def ply(key, temperature, mover_state, mover_tree, waiting_state, waiting_tree):
        """The reusing side moves in `mover_*`, the fresh side in `waiting_*`.

        Returns the new states, the reusing side's trees for both halves (each having followed
        the move just played there) and the kept root visits where the reusing side searched.
        """
        key_reuse, key_fresh = jax.random.split(key)
        kept_visits = mover_tree.node_visits[:, 0]
        out, action = search_half(key_reuse, mover_state, mover_tree, temperature)
        next_mover = jax.vmap(env.step)(mover_state, action)
        mover_tree = search.reuse_subtree(
            out.tree, action, keep=~next_mover.terminated, max_nodes=max_nodes
        )
        _, fresh_action = search_half(key_fresh, waiting_state, None, temperature)
        next_waiting = jax.vmap(env.step)(waiting_state, fresh_action)
        # The reusing side's tree in these games follows the opponent's move too.
        waiting_tree = search.reuse_subtree(
            waiting_tree, fresh_action, keep=~next_waiting.terminated, max_nodes=max_nodes
        )
        active = ~mover_state.terminated
        return next_mover, mover_tree, next_waiting, waiting_tree, kept_visits, active

    def empty_tree(state):
        """An all-empty reusable tree of the loop's shape (every row starts fresh)."""
        out, action = search_half(jax.random.PRNGKey(0), state, None, 0.0)
        return search.reuse_subtree(
            out.tree, action, keep=jnp.zeros((half,), bool), max_nodes=max_nodes
        )

    @jax.jit
    def play(key):
        init_key, loop_key = jax.random.split(key)
        state = jax.vmap(env.init)(jax.random.split(init_key, 2 * half))
        reuse_first = jnp.arange(2 * half) % 2 == 0
        reuse_id = jnp.where(reuse_first, state.current_player, 1 - state.current_player)
        even = jax.tree.map(lambda x: x[0::2], state)  # reusing side moves on even plies
        odd = jax.tree.map(lambda x: x[1::2], state)
        tree_even, tree_odd = empty_tree(even), empty_tree(odd)
        id_even, id_odd = reuse_id[0::2], reuse_id[1::2]

        def reward_of(state, player_id):
            return jnp.take_along_axis(state.rewards, player_id[:, None], axis=1)[:, 0]

        def two_plies(carry, xs):
            even, tree_even, odd, tree_odd, ret_even, ret_odd = carry
            pair, key = xs
            key_a, key_b = jax.random.split(key)
            temperature = jnp.where(pair < opening_plies, 1.0, 0.0)  # one move per side per pair
            even, tree_even, odd, tree_odd, kept_a, active_a = ply(
                key_a, temperature, even, tree_even, odd, tree_odd
            )
            ret_even += reward_of(even, id_even)
            ret_odd += reward_of(odd, id_odd)
            odd, tree_odd, even, tree_even, kept_b, active_b = ply(
                key_b, temperature, odd, tree_odd, even, tree_even
            )
            ret_even += reward_of(even, id_even)
            ret_odd += reward_of(odd, id_odd)
            kept = jnp.concatenate([kept_a * active_a, kept_b * active_b])
            searched = jnp.concatenate([active_a, active_b])
            return (even, tree_even, odd, tree_odd, ret_even, ret_odd), (kept, searched)

        num_pairs = max_plies // 2
        zeros = jnp.zeros((half,))
        carry = (even, tree_even, odd, tree_odd, zeros, zeros)
        xs = (jnp.arange(num_pairs), jax.random.split(loop_key, num_pairs))
        (even, _, odd, _, ret_even, ret_odd), (kept, searched) = jax.lax.scan(two_plies, carry, xs)
        finished = jnp.all(even.terminated) & jnp.all(odd.terminated)
        reuse_return = jnp.stack([ret_even, ret_odd], axis=1).reshape(-1)  # game order
        mean_kept = jnp.sum(kept) / jnp.maximum(jnp.sum(searched), 1)
        return reuse_return, mean_kept, finished

    return play


def reuse_match(
    num_games: int,
    num_simulations: int,
    max_nodes: int,
    opening_plies: int,
    seed: int,
    evaluator: str = "zero",
) -> dict:
    if num_games < 2 or num_games % 2:
        raise SystemExit(f"--reuse-games must be an even number >= 2, got {num_games}")
    play = make_reuse_match(num_games, num_simulations, max_nodes, opening_plies, evaluator)
    start = time.perf_counter()
    reuse_return, mean_kept, finished = jax.block_until_ready(play(jax.random.PRNGKey(seed)))
    seconds = time.perf_counter() - start
    if not bool(finished):
        raise RuntimeError("a connect-four game did not end within 42 plies")
    results = [float(r) for r in reuse_return]
    wins = sum(r > 0 for r in results)
    losses = sum(r < 0 for r in results)
    draws = num_games - wins - losses
    scores = [1.0 if r > 0 else 0.0 if r < 0 else 0.5 for r in results]
    score = statistics.fmean(scores)
    half_width = 1.96 * statistics.pstdev(scores) / math.sqrt(num_games)
    return {
        "benchmark": "search_reuse",
        "game": "connect_four",
        "games": num_games,
        "simulations": num_simulations,
        "max_nodes": max_nodes,
        "opening_plies": opening_plies,
        "evaluator": evaluator,
        "reuse_wins": wins,
        "draws": draws,
        "reuse_losses": losses,
        "reuse_score": round(score, 4),
        "score_95ci": [
            round(max(0.0, score - half_width), 4),
            round(min(1.0, score + half_width), 4),
        ],
        "mean_reused_root_visits": round(float(mean_kept), 2),
        "seconds_with_compile": round(seconds, 1),
        "platform": jax.devices()[0].platform,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--algorithm",
        choices=["muzero", "gumbel_muzero", "stochastic_muzero", "sampled_muzero", "all", "none"],
        nargs="+",
        default=["all"],
        help="throughput lines to print, one or more (none: skip)",
    )
    parser.add_argument("--batch-size", type=int, default=256, help="roots per search")
    parser.add_argument("--simulations", type=int, default=50, help="simulations per search")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=0.5,
        help="at least this long per timed measurement (calls are repeated)",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time, or this process's CPU time (steadier on a shared CPU "
        "machine; meaningless for work done on an accelerator)",
    )
    parser.add_argument(
        "--reuse-games",
        type=int,
        default=200,
        help="connect-four games of reuse vs no reuse (even; 0 skips)",
    )
    parser.add_argument(
        "--reuse-simulations", type=int, default=32, help="simulations per move in the reuse match"
    )
    parser.add_argument(
        "--reuse-max-nodes",
        type=int,
        default=None,
        help="slots of the kept tree (default 4 x reuse simulations)",
    )
    parser.add_argument(
        "--opening-plies",
        type=int,
        default=4,
        help="moves per side sampled at temperature 1 before greedy play",
    )
    parser.add_argument(
        "--reuse-evaluator",
        choices=["zero", "rollout"],
        default="zero",
        help="leaf value in the reuse match: 0, or one random playout",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the reuse match")
    parser.add_argument(
        "--engine",
        choices=list(search.config.ENGINES),
        default="podracer",
        help="the engine of our search in the throughput lines (the reference is raw mctx)",
    )
    parser.add_argument(
        "--levels-per-check",
        type=int,
        nargs="+",
        default=[1],
        help="SearchConfig.descent_levels_per_check of ours: one throughput (or profile) line "
        "per value, each against raw mctx (0: no check, loops of known trip counts to "
        "--max-depth)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        default=None,
        help="SearchConfig.max_depth of both searches (mctx's max_depth too; default: the "
        "simulations)",
    )
    parser.add_argument(
        "--graphs",
        choices=["off", "on", "both"],
        default="off",
        help="compile both searches with XLA's command buffers for loops too "
        "(GRAPH_COMPILER_OPTIONS; GPUs only): on, off, or a line for each",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        default=None,
        help="trace one search of each engine and of raw mctx into DIR (jax.profiler) instead of "
        "timing them, and count the accelerator's kernels per simulation from the traces",
    )
    parser.add_argument(
        "--hlo-ops",
        action="store_true",
        help="also the operations per simulation of raw mctx and both engines (compiled HLO)",
    )
    parser.add_argument(
        "--per-simulation",
        action="store_true",
        help="also the cost per simulation of Stochastic MuZero's search against MuZero's",
    )
    args = parser.parse_args(argv)
    for name in ("batch_size", "simulations", "rounds"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if min(args.levels_per_check) < 0:
        raise SystemExit("--levels-per-check must be >= 0")

    groups = {"all": ["muzero", "gumbel_muzero", "stochastic_muzero"], "none": []}
    algorithms = [a for name in args.algorithm for a in groups.get(name, [name])]
    for algorithm in [] if args.profile else algorithms:
        for graphs in {"off": [False], "on": [True], "both": [False, True]}[args.graphs]:
            for levels in args.levels_per_check:
                line = throughput(
                    algorithm,
                    args.batch_size,
                    args.simulations,
                    args.rounds,
                    args.min_seconds,
                    args.clock,
                    args.engine,
                    levels,
                    graphs,
                    args.max_depth,
                )
                print(json.dumps(line), flush=True)
    if args.profile:
        for algorithm in algorithms:
            for levels in args.levels_per_check:
                line = profile(algorithm, args.batch_size, args.simulations, args.profile, levels)
                print(json.dumps(line), flush=True)
    if args.hlo_ops:
        for algorithm in ("muzero", "gumbel_muzero", "stochastic_muzero"):
            print(json.dumps(hlo_ops(algorithm, args.batch_size, args.simulations)), flush=True)
    if args.per_simulation:
        line = cost_per_simulation(
            args.batch_size, args.simulations, args.rounds, args.min_seconds, args.clock
        )
        print(json.dumps(line), flush=True)
    if args.reuse_games:
        max_nodes = args.reuse_max_nodes or 4 * args.reuse_simulations
        print(
            json.dumps(
                reuse_match(
                    args.reuse_games,
                    args.reuse_simulations,
                    max_nodes,
                    args.opening_plies,
                    args.seed,
                    args.reuse_evaluator,
                )
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
