"""Fidelity: PSNR per preset and step budget, against an independent PyTorch implementation, and
the upscaling question (is the network a better image scaler than Lanczos or bicubic?).

    PYTHONPATH=. python benchmarks/fidelity.py [--out bench-results/fidelity.json] [--quick]

Runs on the GPU when one is usable, else on the CPU (slowly: hours at full size). PyTorch is
optional (`pip install torch` in the benchmark's own environment); without it that column is empty.

1. For each preset and sample photo at 256 px (longer side): PSNR of the training image after 300,
   1000 and 3000 steps of one 3000-step run (cosine schedule over 3000), ours and PyTorch's from the
   same initial parameters and the same schedule.
2. Upscaling: train at 128 and 256 px, render at 512, PSNR / SSIM against the 512 px original, beside
   Lanczos and bicubic upscales of the same small image.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import PHOTOS, ROOT, environment, save_json  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.config import build_config  # noqa: E402
from inr_cli.coords import pixel_grid  # noqa: E402
from inr_cli.images import load_image, resample, resize  # noqa: E402
from inr_cli.metrics import psnr, psnr_from_mse, ssim  # noqa: E402
from inr_cli.network import init_parameters  # noqa: E402
from inr_cli.render import render_float  # noqa: E402
from inr_cli.trainer import Trainer  # noqa: E402
from inr_cli.training import spec_for  # noqa: E402

PRESETS = ("siren", "sigmoid", "fourier")


def train_ours(backend, config, image, checkpoints):
    spec = spec_for(config, image)
    params = init_parameters(spec, config.seed)
    trainer = Trainer(backend, spec, config, image, params, np.zeros_like(params), np.zeros_like(params), 0,
                      config.steps)
    curve = {}
    for step in range(1, config.steps + 1):
        trainer.step()
        if step in checkpoints:
            curve[step] = round(psnr_from_mse(trainer.read_loss()), 3)
    return curve, trainer


def train_torch(torch, config, image, checkpoints, device):
    from benchmarks.torch_reference import TorchTrainer

    spec = spec_for(config, image)
    trainer = TorchTrainer(torch, spec, init_parameters(spec, config.seed), pixel_grid(image.width, image.height),
                           image.targets(), config.lr, config.lr_min, config.steps, 0, config.seed, device)
    curve = {}
    for step in range(1, config.steps + 1):
        trainer.step()
        if step in checkpoints:
            curve[step] = round(psnr_from_mse(trainer.read_loss()), 3)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "fidelity.json")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and budgets: a smoke run")
    parser.add_argument("--presets", nargs="*", default=list(PRESETS))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=256, help="longer side of the training images")
    parser.add_argument("--budgets", type=int, nargs="*", default=[300, 1000, 3000], help="steps to report")
    parser.add_argument("--up-sizes", type=int, nargs="*", default=[128, 256], help="train sizes for upscaling")
    parser.add_argument("--target", type=int, default=512, help="upscaling target size")
    args = parser.parse_args()
    size, budgets, up_sizes, target = args.size, tuple(args.budgets), tuple(args.up_sizes), args.target
    if args.quick:
        size, budgets, up_sizes, target = (32, (5, 10, 20), (16, 32), 64)
    backend = get_backend(args.device)
    try:
        import torch

        torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        torch = torch_device = None
    report = {"environment": environment(), "backend": backend.name, "size": size, "budgets": budgets,
              "curves": {}, "upscaling": {}}
    for photo in PHOTOS:
        image = load_image(PHOTOS[photo], size=size)
        original = load_image(PHOTOS[photo], size=target)
        for preset in args.presets:
            config = replace(build_config(None, {"steps": budgets[-1]}, preset), preview_every=0)
            ours, _ = train_ours(backend, config, image, set(budgets))
            row = {"inr": ours}
            if torch is not None:
                row["torch"] = train_torch(torch, config, image, set(budgets), torch_device)
            report["curves"][f"{photo}/{preset}"] = row
            print(f"{photo:7s} {preset:8s} inr {ours}  torch {row.get('torch', '-')}", flush=True)
            for small_size in up_sizes:
                small = load_image(PHOTOS[photo], size=small_size)
                _, trainer = train_ours(backend, config, small, set())
                rendered = render_float(backend, trainer.spec, trainer.flat_params, original.width, original.height)
                entry = report["upscaling"].setdefault(f"{photo}/{small_size}->{target}", {})
                entry[preset] = {"psnr": round(psnr(rendered, original.values), 3),
                                 "ssim": round(ssim(rendered, original.values), 4)}
                for name, method in (("lanczos", Image.LANCZOS), ("bicubic", Image.BICUBIC)):
                    upscaled = resample(resize(original, small_size).values, original.width, original.height,
                                        method)
                    entry[name] = {"psnr": round(psnr(upscaled, original.values), 3),
                                   "ssim": round(ssim(upscaled, original.values), 4)}
                print(f"  upscale {small_size}->{target}: {preset} {entry[preset]}, lanczos {entry['lanczos']}, "
                      f"bicubic {entry['bicubic']}", flush=True)
    save_json(report, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
