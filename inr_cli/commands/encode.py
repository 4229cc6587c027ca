from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.paths import default_output, named_file, output_target, say_default_output
from inr_cli.console import notice
from inr_cli.core.memory import check, reading_estimate
from inr_cli.core.pixels import fit_longer_side
from inr_cli.errors import UsageError
from inr_cli.formats.images import declared_layout, is_image_name, load_image
from inr_cli.formats.pixel_csv import write_csv

NAME = "encode"
HELP = "Image -> pixel CSV (x, y, channels in [0, 1])."
NEEDS_ARGS = True


def command(
    image: Path = typer.Argument(..., metavar="IMAGE", help="Image file (PNG, JPEG, GIF, ...)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="CSV to write (default: "
                                          "IMAGE with .csv; where that exists it is kept and IMAGE-encoded.csv "
                                          "written; - for standard output)."),
    force: bool = typer.Option(False, "--force", help="Replace the file named by -o if it exists."),
    size: Optional[int] = typer.Option(None, "--size", metavar="N", help="Resize so the longer side is N pixels "
                                       "(Lanczos)."),
    gray: bool = typer.Option(False, "--gray", help="Convert to one grey channel."),
) -> None:
    output = named_file(output)
    if size is not None and size <= 0:
        raise UsageError(f"--size must be a positive number of pixels, got {size}")
    if Path(image).suffix.lower() == ".csv":
        raise UsageError(f"{image} is already a pixel CSV; `inr decode {image}` turns it into an image")
    if output is not None and str(output) != "-" and is_image_name(output):
        raise UsageError(f"{output}: encode writes a pixel CSV, not an image; name a CSV file "
                         f"(-o {Path(output).with_suffix('.csv')})")
    target = output_target(output, None if output else default_output(image, ".csv", fallback="encoded"), force,
                           [image], announce=False)
    check_memory(image, size, gray)
    notices: list[str] = []
    pixels = load_image(image, size=size, gray=gray, notices=notices)  # a bad input is refused first
    if output is None:
        say_default_output(image, ".csv", target)
    for message in notices:
        notice(message)
    if str(target) == "-":
        write_csv(pixels, target)  # the CSV is the result on standard output: no path after it
        return
    write_csv(pixels, target)
    typer.echo(str(target))


def check_memory(image: Path, size: int | None, gray: bool) -> None:
    """The image as its header declares it, refused in one line where reading it (and resizing it)
    would not fit the memory free, before a pixel is decoded; the CSV is written a block at a time."""
    width, height, channels, value_bytes = declared_layout(image, gray)
    resized = fit_longer_side(width, height, size) if size is not None else None
    enlarged = resized is not None and resized[0] * resized[1] > width * height
    advice = "give a smaller --size" if enlarged else "close other programs or use a machine with more memory"
    check([reading_estimate(width, height, channels, value_bytes, resized)], None,
          f"encoding {image} ({width}x{height})", advice)
