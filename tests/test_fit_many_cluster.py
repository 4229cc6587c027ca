"""`inr fit-many --ray` on a real Ray cluster of two nodes on this machine (ray.cluster_utils, on
random ports): workers decode, fit and write; a node killed mid-run, the driver killed then the
command rerun, a poisoned input, a GPU a worker cannot use, and workers that cannot reach the images
(the driver sends them the files). Failpoints decide when kills land."""

from __future__ import annotations

import json
import re
import signal
import time

import numpy as np
import pytest

from inr_cli import config as configuration
from inr_cli.config import build_config, flags_to_values
from inr_cli.errors import InrError
from inr_cli.formats.network_set import SHARDS, WEIGHTS, WEIGHTS_PART
from inr_cli.sets import cluster as on_ray
from inr_cli.sets import inputs
from inr_cli.sets.cluster import UNREACHABLE, gpu_problem, place_workers, probe_task
from inr_cli.sets.storage import shard_name
from tests import test_fit_many
from tests.test_fit_many import NET, finish, inr, python_module, shards_on_disk
from tests.test_fit_many_urls import served  # noqa: F401 - a fixture: images on a local http server

reference = test_fit_many.reference  # the in-process set every run here must reproduce, bit for bit

ray = pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")
pytestmark = [pytest.mark.slow, pytest.mark.cluster]


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
        assert "is left out for the rest of the run" in stderr
        assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
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
    assert 1 <= shards_on_disk(tmp_path / "set") < 5 and not (tmp_path / "set" / WEIGHTS).exists()
    code, stderr = run(cluster, *args)
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    code, stderr = run(cluster, *args)  # a finished set run again: nothing to fit, nothing changed
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_a_poisoned_input_stops_the_run_naming_it(cluster, reference, tmp_path):
    """img3.png kills every worker that starts it: lost on one node (left out), sent alone to the
    other, lost there for the same reason, the run stops naming it, with the other shards kept."""
    folder, _ = reference
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", "--workers", "2", *NET,
                       failpoint="worker-always-at=img3.png")
    assert code == 1, stderr
    assert "shard 3 was lost on 2 nodes" in stderr and "img3.png" in stderr and "Traceback" not in stderr
    assert len(re.findall(r"shard 3 was lost on [\d.]+ \(its worker died\)", stderr)) == 1, stderr
    assert not (tmp_path / "set" / WEIGHTS).exists()
    # the shards that died beside it were sent again; what was fitted is kept
    names = {str(np.load(path)["names"][0]) for path in (tmp_path / "set" / SHARDS).glob("*.npz")}
    assert names <= {"img0.png", "img1.png", "img2.png", "img4.png"}


def test_an_output_url_the_workers_write(cluster, reference, tmp_path):
    """-o URL (file:// through fsspec, as a bucket is written): the workers write their shards there,
    networks included, and a task on a node of the cluster, not the driver, streams them into
    weights.npy: the in-process set, bit for bit."""
    pytest.importorskip("fsspec")
    folder, out = reference
    process = inr("fit-many", folder, "-o", f"file://{tmp_path}/set", "--pack", "2", "--workers", "2",
                  *[arg for arg in NET if arg != "-q"], "--ray", cluster.address)
    code, stderr = finish(process)
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    assert "params" in np.load(tmp_path / "set" / shard_name(0)).files
    assert not (tmp_path / "set" / WEIGHTS_PART).exists()
    assembled = re.search(r"weights\.npy \(assembled on [\d.]+ \(pid (\d+)\)\)", stderr)
    assert assembled and int(assembled.group(1)) != process.pid, stderr


