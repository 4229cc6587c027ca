"""How strongly a hash grid's render creases flat areas at deep zoom (the faint woven texture), by
level count: each image is trained as `inr train` trains it at --size px (the hashgrid preset,
--levels set by hand), drawn at --zoom times that size, and the mean absolute Laplacian (second
differences along rows and columns, of the grey render) taken over the pixels drawn from the
flattest quarter of the small image's pixels (by 3x3 variance). A flat area drawn smoothly has
next to none; each level's cell edges add creases.

    INR_KODAK=../shared/kodak PYTHONPATH=. python dev/deep_zoom_creases.py --images kodim20 kodim03 kodim23 \
        --levels 16 32 --out bench-results/deep-zoom-creases.json
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, environment, job_backend, make_trainer, save_json  # noqa: E402
from benchmarks.upscaling import image_at  # noqa: E402
from inr_cli.config import build_config  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.core.sizing import fit_to_image  # noqa: E402


def creases(name: str, size: int, levels: int, zoom: int) -> float:
    small = image_at(name, size)
    config = fit_to_image(build_config(None, {"training.preview_every": 0, "encoding.levels": levels}, "hashgrid"),
                          small.width, small.height, small.n_channels)[0]
    backend = job_backend("cpu", 1)
    trainer = make_trainer(backend, config, [small])
    for _ in range(config.training.steps):
        trainer.step()
    params = np.asarray(trainer.params[:1]).astype(np.float16).astype(np.float32)  # as a finished run stores it
    drawn = render_float(backend, trainer.spec, params, small.width * zoom, small.height * zoom, clip=False)
    grey = drawn.mean(axis=2)
    padded = np.pad(small.values.mean(axis=2), 1, mode="edge")
    variance = np.lib.stride_tricks.sliding_window_view(padded, (3, 3)).var(axis=(2, 3))
    flat = np.kron(variance <= np.quantile(variance, 0.25), np.ones((zoom, zoom), bool))[1:-1, 1:-1]
    laplacian = np.abs(grey[2:, 1:-1] + grey[:-2, 1:-1] + grey[1:-1, 2:] + grey[1:-1, :-2] - 4 * grey[1:-1, 1:-1])
    return float(laplacian[flat].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", nargs="*", default=["kodim20", "kodim03", "kodim23"])
    parser.add_argument("--levels", type=int, nargs="*", default=[16, 32])
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--zoom", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "deep-zoom-creases.json")
    args = parser.parse_args()
    rows = []
    for name in args.images:
        for levels in args.levels:
            rows.append({"image": name, "levels": levels, "size": args.size, "zoom": args.zoom,
                         "flat_mean_abs_laplacian": creases(name, args.size, levels, args.zoom)})
            print(f"{name:10s} {levels:3d} levels  flat quarter's mean |Laplacian| at {args.zoom}x: "
                  f"{rows[-1]['flat_mean_abs_laplacian']:.3e}", flush=True)
        save_json({"environment": environment(), "rows": rows}, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
