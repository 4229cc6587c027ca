"""The training loop, one for `inr train` and `inr fit-many`: steps, loss readings, the divergence
check, checkpoints, signals. The trainer it steps carries its backend; what happens around the loop
is the caller's (runs/training.py for `inr train`, sets/packs.py once per pack for fit-many).
"""

from __future__ import annotations

import math
import signal
import time

import numpy as np

from inr_cli.core.trainer import Trainer

# The loss is a mean squared error of colours in [0, 1]. Above BLOWUP_FACTOR times the worse of what
# the network scored at its first step and what drawing the image's mean colour scores (and above
# BLOWUP_FLOOR) it has blown up, and training stops at once. A run of JUDGED_STEPS or more that ends
# above UNLEARNED_FACTOR times the mean colour's score (and UNLEARNED_FLOOR) learned nothing. Both
# say the learning rate is too high for it.
BLOWUP_FACTOR, BLOWUP_FLOOR = 100.0, 1.0
UNLEARNED_FACTOR, UNLEARNED_FLOOR, JUDGED_STEPS = 2.0, 1e-3, 100
INTERRUPTING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP: save what can be saved, say how to go on, exit 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Diverged(Exception):
    """Networks whose loss blew up during training (`ended` False) or ended far above their reference."""

    def __init__(self, step: int, which: np.ndarray, losses: np.ndarray, reference: np.ndarray, ended: bool):
        super().__init__(f"diverged at step {step}")
        self.step, self.which, self.losses, self.reference, self.ended = step, which, losses, reference, ended

    def spread(self, rows: np.ndarray, count: int) -> "Diverged":
        """The same, for `count` networks of which these were `rows` (the rest read as sane)."""
        def full(values, fill):
            out = np.full(count, fill, dtype=np.asarray(values).dtype)
            out[rows] = values
            return out

        return Diverged(self.step, full(self.which, False), full(self.losses, np.nan), full(self.reference, np.nan),
                        self.ended)

    def describe(self, i: int = 0) -> str:
        loss = self.losses[i]
        what = f"became {loss}" if not math.isfinite(loss) else f"reached {loss:.3g}"
        if self.ended:
            return (f"the loss ended at {loss:.3g}, far worse than drawing the image's mean colour "
                    f"({self.reference[i]:.3g}): the network learned nothing")
        return f"the loss {what} at step {self.step} (it started at {self.reference[i]:.3g}): training blew up"


class DivergenceGuard:
    def __init__(self, trainer: Trainer):
        self.mean_colour = trainer.mean_colour_loss
        self.reference = None  # set by the first reading

    def keep(self, rows: np.ndarray) -> None:
        """Go on watching only these networks (a mask or indices), with what each started from."""
        self.mean_colour = self.mean_colour[rows]
        if self.reference is not None:
            self.reference = self.reference[rows]

    def check(self, step: int, losses: np.ndarray, ended: bool = False) -> None:
        if self.reference is None:
            self.reference = np.maximum(np.nan_to_num(losses, nan=0.0, posinf=0.0), self.mean_colour)
        if ended:
            reference, factor, floor = self.mean_colour, UNLEARNED_FACTOR, UNLEARNED_FLOOR
        else:
            reference, factor, floor = self.reference, BLOWUP_FACTOR, BLOWUP_FLOOR
        with np.errstate(invalid="ignore"):
            which = ~np.isfinite(losses) | (losses > np.maximum(floor, factor * reference))
        if which.any():
            raise Diverged(step, which, losses, reference, ended)


