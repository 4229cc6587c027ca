from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.paths import default_output, named_file, output_target, say_default_output
from inr_cli.errors import UsageError
from inr_cli.formats.images import image_format, is_image_name, save_image
from inr_cli.formats.pixel_csv import read_csv

NAME = "decode"
HELP = "Pixel CSV -> image: the exact inverse of encode for 8-bit images."
NEEDS_ARGS = True


def command(
    csv: Path = typer.Argument(..., metavar="CSV", help="Pixel CSV written by `inr encode` (or by hand); - reads "
                               "standard input."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Image to write (default: "
                                          "CSV with .png, or NAME-decoded.png when that exists; replaced if it "
                                          "exists)."),
    force: bool = typer.Option(False, "--force", help="Replace the file named by -o if it exists."),
) -> None:
    output = named_file(output)
    if str(csv) == "-" and output is None:
        raise UsageError("decode - reads the CSV from standard input: name the image to write with -o")
    if is_image_name(csv):
        raise UsageError(f"{csv} is an image; decode turns a pixel CSV into one (`inr encode {csv}` writes the CSV)")
    if output is not None and str(output) == "-":
        raise UsageError("decode writes an image file: name it with -o (- is not supported here)")
    target = output_target(output, None if output else default_output(csv, ".png", fallback="decoded"), force, [csv],
                           announce=False)
    image_format(target)
    pixels = read_csv(csv)  # a bad input is refused before any word about the output
    if output is None:
        say_default_output(csv, ".png", target, " (the image encoded, perhaps)")
    save_image(pixels, target)
    typer.echo(str(target))
