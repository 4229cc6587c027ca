"""The test suite's hook module (inr_cli/hooks.py): armed with INR_HOOKS=tests.failpoints and one
failpoint in INR_FAILPOINT, it signals a process at that point (SIGKILL, unless said):

    driver-after=K      the fit-many driver, once at least K shards are on disk
    worker-at=NAME      the worker that starts fitting NAME's shard, once (a marker in OUT remembers it)
    worker-always-at=NAME   that worker, every time: a poisoned input
    node-at=RESOURCE    the whole Ray node (its raylet, then the worker) that declares the custom
                        resource RESOURCE, when its worker starts its first shard, once
    signal-at=SIGNAL@K  the fitting process sends itself SIGNAL (SIGINT, SIGTERM, SIGKILL...) after
                        step K of a pack, every time
    hang-at-start       every Ray shard worker, as it starts, leaves the marker .failpoint-started
                        in OUT and waits for ever (a wedged GPU, a stalled mount)
    hang-on=RESOURCE    the worker of the Ray node that declares RESOURCE waits for ever when it
                        starts its first shard: a straggler
    assembly-killed     the Ray task that assembles a set at a URL, as it starts
    signal-on-write=SIGNAL@SUFFIX  the process sends itself SIGNAL once a file whose name ends with
                        SUFFIX is written in full, before it takes its name (formats/atomic.py)

A real kill (or hang) of a real process, at a moment the test does not have to catch.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path


def at(point: str, **details) -> None:
    wanted = os.environ.get("INR_FAILPOINT", "")
    if point == "shard-written":
        count = len(list(Path(details["shards"]).glob("?????.npz")))  # finished shards, not packs in flight
        if wanted.startswith("driver-after=") and count >= int(wanted.split("=", 1)[1]):
            os.kill(os.getpid(), signal.SIGKILL)
    elif point == "pack-step":
        if wanted.startswith("signal-at="):
            name, step = wanted.split("=", 1)[1].split("@")
            if details["step"] == int(step):
                os.kill(os.getpid(), getattr(signal, name))
    elif point == "file-written":
        if wanted.startswith("signal-on-write="):
            name, suffix = wanted.split("=", 1)[1].split("@")
            if str(details["path"]).endswith(suffix):
                os.kill(os.getpid(), getattr(signal, name))
    elif point == "assembly-task":
        if wanted == "assembly-killed":
            os.kill(os.getpid(), signal.SIGKILL)
    elif point == "worker-start":
        if wanted == "hang-at-start":
            (Path(details["out"]) / ".failpoint-started").touch()
            threading.Event().wait()
    elif point == "shard-start":
        if wanted.startswith("hang-on="):
            resource = wanted.split("=", 1)[1]
            if _node_has(resource) and _first_time(details["out"], f"hang-on-{resource}"):
                threading.Event().wait()
        for name in details["names"]:
            if wanted == f"worker-at={name}" and _first_time(details["out"], f"worker-at-{name}"):
                os.kill(os.getpid(), signal.SIGKILL)
            if wanted == f"worker-always-at={name}":
                os.kill(os.getpid(), signal.SIGKILL)
        if wanted.startswith("node-at="):
            resource = wanted.split("=", 1)[1]
            if _node_has(resource) and _first_time(details["out"], f"node-at-{resource}"):
                raylet = os.getppid()
                with open(f"/proc/{raylet}/cmdline", "rb") as handle:
                    assert b"raylet" in handle.read(), "a Ray worker's parent is its node's raylet"
                os.kill(raylet, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)


def _first_time(out, what: str) -> bool:
    marker = Path(out) / f".failpoint-{what}"
    if marker.exists():
        return False
    marker.touch()
    return True


def _node_has(resource: str) -> bool:
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    return any(node["NodeID"] == node_id and resource in node.get("Resources", {}) for node in ray.nodes())


def environment(failpoint: str) -> dict:
    """The variables that arm `failpoint` in a process started with them."""
    return {"INR_HOOKS": "tests.failpoints", "INR_FAILPOINT": failpoint}
