"""Is FINER worth an activation of its own? An independent PyTorch check beside SIREN and weight
scaling, on images of the time-to-quality suite, with inr's conventions (targets in [0, 1], the
network 3x256 of inr's siren preset, full batch, Adam).

    PYTHONPATH=. python benchmarks/finer_check.py [--size 64] [--images coffee cub] [--budget 2000]

FINER (Liu et al., CVPR 2024, "FINER: Flexible spectral-bias tuning in Implicit NEural
Representation by Variable-periodic Activation Functions"; code: liuzhen0212/FINER, models.py)
replaces sin(omega0 z) by sin(omega0 (|z| + 1) z), the factor |z| + 1 held out of the gradient in
their code (scale_req_grad off); weights drawn as SIREN's; the first layer's biases optionally
U(-k, k) (first_bias_scale, off by default: PyTorch's U(±1/sqrt(in))), a wider k reaching the
higher-frequency parts of the activation. Their image script: omega0 30, lr 5e-4 decayed
exponentially to a tenth over the run, targets in [-1, 1]. Each recipe is scored as the benchmark
scores it: the step at which the training PSNR (every 10 steps) first reaches 30 / 35 / 40 dB, and
a 2x render (trained at half the size for --upscale-steps, against the image at the size) beside
Lanczos. Nothing here is inr's own training code: only the images and the scores are shared.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, environment, save_json  # noqa: E402
from benchmarks.time_to_quality import SUITE, TARGETS, suite_image  # noqa: E402
from inr_cli.core.metrics import psnr, ssim  # noqa: E402
from inr_cli.formats.images import resample  # noqa: E402

# name: activation, omega0 (None: inr's rule from the size), weight scale, first-layer bias bound k,
# lr, final lr as a share of lr, schedule
RECIPES = {
    "siren-paper": ("sine", 30.0, 1.0, None, 1e-4, 1.0, "constant"),
    "ws2-paper": ("sine", 30.0, 2.0, None, 1e-4, 1.0, "constant"),
    "inr-default": ("sine", None, 1.0, None, 3e-4, 1e-5 / 3e-4, "cosine"),  # the preset of 2026-11-24
    "finer-paper-lr": ("finer", 30.0, 1.0, None, 1e-4, 1.0, "constant"),
    "finer-k1": ("finer", 30.0, 1.0, 1.0, 1e-4, 1.0, "constant"),
    "finer-theirs": ("finer", 30.0, 1.0, None, 5e-4, 0.1, "exponential"),
    "finer-inr": ("finer", None, 1.0, None, 3e-4, 1e-5 / 3e-4, "cosine"),
}


def omega0_for(size: int) -> float:
    """inr's rule (core/sizing.py): 0.3 per pixel of the longer side, 15 to 60."""
    return min(60.0, max(15.0, 0.3 * size))


class Net:
    def __init__(self, torch, activation, omega0, weight_scale, bias_k, out_features, seed, hidden=256, layers=3):
        generator = torch.Generator().manual_seed(seed)
        sizes = [2] + [hidden] * layers + [out_features]
        self.torch, self.activation, self.omega0 = torch, activation, omega0
        self.params = []
        for i in range(len(sizes) - 1):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            bound = 1.0 / fan_in if i == 0 else math.sqrt(6.0 / fan_in) / omega0
            weight = (torch.rand(fan_out, fan_in, generator=generator) * 2 - 1) * bound
            if i < len(sizes) - 2:
                weight = weight * weight_scale
            bias_bound = bias_k if (i == 0 and bias_k) else 1.0 / math.sqrt(fan_in)
            bias = (torch.rand(fan_out, generator=generator) * 2 - 1) * bias_bound
            self.params += [weight.requires_grad_(), bias.requires_grad_()]

    def __call__(self, x):
        torch = self.torch
        last = len(self.params) // 2 - 1
        for i in range(last + 1):
            x = x @ self.params[2 * i].T + self.params[2 * i + 1]
            if i < last:
                if self.activation == "finer":
                    with torch.no_grad():
                        scale = x.abs() + 1
                    x = torch.sin(self.omega0 * scale * x)
                else:
                    x = torch.sin(self.omega0 * x)
        return x


