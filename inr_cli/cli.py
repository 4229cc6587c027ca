"""The `inr` command line: one Typer app, one module per command."""

from __future__ import annotations

# First: Ctrl-C while the imports below run (a second or so) is one line, not their traceback.
from inr_cli import starting

# isort: split
import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from typing import NoReturn

import typer
from typer.core import TyperGroup

from inr_cli import __version__
from inr_cli.console import error
from inr_cli.core.training_loop import Interrupted
from inr_cli.errors import OUT_OF_MEMORY, InrError, system_refusal

# The exit status when standard output was closed before all was written (`inr info | head -0`):
# Python's own when its exit cannot flush stdout. Click's would be 1, the status of any failure.
CLOSED_OUTPUT = 120


class OneLineErrors(TyperGroup):
    """Usage errors (an unknown flag, a value not among the choices) as one line on stderr and exit
    code 2, like every other error, instead of a framed box. Typer raises Click's exceptions, from
    Click or from its own copy of it: they are known by their exit_code and format_message. A closed
    stdout ends the command with CLOSED_OUTPUT, before Typer's own handling would make it 1."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)  # --version and --help write here
        except BrokenPipeError:
            raise typer.Exit(CLOSED_OUTPUT) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise typer.Exit(CLOSED_OUTPUT) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:  # noqa: BLE001 - re-raised below unless it is a usage error
            name = type(exc).__name__
            if name == "NoArgsIsHelpError":
                # A command without its arguments is a usage error like one missing argument (stderr,
                # exit code 2, as Click has it), with the whole help as its message.
                typer.echo(exc.ctx.get_help(), err=True)
                sys.exit(2)
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            context = getattr(exc, "ctx", None)
            where = f" (see: {context.command_path} --help)" if context is not None else ""
            error(exc.format_message().replace("Value error, ", "") + where)
            sys.exit(exc.exit_code)
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)


app = typer.Typer(
    name="inr",
    cls=OneLineErrors,
    help="Learn an image as a function: train a small network on pixel coordinates, render it at any size.",
    no_args_is_help=True,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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


@contextlib.contextmanager
def _stopping_signals():
    """SIGTERM and SIGHUP raise Interrupted as Ctrl-C raises KeyboardInterrupt, so that a command
    stopped by one unwinds: a file being written loses its temporary (formats/atomic.py) instead of
    leaving it behind. A signal ignored from the start (nohup) stays ignored; a command with its own
    handling (training's Signals) sets its own, and gets these back after."""
    def stop(signum, frame):
        raise Interrupted(signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        try:
            if number is not None and signal.getsignal(number) == signal.SIG_DFL:
                previous[number] = signal.signal(number, stop)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def handles_errors(command):
    """Turn an InrError into one line on stderr and its exit code; --debug shows the traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with _stopping_signals():
                return command(*args, **kwargs)
        except Interrupted as exc:  # SIGTERM or SIGHUP where the command does not handle it
            error(f"{exc}: stopped; nothing half-written is left")
            raise typer.Exit(128 + exc.signum) from None
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
            error(OUT_OF_MEMORY)
            raise typer.Exit(1) from None
        except OSError as exc:  # what the system refused (a full disk, a read-only folder) that no reader named
            if _debug["on"]:
                raise
            error(system_refusal(exc))
            raise typer.Exit(1) from None

    return wrapper


# What `inr --help` lists: one line each, short enough for 80 columns (Click would cut a command's
# help there with "..."); each command's own --help says the rest.
SUMMARIES = {
    "encode": "Image -> pixel CSV (x, y, channels in [0, 1]).",
    "decode": "Pixel CSV -> image, the exact inverse of encode.",
    "train": "Train a network on an image, CSV or array; --resume a run.",
    "fit-many": "Fit one network per image of a folder, list or bucket.",
    "tune": "Search the settings that fit your images best (Optuna).",
    "render": "Draw a trained network on a canvas of any size.",
    "view": "Zoom into a run or browse a set in the browser.",
    "export": "Write a network as safetensors or ONNX.",
    "join": "Join two sets fitted alike into one.",
    "meta-init": "Learn a start for a set from images of one kind.",
    "eval": "PSNR and SSIM of a render against a reference.",
    "info": "What a run or set holds: network, step, PSNR, sizes.",
    "presets": "List the presets, or print one with every key.",
    "doctor": "Check Python, NumPy, CuPy, CUDA and the kernels.",
}


def _register() -> None:
    from inr_cli.commands import (
        decode,
        doctor,
        encode,
        evaluate,
        export,
        fit_many,
        info,
        join,
        meta_init,
        presets,
        render,
        train,
        tune,
        view,
    )

    for module in (encode, decode, train, fit_many, join, meta_init, tune, render, view, export, evaluate, info,
                   presets, doctor):
        app.command(name=module.NAME, help=module.HELP, short_help=SUMMARIES[module.NAME],
                    no_args_is_help=module.NEEDS_ARGS)(handles_errors(module.command))


_register()
starting.done()


def main(args: list[str] | None = None) -> int:
    """Run one `inr` command (args: the command line after `inr`; None: sys.argv) and return its exit
    code. In-process callers get the code back; the process goes on."""
    try:
        app(args=args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BrokenPipeError:  # stdout closed while a usage error or the help was written
        return CLOSED_OUTPUT
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return 1
    return code


def run() -> NoReturn:
    """The console script `inr` and `python -m inr_cli`: main(), then the process ends without the
    interpreter's teardown. Once NumPy and Ray are loaded, freeing every module and object one by one
    costs more CPU than a short command, and Ray's C++ threads may still run while it does (a glibc
    abort at exit once). What the teardown does that matters is done first, in its order: the
    program's threads waited for, the exit handlers run (Ray's shutdown among them), Python's and C's
    output buffers flushed; then the process ends as multiprocessing's children end. Without
    CPython's hooks for the first two it exits the usual way."""
    code = main()
    wait_for_threads = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if wait_for_threads is None or run_exit_handlers is None:
        sys.exit(code)
    wait_for_threads()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe
            code = code or CLOSED_OUTPUT
    _flush_c_streams()
    os._exit(code)


def _flush_c_streams() -> None:
    """fflush(NULL): what C code (a library's printf) left in its stdio buffers, which only the C
    library's exit would otherwise write. The process's own symbols hold the C library's fflush on
    Linux and macOS (find_library would start ldconfig); elsewhere there is none to reach."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass
