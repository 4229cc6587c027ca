"""Train small, render large: is the network a better image scaler than Lanczos, at every size and factor?

    PYTHONPATH=. python benchmarks/upscaling.py [--sizes 32 48 64 128 256 512] [--presets siren sigmoid]
        [--scales 2 4 8] [--images coffee kodim03 glyphs] [--kodak DIR]

For each image and each training size N (the longer side), train each preset on the image shrunk to N
(Lanczos, as `inr train --size`), render it at k x N for each factor k of --scales, and score PSNR and
SSIM against the original shrunk to k x N, beside Lanczos and bicubic upscales of the very image the
network was trained on. One training serves every factor. A factor whose target is larger than the
original is skipped (the photos are 600 and 640 px wide: up to 300 and 320 px at 2x; the drawings are
1024 px: up to 512; the Kodak photos 768 px: 96 px at 8x).

The images: the two sample photos in colour and the drawing fixtures in grey (what the presets were
tuned on, but for the text); the 24 Kodak photos (kodim01 .. kodim24, read from --kodak, never copied
into the repository); and two drawings made here at run time, never seen by any tuning: `glyphs`
(lines of text in the system's DejaVu fonts) and `doodle` (strokes, rings and hatching drawn from a
fixed seed), 2048 px wide. `--images kodak` names all 24, `--images held-out` the Kodak photos and
the three held-out drawings (text, glyphs, doodle).

A preset may carry settings: `siren:omega0=20,steps=500` (`--set` sets them for every preset).
Settings follow the image's size as `inr train` chooses them, unless set. Runs on the GPU when one is
usable, else on the CPU, one job per core (each on one thread).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from functools import lru_cache  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

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
from inr_cli.core.pixels import PixelImage  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.formats.images import load_image, resample, resize  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
IMAGES = {  # name: (file, grey)
    "coffee": (FIXTURES / "coffee.png", False),
    "rocket": (FIXTURES / "rocket.jpg", False),
    "cub": (FIXTURES / "drawing-cub.png", True),
    "house": (FIXTURES / "drawing-house.png", True),
    "text": (FIXTURES / "drawing-text.png", True),  # lines of text: strokes under 2 px at 224 px wide
}


# kodim01.png .. kodim24.png: --kodak, else $INR_KODAK, else ../shared/kodak beside the checkout
KODAK = Path(os.environ.get("INR_KODAK", ROOT.parent / "shared" / "kodak"))
KODAK_NAMES = [f"kodim{k:02d}" for k in range(1, 25)]
GENERATED_WIDTH = 2048  # the generated drawings' originals: 8x of 256 px
HELD_OUT_DRAWINGS = ["text", "glyphs", "doodle"]  # no preset was tuned on these
SETS = {"kodak": KODAK_NAMES, "held-out": KODAK_NAMES + HELD_OUT_DRAWINGS}


def parse_settings(pairs: list[str]) -> dict:
    settings = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        settings[key.replace("-", "_")] = float(value) if any(c in value for c in ".e") else int(value)
    return settings


def parse_variant(variant: str) -> tuple[str, dict]:
    """'siren:omega0=20,steps=500' -> ('siren', {'omega0': 20, 'steps': 500})."""
    preset, _, pairs = variant.partition(":")
    return preset, parse_settings([pair for pair in pairs.split(",") if pair])


def _font(name: str, size: int):
    try:
        return ImageFont.truetype(name, size)
    except OSError:  # no DejaVu on this system: Pillow's own font, another drawing than the one measured
        return ImageFont.load_default(size=size)


def _finish(canvas: Image.Image, width: int) -> PixelImage:
    """A drawing made at 4x its size, shrunk to `width` (the strokes' edges anti-aliased), as 8-bit grey."""
    height = round(canvas.height * width / canvas.width)
    values = np.asarray(canvas.resize((width, height), Image.LANCZOS), dtype=np.float32)[..., None] / 255.0
    return PixelImage(values, ("l",))


def glyphs(width: int = GENERATED_WIDTH) -> PixelImage:
    """Lines of text in the system's DejaVu fonts, from large to small print, 2048x784: the case where
    a network may memorise the pixels and ring between them."""
    canvas = Image.new("L", (4 * width, 4 * round(width * 0.383)), 255)
    draw = ImageDraw.Draw(canvas)
    lines = [("DejaVuSerif-Bold.ttf", "Between the pixels", 150, 40),
             ("DejaVuSans.ttf", "What is drawn where no sample was taken?", 84, 250),
             ("DejaVuSerif.ttf", "Lanczos, bicubic and a network: 2x 4x 8x", 64, 390),
             ("DejaVuSansMono.ttf", "0123456789 {[()]} #%&@ ~^*+=<>", 52, 510),
             ("DejaVuSans-Oblique.ttf", "small print: quick brown fox jumps over the lazy dog", 40, 610),
             ("DejaVuSerif.ttf", "smaller still, where strokes are thinner than a pixel at 256 px", 30, 690)]
    scale = 4 * width / 2048
    for font, words, size, top in lines:
        draw.text((60 * scale, top * scale), words, font=_font(font, round(size * scale)), fill=0)
    return _finish(canvas, width)


def doodle(width: int = GENERATED_WIDTH, seed: int = 7) -> PixelImage:
    """Strokes of many widths from a fixed seed, 2048x1536: smooth curves, rings, a hatched patch, a
    spiral and a grid of fine lines, black on white."""
    rng = np.random.default_rng(seed)
    w, h = 4 * width, 4 * round(width * 0.75)
    canvas = Image.new("L", (w, h), 255)
    draw = ImageDraw.Draw(canvas)
    unit = w / 2048
    for _ in range(14):  # smooth curves: sums of a few sines
        x0, y0 = rng.uniform(0.1, 0.9) * w, rng.uniform(0.1, 0.9) * h
        amplitude, frequency, phase = rng.uniform(40, 160) * unit, rng.uniform(2, 6), rng.uniform(0, 2 * math.pi)
        length, angle = rng.uniform(300, 900) * unit, rng.uniform(0, math.pi)
        t = np.linspace(0, 1, 200)
        along, across = (t - 0.5) * length, amplitude * np.sin(2 * math.pi * frequency * t * 0.3 + phase)
        xs = x0 + along * math.cos(angle) - across * math.sin(angle)
        ys = y0 + along * math.sin(angle) + across * math.cos(angle)
        draw.line(list(zip(xs, ys)), fill=0, width=max(1, round(rng.choice([3, 6, 10, 16]) * unit)), joint="curve")
    for _ in range(10):  # rings
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 140) * unit
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=0, width=max(1, round(rng.choice([4, 8, 12]) * unit)))
    for k in range(24):  # hatching
        x = 1400 * unit + 14 * k * unit
        draw.line((x, 1100 * unit, x + 200 * unit, 1400 * unit), fill=0, width=max(1, round(4 * unit)))
    spiral = [(400 * unit + (6 + 3 * a) * unit * math.cos(a), 1150 * unit + (6 + 3 * a) * unit * math.sin(a))
              for a in np.arange(0, 60, 0.05)]
    draw.line(spiral, fill=0, width=max(1, round(5 * unit)))
    for k in range(12):  # a grid of fine lines
        draw.line((1500 * unit, (80 + 18 * k) * unit, 1900 * unit, (80 + 18 * k) * unit), fill=0,
                  width=max(1, round(3 * unit)))
        draw.line(((1500 + 36 * k) * unit, 80 * unit, (1500 + 36 * k) * unit, 280 * unit), fill=0,
                  width=max(1, round(3 * unit)))
    return _finish(canvas, width)


