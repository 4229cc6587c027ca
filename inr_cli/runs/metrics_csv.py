"""A run's metrics.csv: step, loss, psnr, lr, seconds, one row per loss reading at the logging
interval; written while the run trains, read back for psnr.svg and the viewer."""

from __future__ import annotations

from pathlib import Path

METRICS_HEADER = "step,loss,psnr,lr,seconds\n"


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
