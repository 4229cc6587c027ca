"""inr: learn an image as a function of its pixel coordinates."""

import os

__version__ = "0.1.0"

# OpenBLAS's worker threads spin a while after each product before they sleep; on the CPU path
# they then hold the cores that the elementwise work between two products needs. Read when NumPy
# loads OpenBLAS, so it
# only applies where inr is imported first, as the `inr` command does; a user's setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
