from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.paths import shown_path
from inr_cli.commands.setting_options import given_settings, set_option, with_setting_options
from inr_cli.console import info
from inr_cli.errors import UsageError
from inr_cli.limits import picture_size
from inr_cli.runs.start import resume_run, start_run
from inr_cli.runs.training import RunInterrupted

NAME = "train"
HELP = "Train a network on an image, a pixel CSV or a .npy array (no DATA: the built-in sample), or --resume a run."
NEEDS_ARGS = False


@with_setting_options(NAME)
def command(
    data: Optional[str] = typer.Argument(
        None, metavar="DATA", help="Image, pixel CSV or .npy array. With --resume: the run directory or checkpoint "
        "(default: latest run).", show_default=False),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="TOML config (inr presets "
                                               "NAME prints one to start from)."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME", help="Start from a packaged preset: "
                                         "siren, sigmoid, fourier, hashgrid (inr presets lists them; default: "
                                         "hashgrid for an image of 96x64 pixels or more, else the model's)."),
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
    try:
        _train(data, flags, resume, allow_data_change, config_file, preset, run_dir, quiet, as_json)
    except RunInterrupted as stopped:  # stdout names the run all the same, for a script that reads it
        _print_run(stopped.result, as_json, interrupted=stopped.signal_name)
        raise


def _train(data, flags, resume, allow_data_change, config_file, preset, run_dir, quiet, as_json) -> None:
    if not resume:
        _finish(start_run(data, flags, config_file, run_dir, quiet, preset), quiet, as_json)
        return
    if preset is not None:
        raise UsageError("--preset cannot be used with --resume: the run keeps its saved configuration")
    if config_file is not None:
        raise UsageError("--config cannot be used with --resume: the run keeps its saved configuration")
    if run_dir is not None:
        raise UsageError("--run-dir cannot be used with --resume: name the run as the argument instead")
    result = resume_run(data, flags, allow_data_change, quiet)
    if result is not None:  # None: the run had finished already, as resume_run said
        _finish(result, quiet, as_json)


def _finish(result, quiet: bool, as_json: bool = False) -> None:
    if not quiet and not as_json:
        run = shown_path(result.run_dir)
        if result.picture_factor > 1:
            (width, height), k = result.image_size, result.picture_factor
            drawn = "x".join(map(str, picture_size(width, height, k)))
            info(f"render.png and comparison.png are drawn at {drawn} (1/{k} of each side); the whole "
                 f"{width}x{height}: inr render {run}; to zoom in: inr view {run}")
        else:
            info(f"render larger: inr render {run} --size 1024")
        read = f" ({result.image_psnr_read})" if result.image_psnr_read else ""
        where = result.wall.summary() if result.wall is not None else None
        info(f"done: step {result.step}, loss {result.loss:.4e}, PSNR {result.psnr:.2f} dB, "
             f"{result.seconds:.1f} s of training; the whole image {result.image_psnr:.2f} dB{read}"
             + (f"; {where}" if where else ""))
    _print_run(result, as_json)


def _print_run(result, as_json: bool, interrupted: str | None = None) -> None:
    """The run directory on stdout (with --json, the summary), whether the run finished or was stopped."""
    if not as_json:
        typer.echo(str(result.run_dir))
        return
    summary = {"run_dir": str(result.run_dir), "step": result.step, "loss": result.loss,
               "psnr": round(result.psnr, 4), "seconds": round(result.seconds, 3)}
    if result.wall is not None:  # where the wall time went: training, reading, pictures, checkpoints, the rest
        summary["wall"] = {name: round(seconds, 3) for name, seconds in result.wall.split().items()}
    typer.echo(json.dumps(summary | ({"interrupted": interrupted} if interrupted else {})))
