"""Run directories: naming, finding the latest, locking."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

from inr_cli.errors import InrError
from inr_cli.formats.checkpoint import FILENAME

RUNS_ROOT = Path("runs")


def new_run_dir(stem: str, root: Path = RUNS_ROOT) -> Path:
    """runs/<stem>, or runs/<stem>-2, -3 ... so a new run never overwrites an old one."""
    candidate, n = root / stem, 1
    while candidate.exists():
        n += 1
        candidate = root / f"{stem}-{n}"
    return candidate


def latest_run(root: Path = RUNS_ROOT) -> Path:
    runs = [p.parent for p in root.glob(f"*/{FILENAME}")] if root.is_dir() else []
    if not runs:
        raise InrError(f"--resume: no run with a {FILENAME} under {root}/ to continue")
    return max(runs, key=lambda p: (p / FILENAME).stat().st_mtime)


class RunLock:
    """An exclusive lock on a run directory, so two trainers never write the same checkpoint.

    filelock: flock on Unix, LockFileEx on Windows (where CuPy runs too), released by the operating
    system when a process dies, so a killed run never leaves its directory locked."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self.lock = FileLock(self.path, timeout=0)

    def __enter__(self):
        try:
            self.lock.acquire()
        except Timeout:
            raise InrError(f"{self.path.parent}: another inr train is using this run directory") from None
        except OSError as exc:
            raise InrError(f"{self.path.parent}: cannot write to the run directory ({exc.strerror})") from None
        return self

    def __exit__(self, *exc):
        self.lock.release()
