"""`inr fit-many --ray` on a real Ray cluster of two nodes on this machine (ray.cluster_utils, on
random ports): workers decode, fit and write; a node killed mid-run, the driver killed then the
command rerun, a poisoned input, and a GPU a worker cannot use. Failpoints decide when kills land."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from inr_cli.sets import fit_many
from inr_cli.sets.cluster import MAX_ATTEMPTS, gpu_problem, worker_options
from tests import test_fit_many
from tests.test_fit_many import NET, finish, inr, shards_on_disk

reference = test_fit_many.reference  # the in-process set every run here must reproduce, bit for bit

ray = pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each; the head also declares one GPU (Ray takes a node's word for it),
    which --device cpu leaves alone and the GPU test uses."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
    nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


def run(cluster, *args, failpoint: str = ""):
    process = inr("fit-many", *args, "--ray", cluster.address, failpoint=failpoint)
    return finish(process)


def test_a_node_killed_mid_run(cluster, reference, tmp_path):
    """A third node joins; its raylet and worker are SIGKILLed when it starts its first shard. Its
    shards are sent again to the nodes left, and the set is the in-process one, bit for bit."""
    folder, out = reference
    victim = cluster.add_node(num_cpus=1, resources={"victim": 1})
    cluster.wait_for_nodes()
    try:
        code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", "--workers", "3", *NET,
                           failpoint="node-at=victim")
        assert code == 0, stderr
        assert "was lost" in stderr and "it is sent again" in stderr
        assert np.array_equal(np.load(tmp_path / "set" / fit_many.WEIGHTS), np.load(out / fit_many.WEIGHTS))
    finally:
        try:
            cluster.remove_node(victim, allow_graceful=False)
        except Exception:  # its processes are dead already; only the bookkeeping is left
            pass


def test_the_driver_killed_then_the_command_rerun(cluster, reference, tmp_path):
    folder, out = reference
    args = [folder, "-o", tmp_path / "set", "--pack", "1", "--workers", "2", *NET]
    code, stderr = run(cluster, *args, failpoint="driver-after=1")
    assert code == -signal.SIGKILL, stderr
    assert 1 <= shards_on_disk(tmp_path / "set") < 5 and not (tmp_path / "set" / fit_many.WEIGHTS).exists()
    code, stderr = run(cluster, *args)
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / fit_many.WEIGHTS), np.load(out / fit_many.WEIGHTS))


def test_a_poisoned_input_stops_the_run_naming_it(cluster, reference, tmp_path):
    """img3.png kills every worker that starts it: after MAX_ATTEMPTS the run stops, naming it, with
    the other shards kept."""
    folder, _ = reference
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", "--workers", "2", *NET,
                       failpoint="worker-always-at=img3.png")
    assert code == 1, stderr
    assert f"was lost {MAX_ATTEMPTS} times" in stderr and "img3.png" in stderr and "Traceback" not in stderr
    assert stderr.count("shard 3 was lost (") == MAX_ATTEMPTS - 1
    assert not (tmp_path / "set" / fit_many.WEIGHTS).exists()
    # the shards that died beside it were sent again alone; what was fitted is kept
    names = {str(np.load(path)["names"][0]) for path in (tmp_path / "set" / fit_many.SHARDS).glob("*.npz")}
    assert names and names <= {"img0.png", "img1.png", "img2.png", "img4.png"}


def test_an_output_url_the_workers_write(cluster, reference, tmp_path):
    """-o URL (file:// through fsspec, as a bucket is written): the workers write their shards there,
    networks included, and the driver streams them into weights.npy: the in-process set, bit for bit."""
    pytest.importorskip("fsspec")
    folder, out = reference
    code, stderr = run(cluster, folder, "-o", f"file://{tmp_path}/set", "--pack", "2", "--workers", "2", *NET)
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / fit_many.WEIGHTS), np.load(out / fit_many.WEIGHTS))
    assert "params" in np.load(tmp_path / "set" / fit_many.shard_name(0)).files
    assert not (tmp_path / "set" / fit_many.WEIGHTS_PART).exists()


def test_a_worker_given_a_gpu_it_cannot_use_stops_the_run(cluster, reference, tmp_path):
    """Ray gives two workers half of the head's GPU each (--gpus-per-worker 0.5); with no CuPy they
    could only fit on the CPU, so the run stops with one line saying why."""
    folder, _ = reference
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--device", "auto", "--gpus-per-worker", "0.5",
                       *NET[:-3])
    assert code == 1, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "cannot use its GPU (Ray gave it GPU 0)" in lines[0], stderr
    assert "CuPy" in lines[0] or "CUDA" in lines[0]


def test_gpu_shares_place_several_workers_on_one_gpu(cluster):
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        assert worker_options(ray, "auto", None, 0.5) == (2, {"num_gpus": 0.5, "num_cpus": 0})
        assert worker_options(ray, "auto", None, None) == (1, {"num_gpus": 1.0, "num_cpus": 0})
        assert worker_options(ray, "cpu", 2, None) == (2, {"num_cpus": 1})
    finally:
        ray.shutdown()


def test_what_a_worker_does_with_a_gpu():
    missing = "CuPy is not installed (pip install 'inr[gpu]')"
    assert gpu_problem("auto", ["0"], 1, None) is None
    assert "Ray gave it GPU 0" in gpu_problem("auto", ["0"], 1, missing) and missing in gpu_problem("auto", ["0"], 1, missing)
    assert "its node has a GPU" in gpu_problem("auto", [], 1, missing)
    assert gpu_problem("auto", [], 0, missing) is None  # no GPU anywhere: the CPU is no waste
    assert gpu_problem("cpu", ["0"], 1, missing) is None  # asked for
    assert "no GPU" in gpu_problem("gpu", [], 0, missing)
