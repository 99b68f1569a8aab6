"""A run's compiled programs, built once a process for each config.

`jax.jit` keeps what it traced and compiled with the function it wraps: a new closure over the
same config is a new function, traced, lowered and compiled (or read back from the persistent
cache) again. A run builds its programs from its config (the agent's `act` and `make_batch`, the
update, Anakin's iteration), so a second run of the same config in one process (a resume, a
PBT member's next interval, an evaluation beside the run) takes the same function objects from
here and starts at once.

Two configs share their programs when they differ only in fields no program reads
(`RUN_LOOP_FIELDS`): the run's limits, how often it logs and saves, its in-run evaluation, its
logging and its name, which the run loop, its logs and its checkpoints alone read; or in fields
the programs take from the train state (`STATE_FIELDS`: the peak learning rate, which a run
writes into its state at every start), so a resume or a PBT member's next interval with another
learning rate compiles nothing. The agent's key also leaves out what its own functions never
read (`AGENT_FREE_FIELDS`): the replay's settings, which only its store reads, built from the
run's own config (a run of other replay priorities, capacity or sampling ratio takes the agent's
`act`, `make_batch` and update as they are: with Sebulba's replay on the host, a PBT member whose
explore changed only those traces nothing), and the optimizer and the learner's pace, which the
update is built from beside the agent (a run of another optimizer, gradient clip or schedule
takes the agent's `act` and `make_batch` and builds only its update). Everything else is in the
key, so a changed search setting or loss weight builds anew. What is built from
hashable parts (an agent and an optimizer, a program and its devices, a game and its batch size)
is cached where it is built with `built_once` (`configs.caching`, re-exported here).
"""

from __future__ import annotations

import json

from configs import ExperimentConfig, to_dict
from configs.caching import ProgramCache, built_once

__all__ = [
    "AGENT_FREE_FIELDS",
    "LIMITS",
    "RUN_LOOP_FIELDS",
    "STATE_FIELDS",
    "ProgramCache",
    "built_once",
    "program_key",
]

# The reasons a run ends by reaching what it was asked to do (any other ends it early): the
# learner's fields the run loop compares with its counts.
LIMITS = ("max_updates", "max_seconds", "max_frames")
# The config's fields that no program reads (dotted paths; a section: all its fields): only the
# run loop (selfplay.run: limits, logs, saves, the stall watch, the profile), the in-run
# evaluator's players and the commands read them. tests/test_programs.py checks that the modules
# that build programs never name them.
RUN_LOOP_FIELDS = (
    "name",
    *(f"learner.{name}" for name in LIMITS),
    "learner.checkpoint_every",
    "learner.keep_checkpoints",
    "learner.log_every_s",
    "learner.stall_timeout_s",
    "learner.profile_updates",
    "learner.profile_dir",
    "evaluation",
    "logging",
)

# The config's fields the programs read from the train state, not as constants: `selfplay.run`
# writes them into the state at every start (`muzero.TrainState.learning_rate`).
STATE_FIELDS = ("optimizer.learning_rate",)

# The config's fields the agent's own functions (`act`, `make_batch`, the loss) never read: its
# store (Sebulba's replay on the host, V-trace's queue) is built from the run's own config at
# every start (`Agent.make_store(config, num_streams)`), and the update from the agent and the
# run's optimizer (`selfplay.sebulba._replicated_update`: keyed by both); how often the learner
# publishes and how many updates it keeps in flight are its thread's. The programs that read
# them (Anakin's iteration, the replay on the device, the update) keep them in their keys.
AGENT_FREE_FIELDS = ("replay", "optimizer", "learner.publish_every", "learner.prefetch")


def program_key(config: ExperimentConfig, without: tuple[str, ...] = ()) -> str:
    """The part of `config` a run's programs are built from, as a hashable string: all of it but
    `RUN_LOOP_FIELDS`, `STATE_FIELDS` and the paths `without` (a section: all its fields)."""
    fields = to_dict(config)
    for path in (*RUN_LOOP_FIELDS, *STATE_FIELDS, *without):
        *sections, name = path.split(".")
        section = fields
        for part in sections:
            section = section[part]
        del section[name]
    return json.dumps(fields, sort_keys=True)
