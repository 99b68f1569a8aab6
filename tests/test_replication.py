"""The replicated update on 4 CPU devices equals the single-device update on the global batch.

The device count must be fixed before JAX starts, so the check runs in a fresh interpreter
(`_distributed_worker.py replicate`) that saves both results for this test to compare.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("_distributed_worker.py")
REPO = Path(__file__).resolve().parents[1]


def worker_env(device_count: int) -> dict[str, str]:
    """The environment of a worker process with `device_count` CPU devices, one thread each."""
    return {
        **os.environ,
        # tests/conftest.py's flags (one thread, XLA's fastest compilation: these workers
        # compile far more than they run), and the devices.
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={device_count} "
        + os.environ["XLA_FLAGS"],
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("replication") / "results.npz"
    proc = subprocess.run(
        [sys.executable, str(WORKER), "replicate", str(out)],
        env=worker_env(4),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(out))


@pytest.mark.parametrize("tag", ["axis0", "axis1"], ids=["batch-major", "time-major"])
def test_replicated_update_equals_single_device_update(results, tag):
    names = [k.split("/", 2)[2] for k in results if k.startswith(f"{tag}/single/")]
    assert names
    for name in names:
        replicated, single = results[f"{tag}/replicated/{name}"], results[f"{tag}/single/{name}"]
        np.testing.assert_allclose(replicated, single, rtol=1e-5, atol=1e-6, err_msg=name)
        assert not np.allclose(single, results[f"{tag}/initial/{name}"]), name
    for metric in ("loss", "grad_norm", "learning_rate"):
        np.testing.assert_allclose(
            results[f"{tag}/metric/replicated/{metric}"],
            results[f"{tag}/metric/single/{metric}"],
            rtol=1e-5,
            err_msg=metric,
        )
    assert int(results[f"{tag}/step"]) == 3


@pytest.mark.parametrize("tag", ["axis0", "axis1"], ids=["batch-major", "time-major"])
def test_parameters_stay_identical_on_every_device(results, tag):
    copies = [results[f"{tag}/device{i}/w1"] for i in range(4)]
    for copy in copies[1:]:
        np.testing.assert_array_equal(copy, copies[0])


def test_the_replica_check_names_a_device_whose_copy_differs(results):
    # selfplay.processes.check_replicas_agree, as a run calls it at its end.
    assert str(results["check/same"]) == ""
    message = str(results["check/drifted"])
    assert "local devices [2] of process 0 differ from its first device's" in message, message


def test_replicated_muzero_loss_equals_single_device(results):
    names = [k.split("/", 2)[2] for k in results if k.startswith("muzero/single/")]
    assert names
    for name in names:
        np.testing.assert_allclose(
            results[f"muzero/replicated/{name}"],
            results[f"muzero/single/{name}"],
            rtol=1e-5,
            atol=1e-6,
            err_msg=name,
        )
        assert not np.allclose(results[f"muzero/single/{name}"], results[f"muzero/initial/{name}"])
    metrics = [k.rsplit("/", 1)[1] for k in results if k.startswith("muzero/metric/single/")]
    assert {"loss", "value_loss", "reward_loss", "policy_loss", "grad_norm"} <= set(metrics)
    for metric in metrics:
        replicated = results[f"muzero/metric/replicated/{metric}"]
        single = results[f"muzero/metric/single/{metric}"]
        np.testing.assert_allclose(replicated, single, rtol=1e-5, atol=1e-6, err_msg=metric)
