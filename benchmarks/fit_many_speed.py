"""Images per second of fitting many small images at once, ours against PyTorch batched, side by side.

The setting of issue 13: SIREN 3x64 (omega0 30, Adam lr 1e-4 cosine), one network per image, full
batch, `--steps` steps, packs of `--pack` networks trained together (ours: the core's networks
dimension; PyTorch: stacked weights and batched matmuls, the way PyTorch users batch networks).
The images are crops of the two sample photos. Each contestant fits `--images` images pack after
pack; the two alternate over `--rounds` rounds and the ratio of the median times is printed, with
the mean PSNR each reached (same initial parameters, same schedule) and, on a GPU, the device
memory per image.

    PYTHONPATH=. python benchmarks/fit_many_speed.py --size 32 --pack 64 --images 128          # CPU
    PYTHONPATH=. python benchmarks/fit_many_speed.py --device gpu --size 64 --pack 2048 --images 10000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import inr_cli  # noqa: E402,F401  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import PHOTOS, ROOT, configure, environment, make_trainer, save_json  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402
from inr_cli.core.network import NetworkSpec, init_networks, output_means  # noqa: E402
from inr_cli.core.pixels import PixelImage  # noqa: E402


def crops(count: int, size: int) -> list[PixelImage]:
    """`count` size x size RGB crops of the sample photos at random places and scales (seeded)."""
    rng = np.random.default_rng(0)
    photos = [Image.open(path).convert("RGB") for path in PHOTOS.values()]
    images = []
    for i in range(count):
        photo = photos[i % len(photos)]
        side = int(rng.integers(size, min(photo.size) // 2))
        x, y = int(rng.integers(0, photo.size[0] - side)), int(rng.integers(0, photo.size[1] - side))
        crop = photo.crop((x, y, x + side, y + side)).resize((size, size), Image.LANCZOS)
        images.append(PixelImage(np.asarray(crop, dtype=np.float32) / 255.0, ("r", "g", "b")))
    return images


def run_ours(backend, config, images, pack):
    losses, peak = [], 0
    start = time.perf_counter()
    for first in range(0, len(images), pack):
        trainer = make_trainer(backend, config, images[first:first + pack], seeds=range(first, first + pack))
        for _ in range(config.training.steps):
            trainer.step()
        losses.append(trainer.read_loss())  # a host read: the pack is finished
        peak = max(peak, _pool_bytes(backend))
        del trainer
    return time.perf_counter() - start, np.concatenate(losses), peak


def run_torch(torch, config, images, pack, device):
    from benchmarks.torch_reference import BatchedTorchTrainer, optimizer_settings

    spec = NetworkSpec.from_config(config, 3)
    opt, steps = config.optimizer, config.training.steps
    coords = pixel_grid(images[0].width, images[0].height)
    losses, peak = [], 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for first in range(0, len(images), pack):
        chunk = images[first:first + pack]
        start_params = init_networks(spec, range(first, first + len(chunk)), output_means(config, chunk))  # as ours
        trainer = BatchedTorchTrainer(torch, spec, start_params, coords,
                                      np.stack([im.targets() for im in chunk]), opt.lr, opt.lr_min, steps, device,
                                      **optimizer_settings(opt))
        for _ in range(steps):
            trainer.step()
        losses.append(trainer.read_loss())
    seconds = time.perf_counter() - start
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    return seconds, np.concatenate(losses), peak


def _pool_bytes(backend) -> int:
    if backend.name != "gpu":
        return 0
    import cupy

    backend.synchronize()
    return cupy.get_default_memory_pool().used_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--pack", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contestants", nargs="+", default=["ours", "torch"], choices=("ours", "torch"),
                        help="who fits (one alone: a run cut short still has the other's figures in its own file)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    config = configure("siren", hidden=args.hidden, layers=args.layers, omega0=30.0, lr=args.lr,
                       lr_min=min(1e-5, args.lr), steps=args.steps, device=args.device)
    backend = get_backend(args.device)
    torch_device = "cuda" if args.device == "gpu" else "cpu"
    images = crops(args.images, args.size)
    seconds_of, psnr_of, peak_of = {who: [] for who in args.contestants}, {}, {}
    for round_index in range(args.rounds):
        for who in args.contestants[::-1] if round_index % 2 else args.contestants:
            if who == "ours":
                seconds, loss, peak_of[who] = run_ours(backend, config, images, args.pack)
            else:
                import torch

                seconds, loss, peak_of[who] = run_torch(torch, config, images, args.pack, torch_device)
            seconds_of[who].append(seconds)
            psnr_of[who] = float(np.mean([psnr_from_mse(v) for v in loss]))
        print(f"round {round_index + 1}: " + ", ".join(
            f"{who} {seconds_of[who][-1]:.2f} s ({args.images / seconds_of[who][-1]:.1f} images/s, mean PSNR "
            f"{psnr_of[who]:.2f} dB)" for who in args.contestants), flush=True)
    report = {"environment": environment(), "setting": {k: v for k, v in vars(args).items() if k != "out"}}
    for who in args.contestants:
        report[f"{who}_s"] = seconds_of[who]
        report[f"{who}_images_per_s"] = round(args.images / statistics.median(seconds_of[who]), 2)
        report[f"{who}_mean_psnr"] = round(psnr_of[who], 3)
        if args.device == "gpu":
            report[f"{who}_gpu_bytes_per_image"] = peak_of[who] // args.pack
    if len(args.contestants) == 2:
        ratio = statistics.median(seconds_of["torch"]) / statistics.median(seconds_of["ours"])
        report["speedup_ours_over_torch"] = round(ratio, 3)
        print(f"median: ours {report['ours_images_per_s']} images/s, PyTorch {report['torch_images_per_s']} "
              f"images/s: ours {ratio:.2f}x as fast")
    out = args.out or ROOT / "bench-results" / f"fit-many-{args.device}-{args.size}.json"
    save_json(report, out)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
