"""Progress on stderr: a training's (step/total, elapsed, time left, loss, PSNR, learning rate,
steps/s) and fit-many's (images done, images/s, time left, mean PSNR).

On a terminal a Rich line whose first columns (step, elapsed, time left) fit even 80 columns; the
bar takes what room is left. Off a terminal (a batch job, a log file) a plain line every
`every_seconds`, and one at the end.
"""

from __future__ import annotations

import time

import numpy as np

from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Column

from inr_cli.console import err


class TrainingProgress:
    """One status line, built to fit the console: the step and the times always, then PSNR, speed,
    loss and learning rate while they fit whole (a field is dropped, never cut), and a bar in
    what room is left."""

    def __init__(self, start: int, total: int, quiet: bool, every_seconds: float = 5.0, console=None):
        self.quiet = quiet
        self.console = console or err
        self.total = total
        self.every = every_seconds
        self.started = time.perf_counter()
        self.last_line = None
        self.plain = not quiet and not self.console.is_terminal
        self.progress = Progress(
            TextColumn("{task.fields[status]}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),
            console=self.console,
            transient=False,
            disable=quiet or self.plain,
        )
        self.task = self.progress.add_task("train", total=total, completed=start,
                                           status=f"step {start}/{total}  {clock(0)} left -:--:--")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def stop(self) -> None:
        """Leave the line as it is (before a last message, on Ctrl-C): it is not drawn again."""
        self.progress.stop()

    def update(self, step: int, loss: float, psnr: float, lr: float, rate: float) -> None:
        now = time.perf_counter()
        left = (self.total - step) / rate if rate > 0 else float("inf")
        fields = [f"step {step}/{self.total}", f"{clock(now - self.started)} left {clock(left)}",
                  f"PSNR {psnr:.2f} dB", f"{rate:.1f} steps/s", f"loss {loss:.3e}", f"lr {lr:.2e}"]
        if self.plain:
            if self.last_line is None or now - self.last_line >= self.every or step == self.total:
                fields[1] = f"elapsed {clock(now - self.started)}  left {clock(left)}"
                self.console.print("  ".join(fields), soft_wrap=True, highlight=False, markup=False)
                self.last_line = now
            return
        self.progress.update(self.task, completed=step, status=fit_fields(fields, self.console.width - MIN_BAR))


MIN_BAR = 12  # columns kept for the bar (and the table's padding) when the fields are laid out


def fit_fields(fields: list[str], width: int) -> str:
    """The first two fields always, then each next one while the line stays within `width`."""
    line = "  ".join(fields[:2])
    for field in fields[2:]:
        if len(line) + 2 + len(field) > width:
            break
        line += "  " + field
    return line


class ImageProgress:
    """Images done, images/s, time left and mean PSNR so far: a Rich bar on a terminal, else a plain
    line every `every` seconds (batch jobs, logs)."""

    def __init__(self, total: int, done: int, quiet: bool, every: float = 10.0):
        self.total, self.done, self.quiet, self.every = total, done, quiet, every
        self.start_done, self.start = done, time.perf_counter()
        self.psnr_sum, self.psnr_count = 0.0, 0  # a running mean: the mean of a growing list cost O(images) per shard
        self.last_line = self.start
        self.console = err
        self.bar = None
        if not quiet and err.is_terminal:
            counter = f"images {total}/{total}"
            self.bar = Progress(  # counts and times first and never squeezed, as in training's progress
                TextColumn("images {task.completed}/{task.total}", table_column=Column(no_wrap=True,
                                                                                      min_width=len(counter))),
                TextColumn("{task.fields[elapsed]} left {task.fields[left]}", table_column=Column(no_wrap=True,
                                                                                                min_width=20)),
                TextColumn("{task.fields[rate]} images/s  mean PSNR {task.fields[psnr]}",
                           table_column=Column(no_wrap=True, overflow="ellipsis", ratio=2)),
                BarColumn(bar_width=None, table_column=Column(ratio=1)), console=err)
            self.task = self.bar.add_task("fit", total=total, completed=done, rate="-", psnr="-",
                                          elapsed=clock(0), left="-:--:--")

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def add(self, count: int, psnrs) -> None:
        self.done += count
        psnrs = np.asarray(psnrs, dtype=np.float64)
        self.psnr_sum += float(psnrs.sum())
        self.psnr_count += psnrs.size
        elapsed = time.perf_counter() - self.start
        rate = (self.done - self.start_done) / max(elapsed, 1e-9)
        mean = self.psnr_sum / self.psnr_count if self.psnr_count else float("nan")
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, rate=f"{rate:.1f}", psnr=f"{mean:.2f} dB",
                            elapsed=clock(elapsed), left=clock(left))
        elif not self.quiet and (time.perf_counter() - self.last_line >= self.every or self.done == self.total):
            self.console.print(f"images {self.done}/{self.total}  {rate:.1f} images/s  mean PSNR {mean:.2f} dB  "
                               f"elapsed {clock(elapsed)}  left {clock(left)}", soft_wrap=True, highlight=False)
            self.last_line = time.perf_counter()


def clock(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
