"""Ctrl-C while `inr` starts: cli.py imports this first, then the commands (a second or so on a
loaded machine), then calls done(). Meanwhile SIGINT ends the process as Ctrl-C ends a command
(one line, exit 130) instead of printing the traceback of whichever import it landed in: nothing
has begun, so there is nothing to unwind. Only where Ctrl-C raises KeyboardInterrupt as Python
sets it up: a handler of the program's own, or SIGINT ignored (nohup, a script's `&`), is kept."""

from __future__ import annotations

import signal
import sys

INTERRUPTED = 130  # 128 + SIGINT, what a command stopped by Ctrl-C exits with


def _stop(signum, frame):
    sys.stderr.write("error: interrupted\n")  # handles_errors' line; the console (rich) may not be imported yet
    raise SystemExit(INTERRUPTED)


def _quiet() -> bool:
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _stop)
            return True
    except ValueError:  # imported outside the main thread, where no handler can be set
        pass
    return False


_quieted = _quiet()


def done() -> None:
    """Ctrl-C raises KeyboardInterrupt again: each command says it and exits 130 (cli.handles_errors)."""
    global _quieted
    if _quieted and signal.getsignal(signal.SIGINT) is _stop:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _quieted = False
