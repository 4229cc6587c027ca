"""Experiment: a grid of latents (spatial functa, Bauer et al. 2023) against one latent an image
(functa, as `inr meta-init --modulations` learns it), both meta-learned in PyTorch on 32-px images,
scored on held-out images image by image: how many reach 30 dB in 3 and 10 steps, and what the base
can hold at all (each held-out latent fitted by Adam for 300 steps, the "ceiling").

    python dev/spatial_latents.py --data SUITE/photos --kind functa --hidden 128 --layers 6 --latents 768 \
        --lr 3e-4 --outer 1200 --every 200 --out functa.json
    python dev/spatial_latents.py --data SUITE/photos --kind grid --hidden 64 --layers 3 --grid 16 --channels 8 \
        --lr 1e-3 --outer 800 --out grid.json [--first-only]

SUITE is benchmarks/weights_suite.py's --data folder (its photos: the tiles of the photos of
../shared/images, one folder a photo). The held-out images are 30% of them, drawn by --seed.

- functa: every hidden layer of the base SIREN is shifted by M z, z the image's D latents.
- grid: the latents are a G x G grid of C numbers over the image (cells centred on [-1, 1]); each
  pixel reads the bilinear mix of its four nearest cells, f(x), and hidden layer l is shifted by
  f(x) M_l (with --first-only, the first layer alone). A pixel's shift comes from the latents near
  it: an image's network is no longer one SIREN with moved biases, as a set of latents is in inr.

Both fit z from 0 by K steps of z <- z - rates * dL/dz (meta-SGD, a rate per latent), and learn the
base, the maps and the rates through those steps (second order, by autograd) with Adam, its rate
falling to a tenth by a cosine. This is not inr's engine (no output at the mean colour, another
split, PyTorch's autograd for the outer gradient): compare kinds within this script, not against
BENCHMARKS.md's tables of inr.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import time

import numpy as np
import torch
from PIL import Image


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a folder of folders of same-size RGB PNGs")
    parser.add_argument("--kind", choices=("functa", "grid"), default="grid")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--latents", type=int, default=768, help="functa: D")
    parser.add_argument("--grid", type=int, default=8, help="grid: G cells across")
    parser.add_argument("--channels", type=int, default=16, help="grid: C numbers a cell")
    parser.add_argument("--first-only", action="store_true", help="grid: shift the first layer alone")
    parser.add_argument("--omega0", type=float, default=15.0)
    parser.add_argument("--inner", type=int, default=3, help="K: the steps the base is learned for")
    parser.add_argument("--outer", type=int, default=800)
    parser.add_argument("--lr", type=float, default=3e-4, help="Adam's outer rate")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--every", type=int, default=100, help="outer steps between held-out readings")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="the results (JSON); the learned tensors beside it (.pt)")
    return parser.parse_args()


def bilinear(side: int, cells: int, coords: np.ndarray) -> torch.Tensor:
    """[side^2, cells^2]: each pixel's weights over the grid's cells, centred cells over [-1, 1],
    clamped at the border."""
    place = (coords + 1) / 2 * cells - 0.5
    mix = np.zeros((side * side, cells * cells), np.float32)
    for pixel, (x, y) in enumerate(place):
        x0, y0 = math.floor(x), math.floor(y)
        for dx in (0, 1):
            for dy in (0, 1):
                xi, yi = min(max(x0 + dx, 0), cells - 1), min(max(y0 + dy, 0), cells - 1)
                mix[pixel, yi * cells + xi] += (1 - abs(x - (x0 + dx))) * (1 - abs(y - (y0 + dy)))
    return torch.tensor(mix)


def main() -> None:
    a = arguments()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    torch.set_num_threads(a.threads)
    files = sorted(glob.glob(f"{a.data}/*/*.png"))
    images = np.stack([np.asarray(Image.open(f).convert("RGB"), np.float32) / 255 for f in files])
    side = images.shape[1]
    order = rng.permutation(len(files))
    held = int(round(0.3 * len(files)))
    test, train = order[:held], order[held:]
    targets = torch.tensor(images.reshape(len(files), side * side, 3))
    centres = (np.arange(side) + 0.5) / side * 2 - 1
    coords_np = np.stack(np.meshgrid(centres, centres, indexing="xy"), -1).reshape(-1, 2).astype(np.float32)
    coords = torch.tensor(coords_np)

    hidden, layers, omega0 = a.hidden, a.layers, a.omega0

    def siren_layer(fan_in: int, fan_out: int, first: bool):
        bound = 1 / fan_in if first else math.sqrt(6 / fan_in) / omega0
        weight = torch.empty(fan_out, fan_in).uniform_(-bound, bound).requires_grad_()
        bias = torch.empty(fan_out).uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in)).requires_grad_()
        return weight, bias

    weights, biases = [], []
    widths = [2] + [hidden] * layers
    for layer in range(layers):
        weight, bias = siren_layer(widths[layer], widths[layer + 1], layer == 0)
        weights.append(weight)
        biases.append(bias)
    out_weight, out_bias = siren_layer(hidden, 3, False)
    if a.kind == "functa":
        latent_shape = (a.latents,)
        torch.randn(a.latents, hidden * layers)  # a draw the measured runs made and discarded: kept for their seeds
        shift_map = torch.empty(a.latents, hidden * layers).normal_(0, 1 / math.sqrt(a.latents)).requires_grad_()
        mix = None
    else:
        latent_shape = (a.grid * a.grid, a.channels)
        shifted = 1 if a.first_only else layers
        shift_map = torch.empty(a.channels, hidden * shifted).normal_(0, 1 / math.sqrt(a.channels)).requires_grad_()
        mix = bilinear(side, a.grid, coords_np)
    rates = torch.full(latent_shape, 1e-2).requires_grad_()
    learned = weights + biases + [out_weight, out_bias, shift_map, rates]
    count = int(np.prod(latent_shape))

    def forward(z: torch.Tensor) -> torch.Tensor:
        """[B, pixels, 3] from latents [B, *latent_shape]."""
        n = z.shape[0]
        if mix is None:
            shifts = (z @ shift_map).view(n, 1, layers, hidden)
        else:
            shifts = ((mix @ z) @ shift_map).view(n, side * side, -1, hidden)
        h = coords.expand(n, -1, -1)
        for layer in range(layers):
            pre = h @ weights[layer].T + biases[layer]
            if mix is None or not a.first_only or layer == 0:
                pre = pre + shifts[:, :, min(layer, shifts.shape[2] - 1)]
            h = torch.sin(omega0 * pre)
        return h @ out_weight.T + out_bias + 0.5

    def inner(y: torch.Tensor, steps: int, second_order: bool) -> torch.Tensor:
        z = torch.zeros((y.shape[0],) + latent_shape, requires_grad=True)
        for _ in range(steps):
            loss = ((forward(z) - y) ** 2).mean() * y.shape[0]  # each image's mean squared error, summed
            (gradient,) = torch.autograd.grad(loss, z, create_graph=second_order)
            z = z - rates * gradient
        return z

    def psnrs(z: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return (-10 * torch.log10(((forward(z).clamp(0, 1) - y) ** 2).mean(dim=(1, 2)))).numpy()

    def summary(values: np.ndarray) -> dict:
        return {"mean": float(values.mean()), "min": float(values.min()), "share30": float((values >= 30).mean())}

    def held_out(steps_list=(3, 10)) -> dict:
        found = {}
        for steps in steps_list:
            values = [psnrs(inner(targets[test[i:i + 32]], steps, False).detach(), targets[test[i:i + 32]])
                      for i in range(0, len(test), 32)]
            found[steps] = summary(np.concatenate(values))
        return found

    def ceiling(steps: int = 300, rate: float = 1e-2) -> dict:
        values = []
        for i in range(0, len(test), 32):
            y = targets[test[i:i + 32]]
            z = inner(y, a.inner, False).detach().requires_grad_()
            adam = torch.optim.Adam([z], lr=rate)
            for _ in range(steps):
                loss = ((forward(z) - y) ** 2).mean() * y.shape[0]
                adam.zero_grad()
                loss.backward()
                adam.step()
            values.append(psnrs(z.detach(), y))
        values = np.concatenate(values)
        worst = np.argsort(values)[:5]
        return {**summary(values), "worst": [int(test[j]) for j in worst], "worst_psnr": values[worst].tolist()}

    adam = torch.optim.Adam(learned, lr=a.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(adam, a.outer, eta_min=a.lr / 10)
    started, log = time.time(), []
    for step in range(1, a.outer + 1):
        y = targets[torch.tensor(rng.choice(train, a.batch, replace=False))]
        loss = ((forward(inner(y, a.inner, True)) - y) ** 2).mean()
        adam.zero_grad()
        loss.backward()
        adam.step()
        schedule.step()
        with torch.no_grad():
            rates.clamp_(min=0)
        if step % a.every == 0 or step == a.outer:
            reading = {**held_out(), "step": step, "train_psnr": -10 * math.log10(loss.item()),
                       "s": round(time.time() - started)}
            log.append(reading)
            print(json.dumps(reading), flush=True)
    results = {"args": vars(a), "D": count, "log": log, "ceiling": ceiling()}
    print("ceiling", json.dumps(results["ceiling"]), flush=True)
    if a.out:
        with open(a.out, "w") as handle:
            json.dump(results, handle)
        torch.save({"learned": learned}, a.out.removesuffix(".json") + ".pt")


if __name__ == "__main__":
    main()
