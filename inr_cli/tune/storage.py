"""Where a study lives: Optuna's journal file in the output folder (study.journal), so that a killed
study resumes with everything it finished, and Ray workers on storage they share report to the same
study.

The journal's appends are serialised by a file lock (flock, through filelock) that the operating
system releases when a process dies: a trial killed while it writes leaves no stale lock behind
(Optuna's own locks wait out a grace period). The folder itself is held by one `inr tune` at a time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from filelock import FileLock
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from inr_cli.errors import InrError, WriteError
from inr_cli.formats.input_files import check_regular
from inr_cli.limits import MAX_LINE_BYTES, MAX_LIST_BYTES
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


def check_journal(out: Path) -> None:
    """The journal read as untrusted before Optuna replays it: a regular file (or none), of bounded
    size and lines; a last line cut short (a process killed inside a write) is dropped: it was never
    a record, and the next append would make it one that cannot be read."""
    path = Path(out) / JOURNAL
    if not os.path.lexists(path):
        return
    check_regular(path, expected="a study's journal")
    size = path.stat().st_size
    if size > MAX_LIST_BYTES:
        raise InrError(f"{path}: {size:,} bytes, larger than a study's journal can be ({MAX_LIST_BYTES:,})")
    with open(path, "rb+") as handle:
        kept, number = 0, 0
        while True:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise InrError(f"{path}, line {number}: longer than a record of a study's journal can be "
                               f"({MAX_LINE_BYTES:,} bytes); the study cannot be resumed: pick another -o")
            if not line.endswith(b"\n"):
                break
            try:  # Optuna skips a last line it cannot read (a write in progress): a finished one is damage
                json.loads(line)
            except (ValueError, RecursionError):
                raise InrError(f"{path}, line {number}: not a record of a study's journal; the study cannot be "
                               f"resumed: pick another -o") from None
            kept = handle.tell()
        if kept == 0 < size:  # not one whole record: a first write cut short and a foreign file look alike
            raise InrError(f"{path}, line 1: not a record of a study's journal (no line of it is whole); the "
                           f"study cannot be resumed: pick another -o")
        if kept < size:
            handle.truncate(kept)


OPERATIONS = 11  # Optuna's journal operation codes: 0 (create a study) to 10 (discard trials)


class CheckedJournalBackend(JournalFileBackend):
    """Optuna's journal file, each record checked as it is read (a JSON object with a known
    operation), a write that fails one line naming the journal."""

    def __init__(self, path: str, lock_obj):
        super().__init__(path, lock_obj=lock_obj)
        self.path = path

    def damaged(self, why: str) -> InrError:
        return InrError(f"{self.path}: not a journal of inr tune ({why}); the study cannot be resumed: pick "
                        f"another -o")

    def read_logs(self, log_number_from: int):
        try:
            for log in super().read_logs(log_number_from):
                op = log.get("op_code") if isinstance(log, dict) else None
                if type(op) is not int or not 0 <= op < OPERATIONS or not isinstance(log.get("worker_id"), str):
                    raise self.damaged(f"a record of an unknown operation: {str(log)[:60]}")
                yield log
        except (ValueError, RecursionError) as exc:  # a line that is not JSON, or one cut short mid-file
            raise self.damaged(str(exc)[:80]) from None

    def append_logs(self, logs) -> None:
        try:
            super().append_logs(logs)
        except OSError as exc:
            raise WriteError(f"cannot write {self.path} ({exc.strerror or exc}); the trials it recorded before are "
                             f"kept", exc.errno, exc.strerror) from None


class CheckedJournalStorage(JournalStorage):
    """Optuna's journal storage, a record it cannot replay (fields missing or of another type) one
    line naming the journal, not Optuna's own exception."""

    def _sync_with_backend(self) -> None:
        try:
            super()._sync_with_backend()
        except InrError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, AssertionError) as exc:
            raise self._backend.damaged(f"{type(exc).__name__}: {str(exc)[:60]}") from None


def open_storage(out: Path):
    """The Optuna storage of the study in `out`."""
    path = Path(out) / JOURNAL
    try:
        return CheckedJournalStorage(CheckedJournalBackend(str(path), JournalLock(path.with_name(JOURNAL + ".lock"))))
    except OSError as exc:
        raise InrError(f"cannot write the study's journal {path} ({exc.strerror or exc})") from None
