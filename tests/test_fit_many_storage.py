"""Where fit-many's networks are written, by the storage the output is on: each into its row of one
shared file (rows in place), or whole in its shard's file and streamed into weights.npy by the
driver (whole shards). The storage is read from the mount table as the kernel writes it; the mode
it gives is forced here through INR_OUTPUT_FSTYPE, and a set fitted either way, or started one way
and finished the other, is the same set, bit for bit. And the files the driver sends to workers
that cannot reach the inputs, read ahead on a thread, within a budget."""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

import inr_cli
from inr_cli.errors import InrError
from inr_cli.formats.network_set import INDEX, SHARDS, WEIGHTS, WEIGHTS_PART
from inr_cli.sets import output_kind
from inr_cli.sets.output_kind import OVERRIDE, filesystem_of, mounts, output_storage
from inr_cli.sets.read_ahead import ReadAhead
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import shard_name
from tests import test_fit_many
from tests.test_fit_many import NET, finish, fit, inr, shards_on_disk

reference = test_fit_many.reference  # the in-process set, rows in place: what every way must reproduce

MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
40 27 0:50 / /mnt/my\040bucket rw,nosuid,nodev,relatime shared:30 master:2 - fuse.s3fs s3fs rw,user_id=0
41 27 0:51 / /shared rw,relatime - nfs4 server:/export rw,vers=4.2
42 41 0:52 / /shared/scratch rw - lustre 10.0.0.1@tcp:/fs rw
43 27 0:53 / /data rw - xfs /dev/vdb rw
44 27 0:54 / /data rw - fuse.gcsfuse bucket rw
45 27 0:55 /sub /weird\134name\011here rw - tmpfs tmpfs rw
"""


def test_the_mount_table_is_read_as_the_kernel_writes_it():
    """Escaped characters in mount points (\\040 a space, \\134 a backslash, \\011 a tab), optional
    fields before the separator; a path's storage is its longest mount point, the last mounted where
    one is mounted over another, never a mount point that merely starts with the same letters."""
    found = mounts(MOUNTINFO)
    assert ("/mnt/my bucket", "fuse.s3fs") in found and ("/weird\\name\there", "tmpfs") in found
    assert len(found) == 8

    def storage(path):
        return filesystem_of(path, MOUNTINFO)

    assert storage("/mnt/my bucket/sets/photos") == ("fuse.s3fs", "/mnt/my bucket")
    assert storage("/mnt/my bucketeer/photos") == ("ext4", "/")
    assert storage("/shared/sets") == ("nfs4", "/shared")
    assert storage("/shared/scratch/sets") == ("lustre", "/shared/scratch")
    assert storage("/shared/scratchpad") == ("nfs4", "/shared")
    assert storage("/data/sets") == ("fuse.gcsfuse", "/data")  # mounted over the xfs
    assert storage("/weird\\name\there/x") == ("tmpfs", "/weird\\name\there")
    assert filesystem_of("/x", "") == ("", "")


def test_a_machine_without_a_mount_table_is_unknown_storage(monkeypatch, tmp_path):
    monkeypatch.setattr(output_kind, "MOUNTINFO", str(tmp_path / "no-such-file"))
    monkeypatch.delenv(OVERRIDE, raising=False)
    assert filesystem_of(tmp_path) == ("", "")
    assert output_storage(tmp_path, 1) == (None, False)
    assert "inr cannot tell what storage" in output_storage(tmp_path, 2).whole_shards


@pytest.mark.parametrize("fstype, one_machine, machines", [
    ("ext4", None, None), ("xfs", None, None), ("tmpfs", None, None), ("overlay", None, None),
    ("lustre", None, None), ("gpfs", None, None), ("beegfs", None, None), ("ceph", None, None),
    ("fuse.s3fs", "FUSE mount", "FUSE mount"), ("fuse.gcsfuse", "FUSE mount", "FUSE mount"),
    ("fuse.mountpoint-s3", "FUSE mount", "FUSE mount"), ("fuse", "FUSE mount", "FUSE mount"),
    ("nfs4", None, "NFS"), ("nfs", None, "NFS"), ("cifs", None, "not known"), ("9p", None, "not known"),
])
def test_which_storage_gets_whole_shards(monkeypatch, tmp_path, fstype, one_machine, machines):
    """Rows in place where one kernel sees every write or the filesystem locks byte ranges across
    machines; whole shards on FUSE mounts always (where weights.npy is written front to back), and
    on NFS or storage not known here when the workers run on several machines."""
    monkeypatch.setenv(OVERRIDE, fstype)
    for nodes, expected in ((1, one_machine), (3, machines)):
        reason, front_to_back = output_storage(tmp_path / "set", nodes)
        assert front_to_back == (expected == "FUSE mount")
        if expected is None:
            assert reason is None, (fstype, nodes, reason)
        else:
            assert expected in reason and fstype in reason and str(tmp_path / "set") in reason, reason
            assert ("3 machines" in reason) == (expected != "FUSE mount"), reason


def test_the_write_check_writes_a_file_and_leaves_nothing(tmp_path):
    (tmp_path / "set" / SHARDS).mkdir(parents=True)
    folder = SetFolder(tmp_path / "set")
    assert folder.cannot_write(SHARDS) is None
    assert list((tmp_path / "set" / SHARDS).iterdir()) == []
    assert f"cannot write {tmp_path / 'set' / 'missing'}" in folder.cannot_write("missing")
    (tmp_path / "file").write_text("")
    assert "cannot write" in SetFolder(tmp_path / "file").cannot_write(SHARDS)


def test_a_set_in_whole_shards_is_the_same_set(reference, tmp_path, monkeypatch):
    """On a FUSE mount (forced): one notice saying why, each shard's file holds its networks, no
    rows file is made, and the set is the one fitted with rows in place, bit for bit, and loads."""
    folder, out = reference
    monkeypatch.setenv(OVERRIDE, "fuse.s3fs")
    result = fit(folder, "-o", tmp_path / "set", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("note:") == 1, result.stderr
    assert f"{tmp_path / 'set'} is on a FUSE mount (fuse.s3fs, {OVERRIDE} says so)" in result.stderr
    assert "each shard's file holds its networks" in result.stderr
    assert all("params" in np.load(tmp_path / "set" / shard_name(i)).files for i in range(3))
    assert not (tmp_path / "set" / WEIGHTS_PART).exists()
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    assert (tmp_path / "set" / INDEX).read_text() == (out / INDEX).read_text()
    loaded = inr_cli.load(tmp_path / "set")
    assert loaded.names == inr_cli.load(out).names and np.array_equal(loaded.weights, np.load(out / WEIGHTS))
    before = (tmp_path / "set" / WEIGHTS).stat()
    result = fit(folder, "-o", tmp_path / "set", "--pack", "2", *NET)  # finished: its weights.npy kept as it is
    assert result.exit_code == 0 and "note:" not in result.stderr, result.stderr
    after = (tmp_path / "set" / WEIGHTS).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    assert (tmp_path / "set" / INDEX).read_text() == (out / INDEX).read_text()


@pytest.mark.parametrize("first, then", [("ext4", "fuse.s3fs"), ("fuse.s3fs", "ext4")])
def test_a_set_started_one_way_is_finished_the_other(reference, tmp_path, monkeypatch, first, then):
    """The driver killed after two shards, the command run again on storage that gives the other
    mode: the shards already fitted keep their networks where they are, and the set is the same."""
    folder, out = reference
    target = tmp_path / "set"
    args = ["fit-many", folder, "-o", target, "--pack", "1", *NET]
    monkeypatch.setenv(OVERRIDE, first)
    assert finish(inr(*args, failpoint="driver-after=2"))[0] == -signal.SIGKILL
    assert shards_on_disk(target) == 2
    assert (target / WEIGHTS_PART).exists() == (first == "ext4")
    monkeypatch.setenv(OVERRIDE, then)
    result = fit(*args[1:])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))
    assert not (target / WEIGHTS_PART).exists()


def test_a_shard_removed_from_a_set_with_rows_in_place_is_fitted_again_in_whole_shards(reference, tmp_path,
                                                                                        monkeypatch):
    """The other shards' networks are in weights.npy alone: it is kept (as the rows file) and the
    driver writes the new shard's networks into it."""
    folder, out = reference
    target = tmp_path / "set"
    monkeypatch.setenv(OVERRIDE, "ext4")
    assert fit(folder, "-o", target, "--pack", "2", *NET).exit_code == 0
    (target / shard_name(1)).unlink()
    weights = np.load(target / WEIGHTS, mmap_mode="r+")
    weights[2:4] = 0
    weights.flush()
    del weights
    monkeypatch.setenv(OVERRIDE, "fuse.s3fs")
    result = fit(folder, "-o", target, "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert "params" in np.load(target / shard_name(1)).files
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))