GENERATED = {"glyphs": glyphs, "doodle": doodle}


def image_names(names: list[str]) -> list[str]:
    """The images named, the sets (kodak, held-out) spelt out."""
    return [name for entry in names for name in SETS.get(entry, [entry])]


@lru_cache(maxsize=4)
def original(name: str, kodak: Path = KODAK) -> PixelImage:
    """The image at its full size: a fixture, a Kodak photo or a generated drawing."""
    if name in GENERATED:
        return GENERATED[name]()
    if name in IMAGES:
        path, grey = IMAGES[name]
        return load_image(path, gray=grey)
    return load_image(kodak / f"{name}.png")


def image_at(name: str, size: int, kodak: Path = KODAK) -> PixelImage:
    """The image shrunk so its longer side is `size` (Lanczos), as `inr train --size` and the test images do."""
    return resize(original(name, kodak), size)


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


def job(device: str, workers: int, variant: str, name: str, size: int, scales: list[int], settings: dict,
        kodak: Path = KODAK) -> dict:
    preset, own = parse_variant(variant)
    settings = {**settings, **own}
    small = image_at(name, size, kodak)
    config = configure(preset, max(small.width, small.height), preview_every=0, **settings)
    backend = job_backend(device, workers)
    trainer = make_trainer(backend, config, [small])
    start = time.perf_counter()
    for _ in range(config.training.steps):
        trainer.step()
    seconds = time.perf_counter() - start
    params = trainer.params[:1]
    if config.network.dtype == "float16":  # what a finished run's checkpoint holds, and `inr render` draws
        params = (params.get() if hasattr(params, "get") else np.asarray(params)).astype(np.float16).astype(np.float32)
    fit = psnr(render_float(backend, trainer.spec, params, small.width, small.height), small.values)
    factors = {}
    for scale in scales:
        large = image_at(name, size * scale, kodak)
        rendered = render_float(backend, trainer.spec, params, large.width, large.height)
        factors[str(scale)] = {"target": size * scale, **upscale_scores(rendered, small, large, scale)}
    net = config.network
    return {"preset": preset, "variant": variant, "image": name, "size": size, "fit_psnr": round(fit, 3),
            "seconds": round(seconds, 1), "settings": {"omega0": net.omega0, "lr": config.optimizer.lr,
                                                       "steps": config.training.steps, **settings},
            "factors": factors}


