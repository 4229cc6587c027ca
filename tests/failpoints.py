"""The test suite's hook module (inr_cli/hooks.py): armed with INR_HOOKS=tests.failpoints and one
failpoint in INR_FAILPOINT, it SIGKILLs the process at that point:

    driver-after=K      the fit-many driver, once K shards are on disk
    worker-at=NAME      the worker that starts fitting NAME's shard, once (a marker in OUT remembers it)

A real kill of a real process, at a moment the test does not have to catch.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def at(point: str, **details) -> None:
    wanted = os.environ.get("INR_FAILPOINT", "")
    if point == "shard-written":
        value = str(len(list(Path(details["shards"]).glob("*.npz"))))
        if wanted == f"driver-after={value}":
            os.kill(os.getpid(), signal.SIGKILL)
    elif point == "shard-start":
        for name in details["names"]:
            if wanted == f"worker-at={name}":
                marker = Path(details["out"]) / f".failpoint-worker-at-{name}"
                if not marker.exists():
                    marker.touch()
                    os.kill(os.getpid(), signal.SIGKILL)


def environment(failpoint: str) -> dict:
    """The variables that arm `failpoint` in a process started with them."""
    return {"INR_HOOKS": "tests.failpoints", "INR_FAILPOINT": failpoint}
