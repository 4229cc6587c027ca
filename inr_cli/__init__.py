"""inr: learn an image as a function of its pixel coordinates.

From Python: `inr_cli.load(path)`, `inr_cli.fit(image, **settings)`, `inr_cli.fit_many(folder, out,
**settings)` (see inr_cli/api.py and docs/python.md). They are imported on first use, so that
`import inr_cli` stays light.
"""

import os

__version__ = "0.1.0"
__all__ = ["load", "fit", "fit_many", "join", "TrainedNetwork", "TrainedSet", "InrError", "UsageError"]

# OpenBLAS's worker threads spin a while after each product before they sleep; on the CPU path
# they then hold the cores that the elementwise work between two products needs. Read when NumPy
# loads OpenBLAS, so it
# only applies where inr is imported first, as the `inr` command does; a user's setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

_FROM = {"load": "api", "fit": "api", "fit_many": "api", "join": "api", "TrainedNetwork": "api", "TrainedSet": "api",
         "InrError": "errors", "UsageError": "errors"}


def __getattr__(name: str):
    if name not in _FROM:
        raise AttributeError(f"module 'inr_cli' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(f"inr_cli.{_FROM[name]}"), name)


def __dir__():
    return sorted(list(globals()) + list(_FROM))
