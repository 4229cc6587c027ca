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
from inr_cli.outputs import named_file
from inr_cli.settings import META_INIT

NAME = "meta-init"
HELP = ("Learn a start for fit-many (--init FILE) from a folder of images of one kind, with Reptile on the "
        "batched engine: fits of a few steps pull the start toward what fits the images; or, with --modulations "
        "D, a base network whose latents of D numbers fit an image in a few steps (functa). Checkpointed (the "
        "same command resumes), in this process or on a Ray cluster (--ray, a start only), the held-out PSNR "
        "after the inner steps logged to OUT.csv and charted in OUT.svg.")
NEEDS_ARGS = True


@with_setting_options(META_INIT)
def command(
    source: str = typer.Argument(..., metavar="FOLDER", help="Images of one kind and one size (or --size N): a "
                                 "folder, a list file (.txt) or a folder URL, as fit-many reads them.",
                                 show_default=False),
    out: str = typer.Option(..., "-o", "--output", metavar="FILE", help="The start: start.safetensors."),
    config_file: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="TOML config."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME", help="Start from a packaged preset."),
    overrides: list[str] = set_option(),
    outer_steps: int = typer.Option(500, "--outer-steps", metavar="N", help="Outer steps."),
    inner_steps: Optional[int] = typer.Option(None, "--inner-steps", metavar="K", help="Steps of each inner fit (at "
                                              "the peak --lr, held), and of the held-out measure (default: 32; a "
                                              "base: 3).", show_default=False),
    meta_batch: int = typer.Option(8, "--meta-batch", metavar="N", help="Images fitted together per outer step."),
    outer_lr: Optional[float] = typer.Option(None, "--outer-lr", metavar="F", help="Reptile's step toward the "
                                             "adapted weights; a base: Adam's rate; either decaying linearly to 0 "
                                             "over the outer steps (default: 1.0; a base: 0.001, 3e-4 deeper than 3 "
                                             "hidden layers)", show_default=False),
    modulations: Optional[int] = typer.Option(None, "--modulations", metavar="D", help="Learn a base with "
                                              "modulations instead (functa): D numbers per image shift every hidden "
                                              "layer, fitted in --inner-steps steps; fit-many --init BASE then fits "
                                              "each image's D numbers alone. Up to the base's layers x hidden (one a "
                                              "shift) draws best.", show_default=False),
    meta_sgd: bool = typer.Option(True, "--meta-sgd/--no-meta-sgd", help="A base: learn each latent's rate "
                                  "(meta-SGD), or hold them at --inner-lr."),
    inner_lr: float = typer.Option(0.1, "--inner-lr", metavar="F", help="A base: each latent's rate at first."),
    holdout: float = typer.Option(0.1, "--holdout", metavar="F", help="Share of the images kept out to measure."),
    eval_every: int = typer.Option(10, "--eval-every", metavar="N", help="Outer steps between held-out measures."),
    ray_address: Optional[str] = ray_option("the inner fits (the same start as without)"),
    workers: Optional[int] = workers_option(),
    gpus_per_worker: Optional[float] = gpus_per_worker_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    force: bool = typer.Option(False, "--force", help="Replace the start named by -o, its OUT.csv and OUT.svg if "
                               "they exist, and start again where its checkpoint was learned otherwise."),
    **options,
) -> None:
    from inr_cli.sets.meta_command import meta_init

    out = named_file(out)
    meta_init(source, out, given_settings(META_INIT, options, overrides), config_file, preset,
              dict(outer_steps=outer_steps, inner_steps=inner_steps, meta_batch=meta_batch, outer_lr=outer_lr,
                   holdout=holdout, eval_every=eval_every, modulations=modulations, meta_sgd=meta_sgd,
                   inner_lr=inner_lr), quiet, ray_address, workers, gpus_per_worker, force)
    typer.echo(str(out))