def row(result: dict, scale: str) -> str:
    scores = result["factors"][scale]
    inr, lanczos = scores["inr"], scores["lanczos"]
    return (f"{result['variant']:12s} {result['image']:8s} {result['size']:4d} -> {scores['target']:4d} ({scale}x)  "
            f"fit {result['fit_psnr']:6.2f}  {inr['psnr']:6.2f} dB (Lanczos {lanczos['psnr']:6.2f}, "
            f"gap {inr['psnr'] - lanczos['psnr']:+5.2f})  SSIM {inr['ssim']:.4f} (Lanczos {lanczos['ssim']:.4f}, "
            f"{inr['ssim'] - lanczos['ssim']:+.4f})  error below / above the small image's band "
            f"{inr['low_band_mse']:.1e} / {inr['high_band_mse']:.1e} (Lanczos {lanczos['low_band_mse']:.1e} / "
            f"{lanczos['high_band_mse']:.1e}); in the flat / busy half {inr['flat_half_mse']:.1e} / "
            f"{inr['busy_half_mse']:.1e} (Lanczos {lanczos['flat_half_mse']:.1e} / {lanczos['busy_half_mse']:.1e})  "
            f"{result['seconds']:.0f} s")


def summary(results: list[dict]) -> list[str]:
    """Per preset, training size and factor, over the photos and over the drawings: the mean and the
    worst gap to Lanczos (render minus Lanczos, PSNR dB and SSIM), and the gap to bicubic."""
    groups: dict = {}
    for result in results:
        kind = "drawings" if original_is_drawing(result["image"]) else "photos"
        for scale, scores in result["factors"].items():
            groups.setdefault((result["variant"], result["size"], int(scale), kind), []).append(scores)
    lines = [f"{'preset':24s} {'size':>4s} {'factor':>6s} {'images':16s} {'PSNR gap: mean (worst)':>24s} "
             f"{'SSIM gap: mean (worst)':>26s} {'to bicubic':>10s}"]
    for (variant, size, scale, kind), scores in sorted(groups.items()):
        psnr_gaps = [s["inr"]["psnr"] - s["lanczos"]["psnr"] for s in scores]
        ssim_gaps = [s["inr"]["ssim"] - s["lanczos"]["ssim"] for s in scores]
        bicubic = [s["inr"]["psnr"] - s["bicubic"]["psnr"] for s in scores]
        lines.append(f"{variant:24s} {size:4d} {scale:5d}x {f'{len(scores)} {kind}':16s} "
                     f"{np.mean(psnr_gaps):+10.2f} ({min(psnr_gaps):+.2f}) {np.mean(ssim_gaps):+13.4f} "
                     f"({min(ssim_gaps):+.4f}) {np.mean(bicubic):+10.2f}")
    return lines


def original_is_drawing(name: str) -> bool:
    return name in GENERATED or (name in IMAGES and IMAGES[name][1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[32, 48, 64, 128, 256, 512])
    parser.add_argument("--images", nargs="*", default=list(IMAGES), help="fixtures (coffee rocket cub house text), "
                        "kodim01 .. kodim24, glyphs, doodle; the sets kodak and held-out")
    parser.add_argument("--presets", nargs="*", default=["siren"], metavar="PRESET[:KEY=VALUE,...]")
    parser.add_argument("--scales", type=int, nargs="*", default=[2], help="factors to render at, each from one "
                        "training")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override every preset")
    parser.add_argument("--kodak", type=Path, default=KODAK, help="the folder of kodim01.png .. kodim24.png")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=0, help="parallel jobs (default: 1 on a GPU, else cores)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "upscaling.json")
    args = parser.parse_args()
    settings = parse_settings(args.set)
    backend_name = get_backend(args.device).name
    workers = args.workers or default_workers(backend_name)
    jobs = []
    for size in args.sizes:
        for name in image_names(args.images):
            full = original(name, args.kodak)
            scales = [scale for scale in args.scales if size * scale <= max(full.width, full.height)]
            if not scales:
                continue
            for variant in args.presets:
                jobs.append((args.device, workers, variant, name, size, scales, settings, args.kodak))
    results = []
    with worker_pool(workers) as pool:
        for future in [pool.submit(job, *job_args) for job_args in jobs]:
            results.append(future.result())
            for scale in results[-1]["factors"]:
                print(row(results[-1], scale), flush=True)
            save_json({"environment": environment(), "backend": backend_name, "scales": args.scales,
                       "set": settings, "results": results}, args.out)
    print("\n".join(summary(results)))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
