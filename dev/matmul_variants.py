"""Experiment: our matmul and the SIREN 512 step under compile-time variants, against cuBLAS.

    PYTHONPATH=. python dev/matmul_variants.py

Each variant is a set of -D defines for kernels/matmul.cu. The shipped default is whichever wins;
this script stays so the comparison can be rerun on another GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_step import SETTINGS, bench_ours, time_matmul  # noqa: E402
from benchmarks.common import photo  # noqa: E402
from inr_cli.backends.cuda_backend import CudaBackend  # noqa: E402

VARIANTS = {"min_blocks_2": {"MATMUL_MIN_BLOCKS": 2}, "min_blocks_1": {"MATMUL_MIN_BLOCKS": 1}}
SHAPES = [(262144, 256, 256, "nt"), (262144, 256, 256, "nn"), (256, 256, 262144, "tn")]


def main():
    cublas = CudaBackend(matmul="cublas")
    image = photo("coffee", 512, 512)
    for shape in SHAPES:
        print(f"cublas {shape}: {time_matmul(cublas, *shape):.4f} ms")
    for name, defines in VARIANTS.items():
        backend = CudaBackend(defines=defines)
        for shape in SHAPES:
            print(f"{name} {shape}: {time_matmul(backend, *shape):.4f} ms")
        seconds, _ = bench_ours(backend, SETTINGS["siren-512"], image, 50)
        print(f"{name} siren-512 step: {seconds * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
