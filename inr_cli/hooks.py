"""Named points in the shipped code where a test may act: kill the process there, say, so that a
crash lands at a moment the test chose instead of one it must race for.

Nothing is armed unless the environment variable INR_HOOKS names a module (`package.module`, on
the import path); that module is imported once, and its `at(point, **details)` is called at every
point. The shipped code knows the points, never the module that acts on them.
"""

from __future__ import annotations

import functools
import importlib
import os

ENVIRONMENT = "INR_HOOKS"


@functools.cache
def _armed(module: str):
    return importlib.import_module(module).at if module else None


def hook(point: str, **details) -> None:
    at = _armed(os.environ.get(ENVIRONMENT, ""))
    if at is not None:
        at(point, **details)
