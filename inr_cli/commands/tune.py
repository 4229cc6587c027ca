from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import typer

from inr_cli.commands.setting_options import given_settings, set_option, with_setting_options

NAME = "tune"
HELP = ("Search the fitting settings for an image or a sample of a folder's (Optuna: TPE, pruning the trials "
        "that lag), in-process or on Ray; writes DIR/best.toml for inr train --config. --resume continues.")
NEEDS_ARGS = True
SETTINGS_OF = "train"  # the settings it takes, as flags and by --set: inr train's (a given one is fixed)


@with_setting_options(SETTINGS_OF)
def command(
    source: str = typer.Argument(..., metavar="IMAGE|FOLDER", help="An image (or pixel CSV, .npy array), or a "
                                 "folder, list file or folder URL of images (each trial fits a sample).",
                                 show_default=False),
    out: Path = typer.Option(..., "-o", "--output", metavar="DIR", help="Folder of the study: its journal, "
                             "best.toml, trials.csv and pictures (created; --resume continues it)."),
    trials: int = typer.Option(20, "--trials", metavar="N", help="Trials to finish (pruned ones count)."),
    objective: Literal["psnr", "steps", "psnr-per-second"] = typer.Option(
        "psnr", "--objective", metavar="psnr|steps|psnr-per-second", help="Best PSNR within --steps, fewest steps "
        "to --target-psnr, or PSNR per second of training."),
    target_psnr: Optional[float] = typer.Option(None, "--target-psnr", metavar="DB", help="The PSNR that "
                                                "--objective steps counts the steps to."),
    pruner: Literal["halving", "median", "hyperband", "none"] = typer.Option(
        "halving", "--pruner", metavar="halving|median|hyperband|none", help="Stop trials that lag at a loss "
        "reading: outside the better half of all trials at that step (successive halving), below the median of "
        "the finished ones, Hyperband, or never."),
    sample: int = typer.Option(8, "--sample", metavar="K", help="Images of a folder fitted by each trial (one "
                               "pack; drawn with --seed)."),
    max_params: Optional[int] = typer.Option(None, "--max-params", metavar="N",
                                             help="Keep width and depth under N parameters per network."),
    searches: list[str] = typer.Option([], "--search", metavar="KEY=LOW:HIGH", help="Search this setting over "
                                       "this range (add :log for a log scale; repeatable); a setting given as a "
                                       "flag or by --set is fixed instead.", show_default=False),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE",
                                               help="TOML config: the settings the first trial starts from."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME", help="Start from configs/NAME.toml "
                                         "(default: the model's)."),
    overrides: list[str] = set_option(),
    resume: bool = typer.Option(False, "--resume", help="Continue the study in DIR (the same options)."),
    ray_address: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="local | auto | "
                                              "ray://host:port: run trials as Ray tasks, several at once (DIR on "
                                              "storage the workers share)."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Trials at once on Ray (default: "
                                          "one per GPU share, or one per machine's worth of CPUs)."),
    gpus_per_trial: Optional[float] = typer.Option(None, "--gpus-per-trial", metavar="F",
                                                   help="Share of a GPU each Ray trial takes (default 1)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress."),
    **options,  # one per setting: with_setting_options
) -> None:
    from inr_cli.tune import require_optuna

    flags = given_settings(SETTINGS_OF, options, overrides)
    require_optuna()  # before the study's modules, which import it
    from inr_cli.tune.study import TuneOptions, tune

    result = tune(source, out, flags, config_file, preset, TuneOptions(
        trials=trials, sample=sample, objective=objective, target_psnr=target_psnr, pruner=pruner,
        max_params=max_params, searches=tuple(searches), resume=resume, ray=ray_address, workers=workers,
        gpus_per_trial=gpus_per_trial, quiet=quiet))
    typer.echo(str(result.out / "best.toml"))
