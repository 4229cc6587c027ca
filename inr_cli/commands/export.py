from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer

from inr_cli import checkpoint as ckpt
from inr_cli import export as exporter
from inr_cli import fit_many
from inr_cli.commands.paths import check_parent
from inr_cli.errors import UsageError

NAME = "export"
HELP = ("Write a trained network for other tools: -o model.safetensors (weights, named per layer) or "
        "-o model.onnx (the whole function: coordinates in, colours out).")
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., help="Run directory, checkpoint.npz, or an inr fit-many folder (with --image)."),
    output: Path = typer.Option(..., "-o", "--output", help="model.safetensors or model.onnx."),
    image: Optional[str] = typer.Option(None, "--image", help="With an inr fit-many folder: whose network."),
) -> None:
    if Path(output).suffix.lower() not in exporter.FORMATS:  # checked before any work
        raise UsageError(f"{output}: unknown export format '{Path(output).suffix}' (use .safetensors or .onnx)")
    check_parent(output)
    if fit_many.is_network_set(run):
        if image is None:
            raise UsageError(f"{run} is a set of networks: name one with --image NAME")
        networks = fit_many.load_network_set(run)
        spec, params, channels = networks.spec, np.array(networks.weights[networks.row(image)]), networks.channels
    else:
        if image is not None:
            raise UsageError(f"--image names an image of an inr fit-many folder; {run} is a single run")
        saved = ckpt.load(run)
        spec, params, channels = saved.spec, saved.params, saved.channels
    exporter.export(spec, params, channels, output)
    typer.echo(str(output))
