"""Render an 8192x8192 image on the GPU: seconds and peak GPU memory.

    PYTHONPATH=. python benchmarks/render_large.py [--size 8192] [--out bench-results/render.json]

Uses a SIREN 3x256 trained 200 steps on a 256-px sample (what it draws does not change the cost),
then times the chunked render alone and the full `inr render` path including the PNG write.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, configure, environment, make_trainer, photo, save_json  # noqa: E402
from inr_cli.core.render import render_uint8  # noqa: E402
from inr_cli.formats.images import save_uint8  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "render.json")
    args = parser.parse_args()

    import cupy

    from inr_cli.backends.cuda_backend import CudaBackend

    backend = CudaBackend()
    image = photo("coffee", 256, 256)
    trainer = make_trainer(backend, configure("siren", hidden=256, layers=3, omega0=30.0, lr=1e-4, steps=200), [image])
    for _ in range(200):
        trainer.step()
    spec, flat = trainer.spec, trainer.state().params[0]
    del trainer
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    render_uint8(backend, spec, flat, 512, 512)  # warm-up
    pool.free_all_blocks()
    baseline = pool.total_bytes()
    start = time.perf_counter()
    pixels = render_uint8(backend, spec, flat, args.size, args.size)
    render_s = time.perf_counter() - start
    peak = pool.total_bytes() - baseline
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        save_uint8(pixels, Path(tmp) / "render.png")
        png_s = time.perf_counter() - start
        png_bytes = (Path(tmp) / "render.png").stat().st_size
    report = {
        "environment": environment(), "size": args.size, "network": "siren 3x256",
        "render_seconds": round(render_s, 3), "mpix_per_s": round(args.size**2 / render_s / 1e6, 2),
        "gpu_pool_bytes_for_render": int(peak), "host_image_bytes": int(pixels.nbytes),
        "png_write_seconds": round(png_s, 3), "png_bytes": png_bytes,
    }
    print(report, flush=True)
    save_json(report, args.out)


if __name__ == "__main__":
    main()
