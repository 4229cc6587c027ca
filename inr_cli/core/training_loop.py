"""The training loop of `inr train` around a Trainer: run directory, checkpoints, metrics, previews, signals."""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.atomic import atomic_write_text
from inr_cli.backends import get_backend
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.core.comparison import side_by_side, write_previews_animation, write_psnr_svg
from inr_cli.config import Config, to_toml
from inr_cli.console import info, notice
from inr_cli.formats.data import fingerprint
from inr_cli.errors import InrError
from inr_cli.formats.images import PixelImage, save_image
from inr_cli.core.metrics import psnr, psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.sizing import fit_to_image
from inr_cli.progress import TrainingProgress
from inr_cli.core.render import render_float
from inr_cli.core.runs import MetricsLog, RunLock, read_metrics
from inr_cli.core.schedule import cosine_lr
from inr_cli.core.trainer import Trainer


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: save, tell the user how to resume, exit non-zero."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class TrainingDiverged(InrError):
    pass


# The loss is a mean squared error of colours in [0, 1]: a network whose loss grows this many times
# above its first reading (and above BLOWUP_FLOOR) has blown up; a learning rate too high for it.
BLOWUP_FACTOR = 100.0
BLOWUP_FLOOR = 1.0


def blew_up(loss: float, first: float) -> bool:
    if not math.isfinite(loss):
        return True
    reference = first if math.isfinite(first) else loss
    return loss > max(BLOWUP_FLOOR, BLOWUP_FACTOR * reference)


@dataclass
class TrainingResult:
    run_dir: Path
    step: int
    loss: float
    psnr: float
    seconds: float


def run_training(config: Config, image: PixelImage, run_dir: Path, resume_from: ckpt.Checkpoint | None = None,
                 quiet: bool = False) -> TrainingResult:
    notices: list[str] = []
    backend = get_backend(config.training.device, config.training.matmul, notices)
    for message in notices:
        notice(message)
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
        metrics = MetricsLog(run_dir / "metrics.csv", trainer.step_done)
        signals = Signals()
        previous = signals.install()
        try:
            _loop(trainer, config, metrics, save, run_dir, quiet, signals)
        except Interrupted as exc:
            _ignore_signals()
            save(trainer)
            info(f"{exc} at step {trainer.step_done}/{total}: checkpoint saved in {run_dir}. "
                 f"Continue with: inr train --resume {run_dir}")
            raise SystemExit(128 + exc.signum) from None  # 130 for Ctrl-C, 143 for SIGTERM
        finally:
            _restore_signal_handlers(previous)
            metrics.close()
        save(trainer)
        rendered = _write_preview(trainer, run_dir / "render.png")
        _save_quietly(side_by_side(rendered, image.values, psnr=psnr(rendered, image.values)),
                      run_dir / "comparison.png")
        _write_run_pictures(run_dir, rendered)
    loss = float(trainer.loss[0])
    return TrainingResult(run_dir, trainer.step_done, loss, psnr_from_mse(loss), trainer.seconds)


def _loop(trainer: Trainer, config: Config, metrics: MetricsLog, save, run_dir: Path, quiet: bool,
          signals: "Signals") -> None:
    train, opt = config.training, config.optimizer
    total = trainer.total_steps
    last_saved = trainer.step_done
    first_loss = float(trainer.loss[0])  # NaN on a fresh run until the first reading

    def check(loss: float, step: int) -> None:
        if blew_up(loss, first_loss):
            what = f"became {loss}" if not math.isfinite(loss) else f"blew up to {loss:.3g}"
            raise TrainingDiverged(
                f"loss {what} at step {step}; stopped, the last good checkpoint (step {last_saved}) is kept in "
                f"{run_dir}. Try a smaller learning rate, e.g. --lr {opt.lr / 10:g}")

    # Overflow on the way to a NaN loss is caught below, with a better message than NumPy's warning.
    with TrainingProgress(trainer.step_done, total, quiet) as progress, np.errstate(all="ignore"):
        window_start, window_steps = time.perf_counter(), 0
        while trainer.step_done < total:
            signals.in_step = True
            trainer.step()
            signals.in_step = False
            if signals.pending is not None:
                raise Interrupted(signals.pending)
            window_steps += 1
            step = trainer.step_done
            if step % train.log_every == 0 or step == total:
                loss = float(trainer.read_loss()[0])  # the one host synchronisation, at the logging interval
                now = time.perf_counter()
                elapsed = now - window_start
                trainer.seconds += elapsed
                if not math.isfinite(first_loss):
                    first_loss = loss
                check(loss, step)
                lr = cosine_lr(step - 1, total, opt.lr, opt.lr_min)
                metrics.append(step, loss, psnr_from_mse(loss), lr, trainer.seconds)
                progress.update(step, loss, psnr_from_mse(loss), lr, window_steps / max(elapsed, 1e-9))
                window_start, window_steps = now, 0
            if step % train.checkpoint_every == 0 and step < total:
                check(float(trainer.read_loss()[0]), step)  # a checkpoint is only written while the run is sane
                save(trainer)
                last_saved = step
            if train.preview_every and step % train.preview_every == 0 and step < total:
                (run_dir / "previews").mkdir(exist_ok=True)
                _write_preview(trainer, run_dir / "previews" / f"step-{step:06d}.png")


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


class Signals:
    """Ctrl-C and SIGTERM: raised at once, or, inside a step, once the step is whole (an update half
    done would leave the moments ahead of the parameters, and the checkpoint would not resume exactly)."""

    def __init__(self):
        self.in_step = False
        self.pending: int | None = None

    def handler(self, signum, frame):
        if self.in_step:
            self.pending = signum
        else:
            raise Interrupted(signum)

    def install(self) -> dict:
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, self.handler)
            except ValueError:  # not the main thread (e.g. some test runners)
                pass
        return previous


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:
            pass


def _restore_signal_handlers(previous) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
