from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.setting_options import (
    given_settings,
    gpus_per_worker_option,
    ray_option,
    set_option,
    with_setting_options,
    workers_option,
)
from inr_cli.sets.driver import fit_folder

NAME = "fit-many"
HELP = ("Fit one network per image of a folder (searched recursively), a list of images or a bucket, many "
        "per step, in-process or on a Ray cluster. Running the same command again resumes.")
NEEDS_ARGS = True


@with_setting_options(NAME)
def command(
    source: str = typer.Argument(..., metavar="INPUT", help="Folder of images (subfolders too: the first level is "
                                 "the label), a list file (.txt: one path or URL per line) or a folder URL "
                                 "(s3://..., gs://...; needs the remote extra of inr).", show_default=False),
    out: str = typer.Option(..., "-o", "--output", metavar="DIR",
                            help="Folder for the set of networks, or a URL (s3://...; needs the remote extra): "
                            "new or empty, or this command's set to resume; anything else needs --force."),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="TOML config (inr presets "
                                               "NAME prints one to start from)."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME",
                                         help="Start from a packaged preset (inr presets lists them; default: the "
                                         "model's)."),
    overrides: list[str] = set_option(),
    pack: Optional[int] = typer.Option(None, "--pack", metavar="N",
                                       help="Networks per step and per shard (default: as many as fill the "
                                       "device; on Ray, shards of 512 that each worker packs for its device)."),
    ray_address: Optional[str] = ray_option("fit the shards"),
    workers: Optional[int] = workers_option(),
    gpus_per_worker: Optional[float] = gpus_per_worker_option(),
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="Skip and list files that do not decode "
                                         "(default: refuse before any work)."),
    labels: Optional[Path] = typer.Option(None, "--labels", metavar="FILE", help="A CSV of name,label rows: the "
                                          "labels of index.csv (instead of class folders)."),
    add: bool = typer.Option(False, "--add", help="Grow the finished set in OUT by the images of INPUT it does "
                             "not hold (same settings and start; its networks untouched)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    force: bool = typer.Option(False, "--force", help="Write the set into -o even where it holds other files or "
                               "another set (the set's own files there are replaced; a set of this command "
                               "is resumed)."),
    **options,  # one per setting: with_setting_options
) -> None:
    fit_folder(source, out, given_settings(NAME, options, overrides), config_file, preset, pack, ray_address, workers,
               gpus_per_worker, skip_unreadable, quiet, force, add, labels)
    typer.echo(out)
