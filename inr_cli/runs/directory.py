"""Run directories: naming, finding the latest, locking."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from inr_cli.errors import InrError
from inr_cli.formats.checkpoint import FILENAME

RUNS_ROOT = Path("runs")
IMAGE_IN_RUN = "image.npy"  # an image given as pixels (the API's fit) is kept in its run, for --resume
BLEW_UP = "blew-up.txt"  # in a run whose training blew up: a bare --resume passes it by


def new_run_dir(stem: str, root: Path = RUNS_ROOT) -> Path:
    """runs/<stem>, or runs/<stem>-2, -3 ... so a new run never overwrites an old one."""
    candidate, n = root / stem, 1
    while candidate.exists():
        n += 1
        candidate = root / f"{stem}-{n}"
    return candidate


def holds_run(folder: Path) -> bool:
    """Whether a folder is a run directory of inr train's (its checkpoint is there)."""
    return os.path.lexists(Path(folder) / FILENAME)


def latest_run(root: Path = RUNS_ROOT) -> Path:
    """The most recently updated run under root, but for runs that blew up (named, they still resume)."""
    runs = [p.parent for p in root.glob(f"*/{FILENAME}")] if root.is_dir() else []
    blown = [run for run in runs if (run / BLEW_UP).exists()]
    runs = [run for run in runs if run not in blown]
    if not runs:
        passed = f" ({len(blown)} that blew up passed by: name one to resume it)" if blown else ""
        raise InrError(f"--resume: no run with a {FILENAME} under {root}/ to continue{passed}")
    return max(runs, key=lambda p: (p / FILENAME).stat().st_mtime)


class FolderLock:
    """An exclusive lock on a folder that one process writes (`who` names the command, `what` the
    folder, in the message to a second one).

    filelock: flock on Unix, LockFileEx on Windows (where CuPy runs too), released by the operating
    system when a process dies, so a killed process never leaves its folder locked."""

    def __init__(self, folder: Path, who: str, what: str):
        self.path = Path(folder) / ".lock"
        self.lock = FileLock(self.path, timeout=0)
        self.who, self.what = who, what

    def __enter__(self):
        try:
            self.lock.acquire()
        except Timeout:
            raise InrError(f"{self.path.parent}: another {self.who} is using this {self.what}") from None
        except OSError as exc:
            raise InrError(f"{self.path.parent}: cannot write to the {self.what} ({exc.strerror})") from None
        return self

    def __exit__(self, *exc):
        self.lock.release()


class RunLock(FolderLock):
    """A run directory's lock, so two trainers never write the same checkpoint."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, "inr train", "run directory")