def test_an_output_url_whose_assembly_task_dies_is_assembled_by_the_driver(cluster, reference, tmp_path):
    pytest.importorskip("fsspec")
    folder, out = reference
    code, stderr = run(cluster, folder, "-o", f"file://{tmp_path}/set", "--pack", "2", "--workers", "2", *NET,
                       failpoint="assembly-killed")
    assert code == 0, stderr
    assert "the assembly of the set on the cluster was lost" in stderr and "the driver assembles it" in stderr
    assert "assembled on" not in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_a_node_that_sees_the_output_on_nfs_makes_the_run_write_whole_shards(cluster, reference, tmp_path):
    """The driver sees the output on its own disk; a third node sees it on NFS (its raylet's
    INR_OUTPUT_FSTYPE, as a head that exports its disk to the others): the run writes whole shards,
    said once, and the set is the in-process one, bit for bit."""
    folder, out = reference
    remote = cluster.add_node(num_cpus=1, resources={"nfs": 1}, env_vars={"INR_OUTPUT_FSTYPE": "nfs4"})
    cluster.wait_for_nodes()
    try:
        code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", "--workers", "3", *NET)
        assert code == 0, stderr
        assert stderr.count("is on NFS (nfs4, INR_OUTPUT_FSTYPE says so)") == 1, stderr
        assert "sees it): each shard's file holds its networks" in stderr
        assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
        assert all("params" in np.load(path).files for path in (tmp_path / "set" / SHARDS).glob("*.npz"))
    finally:
        cluster.remove_node(remote)


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


def node(name: str, cpus: float, gpus: float = 0, alive: bool = True) -> dict:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {"NodeID": name, "NodeManagerAddress": name, "Alive": alive, "Resources": resources}


def test_workers_are_sized_from_each_node():
    """Each worker asks for what its own node has: all its CPUs, or a share of its GPU; a node
    with a GPU gets GPU workers and the others CPU workers under --device auto; the list goes round
    the nodes; what no node can give ends the run in one line naming what the nodes have."""
    def placed(nodes, device="auto", workers=None, share=None):
        return [(p.node, p.kind, p.options) for p in place_workers(nodes, device, workers, share)]

    mixed = [node("gpu", 8, 1), node("cpu", 4), node("dead", 64, alive=False)]
    assert placed(mixed) == [("gpu", "gpu", {"num_gpus": 1.0, "num_cpus": 0}), ("cpu", "cpu", {"num_cpus": 4})]
    assert placed(mixed, share=0.5) == [("gpu", "gpu", {"num_gpus": 0.5, "num_cpus": 0}),
                                        ("cpu", "cpu", {"num_cpus": 4}),
                                        ("gpu", "gpu", {"num_gpus": 0.5, "num_cpus": 0})]
    assert placed(mixed, "cpu") == [("gpu", "cpu", {"num_cpus": 8}), ("cpu", "cpu", {"num_cpus": 4})]
    assert placed(mixed, "gpu") == [("gpu", "gpu", {"num_gpus": 1.0, "num_cpus": 0})]
    assert placed(mixed, "cpu", workers=3) == [("gpu", "cpu", {"num_cpus": 4}), ("cpu", "cpu", {"num_cpus": 4}),
                                               ("gpu", "cpu", {"num_cpus": 4})]
    assert placed([node("a", 1), node("b", 1)], "cpu", workers=5) == [("a", "cpu", {"num_cpus": 1}),
                                                                    ("b", "cpu", {"num_cpus": 1})]
    with pytest.raises(InrError, match=r"--gpus-per-worker 2: no node .* \(the nodes have: gpu: 8 CPU, 1 GPU; "
                                       r"cpu: 4 CPU\)"):
        placed(mixed, share=2)
    with pytest.raises(InrError, match="--device gpu: no node of the Ray cluster has a GPU"):
        placed([node("cpu", 4)], "gpu")


def test_what_a_worker_does_with_a_gpu():
    missing = "CuPy is not installed (pip install 'inr[gpu]')"
    assert gpu_problem("auto", ["0"], 1, None) is None
    given = gpu_problem("auto", ["0"], 1, missing)
    assert "Ray gave it GPU 0" in given and missing in given
    assert "its node has a GPU" in gpu_problem("auto", [], 1, missing)
    assert gpu_problem("auto", [], 0, missing) is None  # no GPU anywhere: the CPU is no waste
    assert gpu_problem("cpu", ["0"], 1, missing) is None  # asked for
    assert "no GPU" in gpu_problem("gpu", [], 0, missing)


