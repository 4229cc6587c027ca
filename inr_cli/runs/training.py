"""The training of one `inr train` run: its directory, checkpoints, metrics, previews and pictures
around the core's step loop (core/training_loop.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from inr_cli.backends import kernel_options, make_backend
from inr_cli.config import Config, build_config, to_toml, tuned_preset
from inr_cli.console import info, notice
from inr_cli.core.memory import check_training
from inr_cli.core.metrics import psnr, psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.pixels import PixelImage, as_floats
from inr_cli.core.render import render_float, render_strided
from inr_cli.core.schedule import learning_rate
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.state import TrainingState
from inr_cli.core.subset_psnr import PixelSubset
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Interrupted, Signals, run_steps
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.atomic import atomic_write_text
from inr_cli.formats.data import fingerprint
from inr_cli.formats.npz import CHUNK_BYTES
from inr_cli.formats.start import initial_state
from inr_cli.limits import preview_factor, shrink_factor
from inr_cli.progress import TrainingProgress
from inr_cli.runs.directory import BLEW_UP, RunLock
from inr_cli.runs.metrics_csv import MetricsLog, read_metrics
from inr_cli.runs.pictures import (
    side_by_side,
    to_uint8,
    write_picture,
    write_previews_animation,
    write_psnr_svg,
)
from inr_cli.runs.snapshots import Snapshots
from inr_cli.runs.wall_time import WallTime
from inr_cli.runs.writer import BackgroundWriter

# A full-batch run whose steps would take longer than this gets a hint to shrink the image or batch.
SLOW_RUN_SECONDS = 600.0


def slow_run_hint(seconds_per_step: float, steps_left: int, full_batch: bool, pixels: int) -> str | None:
    """A hint when a full-batch run would take long: most of its time goes into the pixel count."""
    if not full_batch or seconds_per_step * steps_left < SLOW_RUN_SECONDS:
        return None
    return (f"each step takes {seconds_per_step:.1f} s on {pixels:,} pixels, about "
            f"{seconds_per_step * steps_left / 60:.0f} min for the {steps_left} steps left; --size 512 (a smaller "
            f"image) or --batch-size 65536 (random pixels per step) train much faster")


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
    psnr: float  # of the last training batch
    seconds: float
    image_psnr: float = float("nan")  # the whole image's, drawn by the final network (core/subset_psnr.py)
    image_psnr_read: str = ""  # how: "" on every pixel, else on which subset
    wall: WallTime | None = None  # where the run's wall time went (None: a run stopped by a signal)
    picture_factor: int = 1  # render.png and comparison.png show every k-th pixel of the image
    image_size: tuple[int, int] = (0, 0)


class RunInterrupted(SystemExit):
    """A run stopped by a signal, its checkpoint saved: exits 128 + the signal, carrying what was
    saved so that `inr train` can print its run directory as a finished run does."""

    def __init__(self, signal_name: str, signum: int, result: TrainingResult):
        super().__init__(128 + signum)  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
        self.signal_name, self.result = signal_name, result


class BlewUp(Exception):
    """Training blew up (core's Diverged, not `ended`): said once the run directory is unlocked."""

    def __init__(self, diverged: Diverged, last_saved: int, config: Config):
        super().__init__(diverged.describe())
        self.last_saved, self.config = last_saved, config


def run_training(config: Config, image: PixelImage, run_dir: Path, resume_from: ckpt.Checkpoint | None = None,
                 quiet: bool = False, wall: WallTime | None = None) -> TrainingResult:
    """`inr train`: a run directory, its checkpoints, metrics, previews and pictures, around the loop.
    wall: the run's wall time, started where the command started (reading the image counted)."""
    created = not run_dir.exists()
    wrote = []  # not empty once this run has written its files in run_dir
    try:
        return _run_training(config, image, run_dir, resume_from, quiet, wall or WallTime(), wrote)
    except BlewUp as exc:
        raise InrError(_after_blowing_up(exc, run_dir, created, new_run=resume_from is None)) from None
    except InrError as exc:
        # A new run that failed before its first checkpoint was written (a full disk) holds nothing
        # to resume: its files go, and the same command starts it again.
        if resume_from is None and wrote and not (run_dir / ckpt.FILENAME).is_file():
            _remove_run(run_dir, created)
            raise InrError(f"{exc}; nothing was saved, so {run_dir} is removed") from None
        raise


def _after_blowing_up(exc: BlewUp, run_dir: Path, created: bool, new_run: bool) -> str:
    """What is left of a run that blew up, and the rate to try. A new run with nothing saved past its
    start is removed (the same command at a better rate starts it again); a run with a good
    checkpoint is kept, marked so that a bare `inr train --resume`, which would blow up the same way,
    passes it by."""
    advice = f"train again with {suggested_rate(exc.config)}"
    if new_run and exc.last_saved == 0:
        _remove_run(run_dir, created)
        return f"{exc}; nothing learned was saved, so {run_dir} is removed: {advice}"
    try:
        (run_dir / BLEW_UP).write_text(f"{exc}\n")
    except OSError:
        pass  # the marker only steers a bare --resume; the run itself is intact
    return (f"{exc}; stopped, the last good checkpoint (step {exc.last_saved}) is kept in {run_dir} (a bare "
            f"inr train --resume passes it by: it would blow up again at this rate); {advice}")


def suggested_rate(config: Config) -> str:
    """A learning rate to try after this one blew up or learned nothing: the rate of the preset tuned
    for this network (a hash grid's, else its model's), when this one is higher, else a tenth of this one."""
    preset = tuned_preset(config)
    tuned = build_config(None, {}, preset).optimizer.lr
    if config.optimizer.lr > tuned:
        return f"--lr {tuned:g} (the {preset} preset's rate)"
    return f"a smaller learning rate, e.g. --lr {config.optimizer.lr / 10:g}"


def _remove_run(run_dir: Path, created: bool) -> None:
    """The files a new run wrote, and its folder when this run made it and nothing else is in it."""
    try:
        for name in ("config.toml", ckpt.FILENAME, "metrics.csv", RunLock(run_dir).path.name):
            (run_dir / name).unlink(missing_ok=True)
        for preview in (run_dir / "previews").glob("step-*.png"):
            preview.unlink()
        for folder in (run_dir / "previews", run_dir) if created else (run_dir / "previews",):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    except OSError:
        pass  # left as it was: the run is unfinished, and a bare --resume would say what it holds


def _run_training(config: Config, image: PixelImage, run_dir: Path, resume_from: ckpt.Checkpoint | None,
                  quiet: bool, wall: WallTime, wrote: list) -> TrainingResult:
    backend = make_backend(config.training.device, quiet=quiet, **kernel_options(config.training))
    seed = config.training.seed
    if resume_from is not None:
        spec, state = resume_from.spec, resume_from.state
        check_training(spec, config, image.width, image.height, 1, backend, value_bytes=image.pixels.itemsize,
                       snapshots=True)
    else:
        config, reasons = fit_to_image(config, image.width, image.height, image.n_channels)
        for reason in reasons if not quiet else ():
            info(reason)
        spec = NetworkSpec.from_config(config, image.n_channels)
        check_training(spec, config, image.width, image.height, 1, backend,  # before a parameter is drawn
                       value_bytes=image.pixels.itemsize, snapshots=True)
        state = fresh_state(config, spec, image)
    with wall.phase("reading"):
        data_id = fingerprint(image)
        # A large image is never drawn whole at the end: its PSNR from a subset of its pixels, gathered now.
        subset = PixelSubset.of(image) if shrink_factor(image.width, image.height) > 1 else None
    total = config.training.steps
    train = config.training

    def checkpoint_of(state: TrainingState) -> ckpt.Checkpoint:
        return ckpt.Checkpoint(spec=spec, config=config, state=state, total_steps=total, data_fingerprint=data_id,
                               data_shape=(image.height, image.width, image.n_channels), channels=image.channels)

    def save(trainer: Trainer) -> bool:
        """The trainer's state now, copied on its device into a snapshot (runs/snapshots.py) and
        written by the writer while the next steps run; False while every snapshot is being written."""
        with wall.phase("checkpoints"):
            return snapshots.take(trainer, lambda state, read: write_checkpoint(checkpoint_of(state), run_dir,
                                                                                 "float32", read))

    def save_last(trainer: Trainer, final: bool = False) -> None:
        """The trainer's state as the steps left it, written by the writer from the trainer's own arrays
        (nothing copies them: the steps are over); the run's last (final) in network.dtype, its
        parameters rounded to it in the trainer too, so that the run's pictures draw the network the
        file holds."""
        with wall.phase("checkpoints"):
            dtype = config.network.dtype if final else "float32"
            if dtype != "float32":
                round_in_place(trainer.backend, trainer.params, ckpt.STORED_DTYPES[dtype])
            writer.submit(partial(write_checkpoint, checkpoint_of(trainer.device_state()), run_dir, dtype,
                                  trainer.backend.host_reader()), "checkpoints", latest_only=True)

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InrError(f"cannot create the run directory {run_dir} ({exc.strerror})") from None
    with RunLock(run_dir), BackgroundWriter(on_wait=wall.writer_waited) as writer:
        # A process killed mid-write leaves its temporary file behind; the rename never happened,
        # so checkpoint.npz is the last complete one and the leftovers can go.
        for leftover in run_dir.glob(f".{ckpt.FILENAME}.*.tmp"):
            leftover.unlink(missing_ok=True)
        (run_dir / BLEW_UP).unlink(missing_ok=True)  # a run resumed by its name is given its chance again
        try:
            wrote.append("config.toml")
            atomic_write_text(run_dir / "config.toml", to_toml(config))
        except OSError as exc:
            raise InrError(f"cannot write to the run directory {run_dir} ({exc.strerror})") from None
        trainer = Trainer(backend, spec, config, [image], state, [seed])
        snapshots = Snapshots(backend, trainer.params.shape, writer)
        # The trainer holds the run's state from here on: the start's copy goes, which for a resume is
        # the checkpoint read (parameters and both moments: three times a large table, for the run).
        start_seconds = state.seconds
        del state
        if resume_from is None:
            save(trainer)
        else:
            resume_from.state = None
        last_saved = {"step": trainer.step_done}
        previews = preview_interval(train.preview_every, total)
        preview_k = preview_factor(image.width, image.height)
        hinted = {"done": False}
        opt = config.optimizer

        # A reading's bookkeeping (metrics row, progress line) waits until the next step is launched:
        # on a GPU the device runs that step meanwhile instead of waiting for the host. A checkpoint,
        # the loop's end and an interrupt settle it first.
        readings = []

        def on_reading(step, losses, rate):
            readings.append((step, losses, rate))

        def settle():
            while readings:
                record(*readings.pop(0))

        def record(step, losses, rate):
            loss = float(losses[0])
            lr = learning_rate(step - 1, total, opt.lr, opt.lr_min, opt.warmup)
            if step % train.log_every == 0 or step == total:  # the table keeps to its interval
                metrics.append(step, loss, psnr_from_mse(loss), lr, trainer.seconds)
            progress.update(step, loss, psnr_from_mse(loss), lr, rate)
            if not hinted["done"] and not quiet:
                hinted["done"] = True
                hint = slow_run_hint(1 / max(rate, 1e-9), total - step, trainer.full_batch, image.width * image.height)
                if hint:
                    notice(hint)

        def on_step(step):
            if readings and readings[-1][0] < step:  # this step is launched: the last reading's turn
                settle()
            writer.check()  # a checkpoint the writer could not write stops the run here
            if previews and step % previews == 0 and step < total:
                trainer.count_time()
                with wall.phase("pictures"):
                    pixels = to_uint8(_draw(trainer, preview_k))
                    (run_dir / "previews").mkdir(exist_ok=True)
                    # One thread: on the CPU the steps have the other cores.
                    writer.submit(partial(write_picture, pixels, run_dir / "previews" / f"step-{step:06d}.png", 1),
                                  "pictures", warn_only=True)
                trainer.pause_clock()

        def checkpoint(step):
            settle()  # its metrics row before it
            if not save(trainer):
                return False
            last_saved["step"] = step

        metrics = MetricsLog(run_dir / "metrics.csv", trainer.step_done)
        trainer.pause_clock()  # the first checkpoint and the metrics are not training
        k = shrink_factor(image.width, image.height)
        finished = False  # the last checkpoint handed to the writer, the trainer's memory let go
        # Signals are acted on between the steps and the pictures, never inside the writer's locks.
        with Signals(at_once=False) as signals, TrainingProgress(trainer.step_done, total, quiet) as progress:
            try:
                try:
                    run_steps(trainer, signals, train.log_every, on_reading, on_step, checkpoint,
                              train.checkpoint_every, train.checkpoint_seconds, train.target_psnr,
                              can_checkpoint=snapshots.ready)
                except Diverged as exc:
                    if not exc.ended:
                        writer.drain()  # the last good checkpoint is on disk before the run says so
                        raise BlewUp(exc, last_saved["step"], config) from None
                    ended = exc
                else:
                    ended = None
                finally:
                    settle()
                    metrics.close()
                signals.check()
                save_last(trainer, final=True)
                finished = True
                snapshots.release()
                trainer.release_training_memory()  # room for the final render of a large image
                signals.check()
                with wall.phase("pictures"):
                    values = _draw(trainer, k)
                    signals.check()
                    if subset is None:  # drawn whole: its PSNR exactly, from the final render
                        image_psnr, psnr_read = psnr(values, image.values), ""
                    else:
                        image_psnr, psnr_read = subset.psnr(backend, spec, trainer.params[:1]), subset.describe()
                    _write_final_pictures(values, image, run_dir, k, image_psnr, writer)
                writer.drain()
                signals.check()
            except Interrupted as exc:
                signals.ignore()  # a second Ctrl-C must not cut the last checkpoint short
                progress.stop()
                if not finished:
                    save_last(trainer)
                writer.drain()
                if finished:
                    info(f"{exc} while drawing the final pictures: the checkpoint of step {trainer.step_done} is saved "
                         f"in {run_dir}; inr render {run_dir} draws it")
                else:
                    info(f"{exc} at step {trainer.step_done}/{total}: checkpoint saved in {run_dir}. "
                         f"Continue with: inr train --resume {run_dir}")
                loss = float(trainer.loss[0])
                raise RunInterrupted(str(exc), exc.signum, TrainingResult(
                    run_dir, trainer.step_done, loss, psnr_from_mse(loss), trainer.seconds)) from None
    if ended is not None:
        raise InrError(f"{ended.describe()} (the run is saved in {run_dir}); train again with "
                       f"{suggested_rate(config)}")
    loss = float(trainer.loss[0])
    if trainer.step_done < total and not quiet:
        info(f"reached {train.target_psnr:g} dB (--until-psnr) at step {trainer.step_done} of {total}")
    wall.stop(trainer.seconds - start_seconds)
    return TrainingResult(run_dir, trainer.step_done, loss, psnr_from_mse(loss), trainer.seconds, image_psnr,
                          psnr_read, wall, k, (image.width, image.height))


def write_checkpoint(checkpoint: ckpt.Checkpoint, run_dir: Path, dtype: str = "float32", read=None) -> None:
    """read: the host_reader of the backend that holds the state's arrays (none: host arrays)."""
    try:
        ckpt.save(checkpoint, run_dir / ckpt.FILENAME, dtype, read)
    except OSError as exc:
        kept = "the previous checkpoint is intact" if (run_dir / ckpt.FILENAME).is_file() else \
            "no checkpoint of the run was written yet"
        raise InrError(f"cannot write the checkpoint in {run_dir} ({exc.strerror or exc}); {kept}") from None


def round_in_place(backend, array, dtype) -> None:
    """array (a backend's float32) rounded to dtype's precision, a chunk at a time through the host."""
    flat = array.reshape(-1)
    step = CHUNK_BYTES // 4
    for first in range(0, flat.size, step):
        part = flat[first:first + step]
        backend.copy_from_host(part, np.asarray(backend.to_host(part)).astype(dtype).astype(np.float32))


def fresh_state(config: Config, spec: NetworkSpec, image: PixelImage) -> TrainingState:
    """Step 0 of a new run: the start training.init names, drawn from training.seed, its output at the
    image's mean colour where asked, its weights scaled by network.weight_scale."""
    seed = config.training.seed
    return initial_state(config.training.init, spec, seed, [seed], output_means(config, [image]),
                         weight_scale=config.network.weight_scale)


def _draw(trainer: Trainer, k: int) -> np.ndarray:
    """The network now at every k-th pixel of the training image each way, where those pixels lie:
    (H', W', C) floats in [0, 1]."""
    if k == 1:
        return render_float(trainer.backend, trainer.spec, trainer.params[:1], trainer.width, trainer.height)
    return render_strided(trainer.backend, trainer.spec, trainer.params[:1], trainer.width, trainer.height, k)


def _write_final_pictures(values: np.ndarray, image: PixelImage, run_dir: Path, k: int, image_psnr: float,
                          writer: BackgroundWriter) -> None:
    """render.png and comparison.png (captioned with the whole image's PSNR) from the final network's
    values at every k-th pixel (_draw), beside the image's own pixels there, psnr.svg and previews.png:
    written by the writer (after the previews it holds); a failure to write them only warns."""
    pixels = to_uint8(values)
    reference = image.values if k == 1 else as_floats(image.pixels[::k, ::k])
    writer.submit(partial(write_picture, pixels, run_dir / "render.png"), "pictures", warn_only=True)
    writer.submit(partial(_write_comparison, values, reference, image_psnr, run_dir / "comparison.png"),
                  "pictures", warn_only=True)
    writer.submit(partial(_write_run_pictures, run_dir, pixels), "pictures", warn_only=True)


def _write_comparison(rendered: np.ndarray, reference: np.ndarray, image_psnr: float, path: Path) -> None:
    """reference | render | error map."""
    write_picture(to_uint8(side_by_side(rendered, reference, psnr=image_psnr).values), path)


def _write_run_pictures(run_dir: Path, final: np.ndarray) -> None:
    """psnr.svg from metrics.csv and previews.png (the previews and the final render, animated)."""
    try:
        write_psnr_svg(read_metrics(run_dir), run_dir / "psnr.svg")
        write_previews_animation(sorted((run_dir / "previews").glob("step-*.png")), final, run_dir / "previews.png")
    except (OSError, ValueError) as exc:  # pictures are a convenience: a failure only warns
        raise InrError(f"could not write the run's pictures in {run_dir}: {exc}") from None
