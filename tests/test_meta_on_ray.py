"""Starts on a real Ray cluster on this machine (ray.cluster_utils, one node of two CPUs): `inr
meta-init --ray` learns the in-process start to the bit, even when a worker is SIGKILLed as it
starts an inner fit (its part is sent again); a fit-many worker that reads another file than the
driver's --init start refuses in one line."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.formats.network_set import WEIGHTS
from inr_cli.formats.start import read_start
from tests import start_hooks
from tests.test_fit_many import ROOT, finish
from tests.test_meta_init import kind

ray = pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")
pytestmark = [pytest.mark.slow, pytest.mark.cluster]

NET = ["--hidden", "8", "--layers", "2", "--omega0", "20", "--lr", "1e-3", "--device", "cpu"]
META = ["--outer-steps", "4", "--inner-steps", "3", "--meta-batch", "4", "--eval-every", "2"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """Images of one kind and a start learned from them in-process."""
    base = tmp_path_factory.mktemp("learned")
    folder = kind(base / "kind", 10, 0)
    start = base / "here.safetensors"
    result = CliRunner().invoke(app, ["meta-init", str(folder), "-o", str(start), *NET, *META, "-q"])
    assert result.exit_code == 0, result.output
    return folder, start


def inr(failpoint: str, markers, *args) -> tuple[int, str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **start_hooks.environment(failpoint, markers)}
    return finish(subprocess.Popen([sys.executable, "-m", "inr_cli", *map(str, args)], env=environment,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))


def held_out_losses(log_file) -> list[str]:
    with open(log_file, newline="") as handle:
        return [row["heldout_loss"] for row in csv.DictReader(handle)]


def meta_init_on_ray(cluster, learned, tmp_path, failpoint: str):
    """`inr meta-init --ray` on the learned fixture's images, two workers, `failpoint` armed: (exit
    code, stderr, the start it wrote)."""
    there = tmp_path / "there.safetensors"
    code, stderr = inr(failpoint, tmp_path, "meta-init", learned[0], "-o", there, *NET, *META, "--ray",
                       cluster.address, "--workers", "2")
    return code, stderr, there


def test_meta_init_on_ray_learns_the_in_process_start_even_with_a_worker_killed(cluster, learned, tmp_path):
    here = learned[1]
    code, stderr, there = meta_init_on_ray(cluster, learned, tmp_path, "kill-at=03.png")
    assert code == 0, stderr
    assert (tmp_path / ".failpoint-kill-at-03.png").exists()  # the kill happened
    lost = [line for line in stderr.splitlines() if "was lost" in line]
    assert len(lost) == 1 and "03.png" in lost[0] and "(its worker died); it is sent again" in lost[0], stderr
    assert "2 workers on 1 node" in stderr and "Traceback" not in stderr
    spec_here, start_here = read_start(str(here))
    spec_there, start_there = read_start(str(there))
    assert spec_here == spec_there and np.array_equal(start_here, start_there)
    assert held_out_losses(here.with_suffix(".csv")) == held_out_losses(tmp_path / "there.csv")


def test_a_straggling_inner_fit_is_sent_to_the_other_worker(cluster, learned, tmp_path):
    """The worker that starts the inner fit holding 03.png hangs there: the part is sent to the
    other worker too, the first result kept, the hung worker restarted for the next outer steps,
    and the start is the in-process one, bit for bit."""
    here = learned[1]
    code, stderr, there = meta_init_on_ray(cluster, learned, tmp_path, "hang-at=03.png")
    assert code == 0, stderr
    assert (tmp_path / ".failpoint-hang-at-03.png").exists()  # the hang happened
    assert "an inner fit has been running on" in stderr and "the first result is kept" in stderr, stderr
    assert np.array_equal(read_start(str(there))[1], read_start(str(here))[1])
    assert held_out_losses(here.with_suffix(".csv")) == held_out_losses(tmp_path / "there.csv")


def test_a_fit_many_worker_that_reads_another_start_file_refuses(cluster, learned, tmp_path):
    """The start file is rewritten (other weights) as the worker starts, after the driver planned
    with it: the worker's check finds another sha256 and the run stops in one line, nothing fitted."""
    folder, here = learned
    start = tmp_path / "start.safetensors"
    start.write_bytes(here.read_bytes())
    code, stderr = inr(f"other-start={start}", tmp_path, "fit-many", folder, "-o", tmp_path / "set", "--init", start,
                       "--steps", "3", *NET, "--ray", cluster.address, "--workers", "1", "-q")
    assert code == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"its --init {start} is not the file the driver read" in errors[0], stderr
    assert "Traceback" not in stderr and not (tmp_path / "set" / WEIGHTS).exists()
