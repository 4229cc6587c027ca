"""Preset tuning: a small grid of settings per preset, each trained on both sample photos.

    PYTHONPATH=. python benchmarks/tune_presets.py siren --size 128 --workers 2 [--device gpu] \
        --grid lr=1e-4,3e-4 omega0=30,60 [--steps 1000] [--out benchmarks/results/tune-siren.json]

For every combination of the grid it trains the preset (its own step budget unless --steps) on each
photo resized so the longer side is --size, and reports the PSNR of the training image at the end,
and the PSNR of a render at twice the size against the photo resized to twice the size (how the
setting generalises between pixels: a setting can fit the pixels and draw noise between them).
Runs in parallel worker processes, one BLAS thread each: on a CPU that is faster than one process.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import PHOTOS, ROOT, configure, environment, save_json, worker_pool  # noqa: E402
from inr_cli.api import number_or_text  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.metrics import psnr  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402
from inr_cli.settings import BY_NAME  # noqa: E402

FIELDS = set(BY_NAME)  # the command line's names (lr, omega0, fourier_sigma, ...)


def parse_grid(items: list[str]) -> dict[str, list]:
    """name=v1,v2 pairs into {field: [values]}; numbers stay numbers."""
    grid = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in FIELDS or not values:
            raise SystemExit(f"--grid {item!r}: expected FIELD=v1,v2 with FIELD one of {', '.join(sorted(FIELDS))}")
        grid[name] = [number_or_text(v) for v in values.split(",")]
    return grid


def run_one(device: str, preset: str, overrides: dict, photo: str, size: int) -> dict:
    from benchmarks.fidelity import train_ours

    config = configure(preset, size, **{**overrides, "preview_every": 0})
    steps = config.training.steps
    image = load_image(PHOTOS[photo], size=size)
    larger = load_image(PHOTOS[photo], size=2 * size)
    start = time.perf_counter()
    curve, trainer = train_ours(get_backend(device), config, image, {steps})
    rendered = render_float(trainer.backend, trainer.spec, trainer.params[:1], larger.width, larger.height)
    return {"photo": photo, "settings": overrides, "train_psnr": curve[steps],
            "upscale2x_psnr": round(psnr(rendered, larger.values), 3), "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset")
    parser.add_argument("--grid", nargs="*", default=[], help="FIELD=v1,v2 ... (config field names)")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=0, help="step budget (default: the preset's)")
    parser.add_argument("--device", default="cpu", help="cpu, gpu or auto")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    grid = parse_grid(args.grid)
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]
    if args.steps:
        combos = [{**combo, "steps": args.steps} for combo in combos]
    jobs = [(args.device, args.preset, combo, photo, args.size) for combo in combos for photo in PHOTOS]
    results = []
    with worker_pool(args.workers) as pool:
        for result in pool.map(run_one, *zip(*jobs)):
            results.append(result)
            print(f"{result['photo']:7s} {result['settings']}  train {result['train_psnr']:.2f} dB  "
                  f"2x {result['upscale2x_psnr']:.2f} dB  ({result['seconds']} s)", flush=True)
    print(f"\n{args.preset} at {args.size} px, mean over {len(PHOTOS)} photos:")
    summary = []
    for combo in combos:
        rows = [r for r in results if r["settings"] == combo]
        entry = {"settings": combo, "train_psnr": round(float(np.mean([r["train_psnr"] for r in rows])), 3),
                 "upscale2x_psnr": round(float(np.mean([r["upscale2x_psnr"] for r in rows])), 3)}
        summary.append(entry)
        print(f"  {combo}  train {entry['train_psnr']:.2f} dB  2x {entry['upscale2x_psnr']:.2f} dB")
    out = args.out or ROOT / "bench-results" / f"tune-{args.preset}.json"
    save_json({"environment": environment(), "preset": args.preset, "size": args.size, "results": results,
               "summary": summary}, out)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
