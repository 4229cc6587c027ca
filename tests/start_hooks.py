"""A hook module (inr_cli/hooks.py) for the Ray tests of starts (tests/test_meta_on_ray.py), armed
with INR_HOOKS=tests.start_hooks, INR_FAILPOINT and INR_FAILPOINT_DIR=FOLDER (markers: once only):

    kill-at=NAME        the meta-init worker that starts an inner fit holding NAME is SIGKILLed, once
    hang-at=NAME        the meta-init worker that starts an inner fit holding NAME waits for ever, once
    other-start=FILE    the fit-many worker, as it starts, finds FILE (a start) holding other weights:
                        the file a node without shared storage would read
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path


def at(point: str, **details) -> None:
    wanted = os.environ.get("INR_FAILPOINT", "")
    if point == "meta-fit-start" and wanted.startswith("kill-at="):
        name = wanted.split("=", 1)[1]
        if name in details["names"] and _first_time(f"kill-at-{name}"):
            os.kill(os.getpid(), signal.SIGKILL)
    elif point == "meta-fit-start" and wanted.startswith("hang-at="):
        name = wanted.split("=", 1)[1]
        if name in details["names"] and _first_time(f"hang-at-{name}"):
            threading.Event().wait()
    elif point == "worker-start" and wanted.startswith("other-start=") and _first_time("other-start"):
        from inr_cli.formats.export import write_safetensors
        from inr_cli.formats.start import read_start

        path = Path(wanted.split("=", 1)[1])
        spec, params = read_start(str(path))
        write_safetensors(spec, params + 1, ("r", "g", "b"), path, {})


def _first_time(what: str) -> bool:
    marker = Path(os.environ["INR_FAILPOINT_DIR"]) / f".failpoint-{what}"
    if marker.exists():
        return False
    marker.touch()
    return True


def environment(failpoint: str, folder: Path) -> dict:
    return {"INR_HOOKS": "tests.start_hooks", "INR_FAILPOINT": failpoint, "INR_FAILPOINT_DIR": str(folder)}
