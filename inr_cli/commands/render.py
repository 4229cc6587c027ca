from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import numpy as np
import typer

from inr_cli.sets import fit_many
from inr_cli.config import Device
from inr_cli.backends import get_backend
from inr_cli.core.canvas import canvas_size
from inr_cli.commands.paths import check_parent
from inr_cli.console import info, notice
from inr_cli.errors import UsageError
from inr_cli.formats.images import image_format, save_tiff, save_uint16, save_uint8
from inr_cli.core.render import render_float, render_uint8

NAME = "render"
HELP = "Draw a trained network on a canvas of any size."
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., metavar="RUN", help="Run directory, checkpoint.npz, or an inr fit-many folder (with --image)."),
    image: Optional[str] = typer.Option(None, "--image", help="With an inr fit-many folder: the image whose network "
                                        "to draw (its file name)."),
    size: Optional[int] = typer.Option(None, "--size", help="Longer side in pixels; the aspect ratio is kept."),
    width: Optional[int] = typer.Option(None, "--width", help="Canvas width (with --height: exact size)."),
    height: Optional[int] = typer.Option(None, "--height", help="Canvas height."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Image to write (default: RUN/render-WxH.png)."),
    depth: int = typer.Option(8, "--depth", help="Bits per channel: 8, 16 (PNG or TIFF) or 32 (float TIFF, "
                              "values not clipped)."),
    device: Device = typer.Option("auto", "--device", help="auto | cpu | gpu."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress messages."),
) -> None:
    if depth not in (8, 16, 32):
        raise UsageError(f"--depth is 8, 16 or 32 bits per channel, got {depth}")
    network = fit_many.one_network(run, image)
    w, h = canvas_size(network.width, network.height, size, width, height)
    run_dir = run if run.is_dir() else run.parent
    target = output or run_dir / f"{network.label}-{w}x{h}.png"
    check_parent(target)
    kind = image_format(target)
    if depth == 16 and kind not in ("PNG", "TIFF"):
        raise UsageError(f"{target}: 16-bit renders are written as PNG or TIFF (use .png or .tif)")
    if depth == 32 and kind != "TIFF":
        raise UsageError(f"{target}: float renders are written as TIFF (use .tif)")
    notices: list[str] = []
    backend = get_backend(device, "kernel", notices)
    for message in notices:
        notice(message)
    start = time.perf_counter()
    if depth > 8:
        values = render_float(backend, network.spec, network.params, w, h, clip=depth == 16)
        seconds = time.perf_counter() - start
        if kind == "PNG":
            save_uint16(np.round(values * 65535).astype(np.uint16), target)
        else:
            save_tiff(np.round(values * 65535).astype(np.uint16) if depth == 16 else values, target)
    else:
        values = render_uint8(backend, network.spec, network.params, w, h)
        seconds = time.perf_counter() - start
        save_uint8(values, target)
    if not quiet:
        info(f"rendered {w}x{h} in {seconds:.2f} s on {backend.name}")
    typer.echo(str(target))
