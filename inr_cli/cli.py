"""The `inr` command line: one Typer app, one module per command."""

from __future__ import annotations

import functools

import typer

from inr_cli import __version__
from inr_cli.console import error
from inr_cli.errors import InrError

app = typer.Typer(
    name="inr",
    help="Learn an image as a function: train a small network on pixel coordinates, render it at any size.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_debug = {"on": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"inr {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback when something fails."),
) -> None:
    _debug["on"] = debug


def handles_errors(command):
    """Turn an InrError into one line on stderr and its exit code; --debug shows the traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InrError as exc:
            if _debug["on"]:
                raise
            error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            error("interrupted")
            raise typer.Exit(130) from None
        except MemoryError:
            if _debug["on"]:
                raise
            error("out of memory; try a smaller size or batch")
            raise typer.Exit(1) from None

    return wrapper


def _register() -> None:
    from inr_cli.commands import decode, doctor, encode, evaluate, fit_many, info, render, train

    for module in (encode, decode, train, fit_many, render, evaluate, info, doctor):
        app.command(name=module.NAME, help=module.HELP, no_args_is_help=module.NEEDS_ARGS)(
            handles_errors(module.command)
        )


_register()


def main() -> None:
    app()
