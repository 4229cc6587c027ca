"""`inr meta-init --ray` on a real Ray cluster on this machine (ray.cluster_utils, one node of two
CPUs: two workers): the start learned there is the in-process one to the bit, even when a worker is
SIGKILLed as it starts an inner fit (its part is sent again)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.formats.start import read_start
from tests import meta_hooks
from tests.test_fit_many import ROOT, finish
from tests.test_meta_init import kind

ray = pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")
pytestmark = pytest.mark.slow

NET = ["--hidden", "8", "--layers", "2", "--omega0", "20", "--lr", "1e-3", "--device", "cpu"]
META = ["--outer-steps", "4", "--inner-steps", "3", "--meta-batch", "4", "--eval-every", "2", "-q"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


def held_out_losses(log_file) -> list[str]:
    with open(log_file, newline="") as handle:
        return [row["heldout_loss"] for row in csv.DictReader(handle)]


def test_on_ray_the_start_is_the_in_process_one_even_with_a_worker_killed(cluster, tmp_path):
    folder = kind(tmp_path / "kind", 10, 0)
    here = tmp_path / "here.safetensors"
    result = CliRunner().invoke(app, ["meta-init", str(folder), "-o", str(here), *NET, *META])
    assert result.exit_code == 0, result.output
    there = tmp_path / "there.safetensors"
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **meta_hooks.environment("03.png", tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "inr_cli", "meta-init", str(folder), "-o", str(there), *NET,
                                *META[:-1], "--ray", cluster.address, "--workers", "2"], env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, stderr = finish(process)
    assert code == 0, stderr
    assert (tmp_path / ".failpoint-kill-at-03.png").exists()  # the kill happened
    lost = [line for line in stderr.splitlines() if "was lost" in line]
    assert len(lost) == 1 and "03.png" in lost[0] and "(its worker died); it is sent again" in lost[0], stderr
    assert "2 workers on 1 node" in stderr and "Traceback" not in stderr
    spec_here, start_here = read_start(str(here))
    spec_there, start_there = read_start(str(there))
    assert spec_here == spec_there and np.array_equal(start_here, start_there)
    assert held_out_losses(tmp_path / "here.csv") == held_out_losses(tmp_path / "there.csv")
