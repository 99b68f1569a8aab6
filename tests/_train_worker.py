"""`podracer train ARGS` as one process of a test's job, with a fault injected:

    python tests/_train_worker.py FAULT ARGS...

FAULT `none` runs the command as it is; `actor-fails-in-process-1` makes the actors'
environments of process 1 raise after a few steps (tests.fakes.FailingEnv).
"""

import os
import sys

import jax

from podracer import cli
from selfplay import actors, launch
from tests import fakes

# The fault is injected in this process: it trains here, not in a supervised child.
os.environ[launch.JOB_PROCESS] = "1"


def _fail_actors_of_process_1() -> None:
    real_make_env = actors.make_env

    def make_env(name, num_envs, seed=0, **options):
        env = real_make_env(name, num_envs, seed=seed, **options)
        if jax.process_index() != 1:
            return env
        return fakes.FailingEnv(env, fail_after=20, message="environment exploded in process 1")

    actors.make_env = make_env


if __name__ == "__main__":
    fault, args = sys.argv[1], sys.argv[2:]
    if fault == "actor-fails-in-process-1":
        _fail_actors_of_process_1()
    elif fault != "none":
        raise SystemExit(f"unknown fault {fault!r}")
    sys.exit(cli.main(args))