def coordinates(width: int, height: int) -> np.ndarray:
    """Pixel centres in [-1, 1] (inr's convention), x then y, row by row."""
    u = (np.arange(width) + 0.5) / width * 2 - 1
    v = (np.arange(height) + 0.5) / height * 2 - 1
    return np.stack(np.meshgrid(u, v), -1).reshape(-1, 2).astype(np.float32)


def train(torch, recipe, image, steps: int, seed: int, stop_when_done: bool):
    activation, omega0, weight_scale, bias_k, lr, final_share, schedule = recipe
    omega0 = omega0 or omega0_for(max(image.width, image.height))
    net = Net(torch, activation, omega0, weight_scale, bias_k, image.n_channels, seed)
    x = torch.from_numpy(coordinates(image.width, image.height))
    target = torch.from_numpy(image.values.reshape(-1, image.n_channels).astype(np.float32))
    optimizer = torch.optim.Adam(net.params, lr=lr)
    reached, best = {f"{t:g}dB": None for t in TARGETS}, float("-inf")
    for step in range(1, steps + 1):
        progress = (step - 1) / steps
        if schedule == "cosine":
            rate = lr * final_share + 0.5 * (lr - lr * final_share) * (1 + math.cos(math.pi * progress))
        elif schedule == "exponential":
            rate = lr * final_share ** progress
        else:
            rate = lr
        for group in optimizer.param_groups:
            group["lr"] = rate
        loss = ((net(x) - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == 1:
            quality = -10 * math.log10(max(loss.item(), 1e-30))
            best = max(best, quality)
            for t in TARGETS:
                if reached[f"{t:g}dB"] is None and quality >= t:
                    reached[f"{t:g}dB"] = step
            if stop_when_done and all(reached.values()):
                break
    return net, reached, best, step


def render(torch, net, width: int, height: int, channels: int) -> np.ndarray:
    with torch.no_grad():
        out = net(torch.from_numpy(coordinates(width, height))).numpy()
    return np.clip(out.reshape(height, width, channels), 0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--images", nargs="*", default=["coffee", "cub"], choices=list(SUITE))
    parser.add_argument("--recipes", nargs="*", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--upscale-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "finer-check.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    results = []
    for name in args.images:
        image, small = suite_image(name, args.size), suite_image(name, args.size // 2)
        lanczos = resample(small.values, image.width, image.height, Image.LANCZOS)
        for recipe_name in args.recipes:
            recipe = RECIPES[recipe_name]
            start = time.perf_counter()
            _, reached, best, steps = train(torch, recipe, image, args.budget, 0, True)
            net, _, _, _ = train(torch, recipe, small, args.upscale_steps, 0, False)
            drawn = render(torch, net, image.width, image.height, image.n_channels)
            row = {"image": name, "size": args.size, "recipe": recipe_name, "reached": reached,
                   "best_psnr": round(best, 2), "steps_run": steps,
                   "upscale": {"psnr": round(psnr(drawn, image.values), 3), "ssim": round(ssim(drawn, image.values), 4),
                               "lanczos_psnr": round(psnr(lanczos, image.values), 3),
                               "lanczos_ssim": round(ssim(lanczos, image.values), 4)},
                   "seconds": round(time.perf_counter() - start, 1)}
            results.append(row)
            up = row["upscale"]
            print(f"{name:12s} {args.size:4d} {recipe_name:16s} steps to 30/35/40 "
                  f"{' / '.join(str(s) if s else '-' for s in reached.values()):>16s}  best {best:6.2f}  "
                  f"2x {up['psnr']:.2f} dB ({up['psnr'] - up['lanczos_psnr']:+.2f} vs Lanczos), "
                  f"SSIM {up['ssim']:.4f} ({up['ssim'] - up['lanczos_ssim']:+.4f})  {row['seconds']:.0f} s", flush=True)
            save_json({"environment": environment(), "recipes": RECIPES, "results": results}, args.out)
    print(json.dumps({"saved": str(args.out)}))


if __name__ == "__main__":
    main()
