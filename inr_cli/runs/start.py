"""Starting a run, or resuming one, from the settings `inr train` and the API's fit are given: the
configuration, the training data and the run directory, checked, then the run's training."""

from __future__ import annotations

from pathlib import Path

from inr_cli import settings
from inr_cli.backends import require_gpu
from inr_cli.config import build_config, flags_to_values, with_values
from inr_cli.console import info, notice
from inr_cli.core.schedule import learning_rate
from inr_cli.core.training_loop import reached_target
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.data import SAMPLE, load_training_data, same_data
from inr_cli.formats.start import is_file_start, refuse_base, resolved_start, start_network
from inr_cli.outputs import folder_output, writable_inside
from inr_cli.runs.directory import IMAGE_IN_RUN, RunLock, holds_run, latest_run, new_run_dir
from inr_cli.runs.training import TrainingResult, run_training
from inr_cli.runs.wall_time import WallTime

# Settings that may change when a run is resumed; the rest define the run and stay as they were.
RESUMABLE = settings.RESUMABLE


# From this many pixels up (a 96x64 photo), `inr train IMAGE` with no preset, model, encoding or config
# file trains the hashgrid preset. Drawn 2x to 8x larger it is a little ahead of Lanczos on the mean of
# photos and drawings, where the siren preset falls behind on drawings of text; it fits the pixels in
# fewer seconds, and on a large photo reaches a sharp image many times sooner than SIREN, whose every
# step costs every pixel times its width squared. Smaller images keep the siren preset, further ahead
# of Lanczos than the hash grid at 64 px (BENCHMARKS.md, "Drawing larger: 2x, 4x and 8x").
HASH_GRID_PIXELS = 96 * 64
HASH_GRID_PRESET = "hashgrid"
# Flags that say which network is meant, where the size then does not choose one: a model, an encoding,
# or what only SIREN or Fourier features take (a file start, --init PATH, names its network too).
NETWORK_FLAGS = {"model", "encoding", "omega0", "weight_scale", "fourier_features", "fourier_sigma"}


def preset_for_size(width: int, height: int) -> str | None:
    """The preset an image of this size trains with when nothing else names one (None: the model's)."""
    return HASH_GRID_PRESET if width * height >= HASH_GRID_PIXELS else None


def sized_preset_note(width: int, height: int, preset: str) -> str:
    """What `inr train` and `inr eval --train-size` say when the size chose the preset."""
    return (f"{width}x{height}: training the {preset} preset, inr's from {HASH_GRID_PIXELS:,} pixels up (a trained "
            f"hash grid: sharp soon, and level with Lanczos when drawn larger); --preset siren trains a SIREN")


def start_run(data, flags, config_file, run_dir, quiet, preset=None) -> TrainingResult:
    """A new run, as `inr train DATA` starts it (flags: {flag name: value}); the API's fit calls it too."""
    wall = WallTime()
    values = flags_to_values(flags)
    if data is not None:  # else the --config file's [data] source, or the preset's (the sample)
        values["data.source"] = "" if data == SAMPLE else str(Path(data).resolve())
    config = build_config(config_file, values, preset, start=start_network(values, preset, config_file))
    config = resolved_start(config)
    refuse_base(config.training.init, f"inr fit-many FOLDER --init {config.training.init} fits latents over it")
    if config.training.device == "gpu":
        require_gpu()
    source = config.data.source
    notices: list[str] = []
    with wall.phase("reading"):
        image = load_training_data(source, config.data.size, config.data.gray, notices)
    for message in notices:
        notice(message)
    chooses = (preset is None and config_file is None and not NETWORK_FLAGS & set(flags)
               and not is_file_start(config.training.init))
    sized = preset_for_size(image.width, image.height) if chooses else None
    if sized is not None:
        config = resolved_start(build_config(None, values, sized))
    if (preset is None and flags.get("model") == "relu" and "encoding" not in flags
            and config.encoding.name == "fourier"):
        notice("--model relu starts from the fourier preset: Fourier features (sigma "
               f"{config.encoding.sigma:g}) in front of the ReLU MLP; --encoding none for a plain one")
    taken = ""  # the plain name, when an earlier run holds it
    if run_dir is None:
        run_dir = new_run_dir(Path(source).stem if source else SAMPLE)
        plain = run_dir.parent / (Path(source).stem if source else SAMPLE)
        taken = f" ({plain} holds an earlier run)" if run_dir != plain else ""
    elif folder_output(run_dir, holds_run, "run of inr train", "--run-dir", placed=[IMAGE_IN_RUN]):
        with RunLock(run_dir):  # a run in use is said as such: resuming it would fail the same way
            pass
        raise UsageError(f"{run_dir} already holds a run; continue it with --resume {run_dir} or pick another "
                         f"--run-dir")
    if not quiet:
        if sized is not None:
            info(sized_preset_note(image.width, image.height, sized))
        net = config.network
        encoding = "" if config.encoding.name == "none" else f" on {config.encoding.name} features"
        info(f"training {net.model} ({net.layers}x{net.hidden}){encoding} on {source or 'the built-in sample'} "
             f"({image.width}x{image.height}, {','.join(image.channels)}) -> {run_dir}{taken}")
    return run_training(config, image, run_dir, None, quiet, wall)