def read_ahead(budget: int, fail: str = ""):
    """A ReadAhead over keys of two files of 5 bytes each, and the files it read, in order."""
    read: list[str] = []

    def read_file(location: str) -> bytes:
        if location == fail:
            raise InrError(f"{location}: cannot read")
        read.append(location)
        return location[0].encode() * 5

    return ReadAhead(lambda key: [f"{key}a", f"{key}b"], read_file, budget), read


def test_files_are_read_ahead_within_the_budget():
    """The next key is read only while less than the budget is held (here 25 bytes: three keys of
    10), in the order followed; taking one makes room for the next; a key no longer followed is
    dropped, and its room given to the next."""
    ahead, read = read_ahead(budget=25)
    try:
        ahead.follow(range(6))
        assert ahead.idle.wait(30)
        assert read == ["0a", "0b", "1a", "1b", "2a", "2b"] and ahead.held_bytes == 30
        assert ahead.take(5) is None and ahead.ready(2) and not ahead.ready(3)
        assert ahead.take(1) == [b"1" * 5, b"1" * 5]
        assert ahead.take(1) is None
        assert ahead.idle.wait(30)
        assert read[6:] == ["3a", "3b"] and ahead.held_bytes == 30
        ahead.follow([5, 4, 3])  # 0 and 2 dropped: room for 5 and 4
        assert ahead.idle.wait(30)
        assert read[8:] == ["5a", "5b", "4a", "4b"] and ahead.held_bytes == 30
        assert [ahead.ready(key) for key in range(6)] == [False, False, False, True, True, True]
    finally:
        ahead.close()
    assert ahead.idle.wait(30) and ahead.held_bytes == 0


