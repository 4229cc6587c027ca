from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.sets import fit_many
from inr_cli.backends import make_backend
from inr_cli.core.training_loop import Interrupted, Signals
from inr_cli.config import Device, Encoding, Model, build_config, flags_to_values
from inr_cli.console import info, notice
from inr_cli.progress import ImageProgress
from inr_cli.errors import UsageError

NAME = "fit-many"
HELP = ("Fit one network per image of a folder, many per step, in-process or on a Ray cluster. "
        "Running the same command again resumes.")
NEEDS_ARGS = True


def command(
    folder: Path = typer.Argument(..., help="Folder of images (every file in it, not in subfolders)."),
    out: Path = typer.Option(..., "-o", "--output", help="Folder for the set of networks (created; rerun: resumed)."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="TOML config (see configs/)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Start from configs/NAME.toml (default: the model's)."),
    model: Optional[Model] = typer.Option(None, "--model", help="siren | sigmoid | relu (default: siren)."),
    hidden: Optional[int] = typer.Option(None, "--hidden", help="Neurons per hidden layer."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Number of hidden layers."),
    omega0: Optional[float] = typer.Option(None, "--omega0", help="SIREN frequency omega_0 (default: from the images' size)."),
    encoding: Optional[Encoding] = typer.Option(None, "--encoding", help="none | fourier."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Steps per network."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Peak learning rate."),
    lr_min: Optional[float] = typer.Option(None, "--lr-min", help="Final learning rate of the cosine schedule."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Run seed; each image's seed comes from it and its name."),
    device: Optional[Device] = typer.Option(None, "--device", help="auto | cpu | gpu (default: auto)."),
    size: Optional[int] = typer.Option(None, "--size", help="Fit every image inside N x N (aspect kept)."),
    gray: Optional[bool] = typer.Option(None, "--gray", help="Fit one grey channel."),
    pack: Optional[int] = typer.Option(None, "--pack", help="Networks per step (default: as many as fill the device)."),
    ray_address: Optional[str] = typer.Option(None, "--ray", help="local | auto | ray://host:port: fit the shards "
                                              "on a Ray cluster (needs Ray: the 'cluster' extra of inr)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Ray workers (default: one per GPU, or one per "
                                          "machine's worth of CPUs)."),
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="Skip and list files that do not decode "
                                         "(default: refuse before any work)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    if pack is not None and pack <= 0:
        raise UsageError(f"--pack must be a positive number of networks, got {pack}")
    if workers is not None and workers <= 0:
        raise UsageError(f"--workers must be positive, got {workers}")
    flags = dict(model=model, hidden=hidden, layers=layers, omega0=omega0, encoding=encoding, steps=steps, lr=lr,
                 lr_min=lr_min, seed=seed, device=device, size=size, gray=gray, preview_every=0)
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
    typer.echo(str(out))
