"""The training progress line: step/total, loss, PSNR, learning rate, steps/s, time left."""

from __future__ import annotations

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from inr_cli.console import err


class TrainingProgress:
    def __init__(self, start: int, total: int, quiet: bool):
        self.quiet = quiet
        self.progress = Progress(
            TextColumn("step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}  PSNR {task.fields[psnr]}  lr {task.fields[lr]}"),
            TextColumn("{task.fields[rate]} steps/s"),
            TimeRemainingColumn(),
            console=err,
            transient=False,
            disable=quiet,
        )
        self.task = self.progress.add_task("train", total=total, completed=start,
                                           loss="-", psnr="-", lr="-", rate="-")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def update(self, step: int, loss: float, psnr: float, lr: float, rate: float) -> None:
        self.progress.update(self.task, completed=step, loss=f"{loss:.3e}", psnr=f"{psnr:.2f} dB",
                             lr=f"{lr:.2e}", rate=f"{rate:.1f}")
