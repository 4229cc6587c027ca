"""Run a few SIREN 512x512 training steps between cudaProfilerStart/Stop, for Nsight Compute.

    ncu --profile-from-start off --print-summary per-kernel python benchmarks/profile_step.py
    python benchmarks/profile_step.py --timeline   # wall time per step vs summed kernel time

Eager launches (no CUDA graph) so every kernel of the step is attributed by name.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import configure, make_trainer, photo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--matmul", default="kernel")
    args = parser.parse_args()
    import cupy

    from inr_cli.backends.cuda_backend import CudaBackend

    backend = CudaBackend(matmul=args.matmul)
    image = photo("coffee", args.size, args.size)
    config = configure("siren", hidden=256, layers=3, omega0=30.0, lr=1e-4, cuda_graph=False)
    trainer = make_trainer(backend, config, [image])
    for _ in range(3):
        trainer.step()
    backend.synchronize()
    cupy.cuda.profiler.start()
    for _ in range(args.steps):
        trainer.step()
    backend.synchronize()
    cupy.cuda.profiler.stop()
    print(f"loss {trainer.read_loss()[0]:.5f}")


if __name__ == "__main__":
    main()
