"""Run directories: naming, finding the latest, locking, and the metrics table."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

from inr_cli.formats.checkpoint import FILENAME
from inr_cli.errors import InrError

RUNS_ROOT = Path("runs")
METRICS_HEADER = "step,loss,psnr,lr,seconds\n"


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


class MetricsLog:
    """metrics.csv: step, loss, psnr, lr, seconds. On resume, rows past the checkpoint are dropped,
    since the resumed run recomputes those steps."""

    def __init__(self, path: Path, keep_through_step: int):
        self.path = Path(path)
        rows = []
        if keep_through_step > 0 and self.path.is_file():
            for line in self.path.read_text().splitlines()[1:]:
                try:
                    if int(line.split(",")[0]) <= keep_through_step:
                        rows.append(line + "\n")
                except ValueError:
                    continue
        self.path.write_text(METRICS_HEADER + "".join(rows))
        self.handle = open(self.path, "a")

    def append(self, step: int, loss: float, psnr: float, lr: float, seconds: float) -> None:
        self.handle.write(f"{step},{loss:.8g},{psnr:.4f},{lr:.6g},{seconds:.3f}\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines()[1:]:
        parts = line.split(",")
        try:
            rows.append({"step": int(parts[0]), "loss": float(parts[1]), "psnr": float(parts[2]),
                         "lr": float(parts[3]), "seconds": float(parts[4])})
        except (ValueError, IndexError):
            continue
    return rows
