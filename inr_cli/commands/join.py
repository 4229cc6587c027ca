from __future__ import annotations

from pathlib import Path

import typer

NAME = "join"
HELP = ("Join two inr fit-many sets fitted with the same settings and start into a new one (-o): every "
        "network kept bit for bit, the rows sorted by name; how a set grows (fit the new images apart, "
        "then join).")
NEEDS_ARGS = True


def command(
    first: Path = typer.Argument(..., metavar="A", help="An inr fit-many folder."),
    second: Path = typer.Argument(..., metavar="B", help="Another, fitted with the same settings and start."),
    output: Path = typer.Option(..., "-o", "--output", metavar="OUT", help="The joined set: a new folder."),
) -> None:
    import inr_cli

    joined = inr_cli.join(first, second, output)
    typer.echo(str(joined.folder))
