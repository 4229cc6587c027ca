"""The hook module (inr_cli/hooks.py) of inr tune's tests: armed with INR_HOOKS=tests.tune_hooks and
INR_FAILPOINT, a comma-separated list of:

    kill-at-trial=K     SIGKILL the process that fits trial K, at its first loss reading (in-process:
                        the study itself; on Ray: the worker)
    interrupt-at-trial=K    SIGINT to that process there instead (a Ctrl-C)
    together=N          each trial, as it starts, waits until N trials have started (markers in the
                        study folder): it passes only when N trials run at once, and fails the trial
                        after WAIT_SECONDS otherwise

A real kill, or a real rendezvous, at a moment the test does not have to catch.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

WAIT_SECONDS = 120.0


def _wanted() -> dict[str, str]:
    points = [p for p in os.environ.get("INR_FAILPOINT", "").split(",") if "=" in p]
    return dict(point.split("=", 1) for point in points)


def at(point: str, **details) -> None:
    wanted = _wanted()
    if point == "tune-reading" and wanted.get("kill-at-trial") == str(details["number"]):
        os.kill(os.getpid(), signal.SIGKILL)
    if point == "tune-reading" and wanted.get("interrupt-at-trial") == str(details["number"]):
        os.kill(os.getpid(), signal.SIGINT)
    if point == "tune-trial-start" and "together" in wanted:
        folder = Path(details["out"])
        (folder / f".started-{details['number']}").touch()
        deadline = time.monotonic() + WAIT_SECONDS
        while len(list(folder.glob(".started-*"))) < int(wanted["together"]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"trial {details['number']} waited {WAIT_SECONDS:g} s for another to start: "
                                   f"the trials did not run at once")
            time.sleep(0.01)
