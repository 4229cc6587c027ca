"""The training progress: step/total, elapsed, time left, loss, PSNR, learning rate, steps/s.

On a terminal a Rich line whose first columns (step, elapsed, time left) fit even 80 columns; the
bar takes what room is left. Off a terminal (a batch job, a log file) a plain line every
`every_seconds`, and one at the end.
"""

from __future__ import annotations

import time

from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Column

from inr_cli.console import err


class TrainingProgress:
    def __init__(self, start: int, total: int, quiet: bool, every_seconds: float = 5.0, console=None):
        self.quiet = quiet
        self.console = console or err
        self.total = total
        self.every = every_seconds
        self.started = time.perf_counter()
        self.last_line = self.started
        self.plain = not quiet and not self.console.is_terminal
        counter = f"step {total}/{total}"
        self.progress = Progress(  # the first two columns never shrink: the figures a user waits on
            TextColumn("step {task.completed}/{task.total}", table_column=Column(no_wrap=True, min_width=len(counter))),
            TextColumn("{task.fields[elapsed]} left {task.fields[left]}", table_column=Column(no_wrap=True, min_width=20)),
            TextColumn("loss {task.fields[loss]}  PSNR {task.fields[psnr]}  lr {task.fields[lr]}  "
                       "{task.fields[rate]} steps/s", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=2)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),
            console=self.console,
            transient=False,
            disable=quiet or self.plain,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, loss="-", psnr="-", lr="-",
                                           rate="-", elapsed=clock(0), left="-:--:--")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def update(self, step: int, loss: float, psnr: float, lr: float, rate: float) -> None:
        now = time.perf_counter()
        left = (self.total - step) / rate if rate > 0 else float("inf")
        self.progress.update(self.task, completed=step, loss=f"{loss:.3e}", psnr=f"{psnr:.2f} dB",
                             lr=f"{lr:.2e}", rate=f"{rate:.1f}", elapsed=clock(now - self.started), left=clock(left))
        if self.plain and (now - self.last_line >= self.every or step == self.total):
            self.console.print(f"step {step}/{self.total}  elapsed {clock(now - self.started)}  left {clock(left)}  "
                               f"loss {loss:.3e}  PSNR {psnr:.2f} dB  lr {lr:.2e}  {rate:.1f} steps/s",
                               soft_wrap=True, highlight=False, markup=False)
            self.last_line = now


def clock(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
