"""The replicated update across 2 processes (`jax.distributed`, gloo) on this machine.

Each process has 2 CPU devices and feeds different data: only a gradient average that crosses
processes leaves both with the same parameters, equal to one device's update on the global batch.
"""

import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.test_replication import WORKER, worker_env

NUM_PROCESSES = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_worker_processes(mode: str, outs, timeout: float = 120.0) -> list[dict]:
    """Runs `_distributed_worker.py MODE PORT I N OUT_I` for each of the N `outs` together (one
    `jax.distributed` job, 2 CPU devices each) and returns what each saved."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), mode, str(port), str(i), str(len(outs)), str(out)],
            env=worker_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, out in enumerate(outs)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:  # a hung peer fails the test instead of blocking it
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for i, proc in enumerate(procs):
        assert proc.returncode == 0, f"process {i}:\n{logs[i][-4000:] if i < len(logs) else ''}"
    return [dict(np.load(out)) for out in outs]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distributed")
    return run_worker_processes("process", [tmp / f"process{i}.npz" for i in range(NUM_PROCESSES)])


def test_processes_end_with_identical_updated_parameters(results):
    first, second = results
    names = [k.split("/", 1)[1] for k in first if k.startswith("replicated/")]
    assert names
    for name in names:
        np.testing.assert_array_equal(first[f"replicated/{name}"], second[f"replicated/{name}"])
        assert not np.allclose(first[f"replicated/{name}"], first[f"initial/{name}"]), name
    np.testing.assert_array_equal(first["loss"], second["loss"])


def test_processes_match_one_device_on_the_global_batch(results):
    for result in results:
        for key in result:
            if key.startswith("single/"):
                name = key.split("/", 1)[1]
                np.testing.assert_allclose(
                    result[f"replicated/{name}"], result[key], rtol=1e-5, atol=1e-6, err_msg=name
                )


def test_the_update_without_manual_axis_checks_still_averages_over_processes(results):
    # As Anakin runs its updates (shard_map with check_vma=False, for mctx).
    for result in results:
        names = [k.split("/", 1)[1] for k in result if k.startswith("single/")]
        assert names
        for name in names:
            np.testing.assert_allclose(
                result[f"unchecked/{name}"], result[f"single/{name}"], rtol=1e-5, atol=1e-6,
                err_msg=name,
            )  # fmt: skip


def test_the_lockstep_rounds_agree_in_both_processes(results):
    for process, result in enumerate(results):
        reasons = [str(result[f"lockstep/{i}/reason"]) for i in range(4)]
        assert reasons[:2] == ["", ""]
        assert reasons[2] == ("boom" if process == 1 else "process 1: boom")
        assert reasons[3] == "max_updates"
        flags = [result[f"lockstep/{i}/flags"].tolist() for i in range(4)]
        assert flags[0] == [True, True]  # everyone ready; process 0's clock says log
        assert flags[1] == [False, False]  # one not ready; process 1's clock does not count
        frames = [result[f"lockstep/{i}/frames"].tolist() for i in range(4)]
        assert frames == [[21, 10, 11], [40, 20, 20], [60, 30, 30], [80, 40, 40]]
        inserts = [result[f"lockstep/{i}/inserts"].tolist() for i in range(4)]
        assert inserts == [[0, 100], [5, 5], [7, 8], [9, 9]]  # for the job's replay ratio
        assert [int(result[f"lockstep/{i}/other_frames"]) for i in range(4)] == [0, 2, 4, 6]


def test_a_local_batch_on_a_device_or_in_host_memory_makes_the_same_global_batch(results):
    local = np.arange(3 * 4 * 2).reshape(3, 4, 2)
    expected = np.concatenate([local, local + 100], axis=1)  # [T, 2 processes x B, 2]
    for result in results:
        np.testing.assert_array_equal(result["shard/device"], expected)
        np.testing.assert_array_equal(result["shard/host"], expected)
