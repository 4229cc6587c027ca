from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import typer

from inr_cli.backends import make_backend
from inr_cli.commands.paths import named_file, output_target, run_sources
from inr_cli.config import Device
from inr_cli.console import err, info
from inr_cli.core.canvas import WHOLE_CANVAS_PIXELS, canvas_size, check_region
from inr_cli.core.memory import check_render
from inr_cli.core.render import render_at_depth, tile_rows
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.images import image_format, save_tiff, save_uint8, save_uint16
from inr_cli.formats.tiled_tiff import pyramid_levels, write_pyramid
from inr_cli.loading import one_network

NAME = "render"
HELP = "Draw a trained network (a run, or one network of an inr fit-many folder) on a canvas of any size."
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., metavar="RUN|SET", help="Run directory, checkpoint.npz, an inr fit-many folder "
                               "(with --image), or a .safetensors file inr export wrote."),
    image: Optional[str] = typer.Option(None, "--image", metavar="NAME", help="With a set (an inr fit-many folder or "
                                        "its export): the image whose network to draw, named as index.csv "
                                        "names it (its path in the set's input folder, A/x.png)."),
    size: Optional[int] = typer.Option(None, "--size", metavar="N", help="Longer side in pixels; the aspect ratio "
                                       "is kept."),
    width: Optional[int] = typer.Option(None, "--width", metavar="N", help="Canvas width (with --height: exact "
                                        "size)."),
    height: Optional[int] = typer.Option(None, "--height", metavar="N", help="Canvas height."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Image to write (default: "
                                          "RUN/render-WxH.png, replaced if it exists; - writes a PNG to standard "
                                          "output)."),
    force: bool = typer.Option(False, "--force", help="Replace the file named by -o if it exists."),
    depth: int = typer.Option(8, "--depth", metavar="8|16|32", show_default=False, help="Bits per channel: 8, 16 "
                              "(PNG or TIFF) or 32 (float TIFF, values not clipped). Default: 8."),
    region: Optional[str] = typer.Option(None, "--region", metavar="L,T,R,B", help="Draw only this part of the "
                                         "canvas: its columns L to R and rows T to B (R and B excluded), the pixels "
                                         "the whole canvas has there."),
    tiles: bool = typer.Option(False, "--tiles", help="Write a tiled pyramidal TIFF (.tif, 256-px tiles, each level "
                               "half the one above), drawn a strip at a time: a canvas of any size in bounded memory. "
                               "The default for a canvas of more than 64 megapixels without -o."),
    device: Device = typer.Option("auto", "--device", metavar="auto|cpu|gpu", show_default=False,
                                  help="Where to draw: auto uses the GPU when CuPy finds one. Default: auto."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress messages."),
) -> None:
    output = named_file(output)
    if depth not in (8, 16, 32):
        raise UsageError(f"--depth is 8, 16 or 32 bits per channel, got {depth}")
    to_stdout = output is not None and str(output) == "-"
    if to_stdout and depth == 32:
        raise UsageError("-o - writes a PNG; float renders (--depth 32) are written as TIFF: name a .tif file")
    network = one_network(run, image)
    w, h = canvas_size(network.width, network.height, size, width, height)
    part = parse_region(region, w, h) if region is not None else None
    run_dir = run if run.is_dir() else run.parent
    tiles = tiles or (output is None and part is None and w * h > TILED_DEFAULT_PIXELS)
    if part is not None:
        default = run_dir / f"{network.label}-{w}x{h}-{'_'.join(map(str, part))}.png"
    else:
        default = run_dir / f"{network.label}-{w}x{h}.{'tif' if tiles else 'png'}"
    kind = "PNG" if to_stdout else image_format(output or default)
    if tiles:
        _check_tiles(kind, depth, part, to_stdout, output)
    if depth == 16 and kind not in ("PNG", "TIFF"):
        raise UsageError(f"{output}: 16-bit renders are written as PNG or TIFF (use .png or .tif)")
    if depth == 32 and kind != "TIFF":
        raise UsageError(f"{output}: float renders are written as TIFF (use .tif)")
    target = output_target(output, default, force, [run, *run_sources(run, image)])
    backend = make_backend(device, quiet=quiet)
    if not tiles:  # tiles are drawn a strip of rows at a time
        check_render(network.spec, *((w, h) if part is None else (part[2] - part[0], part[3] - part[1])), backend,
                     depth)
    start = time.perf_counter()
    if tiles:
        _write_tiles(backend, network, w, h, target, quiet)
        if not quiet:
            info(f"rendered {w}x{h} as a tiled pyramid in {time.perf_counter() - start:.2f} s on {backend.name}")
        typer.echo(str(target))
        return
    rows = h if part is None else part[3] - part[1]
    with _progress(f"render {w}x{h}", rows, quiet) as on_chunk:
        values = render_at_depth(backend, network.spec, network.params, w, h, depth, on_chunk=on_chunk, region=part)
    seconds = time.perf_counter() - start
    if to_stdout:
        _write_stdout(values)
    elif kind == "PNG" and depth == 16:
        save_uint16(values, target)
    elif depth > 8:
        save_tiff(values, target)
    else:
        save_uint8(values, target)
    if not quiet:
        what = f"{w}x{h}" if part is None else (f"{part[2] - part[0]}x{part[3] - part[1]} at {part[0]},{part[1]} of "
                                               f"the {w}x{h} canvas")
        info(f"rendered {what} in {seconds:.2f} s on {backend.name}")
    if not to_stdout:
        typer.echo(str(target))


TILED_DEFAULT_PIXELS = WHOLE_CANVAS_PIXELS  # above it, a tiled pyramid unless -o names another file


def parse_region(text: str, width: int, height: int) -> tuple[int, int, int, int]:
    """--region L,T,R,B as (left, top, right, bottom) within the width x height canvas, or one line."""
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--region is LEFT,TOP,RIGHT,BOTTOM in pixels of the canvas, got '{text}'")
    return check_region(tuple(int(p) for p in parts), width, height)


def _check_tiles(kind: str, depth: int, part, to_stdout: bool, output) -> None:
    if to_stdout or kind != "TIFF":
        raise UsageError(f"{output or '-'}: a tiled pyramid is written as a TIFF (use .tif)")
    if depth != 8:
        raise UsageError("--tiles writes 8 bits per channel (--depth 8)")
    if part is not None:
        raise UsageError("--tiles draws the whole canvas; --region draws one part of it as one image")


def _write_tiles(backend, network, width: int, height: int, target: Path, quiet: bool) -> None:
    """The canvas as a tiled pyramid, a strip of rows drawn at a time, a bar per level on a terminal."""
    levels = pyramid_levels(width, height)
    draw = tile_rows(backend, network.spec, network.params)
    rows_before = np.cumsum([0] + [h for _, h in levels])  # the bar counts the rows of every level
    with _progress(f"render {width}x{height} in tiles", int(rows_before[-1]), quiet) as on_chunk:
        on_strip = None if on_chunk is None else lambda level, rows: on_chunk(int(rows_before[level]) + rows)
        write_pyramid(target, width, height, network.spec.out_features, draw, on_strip)


@contextmanager
def _progress(label: str, rows: int, quiet: bool):
    """A bar over the render's chunks on stderr, on a terminal only and not with -q; yields on_chunk."""
    if quiet or not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as progress:
        task = progress.add_task(label, total=rows)
        yield lambda done: progress.update(task, completed=done)


def _write_stdout(values: np.ndarray) -> None:
    """The render as PNG bytes on standard output, and nothing else there."""
    from inr_cli.formats.png import png_bytes

    data = png_bytes(values)
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise InrError("standard output was closed before the PNG was written") from None
