from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.sets import fit_many
from inr_cli.backends import make_backend
from inr_cli.commands.setting_options import given_settings, set_option, with_setting_options
from inr_cli.config import build_config, flags_to_values
from inr_cli.core.training_loop import Interrupted, Signals
from inr_cli.console import info, notice
from inr_cli.progress import ImageProgress
from inr_cli.errors import UsageError

NAME = "fit-many"
HELP = ("Fit one network per image of a folder, many per step, in-process or on a Ray cluster. "
        "Running the same command again resumes.")
NEEDS_ARGS = True


@with_setting_options(NAME)
def command(
    folder: Path = typer.Argument(..., metavar="FOLDER", help="Folder of images (every file in it, not in "
                                  "subfolders).", show_default=False),
    out: Path = typer.Option(..., "-o", "--output", metavar="DIR",
                             help="Folder for the set of networks (created; rerun: resumed)."),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="TOML config (see configs/)."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME",
                                         help="Start from configs/NAME.toml (default: the model's)."),
    overrides: list[str] = set_option(),
    pack: Optional[int] = typer.Option(None, "--pack", metavar="N",
                                       help="Networks per step (default: as many as fill the device)."),
    ray_address: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="local | auto | "
                                              "ray://host:port: fit the shards on a Ray cluster (needs Ray: the "
                                              "'cluster' extra of inr)."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Ray workers (default: one per "
                                          "GPU, or one per machine's worth of CPUs)."),
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="Skip and list files that do not decode "
                                         "(default: refuse before any work)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    **options,  # one per setting: with_setting_options
) -> None:
    fit_folder(folder, out, given_settings(NAME, options, overrides), config_file, preset, pack, ray_address, workers,
               skip_unreadable, quiet)
    typer.echo(str(out))


def fit_folder(folder: Path, out: Path, flags: dict, config_file: Path | None, preset: str | None, pack: int | None,
               ray_address: str | None, workers: int | None, skip_unreadable: bool, quiet: bool) -> None:
    """`inr fit-many FOLDER -o OUT` (flags: {flag name: value}); the API's fit_many calls it too."""
    if pack is not None and pack <= 0:
        raise UsageError(f"--pack must be a positive number of networks, got {pack}")
    if workers is not None and workers <= 0:
        raise UsageError(f"--workers must be positive, got {workers}")
    flags = {**flags, "preview_every": 0}
    config = build_config(config_file, flags_to_values({**flags, "source": str(folder.resolve())}), preset)
    backend = make_backend(config.training.device, config.training.matmul, quiet)
    notices: list[str] = []
    plan, pending = fit_many.prepare(folder, out, config, pack, backend, skip_unreadable, notices)
    for message in notices:
        notice(message)
    total = len(plan.images)
    done = total - sum(len(plan.shards[i]) for i in pending)
    if not quiet:
        where = f"Ray ({ray_address})" if ray_address else backend.name
        info(f"fitting {total} images ({len(plan.shards)} shards of up to {plan.pack}; {done} done) on {where}: "
             f"{plan.spec.model} {plan.spec.layers}x{plan.spec.hidden}, {config.training.steps} steps -> {out}")
    with Signals() as signals, ImageProgress(total, done, quiet) as progress:
        def on_shard(index, result):
            progress.add(len(result["names"]), result["psnr"])

        try:
            if ray_address:
                from inr_cli.sets.cluster import run_on_ray

                run_on_ray(ray_address, plan, out, pending, on_shard, workers)
            else:
                fit_many.run_in_process(backend, plan, out, pending, on_shard, signals)
        except Interrupted as exc:
            signals.ignore()
            progress.stop()
            info(f"{exc}: {progress.done} of {total} images are fitted and kept in {out}; "
                 f"run the same command again to fit the rest")
            raise SystemExit(128 + exc.signum) from None
    bytes_per_image = fit_many.assemble(out, plan)
    if not quiet:
        info(f"done: {total} networks of {plan.spec.parameter_count():,} parameters ({bytes_per_image:,} bytes "
             f"each) in {out / fit_many.WEIGHTS}; one row per image in {out / fit_many.INDEX}")
