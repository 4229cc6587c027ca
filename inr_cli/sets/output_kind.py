"""What storage a set's output folder is on, and so how its workers write the networks: each straight
into its row of one shared file (rows in place), or whole in its shard's file, streamed into
weights.npy by the driver at the end (whole shards, as in a bucket).

Rows are not page-aligned, so rows in place need every writer's byte ranges to land as written
even where two machines write one page at once. One kernel sees every write to a local disk; the
cluster filesystems below lock byte ranges across their clients. An NFS client caches and writes
back whole pages, so two machines writing rows that share a page can undo each other's bytes; a
FUSE mount of an object store (s3fs, gcsfuse, mountpoint-s3, rclone) refuses writes into the middle
of a file or uploads the whole file again at every sync, even from one machine. So: FUSE mounts
get whole shards always; NFS and filesystems not known here, when the workers run on more than
one machine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

# The filesystem type to take the output's as, instead of the one found (a test's knob, and a way
# out where the detection is wrong: `lustre` for rows in place, `fuse` for whole shards).
OVERRIDE = "INR_OUTPUT_FSTYPE"
MOUNTINFO = "/proc/self/mountinfo"
# One kernel sees every write (fuseblk: a disk through FUSE, such as ntfs-3g, not an object store).
LOCAL = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "ramfs", "overlay", "f2fs", "jfs",
                   "reiserfs", "bcachefs", "vfat", "exfat", "ntfs", "ntfs3", "hfsplus", "apfs", "fuseblk"})
# Coherent across machines for writes to byte ranges of one file: their clients lock the ranges, or
# write through (BeeGFS in its default buffered cache mode; its native mode caches pages as NFS does).
SHARED_COHERENT = frozenset({"lustre", "gpfs", "beegfs", "ceph"})
_ESCAPE = re.compile(r"\\([0-7]{3})")  # the kernel writes space, tab, newline and backslash as \ooo


def mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of a /proc/PID/mountinfo text, in its order."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 9 or "-" not in fields[6:]:
            continue
        after = fields.index("-", 6)  # optional fields (shared:N ...) sit between the options and "-"
        if after + 1 < len(fields):
            found.append((_ESCAPE.sub(lambda octal: chr(int(octal.group(1), 8)), fields[4]), fields[after + 1]))
    return found


def filesystem_of(path: Path, mountinfo: str | None = None) -> tuple[str, str]:
    """The filesystem type and mount point of `path` (links followed; it need not exist yet): the
    longest mount point above it, the last mounted where several share one. ("", "") where the
    mounts cannot be read (not Linux)."""
    if mountinfo is None:
        try:
            with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
                mountinfo = handle.read()
        except OSError:
            return "", ""
    path = Path(os.path.realpath(path))
    best = ("", "")
    for point, fstype in mounts(mountinfo):
        inside = path == Path(point) or Path(point) in path.parents
        if inside and len(point) >= len(best[1]):
            best = (fstype, point)
    return best


class OutputStorage(NamedTuple):
    """How a set is written in its local output folder."""
    whole_shards: str | None  # why the networks go whole into the shards' files (None: rows in place)
    front_to_back: bool  # weights.npy can only be written front to back there (a FUSE mount), not at its rows


def storage_kind(path: Path) -> tuple[str, str]:
    """The filesystem type of `path` as this machine sees it, and where that is said (its mount
    point, or the override)."""
    fstype = os.environ.get(OVERRIDE, "").strip()
    if fstype:
        return fstype, f"{OVERRIDE} says so"
    fstype, point = filesystem_of(path)
    return fstype, f"mounted at {point}"


def output_storage(path: Path, nodes: int, kind: tuple[str, str] | None = None) -> OutputStorage:
    """How the networks of a set in the local folder `path`, fitted by workers on `nodes` machines,
    are written; `kind`: storage_kind(path) as a worker's machine sees it (else as this one does)."""
    fstype, point = kind or storage_kind(path)
    if fstype == "fuse" or fstype.startswith("fuse."):
        return OutputStorage(f"{path} is on a FUSE mount ({fstype}, {point}), which cannot take rows written into "
                             f"one shared file", True)
    return OutputStorage(_many_writers_problem(path, nodes, fstype, point), False)


def _many_writers_problem(path: Path, nodes: int, fstype: str, point: str) -> str | None:
    if fstype in LOCAL or fstype in SHARED_COHERENT or nodes <= 1:
        return None  # one kernel sees every write, or the filesystem locks what each machine writes
    machines = f"the workers run on {nodes} machines"
    if fstype.startswith("nfs"):
        return f"{path} is on NFS ({fstype}, {point}), where writes into one file from several machines are not " \
               f"safe, and {machines}"
    if not fstype:
        return f"inr cannot tell what storage {path} is on, and {machines}"
    return f"{path} is on {fstype} ({point}), not known to take writes into one file from several machines, " \
           f"and {machines}"
