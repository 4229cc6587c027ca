from __future__ import annotations

import signal
import sys
import time
import webbrowser
from pathlib import Path
from typing import Optional

import typer

from inr_cli.backends import make_backend
from inr_cli.commands.paths import shown_path
from inr_cli.config import Device
from inr_cli.console import info
from inr_cli.errors import InrError, UsageError
from inr_cli.runs.directory import RUNS_ROOT

NAME = "view"
HELP = ("Look at a run or a set (an inr fit-many folder) in the browser: zoom into the function, follow a "
        "training run, browse a set.")
NEEDS_ARGS = True


def command(
    run: Optional[Path] = typer.Argument(None, metavar="RUN|SET", show_default=False, help="Run directory, "
                                         "checkpoint.npz, or an inr fit-many folder."),
    next_run: bool = typer.Option(False, "--next", help="Wait for the next run that inr train starts under runs/ "
                                  "(here), and follow it: start the viewer first, then train."),
    port: int = typer.Option(0, "--port", metavar="N", show_default=False, help="Port to listen on. Default: 0, "
                             "a free one."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS", show_default=False, help="Address to "
                             "listen on; another than loopback lets other machines see the run. Default: 127.0.0.1."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Do not open the page in a browser."),
    device: Device = typer.Option("auto", "--device", metavar="auto|cpu|gpu", show_default=False,
                                  help="Where tiles are drawn: auto uses the GPU when CuPy finds one. Default: auto."),
    trust: bool = typer.Option(False, "--trust", help="Show a set's training images from wherever its "
                               "fit-many.json names them (URLs, paths outside its input folder): only for a set "
                               "you made."),
) -> None:
    from inr_cli.loading import require_input
    from inr_cli.viewer.server import ViewServer
    from inr_cli.viewer.sources import SetView, open_view
    from inr_cli.viewer.tiles import TileRenderer

    if not 0 <= port <= 65535:
        raise UsageError(f"--port is 0..65535, got {port}")
    # "Ctrl-C stops", also when started from a shell that ignored SIGINT for it (a script's `&`):
    # Python raises KeyboardInterrupt only where SIGINT was not ignored at its start.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if next_run == (run is not None):
        raise UsageError("give a run or set to view, or --next for the next run inr train starts (not both)")
    if next_run:
        run = _wait_for_next_run()
    elif not run.exists() or (run.is_dir() and not any(run.iterdir())):
        what = "an empty folder" if run.exists() else "no such run directory or checkpoint"
        raise InrError(f"{run}: {what}; inr view --next waits for the next run inr train starts")
    require_input(run)  # a folder of the user's files is neither a run nor a set
    if _run_without_checkpoint(run):
        _wait_for_first_checkpoint(run)
    view = open_view(run, trust)
    withheld = view.sources_allowed.withheld if isinstance(view, SetView) else 0
    if withheld:
        info(f"{withheld} training images are not shown: the set's plan names them at URLs or outside its input "
             f"folder; --trust shows them (for a set you made)")
    renderer = TileRenderer(make_backend(device))
    try:
        server = ViewServer((host, port), view, renderer)
    except OSError as exc:
        raise InrError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    typer.echo(server.url)
    sys.stdout.flush()
    info(f"serving {shown_path(run)} on {renderer.backend.name}; Ctrl-C stops")
    if not no_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        info("stopped")
    finally:
        server.server_close()


def _run_without_checkpoint(path: Path) -> bool:
    """A run directory that `inr train` has started (its config.toml is written first) but that has
    no checkpoint yet: viewed from its first steps."""
    from inr_cli.formats import checkpoint as ckpt

    return path.is_dir() and (path / "config.toml").is_file() and not ckpt.resolve_exists(path)


def _wait_for_first_checkpoint(run: Path) -> None:
    from inr_cli.formats import checkpoint as ckpt

    info(f"waiting for the first checkpoint of {shown_path(run)} (Ctrl-C stops)")
    _wait_until(lambda: ckpt.resolve_exists(run))


def _wait_for_next_run() -> Path:
    """The first run directory under runs/ whose config.toml (the first file `inr train` writes, on a
    start and on a resume) appears or changes after this call."""
    def started() -> dict[Path, int]:
        return {config.parent: config.stat().st_mtime_ns for config in RUNS_ROOT.glob("*/config.toml")}

    before = started()
    info(f"waiting for the next run under {RUNS_ROOT}/: start inr train here (Ctrl-C stops)")
    new = _wait_until(lambda: [run for run, stamp in started().items() if before.get(run) != stamp])
    info(f"following {shown_path(new[0])}")
    return new[0]


def _wait_until(condition):
    """condition()'s first true value, asked five times a second; Ctrl-C ends the command."""
    try:
        while not (found := condition()):
            time.sleep(0.2)  # a user waits on this, not a test: polling the files is enough
        return found
    except KeyboardInterrupt:
        info("stopped")
        raise typer.Exit(0) from None