# NET as the Python API's keyword arguments
SETTINGS = dict(init="random", hidden=12, layers=2, omega0=60, lr=3e-3, steps=40, device="cpu", quiet=True)


def fit_in_a_driver_of_its_own(source: str, out, scratch, memory: dict | None = None,
                               cluster_settings: dict | None = None, **options) -> str:
    """api.fit_many with a child process as the Ray driver (tests/ray_driver.py), which first puts
    `memory` (a memory:// path for each file here) in its own memory://, where Ray's workers, other
    processes, find nothing, and sets `cluster_settings` on inr_cli.sets.cluster. Its standard error,
    once it has ended well."""
    spec = scratch / "driver.json"
    spec.write_text(json.dumps({"source": source, "out": str(out), "options": {**SETTINGS, **options},
                                "memory": {target: str(path) for target, path in (memory or {}).items()},
                                "cluster_settings": cluster_settings or {}}))
    code, stderr = finish(python_module("tests.ray_driver", spec))
    assert code == 0, stderr
    return stderr


def test_workers_that_cannot_reach_the_inputs_get_the_files(cluster, reference, tmp_path):
    """The images lie in fsspec's memory:// of the driver: Ray's workers, other processes, find it
    empty. The probe tasks and the shard workers say so, the driver sends them the files' bytes, and
    the set is the in-process one, bit for bit. A file there that is no image is still reported as
    such (here skipped), not sent again and again."""
    pytest.importorskip("fsspec")
    folder, out = reference
    root = f"/inr-{tmp_path.name}"
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"not an image")
    memory = {f"{root}/{path.name}": path for path in [*folder.iterdir(), notes]}
    stderr = fit_in_a_driver_of_its_own(f"memory://{root}/", tmp_path / "set", tmp_path, memory,
                                        # a probe task per file: more than SENT_IN_FLIGHT
                                        {"SENT_PIECE": 1}, ray=cluster.address, pack=2, workers=2,
                                        skip_unreadable=True)
    assert f"the driver sends the images' files to 2 of 2 workers: they cannot read memory://{root}/" in stderr
    assert "skipped notes.txt: notes.txt: not an image file Pillow can read" in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_on_a_cluster_where_one_node_reaches_the_inputs(cluster, reference, tmp_path, monkeypatch):
    """A third node reaches the images (fsspec's dir:// is their parent folder there, and in the
    driver; on the fixture's nodes it is nothing). Each probe task (one per image here) and each of
    the three workers, one per node, decides for itself: one worker reads the files, two are sent
    them, and the set is the in-process one, bit for bit."""
    pytest.importorskip("fsspec")
    folder, out = reference
    reaching = {"FSSPEC_DIR_PATH": str(folder.parent), "FSSPEC_DIR_TARGET_PROTOCOL": "file"}
    for name, value in reaching.items():  # for the driver, a child of this process
        monkeypatch.setenv(name, value)
    seeing = cluster.add_node(num_cpus=1, env_vars=reaching)
    cluster.wait_for_nodes()
    try:
        stderr = fit_in_a_driver_of_its_own(f"dir://{folder.name}/", tmp_path / "set", tmp_path,
                                            cluster_settings={"PROBE_CHUNK": 1}, ray=cluster.address, pack=1,
                                            workers=3)
    finally:
        cluster.remove_node(seeing)
    assert f"the driver sends the images' files to 2 of 3 workers: they cannot read dir://{folder.name}/" in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_a_probe_tells_files_it_cannot_reach_from_files_that_do_not_decode(reference, tmp_path):
    """A task that cannot reach its chunk's first file (gone, or not the size listed) answers
    UNREACHABLE, and the driver sends the files; one that reaches them reports a broken file as that
    image's error, with its reason, as does a task sent the files, which never answers UNREACHABLE,
    so that nothing is sent again and again."""
    folder, _ = reference
    config = build_config(None, flags_to_values({"source": "x"}), None)
    config_json = configuration.to_json(config)
    good = folder / "img0.png"
    (tmp_path / "broken.png").write_bytes(b"not an image")

    def listed(path, size=None):
        return inputs.Listed(path.name, str(path), path.stat().st_size if size is None else size, "")

    gone, broken = listed(tmp_path / "gone.png", 100), listed(tmp_path / "broken.png")
    probed = inputs.probe([(good.name, str(good))], config)[0]
    assert probed[0] == 14 and probed[-1] == inputs.fingerprint(good.read_bytes())
    assert probe_task([gone, listed(good)], config_json) == UNREACHABLE
    assert probe_task([listed(good, size=101)], config_json) == UNREACHABLE  # another file at that path
    assert probe_task([broken, listed(good)], config_json) == [
        ("error", "broken.png: not an image file Pillow can read"), probed]
    assert probe_task([listed(good), gone], config_json)[1][0] == "error"  # gone after the first: its error
    sent = [inputs.read_or_reason(item.location) for item in (gone, broken, listed(good))]
    found = probe_task([gone, broken, listed(good)], config_json, sent)
    assert found[0][0] == "error" and f"{gone.location}: cannot read" in found[0][1]
    assert found[1:] == [("error", "broken.png: not an image file Pillow can read"), probed]
    # a worker decodes the bytes sent as it would the file, and still checks them against the plan
    image = inputs.load(str(good), good.name, config, expected=probed[-1], data=good.read_bytes())[0]
    assert np.array_equal(image.values, inputs.load(str(good), good.name, config)[0].values)
    with pytest.raises(InrError, match="changed since"):
        inputs.load(str(good), good.name, config, expected=probed[-1], data=good.read_bytes() + b"x")