class Signals:
    """Interrupting signals, raised as Interrupted at once, or, inside a step, once the step is whole
    and its loss read if due (an update half done would leave the moments ahead of the parameters,
    and the checkpoint would not resume exactly). A context: the previous handlers come back on exit.

    at_once False: a signal is only noted, and acted on where the command calls check() (the loop
    does after every step). A command whose loop shares locks with a thread of its own (the run's
    background writer) needs this: an exception raised inside a lock's Python code (a Condition's
    __exit__) leaves the lock held, and the thread, then the command's end, waits for ever."""

    def __init__(self, at_once: bool = True):
        self.at_once = at_once
        self.in_step = False
        self.pending: int | None = None
        self.previous: dict = {}

    def handler(self, signum, frame):
        if self.in_step or not self.at_once:
            self.pending = signum
        else:
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise Interrupted for a signal noted and not yet acted on."""
        if self.pending is not None:
            raise Interrupted(self.pending)

    def __enter__(self):
        for sig in INTERRUPTING_SIGNALS:
            try:
                self.previous[sig] = signal.signal(sig, self.handler)
            except ValueError:  # not the main thread (e.g. some test runners)
                pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def ignore(self) -> None:
        """While the last checkpoint is written: a second Ctrl-C must not cut it short."""
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)


def reached_target(losses: np.ndarray, target_psnr: float) -> np.ndarray:
    """Which networks' training PSNR is at or above target_psnr dB (none when the target is 0: off)."""
    if not target_psnr:
        return np.zeros(len(losses), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -10.0 * np.log10(np.asarray(losses, dtype=np.float64)) >= target_psnr


def run_steps(trainer: Trainer, signals: Signals, log_every: int, on_reading=None, on_step=None,
              checkpoint=None, checkpoint_every: int = 0, checkpoint_seconds: float = 0.0,
              target_psnr: float = 0.0, guard: DivergenceGuard | None = None, can_checkpoint=None) -> np.ndarray:
    """Step the trainer to its total and return the last losses.

    The losses are read (the one host synchronisation) after the first step, every `log_every`
    steps and after the last; each reading is checked for divergence (Diverged) and handed to
    on_reading(step, losses, steps_per_second). on_step(step) runs after every step (previews).
    checkpoint(step) runs every `checkpoint_every` steps and whenever `checkpoint_seconds` have
    passed since the last one, each time after a reading that shows the run sane. A checkpoint that
    cannot be taken now (can_checkpoint() False, or checkpoint(step) returning False: its memory is
    still being written) is taken at the first step after that where it can, the loop never waiting.

    With a target_psnr, a reading at a multiple of `log_every` where any network has reached it
    ends the loop early (the caller sees which through reached_target): the stopping step is then a
    function of the step alone, so a resumed run stops where an uninterrupted one would. A guard
    carried over from an earlier call keeps judging divergence from the networks' own start."""
    total = trainer.total_steps
    guard = guard or DivergenceGuard(trainer)
    owed = False  # a checkpoint fell due and could not be taken yet
    last_saved, last_reading = time.perf_counter(), (trainer.step_done, trainer.seconds)
    losses = trainer.loss

    def read(step: int, ended: bool = False) -> np.ndarray:
        nonlocal last_reading
        losses = trainer.read_loss()
        guard.check(step, losses)
        steps, seconds = step - last_reading[0], trainer.seconds - last_reading[1]
        last_reading = (step, trainer.seconds)
        if on_reading is not None:
            on_reading(step, losses, steps / max(seconds, 1e-9))
        if ended:
            guard.check(step, losses, ended=True)
        return losses

    # Overflow on the way to a NaN loss is caught by the guard, with a better message than NumPy's.
    with np.errstate(all="ignore"):
        first = trainer.step_done
        while trainer.step_done < total:
            signals.check()  # one noted during the last step's previews or checkpoint (at_once False)
            signals.in_step = True
            trainer.step()
            signals.in_step = False
            step = trainer.step_done
            read_now = step == first + 1 or step % log_every == 0 or step == total
            # A signal in the step is acted on after its reading: a checkpoint then holds this step's
            # loss, and a target reached at it ends the loop as it would uninterrupted (a resumed run
            # never checks the step it starts from).
            if read_now:
                losses = read(step, ended=step == total and total >= JUDGED_STEPS)
                if step % log_every == 0 and step < total and reached_target(losses, target_psnr).any():
                    return losses
            signals.check()
            if on_step is not None:
                on_step(step)
            if checkpoint is not None and step < total:
                due = owed or (checkpoint_every and step % checkpoint_every == 0) or (
                    checkpoint_seconds and time.perf_counter() - last_saved >= checkpoint_seconds)
                owed = bool(due)
                if due and (can_checkpoint is None or can_checkpoint()):
                    if not read_now:  # a checkpoint is only written while the run is sane
                        losses = read(step)
                    if checkpoint(step) is not False:
                        owed = False
                        trainer.pause_clock()
                        last_saved = time.perf_counter()
    return losses
