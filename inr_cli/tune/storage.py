"""Where a study lives: Optuna's journal file in the output folder (study.journal), so that a killed
study resumes with everything it finished, and Ray workers on storage they share report to the same
study.

The journal's appends are serialised by a file lock (flock, through filelock) that the operating
system releases when a process dies: a trial killed while it writes leaves no stale lock behind
(Optuna's own locks wait out a grace period). The folder itself is held by one `inr tune` at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

from inr_cli.runs.directory import FolderLock

JOURNAL = "study.journal"
STUDY_NAME = "inr-tune"
DEFINITION = "inr-tune"  # the study's user attribute that records what it was started with


class JournalLock:
    """Optuna's journal lock (acquire, release) as an flock on a file beside the journal."""

    def __init__(self, path: Path):
        self.path = str(path)
        self.lock = FileLock(self.path)

    def acquire(self) -> bool:
        self.lock.acquire()
        return True

    def release(self) -> None:
        self.lock.release()


def study_lock(out: Path) -> FolderLock:
    """The study folder held by one driver: a second `inr tune` on it is refused, not interleaved."""
    return FolderLock(out, "inr tune", "study folder")


def holds_study(out: Path) -> bool:
    """Whether a folder is a study folder of inr tune's (its journal is there, even empty)."""
    return os.path.lexists(Path(out) / JOURNAL)


def has_study(out: Path) -> bool:
    path = Path(out) / JOURNAL
    return path.is_file() and path.stat().st_size > 0


def repair(out: Path) -> None:
    """A journal whose last line was cut short (a process killed inside a write) loses that line:
    it was never a record, and the next append would make it one that cannot be read."""
    path = Path(out) / JOURNAL
    if not path.is_file():
        return
    with open(path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size == 0:
            return
        handle.seek(max(0, size - 1))
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        handle.truncate(data.rfind(b"\n") + 1)


def open_storage(out: Path):
    """The Optuna storage of the study in `out`."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = Path(out) / JOURNAL
    return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalLock(path.with_name(JOURNAL + ".lock"))))