def test_a_key_larger_than_the_budget_is_read_alone_and_a_failed_read_is_raised_where_taken():
    ahead, read = read_ahead(budget=1, fail="1b")
    try:
        ahead.follow([0, 1, 2])
        assert ahead.idle.wait(30)
        assert read == ["0a", "0b"] and ahead.held_bytes == 10
        assert ahead.take(0) == [b"0" * 5] * 2
        assert ahead.idle.wait(30) and ahead.ready(1) and ahead.ready(2)  # a failed read holds no bytes
        assert read[2:] == ["1a", "2a", "2b"] and ahead.held_bytes == 10
        with pytest.raises(InrError, match="1b: cannot read"):
            ahead.take(1)
        assert ahead.take(2) == [b"2" * 5] * 2
    finally:
        ahead.close()


def test_waiting_for_files_ends_when_one_is_read():
    gate = threading.Event()
    ahead = ReadAhead(lambda key: ["x"], lambda location: gate.wait(30) and b"x", 10)
    try:
        ahead.follow([0])
        ahead.wait(0.01)  # nothing read yet: returns after its time
        assert not ahead.ready(0)
        gate.set()
        while not ahead.ready(0):
            ahead.wait(30)
        assert ahead.take(0) == [b"x"]
    finally:
        ahead.close()


# --- on a real two-node Ray cluster (tests/test_fit_many_cluster.py's) ----------------------------

try:
    from tests.test_fit_many_cluster import cluster, fit_in_a_driver_of_its_own, run  # noqa: F401 - a fixture
except pytest.skip.Exception:  # no Ray (the optional extra inr[cluster]): the tests above still run
    cluster = None
needs_ray = pytest.mark.skipif(cluster is None, reason="Ray is the optional extra inr[cluster]")


@pytest.mark.slow
@pytest.mark.cluster
@needs_ray
def test_nfs_with_workers_on_two_machines_gets_whole_shards(cluster, reference, tmp_path, monkeypatch):  # noqa: F811
    folder, out = reference
    monkeypatch.setenv(OVERRIDE, "nfs4")
    code, stderr = run(cluster, folder, "-o", tmp_path / "set", "--pack", "2", "--workers", "2", *NET)
    assert code == 0, stderr
    assert f"{tmp_path / 'set'} is on NFS (nfs4, {OVERRIDE} says so)" in stderr, stderr
    assert "the workers run on 2 machines" in stderr and stderr.count("note:") == 1, stderr
    assert all("params" in np.load(tmp_path / "set" / shard_name(i)).files for i in range(3))
    assert not (tmp_path / "set" / WEIGHTS_PART).exists()
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    assert np.array_equal(inr_cli.load(tmp_path / "set").weights, np.load(out / WEIGHTS))


@pytest.mark.slow
@pytest.mark.cluster
@needs_ray
def test_blind_workers_on_a_fuse_mount_with_one_shard_read_ahead(cluster, reference, tmp_path,  # noqa: F811
                                                                 monkeypatch):
    """The images in the driver's memory:// (the workers cannot reach them), the output on a FUSE
    mount (forced), a budget that holds one shard's files at a time: the set is the same."""
    pytest.importorskip("fsspec")
    folder, out = reference
    monkeypatch.setenv(OVERRIDE, "fuse.rclone")
    root = f"/inr-{tmp_path.name}"
    stderr = fit_in_a_driver_of_its_own(f"memory://{root}/", tmp_path / "set", tmp_path,
                                        {f"{root}/{path.name}": path for path in folder.iterdir()},
                                        {"SENT_AHEAD": 1}, ray=cluster.address, pack=1, workers=2)
    assert "the driver sends the images' files to 2 of 2 workers" in stderr
    assert "is on a FUSE mount (fuse.rclone" in stderr
    assert all("params" in np.load(tmp_path / "set" / shard_name(i)).files for i in range(5))
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
