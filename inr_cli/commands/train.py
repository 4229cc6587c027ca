from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from inr_cli.formats import checkpoint as ckpt
from inr_cli import settings
from inr_cli.commands.setting_options import given_settings, set_option, with_setting_options
from inr_cli.config import build_config, flags_to_values, with_values
from inr_cli.console import info, notice
from inr_cli.formats.data import SAMPLE, fingerprint, load_training_data
from inr_cli.errors import InrError, UsageError
from inr_cli.core.runs import RunLock, latest_run, new_run_dir
from inr_cli.core.training_loop import TrainingResult, run_training

NAME = "train"
HELP = "Train a network on an image, a pixel CSV or a .npy array (no DATA: the built-in sample), or --resume a run."
NEEDS_ARGS = False

# Flags that may change when a run is resumed; the rest define the run and stay as they were.
RESUMABLE = settings.RESUMABLE


@with_setting_options(NAME)
def command(
    data: Optional[str] = typer.Argument(
        None, metavar="DATA", help="Image, pixel CSV or .npy array. With --resume: the run directory or checkpoint "
        "(default: latest run).", show_default=False),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="TOML config (see configs/)."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME", help="Start from configs/NAME.toml: "
                                         "siren, sigmoid, fourier (default: the model's)."),
    overrides: list[str] = set_option(),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", metavar="DIR",
                                           help="Where to write the run (default: runs/<name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue a run (DATA names it; default: the latest)."),
    allow_data_change: bool = typer.Option(False, "--allow-data-change",
                                           help="With --resume: go on even if the data differ from the run's."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    as_json: bool = typer.Option(False, "--json", help="Print the final summary as one JSON object (stdout)."),
    **options,  # one per setting: with_setting_options
) -> None:
    flags = given_settings(NAME, options, overrides)
    if resume:
        if preset is not None:
            raise UsageError("--preset cannot be used with --resume: the run keeps its saved configuration")
        _resume(data, flags, config_file, run_dir, allow_data_change, quiet, as_json)
    else:
        _finish(start_run(data, flags, config_file, run_dir, quiet, preset), quiet, as_json)


def start_run(data, flags, config_file, run_dir, quiet, preset=None) -> TrainingResult:
    """A new run, as `inr train DATA` starts it (flags: {flag name: value}); the API's fit calls it too."""
    values = flags_to_values(flags)
    if data is not None:  # else the --config file's [data] source, or the preset's (the sample)
        values["data.source"] = "" if data == SAMPLE else str(Path(data).resolve())
    config = build_config(config_file, values, preset)
    if preset is None and flags.get("model") == "relu" and "encoding" not in flags and config.encoding.name == "fourier":
        notice("--model relu starts from the fourier preset: Fourier features (sigma "
               f"{config.encoding.sigma:g}) in front of the ReLU MLP; --encoding none for a plain one")
    source = config.data.source
    notices: list[str] = []
    image = load_training_data(source, config.data.size, config.data.gray, notices)
    for message in notices:
        notice(message)
    if run_dir is None:
        run_dir = new_run_dir(Path(source).stem if source else SAMPLE)
    elif (run_dir / ckpt.FILENAME).exists():
        with RunLock(run_dir):  # a run in use is said as such: resuming it would fail the same way
            pass
        raise UsageError(f"{run_dir} already holds a run; continue it with --resume {run_dir} or pick another --run-dir")
    if not quiet:
        net = config.network
        info(f"training {net.model} ({net.layers}x{net.hidden}) on {source or 'the built-in sample'} "
             f"({image.width}x{image.height}, {','.join(image.channels)}) -> {run_dir}")
    return run_training(config, image, run_dir, None, quiet)


def _resume(data, flags, config_file, run_dir, allow_data_change, quiet, as_json=False) -> None:
    if config_file is not None:
        raise UsageError("--config cannot be used with --resume: the run keeps its saved configuration")
    if run_dir is not None:
        raise UsageError("--run-dir cannot be used with --resume: name the run as the argument instead")
    fixed = sorted(set(flags) - RESUMABLE)
    if fixed:
        raise UsageError(f"--{fixed[0].replace('_', '-')} cannot change when resuming; start a new run instead")
    run = Path(data) if data else latest_run()
    if run.is_file() and run.suffix != ".npz":
        raise UsageError(f"{run} is not a run: --resume takes a run directory (runs/NAME) or its {ckpt.FILENAME}")
    saved = ckpt.load(run)
    run_dir = run if run.is_dir() else run.parent
    config = with_values(saved.config, flags_to_values(flags))
    steps = config.training.steps
    if "steps" in flags and steps <= saved.step:
        raise UsageError(f"--steps is the run's new total and {run_dir} is at step {saved.step} already; "
                         f"pass --steps N with N above {saved.step}")
    if saved.step >= steps:
        info(f"{run_dir} already finished {saved.step} of {steps} steps; pass --steps N (> {saved.step}) "
             f"to train further")
        return
    image = load_training_data(config.data.source, config.data.size, config.data.gray)
    if image.n_channels != saved.spec.out_features:
        raise InrError(f"the data now have {image.n_channels} channels, the run was trained on "
                       f"{saved.spec.out_features}; start a new run")
    if fingerprint(image) != saved.data_fingerprint:
        where = config.data.source or "the built-in sample"
        if not allow_data_change:
            raise InrError(f"{where} has changed since this run started (fingerprint differs); "
                           f"pass --allow-data-change to continue on the new data")
        notice(f"{where} has changed since this run started; continuing on the new data as asked")
    if not quiet:
        info(f"resuming {run_dir} at step {saved.step} of {steps}")
    _finish(run_training(config, image, run_dir, saved, quiet), quiet, as_json)


def _finish(result, quiet: bool, as_json: bool = False) -> None:
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "step": result.step, "loss": result.loss,
                               "psnr": round(result.psnr, 4), "seconds": round(result.seconds, 3)}))
        return
    if not quiet:
        info(f"done: step {result.step}, loss {result.loss:.4e}, PSNR {result.psnr:.2f} dB, "
             f"{result.seconds:.1f} s of training. Render larger with: inr render {result.run_dir} --size 1024")
    typer.echo(str(result.run_dir))
