"""inr: learn an image as a function of its pixel coordinates."""

import os

__version__ = "0.1.0"

# OpenBLAS's worker threads spin for ~0.1 s after each product before they sleep; on the CPU path
# they then hold the cores that the elementwise work between two products needs (a SIREN 3x128
# step on 2 cores: 47 ms with the default, 39 ms with this). Read when NumPy loads OpenBLAS, so it
# only applies where inr is imported first, as the `inr` command does; a user's setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
