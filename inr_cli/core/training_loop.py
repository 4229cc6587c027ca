"""The training loop, one for `inr train` and `inr fit-many`: steps, loss readings, the divergence
check, checkpoints, signals. `run_training` wraps it for `inr train` (run directory, metrics,
previews, pictures); fit-many runs it once per pack (sets/fit_many.py).
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.backends import make_backend
from inr_cli.config import Config, to_toml
from inr_cli.console import info, notice
from inr_cli.core.comparison import side_by_side, write_previews_animation, write_psnr_svg
from inr_cli.core.metrics import psnr, psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.render import render_float
from inr_cli.core.runs import MetricsLog, RunLock, read_metrics
from inr_cli.core.schedule import cosine_lr
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.trainer import Trainer
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.atomic import atomic_write_text
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.formats.data import fingerprint
from inr_cli.formats.images import PixelImage, save_image
from inr_cli.progress import TrainingProgress

# The loss is a mean squared error of colours in [0, 1]. Above BLOWUP_FACTOR times the worse of what
# the network scored at its first step and what drawing the image's mean colour scores (and above
# BLOWUP_FLOOR) it has blown up, and training stops at once. A run of JUDGED_STEPS or more that ends
# above UNLEARNED_FACTOR times the mean colour's score (and UNLEARNED_FLOOR) learned nothing. Both
# say the learning rate is too high for it.
BLOWUP_FACTOR, BLOWUP_FLOOR = 100.0, 1.0
UNLEARNED_FACTOR, UNLEARNED_FLOOR, JUDGED_STEPS = 2.0, 1e-3, 100
# A full-batch run whose steps would take longer than this gets a hint to shrink the image or batch.
SLOW_RUN_SECONDS = 600.0
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
    (an update half done would leave the moments ahead of the parameters, and the checkpoint would
    not resume exactly). A context: the previous handlers come back on exit."""

    def __init__(self):
        self.in_step = False
        self.pending: int | None = None
        self.previous: dict = {}

    def handler(self, signum, frame):
        if self.in_step:
            self.pending = signum
        else:
            raise Interrupted(signum)

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


def run_steps(trainer: Trainer, signals: Signals, log_every: int, on_reading=None, on_step=None,
              checkpoint=None, checkpoint_every: int = 0, checkpoint_seconds: float = 0.0) -> np.ndarray:
    """Step the trainer to its total and return the last losses.

    The losses are read (the one host synchronisation) after the first step, every `log_every`
    steps and after the last; each reading is checked for divergence (Diverged) and handed to
    on_reading(step, losses, steps_per_second). on_step(step) runs after every step (previews).
    checkpoint(step) runs every `checkpoint_every` steps and whenever `checkpoint_seconds` have
    passed since the last one, each time after a reading that shows the run sane."""
    total = trainer.total_steps
    guard = DivergenceGuard(trainer)
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
            signals.in_step = True
            trainer.step()
            signals.in_step = False
            if signals.pending is not None:
                raise Interrupted(signals.pending)
            step = trainer.step_done
            read_now = step == first + 1 or step % log_every == 0 or step == total
            if read_now:
                losses = read(step, ended=step == total and total >= JUDGED_STEPS)
            if on_step is not None:
                on_step(step)
            if checkpoint is not None and step < total:
                due = (checkpoint_every and step % checkpoint_every == 0) or (
                    checkpoint_seconds and time.perf_counter() - last_saved >= checkpoint_seconds)
                if due:
                    if not read_now:  # a checkpoint is only written while the run is sane
                        losses = read(step)
                    checkpoint(step)
                    trainer.pause_clock()
                    last_saved = time.perf_counter()
    return losses


def slow_run_hint(seconds_per_step: float, steps_left: int, full_batch: bool, pixels: int) -> str | None:
    """A hint when a full-batch run would take long: most of its time goes into the pixel count."""
    if not full_batch or seconds_per_step * steps_left < SLOW_RUN_SECONDS:
        return None
    return (f"each step takes {seconds_per_step:.1f} s on {pixels:,} pixels, about {seconds_per_step * steps_left / 60:.0f} "
            f"min for the {steps_left} steps left; --size 512 (a smaller image) or --batch-size 65536 (random "
            f"pixels per step) train much faster")


def preview_interval(preview_every: int, total: int) -> int:
    """Steps between previews: the configured interval, or, for a run too short to reach it, a
    quarter of the run (a short run still shows how its picture formed)."""
    if not preview_every:
        return 0
    return preview_every if preview_every < total else max(1, math.ceil(total / 4))


@dataclass
class TrainingResult:
    run_dir: Path
    step: int
    loss: float
    psnr: float
    seconds: float


