from __future__ import annotations

import json
from pathlib import Path

import typer

from inr_cli import checkpoint as ckpt
from inr_cli.backends import get_backend
from inr_cli.console import notice
from inr_cli.data import load_training_data
from inr_cli.errors import InrError
from inr_cli.metrics import psnr, ssim
from inr_cli.render import render_float

NAME = "eval"
HELP = "PSNR and SSIM of the network's render against a reference image or CSV."
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., help="Run directory or checkpoint.npz."),
    reference: Path = typer.Argument(..., help="Reference image or pixel CSV; rendered at its size."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | gpu."),
) -> None:
    saved = ckpt.load(run)
    gray = saved.channels == ("l",)
    ref = load_training_data(str(reference), gray=gray)
    if ref.n_channels != saved.spec.out_features:
        raise InrError(f"{reference} has channels {','.join(ref.channels)}, the network draws "
                       f"{','.join(saved.channels)}")
    notices: list[str] = []
    backend = get_backend(device, "kernel", notices)
    for message in notices:
        notice(message)
    rendered = render_float(backend, saved.spec, saved.params, ref.width, ref.height)
    result = {
        "psnr": round(psnr(rendered, ref.values), 4),
        "ssim": round(ssim(rendered, ref.values), 5),
        "step": saved.step,
        "params": saved.spec.parameter_count(),
        "width": ref.width,
        "height": ref.height,
    }
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(f"PSNR {result['psnr']:.2f} dB  SSIM {result['ssim']:.4f}  "
                   f"({ref.width}x{ref.height}, step {saved.step}, {result['params']} parameters)")
