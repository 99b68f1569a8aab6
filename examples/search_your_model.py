"""`search` from another project: Monte-Carlo tree search over your own model, in a few lines.

The model is yours: here a known one in plain JAX, a walk on a line whose goal is at GOAL (a
step onto it pays 1 and ends the episode). The search gets no hint of the goal from the model's
prior or values (uniform and zero): it finds the way by looking ahead, left or right.

    python examples/search_your_model.py
"""

import jax
import jax.numpy as jnp
import mctx

import search

GOAL = 3
LEFT, RIGHT = 0, 1


def recurrent_fn(params, rng_key, action, position):
    """One step of the model: action [B] int32, position [B] int32 (the search's embedding)."""
    del params, rng_key
    next_position = position + jnp.where(action == RIGHT, 1, -1)
    reached = next_position == GOAL  # [B]
    out = mctx.RecurrentFnOutput(
        reward=reached.astype(jnp.float32),
        discount=jnp.where(reached, 0.0, 0.9),  # 0: the episode ends at the goal
        prior_logits=jnp.zeros((position.shape[0], 2)),  # [B, A]: no hint
        value=jnp.zeros(position.shape[0]),
    )
    return out, next_position


def plan(positions: jax.Array, config: search.SearchConfig, key: jax.Array) -> search.SearchOutput:
    """A search from each of `positions` [B]."""
    root = mctx.RootFnOutput(
        prior_logits=jnp.zeros((positions.shape[0], 2)),
        value=jnp.zeros(positions.shape[0]),
        embedding=positions,
    )
    return search.run(None, key, root, recurrent_fn, config)


def main() -> list[int]:
    positions = jnp.array([0, 1, 2, 5, 6])  # the goal is to the right of three, left of two
    # Greedy (temperature 0); algorithm="gumbel_muzero" runs Gumbel MuZero on the same model.
    config = search.SearchConfig(num_simulations=32, temperature=0.0)
    out = jax.jit(plan, static_argnums=1)(positions, config, jax.random.PRNGKey(0))
    values = [round(v, 2) for v in out.root_value.tolist()]
    print(f"moves {out.action.tolist()} (1: right), root values {values}")
    return out.action.tolist()


if __name__ == "__main__":
    main()