def test_the_driver_reads_the_files_it_sends_piece_by_piece(tmp_path, monkeypatch):
    """Pieces of about SENT_PIECE bytes, in order, each read when it is sent, not before; a file
    the driver cannot read either is sent as the reason."""
    files = []
    for i in range(4):
        files.append(tmp_path / f"{i}.png")
        files[-1].write_bytes(bytes([i]) * 10)
    listed = [inputs.Listed(path.name, str(path), 10, "") for path in files]
    listed.append(inputs.Listed("gone.png", str(tmp_path / "gone.png"), 10, ""))
    monkeypatch.setattr(on_ray, "SENT_PIECE", 20)
    pieces = on_ray._read_pieces(listed, 1, 5)
    assert next(pieces) == (1, [b"\x01" * 10, b"\x02" * 10])
    files[3].write_bytes(b"later")
    assert next(pieces) == (3, [b"later", f"{tmp_path / 'gone.png'}: cannot read (No such file or directory)"])
    assert next(pieces, None) is None


def test_without_workers_each_one_cpu_node_gets_a_worker(cluster, reference, tmp_path):
    """No --workers on nodes of one CPU: one worker per node, each asking for that one CPU (sized
    from the driver's cores, each asked for more than any node has and Ray waited for ever)."""
    folder, out = reference
    process = inr("fit-many", folder, "-o", tmp_path / "set", "--pack", "2", *NET[:-1], "--ray", cluster.address)
    code, stderr = finish(process)
    assert code == 0, stderr
    assert "2 workers on 2 nodes (0 on GPUs, 2 on CPUs)" in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_until_psnr_on_the_cluster_says_what_reached_it_as_this_process_does(cluster, reference, tmp_path):
    """The line of the images that reached --until-psnr counts the shards the workers fitted."""
    folder, _ = reference
    said = []
    for where in ([], ["--ray", cluster.address]):
        process = inr("fit-many", folder, "-o", tmp_path / f"set{len(where)}", "--pack", "2", "--until-psnr", "22",
                      *NET[:-1], *where)
        code, stderr = finish(process)
        assert code == 0, stderr
        said.append([line for line in stderr.splitlines() if line.startswith("--until-psnr 22: ")])
    assert len(said[0]) == 1 and said[0] == said[1], said


