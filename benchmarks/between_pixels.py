"""Random pixels or random positions between them: which batches train the hash grid better?

    PYTHONPATH=. python benchmarks/between_pixels.py [--images coffee rocket text] [--size 256] [--steps 200]
        [--fraction 0.25]

The hashgrid preset trains on random batches of pixels (`training.batch_size`, numpy_ops.batch_indices).
tiny-cuda-nn's image sample draws positions anywhere in the image instead and reads the image
bilinearly interpolated there. For each image this trains the preset both ways from the same start
with the same batch size (a share of the pixels), and reports the PSNR at the pixels (the image at
--size) over the steps and what each draws between the pixels: trained at --size / 2, rendered at
--size, against Lanczos.
Positions are drawn on the host (NumPy) and copied in each step: the comparison is of the steps,
not of their speed.
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

from benchmarks.common import ROOT, configure, environment, make_trainer, save_json  # noqa: E402
from benchmarks.time_to_quality import SUITE, suite_image  # noqa: E402
from benchmarks.upscaling import upscale_scores  # noqa: E402
from inr_cli.backends.cpu_backend import CpuBackend  # noqa: E402
from inr_cli.core.metrics import psnr  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402


def interpolated(values: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """The image (H, W, C) bilinearly interpolated at coords [rows, 2] in the coordinate convention
    (pixel centres at u = (x + 0.5) / W * 2 - 1; beyond the outer centres, the border's values)."""
    height, width = values.shape[:2]
    x = np.clip((coords[:, 0] + 1) / 2 * width - 0.5, 0, width - 1)
    y = np.clip((coords[:, 1] + 1) / 2 * height - 0.5, 0, height - 1)
    x0, y0 = np.minimum(np.floor(x).astype(int), width - 2), np.minimum(np.floor(y).astype(int), height - 2)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    top = values[y0, x0] * (1 - fx) + values[y0, x0 + 1] * fx
    bottom = values[y0 + 1, x0] * (1 - fx) + values[y0 + 1, x0 + 1] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def train(image, steps: int, fraction: float, positions: bool, seed: int = 0):
    """The hashgrid preset on the image for `steps` steps of batches of that fraction of its pixels,
    pixels or positions; the trainer and the PSNR at the pixels every steps // 10."""
    batch = max(1, int(image.width * image.height * fraction))
    config = configure("hashgrid", max(image.width, image.height), steps=steps, batch_size=batch, preview_every=0)
    backend = CpuBackend()
    trainer = make_trainer(backend, config, [image])
    rng = np.random.default_rng(seed)
    curve = []
    for step in range(1, steps + 1):
        if positions:
            coords = rng.uniform(-1, 1, (trainer.batch, 2)).astype(np.float32)
            trainer.batch_x[0], trainer.batch_t[0] = coords, interpolated(image.values, coords)
            trainer.training_pass(trainer.batch_x, trainer.batch_t, trainer.step_loss)
            trainer.optimizer.advance_schedule(backend, trainer.step_counter, trainer.hyper, trainer.total_steps)
            trainer.optimizer.update(backend, trainer.params, trainer.flat_grads, trainer.moment1, trainer.moment2,
                                     trainer.hyper)
            trainer.step_done += 1
        else:
            trainer.step()
        if step % max(1, steps // 10) == 0 or step == steps:
            drawn = render_float(backend, trainer.spec, trainer.params[:1], image.width, image.height)
            curve.append([step, round(psnr(drawn, image.values), 3)])
    return trainer, curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", nargs="*", default=["coffee", "rocket", "text"], choices=list(SUITE))
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fraction", type=float, default=0.25, help="pixels or positions a step, as a share of "
                        "the image's pixels")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "between-pixels.json")
    args = parser.parse_args()
    results = []
    for name in args.images:
        image, small = suite_image(name, args.size), suite_image(name, args.size // 2)
        for positions in (False, True):
            _, curve = train(image, args.steps, args.fraction, positions)
            trainer, _ = train(small, args.steps, args.fraction, positions)
            rendered = render_float(trainer.backend, trainer.spec, trainer.params[:1], image.width, image.height)
            scores = upscale_scores(rendered, small, image)
            kind = "positions" if positions else "pixels"
            results.append({"image": name, "size": args.size, "fraction": args.fraction, "steps": args.steps,
                            "sampling": kind, "curve": curve, "upscale": scores})
            inr, lanczos = scores["inr"]["psnr"], scores["lanczos"]["psnr"]
            print(f"{name:8s} {kind:9s} PSNR at the pixels by step {curve}  2x {inr:.2f} dB (Lanczos {lanczos:.2f}, "
                  f"gap {inr - lanczos:+.2f})", flush=True)
            save_json({"environment": environment(), "results": results}, args.out)


if __name__ == "__main__":
    main()
