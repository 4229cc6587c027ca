from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.paths import check_parent, default_output
from inr_cli.errors import UsageError
from inr_cli.formats.images import save_image
from inr_cli.formats.pixel_csv import read_csv

NAME = "decode"
HELP = "Pixel CSV -> image: the exact inverse of encode for 8-bit images."
NEEDS_ARGS = True


def command(
    csv: Path = typer.Argument(..., metavar="CSV", help="Pixel CSV written by `inr encode` (or by hand); - reads standard input."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Image to write (default: CSV with .png, "
                                          "or NAME-decoded.png when that exists)."),
) -> None:
    if str(csv) == "-" and output is None:
        raise UsageError("decode - reads the CSV from standard input: name the image to write with -o")
    pixels = read_csv(csv)
    target = output or default_output(csv, ".png", fallback="decoded")
    check_parent(target)
    save_image(pixels, target)
    typer.echo(str(target))
