"""A hook module (inr_cli/hooks.py) for meta-init's Ray tests: armed with INR_HOOKS=tests.meta_hooks,
INR_FAILPOINT=kill-at=NAME and INR_FAILPOINT_DIR=FOLDER, the Ray worker that starts an inner fit
holding NAME is SIGKILLed, once (a marker in FOLDER remembers it)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def at(point: str, **details) -> None:
    wanted = os.environ.get("INR_FAILPOINT", "")
    if point == "meta-fit-start" and wanted.startswith("kill-at="):
        name = wanted.split("=", 1)[1]
        marker = Path(os.environ["INR_FAILPOINT_DIR"]) / f".failpoint-kill-at-{name}"
        if name in details["names"] and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


def environment(name: str, folder: Path) -> dict:
    return {"INR_HOOKS": "tests.meta_hooks", "INR_FAILPOINT": f"kill-at={name}", "INR_FAILPOINT_DIR": str(folder)}