def run_training(config: Config, image: PixelImage, run_dir: Path, resume_from: ckpt.Checkpoint | None = None,
                 quiet: bool = False) -> TrainingResult:
    """`inr train`: a run directory, its checkpoints, metrics, previews and pictures, around the loop."""
    backend = make_backend(config.training.device, config.training.matmul, quiet)
    seed = config.training.seed
    if resume_from is not None:
        spec, state = resume_from.spec, resume_from.state
    else:
        config, reasons = fit_to_image(config, image.width, image.height)
        for reason in reasons if not quiet else ():
            info(reason)
        spec = NetworkSpec.from_config(config, image.n_channels)
        state = TrainingState.fresh(spec, [seed], output_means(config, [image]))
    data_id = fingerprint(image)
    total = config.training.steps
    train = config.training

    def save(trainer: Trainer) -> None:
        checkpoint = ckpt.Checkpoint(spec=spec, config=config, state=trainer.state(), total_steps=total,
                                     data_fingerprint=data_id, data_shape=(image.height, image.width, image.n_channels),
                                     channels=image.channels)
        try:
            ckpt.save(checkpoint, run_dir / ckpt.FILENAME)
        except OSError as exc:
            raise InrError(f"cannot write the checkpoint in {run_dir} ({exc.strerror or exc}); "
                           f"the previous checkpoint is intact") from None

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InrError(f"cannot create the run directory {run_dir} ({exc.strerror})") from None
    with RunLock(run_dir):
        # A process killed mid-write leaves its temporary file behind; the rename never happened,
        # so checkpoint.npz is the last complete one and the leftovers can go.
        for leftover in run_dir.glob(f".{ckpt.FILENAME}.*.tmp"):
            leftover.unlink(missing_ok=True)
        try:
            atomic_write_text(run_dir / "config.toml", to_toml(config))
        except OSError as exc:
            raise InrError(f"cannot write to the run directory {run_dir} ({exc.strerror})") from None
        trainer = Trainer(backend, spec, config, [image], state, [seed])
        if resume_from is None:
            save(trainer)
        last_saved = {"step": trainer.step_done}
        previews = preview_interval(train.preview_every, total)
        hinted = {"done": False}

        def on_reading(step, losses, rate):
            loss = float(losses[0])
            lr = cosine_lr(step - 1, total, config.optimizer.lr, config.optimizer.lr_min)
            if step % train.log_every == 0 or step == total:  # the table keeps to its interval
                metrics.append(step, loss, psnr_from_mse(loss), lr, trainer.seconds)
            progress.update(step, loss, psnr_from_mse(loss), lr, rate)
            if not hinted["done"] and not quiet:
                hinted["done"] = True
                hint = slow_run_hint(1 / max(rate, 1e-9), total - step, trainer.full_batch, image.width * image.height)
                if hint:
                    notice(hint)

        def on_step(step):
            if previews and step % previews == 0 and step < total:
                (run_dir / "previews").mkdir(exist_ok=True)
                _write_preview(trainer, run_dir / "previews" / f"step-{step:06d}.png")
                trainer.pause_clock()

        def checkpoint(step):
            save(trainer)
            last_saved["step"] = step

        metrics = MetricsLog(run_dir / "metrics.csv", trainer.step_done)
        try:
            with Signals() as signals, TrainingProgress(trainer.step_done, total, quiet) as progress:
                try:
                    run_steps(trainer, signals, train.log_every, on_reading, on_step, checkpoint,
                              train.checkpoint_every, train.checkpoint_seconds)
                except Interrupted as exc:
                    signals.ignore()
                    progress.stop()
                    save(trainer)
                    info(f"{exc} at step {trainer.step_done}/{total}: checkpoint saved in {run_dir}. "
                         f"Continue with: inr train --resume {run_dir}")
                    raise SystemExit(128 + exc.signum) from None  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
        except Diverged as exc:
            if not exc.ended:
                raise InrError(f"{exc.describe()}; stopped, the last good checkpoint (step {last_saved['step']}) is "
                               f"kept in {run_dir}. Try a smaller learning rate, e.g. --lr {config.optimizer.lr / 10:g}"
                               ) from None
            ended = exc
        else:
            ended = None
        finally:
            metrics.close()
        save(trainer)
        rendered = _write_preview(trainer, run_dir / "render.png")
        _save_quietly(side_by_side(rendered, image.values, psnr=psnr(rendered, image.values)),
                      run_dir / "comparison.png")
        _write_run_pictures(run_dir, rendered)
    if ended is not None:
        raise InrError(f"{ended.describe()} (the run is saved in {run_dir}). Try a smaller learning rate, e.g. "
                       f"--lr {config.optimizer.lr / 10:g}")
    loss = float(trainer.loss[0])
    return TrainingResult(run_dir, trainer.step_done, loss, psnr_from_mse(loss), trainer.seconds)


def _write_preview(trainer: Trainer, path: Path) -> np.ndarray:
    """The current network drawn at the training size; a failure to write it only warns."""
    values = render_float(trainer.backend, trainer.spec, trainer.params[:1], trainer.width, trainer.height)
    _save_quietly(PixelImage(values, trainer.channels), path)
    return values


def _write_run_pictures(run_dir: Path, rendered: np.ndarray) -> None:
    """psnr.svg from metrics.csv and previews.png (the previews and the final render, animated)."""
    try:
        write_psnr_svg(read_metrics(run_dir), run_dir / "psnr.svg")
        frames = sorted((run_dir / "previews").glob("step-*.png")) + [run_dir / "render.png"]
        write_previews_animation(frames, run_dir / "previews.png")
    except (OSError, ValueError) as exc:  # pictures are a convenience: a failure only warns
        notice(f"could not write the run's pictures in {run_dir}: {exc}")


def _save_quietly(image: PixelImage, path: Path) -> None:
    try:
        save_image(image, path)
    except (InrError, OSError) as exc:
        notice(f"could not write {path}: {exc}")
