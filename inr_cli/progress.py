"""Progress on stderr: a training's (step/total, elapsed, time left, loss, PSNR, learning rate,
steps/s) and fit-many's (images done, the step of the pack in flight, time left, images/s, mean PSNR).

On a terminal a Rich line whose first columns (step, elapsed, time left) fit even 80 columns; the
bar takes what room is left. Off a terminal (a batch job, a log file) a plain line every
`every_seconds`, and one at the end.
"""

from __future__ import annotations

import time

import numpy as np
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text

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
    """fit-many's progress: images done (their networks at the target PSNR or the step budget, in a
    shard written or in the pack in flight), elapsed and time left, the step of the pack in flight,
    the mean PSNR of the images written so far, the pack's mean PSNR at its last reading, images/s.

    Fed by the step loop of each pack (pack_started, step, reading) and by each finished shard
    (add); a Ray run reports shards only. The work is counted in network-steps, so time left and
    rate move with the steps, not only when a pack ends. On a terminal a Rich line redrawn by its
    own clock (elapsed moves even while a step runs); off a terminal a plain line at the first
    news, every `every` seconds and at the end."""

    def __init__(self, total: int, done: int, steps: int, quiet: bool, every: float = 5.0, console=None):
        self.total, self.done, self.steps, self.quiet, self.every = total, done, max(steps, 1), quiet, every
        self.console = console or err
        self.started = time.perf_counter()
        self.session_work = 0  # network-steps done by this process
        self.pack_networks = self.pack_step = 0  # the pack in flight (0 networks: none)
        self.settled = 0  # network-steps of networks done in the shard in flight (at their target or the budget)
        self.finished = 0  # networks of the shard in flight that are done, its shard not yet written
        self.pack_psnr = float("nan")
        self.stepwise = False  # whether steps are reported (in-process), or only shards (Ray)
        self.psnr_sum, self.psnr_count = 0.0, 0  # a running mean: the mean of a growing list cost O(images) per shard
        self.last_line: float | None = None
        self.plain = not quiet and not self.console.is_terminal
        self.bar = None
        if not quiet and not self.plain:
            self.bar = Progress(_LiveColumn(lambda: fit_fields(self.fields(), self.console.width - MIN_BAR)),
                                BarColumn(bar_width=None, table_column=Column(ratio=1)), console=self.console)
            self.task = self.bar.add_task("fit", total=total * self.steps, completed=done * self.steps)

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def stop(self) -> None:
        """Leave the line as it is (before a last message, on Ctrl-C): it is not drawn again."""
        if self.bar is not None:
            self.bar.stop()

    def pack_started(self, networks: int, step: int) -> None:
        """A pack of `networks` goes on from `step` (above 0: taken up where an interrupted run saved
        it, or the rest of a pack that some networks left at their target PSNR)."""
        self.stepwise = True
        self.pack_networks, self.pack_step, self.pack_psnr = networks, step, float("nan")

    def networks_finished(self, count: int) -> None:
        """`count` networks left the pack at their target PSNR or at the step budget: they need no more steps."""
        self.settled += count * self.steps
        self.pack_networks -= count
        self.finished += count
        self._show()

    def took_up(self, saved: str, networks: int, step: int, finished: int) -> None:
        """A pack saved in flight by an earlier run is taken up: said once, so that a resume says what
        it goes on from."""
        self.finished += finished
        self.settled += finished * self.steps
        if not self.quiet:
            done = f", {finished} of its networks done already" if finished else ""
            self.console.print(f"taking up the pack saved in {saved}: {networks} networks at step {step} of "
                               f"{self.steps}{done}", soft_wrap=True, highlight=False, markup=False)

    def step(self, step: int) -> None:
        self.session_work += self.pack_networks * (step - self.pack_step)
        self.pack_step = step
        self._show()

    def reading(self, step: int, losses) -> None:
        """The pack's losses read at `step`: its mean PSNR so far."""
        losses = np.asarray(losses, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.pack_psnr = float(np.mean(-10.0 * np.log10(losses)))
        self.step(step)

    def add(self, count: int, psnrs) -> None:
        """`count` images fitted and written, with their PSNRs; the pack in flight, if any, is among them."""
        if not self.stepwise:
            self.session_work += count * self.steps
        self.done += count
        self.pack_networks = self.pack_step = self.settled = self.finished = 0
        psnrs = np.asarray(psnrs, dtype=np.float64)
        self.psnr_sum += float(psnrs.sum())
        self.psnr_count += psnrs.size
        self._show()

    @property
    def work_done(self) -> int:
        return self.done * self.steps + self.settled + self.pack_networks * self.pack_step

    def fields(self) -> list[str]:
        """What the line says, most wanted first (a narrow terminal drops from the end)."""
        elapsed = time.perf_counter() - self.started
        # network-steps; none in the first second, whose few steps (a pack taken up, say) say no rate yet
        per_second = self.session_work / elapsed if elapsed >= RATE_AFTER_SECONDS else 0.0
        left = (self.total * self.steps - self.work_done) / per_second if per_second > 0 else float("inf")
        times = f"{clock(elapsed)} left {clock(left)}" if not self.plain else \
            f"elapsed {clock(elapsed)}  left {clock(left)}"
        fields = [f"images {self.done + self.finished}/{self.total}", times]
        if self.pack_networks:
            fields.append(f"step {self.pack_step}/{self.steps}")
        if self.psnr_count:
            fields.append(f"mean PSNR {self.psnr_sum / self.psnr_count:.2f} dB")
        if self.pack_networks and self.pack_psnr == self.pack_psnr:
            fields.append(f"pack PSNR {self.pack_psnr:.2f} dB")
        fields.append(f"{per_second / self.steps:.3g} images/s" if per_second > 0 else "- images/s")
        return fields

    def _show(self) -> None:
        now = time.perf_counter()
        if self.bar is not None:
            # Called after every step: the bar is moved a few times a second, not at the steps' pace
            # (a small pack on a GPU steps far faster than a redraw).
            if self.last_line is None or now - self.last_line >= BAR_SECONDS or self.pack_networks == 0:
                self.bar.update(self.task, completed=self.work_done)
                self.last_line = now
        elif self.plain:
            if self.last_line is None or now - self.last_line >= self.every or (
                    self.done == self.total and not self.finished):
                self.console.print("  ".join(self.fields()), soft_wrap=True, highlight=False, markup=False)
                self.last_line = now


RATE_AFTER_SECONDS = 1.0  # fit-many's rate and time left are said from this much time on
BAR_SECONDS = 0.1  # between moves of fit-many's bar (its text is redrawn by Rich's own clock)


class _LiveColumn(ProgressColumn):
    """A column whose text is made at each redraw, so that its clock moves between updates."""

    def __init__(self, line):
        super().__init__(table_column=Column(no_wrap=True))
        self.line = line

    def render(self, task) -> Text:
        return Text(self.line())


def clock(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