def resume_run(data, flags, allow_data_change, quiet) -> TrainingResult | None:
    """Go on with a run, as `inr train --resume [DATA]` does (data: its directory or checkpoint, None:
    the latest run; flags: the resumable settings to change); None when it had already finished."""
    wall = WallTime()
    run = Path(data) if data else latest_run()
    if run.is_file() and run.suffix != ".npz":
        raise UsageError(f"{run} is not a run: --resume takes a run directory (runs/NAME) or its {ckpt.FILENAME}")
    saved = ckpt.load(run, deferred=True)  # the arrays read when the trainer takes them, to the device
    # A setting a run cannot change may still be said, at the value it was recorded with.
    fixed = sorted(name for name, key_value in ((n, flags_to_values({n: flags[n]})) for n in set(flags) - RESUMABLE)
                   if any(saved.config.get(key) != value for key, value in key_value.items()))
    if fixed:
        raise UsageError(f"--{fixed[0].replace('_', '-')} cannot change when resuming; start a new run instead")
    run_dir = run if run.is_dir() else run.parent
    writable_inside(run_dir, "--resume")  # the files it writes again: no link, no FIFO among them
    config = with_values(saved.config, flags_to_values(flags))
    config = with_values(config, {"data.source": _image_of(run_dir, config.data.source)})
    steps = config.training.steps
    if "steps" in flags and steps <= saved.step:
        raise UsageError(f"--steps is the run's new total and {run_dir} is at step {saved.step} already; "
                         f"pass --steps N with N above {saved.step}")
    target = config.training.target_psnr
    at_reading = saved.step % config.training.log_every == 0  # where an uninterrupted run checks the target
    if saved.step < steps and at_reading and reached_target(saved.state.loss[:1], target).all():
        info(f"{run_dir} already reached {target:g} dB at step {saved.step} (--until-psnr); pass a higher "
             f"--until-psnr (or 0) to train further")
        return None
    if saved.step >= steps:
        was, again = _rates(config, saved, 2 * saved.step)
        info(f"{run_dir} already finished {saved.step} of {steps} steps; --steps N (> {saved.step}) trains further on "
             f"the cosine curve of N steps: the learning rate rises again (with --steps {2 * saved.step}: {was:.3g} "
             f"-> {again:.3g}) and anneals by step N")
        return None
    with wall.phase("reading"):
        image = load_training_data(config.data.source, config.data.size, config.data.gray)
    if image.n_channels != saved.spec.out_features:
        raise InrError(f"the data now have {image.n_channels} channels, the run was trained on "
                       f"{saved.spec.out_features}; start a new run")
    if not same_data(image, saved.data_fingerprint):
        where = config.data.source or "the built-in sample"
        if not allow_data_change:
            raise InrError(f"{where} has changed since this run started (fingerprint differs); "
                           f"pass --allow-data-change to continue on the new data")
        notice(f"{where} has changed since this run started; continuing on the new data as asked")
    if not quiet:
        info(f"resuming {run_dir} at step {saved.step} of {steps}")
        if steps != saved.total_steps:
            was, now = _rates(config, saved, steps)
            notice(f"--steps {steps}: the learning rate follows the cosine curve of {steps} steps, {now:.3g} at step "
                   f"{saved.step + 1} ({was:.3g} on the curve of {saved.total_steps}), down to "
                   f"{config.optimizer.lr_min:.3g} by step {steps}")
    return run_training(config, image, run_dir, saved, quiet, wall)


def _image_of(run_dir: Path, source: str) -> str:
    """The run's training image: where the run recorded it, or, for an image the run keeps itself,
    in the run directory as it is now (a run that was moved or copied elsewhere)."""
    kept = run_dir / IMAGE_IN_RUN
    if source and Path(source).name == IMAGE_IN_RUN and not Path(source).exists() and kept.is_file():
        return str(kept.resolve())
    return source


def _rates(config, saved: ckpt.Checkpoint, steps: int) -> tuple[float, float]:
    """The learning rate of the next step on the run's curve and on the curve of `steps`: the cosine
    spans the whole budget, so a new total puts the run at another point of another curve (a
    finished run, annealed to lr_min, rises again)."""
    opt = config.optimizer
    return (learning_rate(saved.step, saved.total_steps, opt.lr, opt.lr_min, opt.warmup),
            learning_rate(saved.step, steps, opt.lr, opt.lr_min, opt.warmup))
