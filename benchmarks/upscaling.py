"""Train small, render large: is the network a better image scaler than Lanczos, at every size?

    PYTHONPATH=. python benchmarks/upscaling.py [--sizes 32 48 64 128 256 512] [--presets siren sigmoid]

For each image (the two sample photos in colour, the two drawing fixtures in grey) and each training
size N (the longer side), train the preset on the image shrunk to N (Lanczos, as `inr train --size`),
render it at --scale x N, and score PSNR and SSIM against the original shrunk to that size, beside
Lanczos and bicubic upscales of the very image the network was trained on. A size whose target is
larger than the original is skipped (the photos are 600 and 640 px wide: up to 300 and 320 px at 2x;
the drawings are 1024 px: up to 512). Settings follow the image's size as `inr train` chooses them;
`--set omega0=30 lr=1e-3` overrides them (for tuning). Runs on the GPU when one is usable, else on the
CPU, one job per core (each on one thread).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    ROOT,
    configure,
    default_workers,
    environment,
    job_backend,
    make_trainer,
    save_json,
    worker_pool,
)
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.metrics import psnr, ssim  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.formats.images import load_image, resample  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
IMAGES = {  # name: (file, grey)
    "coffee": (FIXTURES / "coffee.png", False),
    "rocket": (FIXTURES / "rocket.jpg", False),
    "cub": (FIXTURES / "drawing-cub.png", True),
    "house": (FIXTURES / "drawing-house.png", True),
    "text": (FIXTURES / "drawing-text.png", True),  # lines of text: strokes under 2 px at 224 px wide
}


def parse_settings(pairs: list[str]) -> dict:
    settings = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        settings[key.replace("-", "_")] = float(value) if any(c in value for c in ".e") else int(value)
    return settings


def band_errors(rendered: np.ndarray, original: np.ndarray, scale: int) -> dict:
    """Where the error lies: its mean square split (Parseval) between the band the training image
    could hold (below its Nyquist frequency, 1 / (2 * scale) cycles per pixel of the render) and the
    band above. A resampler leaves the original's detail above that band out; a render with more
    error there than Lanczos has drawn something that is not in the original (ripples, noise)."""
    height, width, channels = original.shape
    spectrum = np.fft.fft2((rendered - original).astype(np.float64), axes=(0, 1))
    power = (np.abs(spectrum) ** 2).sum(axis=2) / (height * width) / (height * width * channels)
    low = ((np.abs(np.fft.fftfreq(height))[:, None] < 0.5 / scale)
           & (np.abs(np.fft.fftfreq(width))[None, :] < 0.5 / scale))
    # And where in the picture: the flattest half of the original (by local variance over 7x7)
    # against the busier half. SSIM divides by local variance, so error in flat areas costs it most.
    grey = original.mean(axis=2)
    padded = np.pad(grey, 3, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, (7, 7))
    flat = windows.var(axis=(2, 3)) <= np.median(windows.var(axis=(2, 3)))
    squared = ((rendered - original) ** 2).mean(axis=2)
    return {"low_band_mse": float(power[low].sum()), "high_band_mse": float(power[~low].sum()),
            "flat_half_mse": float(squared[flat].mean()), "busy_half_mse": float(squared[~flat].mean())}


def upscale_scores(rendered: np.ndarray, small, original, scale: int | None = None) -> dict:
    """The network's render and the classic resamplers of the same small image, each against the
    original: PSNR and SSIM, and with `scale` where the error lies (band_errors)."""
    scores = {"inr": rendered}
    for name, method in (("lanczos", Image.LANCZOS), ("bicubic", Image.BICUBIC)):
        scores[name] = resample(small.values, original.width, original.height, method)
    return {name: {"psnr": round(psnr(values, original.values), 3), "ssim": round(ssim(values, original.values), 4),
                   **(band_errors(values, original.values, scale) if scale else {})}
            for name, values in scores.items()}


def job(device: str, workers: int, preset: str, name: str, size: int, scale: int, settings: dict) -> dict:
    path, grey = IMAGES[name]
    small = load_image(path, size=size, gray=grey)
    original = load_image(path, size=size * scale, gray=grey)
    config = configure(preset, max(small.width, small.height), preview_every=0, **settings)
    backend = job_backend(device, workers)
    trainer = make_trainer(backend, config, [small])
    start = time.perf_counter()
    for _ in range(config.training.steps):
        trainer.step()
    seconds = time.perf_counter() - start
    params = trainer.params[:1]
    fit = psnr(render_float(backend, trainer.spec, params, small.width, small.height), small.values)
    rendered = render_float(backend, trainer.spec, params, original.width, original.height)
    result = upscale_scores(rendered, small, original, scale)
    net = config.network
    return {"preset": preset, "image": name, "size": size, "target": size * scale, "fit_psnr": round(fit, 3),
            "seconds": round(seconds, 1), "settings": {"omega0": net.omega0, "lr": config.optimizer.lr,
                                                       "steps": config.training.steps, **settings},
            **result}


def row(result: dict) -> str:
    inr, lanczos = result["inr"], result["lanczos"]
    return (f"{result['preset']:8s} {result['image']:7s} {result['size']:4d} -> {result['target']:4d}  "
            f"fit {result['fit_psnr']:6.2f}  2x {inr['psnr']:6.2f} dB (Lanczos {lanczos['psnr']:6.2f}, "
            f"gap {inr['psnr'] - lanczos['psnr']:+5.2f})  SSIM {inr['ssim']:.4f} (Lanczos {lanczos['ssim']:.4f}, "
            f"{inr['ssim'] - lanczos['ssim']:+.4f})  error below / above the small image's band "
            f"{inr['low_band_mse']:.1e} / {inr['high_band_mse']:.1e} (Lanczos {lanczos['low_band_mse']:.1e} / "
            f"{lanczos['high_band_mse']:.1e}); in the flat / busy half {inr['flat_half_mse']:.1e} / "
            f"{inr['busy_half_mse']:.1e} (Lanczos {lanczos['flat_half_mse']:.1e} / {lanczos['busy_half_mse']:.1e})  "
            f"{result['seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[32, 48, 64, 128, 256, 512])
    parser.add_argument("--images", nargs="*", default=list(IMAGES), choices=list(IMAGES))
    parser.add_argument("--presets", nargs="*", default=["siren"])
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the preset")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=0, help="parallel jobs (default: 1 on a GPU, else cores)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "upscaling.json")
    args = parser.parse_args()
    settings = parse_settings(args.set)
    backend_name = get_backend(args.device).name
    workers = args.workers or default_workers(backend_name)
    jobs = []
    for size in args.sizes:
        for name in args.images:
            with Image.open(IMAGES[name][0]) as im:
                if size * args.scale > max(im.size):
                    continue
            for preset in args.presets:
                jobs.append((args.device, workers, preset, name, size, args.scale, settings))
    results = []
    with worker_pool(workers) as pool:
        for future in [pool.submit(job, *job_args) for job_args in jobs]:
            results.append(future.result())
            print(row(results[-1]), flush=True)
    save_json({"environment": environment(), "backend": backend_name, "scale": args.scale, "set": settings,
               "results": results}, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