def test_resources_no_node_has_end_the_run_in_one_line(cluster, reference, tmp_path):
    folder, _ = reference
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--device", "auto", "--gpus-per-worker", "2",
                       *NET[:-3])
    assert code == 1, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: --gpus-per-worker 2: no node of the Ray cluster has 2 GPU"), stderr
    assert re.search(r"\(the nodes have: [\d.]+: 1 CPU(, 1 GPU)?; [\d.]+: 1 CPU(, 1 GPU)?\)$", lines[-1]), stderr
    assert "1 GPU" in lines[-1]
    assert "Traceback" not in stderr


def test_sigterm_while_the_workers_start_ends_the_run(cluster, reference, tmp_path):
    """Every worker hangs as it starts (the failpoint leaves a marker first): SIGTERM then ends the
    command at once, exit 128 + SIGTERM, saying that nothing is lost."""
    folder, _ = reference
    out = tmp_path / "set"
    process = inr("fit-many", folder, "-o", out, "--pack", "1", *NET, "--ray", cluster.address,
                  failpoint="hang-at-start")
    while not (out / ".failpoint-started").exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process, timeout=60)
    assert code == 128 + signal.SIGTERM, stderr
    assert "SIGTERM" in stderr and "run the same command again" in stderr and "Traceback" not in stderr


def test_workers_that_never_start_end_the_run_at_the_start_deadline(cluster, reference, tmp_path, monkeypatch):
    """Every worker hangs as it starts and nobody signals the command: at the start deadline
    (INR_RAY_START_TIMEOUT) it ends in one line naming what it asked and what the nodes have, the
    hung workers are killed, and the same command run again fits the set, bit for bit."""
    folder, out = reference
    monkeypatch.setenv("INR_RAY_START_TIMEOUT", "2")
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", *NET, failpoint="hang-at-start")
    assert code == 1, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: no Ray worker started within 2 s (asked: 2 workers on "), stderr
    assert "the nodes have: " in lines[-1] and "Traceback" not in stderr
    monkeypatch.delenv("INR_RAY_START_TIMEOUT")
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", *NET)
    assert code == 0, stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_a_mixed_cluster_uses_every_node(cluster, reference, tmp_path):
    """--device auto on the fixture: the head declares a GPU (which, with no CuPy here, its worker
    cannot use: it fits on the CPU, said once) and the other node a CPU worker. Both fit, and the
    set is the in-process one, bit for bit."""
    folder, out = reference
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", "--device", "auto", *NET[:-3])
    assert code == 0, stderr
    assert "2 workers on 2 nodes (1 on GPUs, 1 on CPUs)" in stderr
    assert stderr.count("fit on the CPU") == 1 and "cannot use its GPU" in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_a_straggler_is_sent_to_another_node(cluster, reference, tmp_path):
    """A third node's worker hangs on its first shard for ever: once the others have shown how long
    a shard takes, that shard is sent to another node too, the first result is kept, and the run
    ends (the hung worker ended with it) with the in-process set, bit for bit."""
    folder, out = reference
    slow = cluster.add_node(num_cpus=1, resources={"slow": 1})
    cluster.wait_for_nodes()
    try:
        code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "1", *NET, failpoint="hang-on=slow")
        assert code == 0, stderr
        assert "has been fitting on" in stderr and "the first result is kept" in stderr
        assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    finally:
        cluster.remove_node(slow)


def test_an_http_folder_on_the_cluster(cluster, served, reference, tmp_path):  # noqa: F811 - the fixture
    """The workers read the images from the http server themselves: the in-process set, bit for bit."""
    _, url = served
    _, out = reference
    code, stderr = run(cluster, f"{url}/images/", "-o", tmp_path / "set", "--pack", "2", "--workers", "2", *NET)
    assert code == 0, stderr
    assert "the driver sends" not in stderr
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
