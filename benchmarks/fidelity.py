"""Fidelity: PSNR per preset and step budget, against an independent PyTorch implementation, and
the upscaling question (is the network a better image scaler than Lanczos or bicubic?).

    PYTHONPATH=. python benchmarks/fidelity.py [--out bench-results/fidelity.json] [--quick]

Runs on the GPU when one is usable, else on the CPU (slowly: hours at full size; there the jobs run
in --workers processes, one per core by default, each on its share of the cores). PyTorch is
optional (`pip install torch` in the benchmark's own environment); without it that column is empty.

1. For each preset and sample photo at --size px (longer side): PSNR of the training image after
   each of --budgets steps of one run as long as the last budget (cosine schedule over that run),
   ours and PyTorch's from the same initial parameters and the same schedule (PyTorch stopped after
   --torch-steps if given).
2. Upscaling: train at each of --up-sizes (a size equal to --size reuses that run), render at each
   of --targets, PSNR / SSIM against the photo resized to the target, beside Lanczos and bicubic
   upscales of the very image the network was trained on. (benchmarks/upscaling.py asks the same
   question at every size from 32 to 512 px, on photos and drawings, at 2x.)
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    PHOTOS,
    ROOT,
    configure,
    default_workers,
    environment,
    job_backend,
    make_trainer,
    save_json,
    worker_pool,
)
from benchmarks.upscaling import upscale_scores  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402
from inr_cli.core.network import NetworkSpec, init_networks, output_means  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402

PRESETS = ("siren", "sigmoid", "fourier")


def train_ours(backend, config, image, checkpoints):
    trainer = make_trainer(backend, config, [image])
    curve = {}
    for step in range(1, config.training.steps + 1):
        trainer.step()
        if step in checkpoints:
            curve[step] = round(psnr_from_mse(float(trainer.read_loss()[0])), 3)
    return curve, trainer


def train_torch(torch, config, image, checkpoints, device, stop_after):
    from benchmarks.torch_reference import TorchTrainer, optimizer_settings

    spec = NetworkSpec.from_config(config, image.n_channels)
    opt, steps, seed = config.optimizer, config.training.steps, config.training.seed
    trainer = TorchTrainer(torch, spec, init_networks(spec, [seed], output_means(config, [image]))[0],
                           pixel_grid(image.width, image.height),
                           image.targets(), opt.lr, opt.lr_min, steps, 0, seed, device, **optimizer_settings(opt))
    curve = {}
    for step in range(1, min(stop_after, steps) + 1):
        trainer.step()
        if step in checkpoints:
            curve[step] = round(psnr_from_mse(trainer.read_loss()), 3)
    return curve


def ours_job(device, workers, preset, photo, train_size, steps, budgets, targets):
    """One of our runs: its PSNR curve and its renders at each target size."""
    config = configure(preset, train_size, steps=steps, preview_every=0)
    small = load_image(PHOTOS[photo], size=train_size)
    backend = job_backend(device, workers)
    curve, trainer = train_ours(backend, config, small, set(budgets))
    upscales = {}
    for target in targets:
        original = load_image(PHOTOS[photo], size=target)
        rendered = render_float(backend, trainer.spec, trainer.params[:1], original.width, original.height)
        upscales[target] = upscale_scores(rendered, small, original)
    return {"kind": "ours", "preset": preset, "photo": photo, "train_size": train_size, "curve": curve,
            "upscales": upscales}


def torch_job(preset, photo, size, steps, budgets, stop_after):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(1)
    config = configure(preset, size, steps=steps, preview_every=0)
    image = load_image(PHOTOS[photo], size=size)
    curve = train_torch(torch, config, image, set(budgets), device, stop_after)
    return {"kind": "torch", "preset": preset, "photo": photo, "curve": curve}


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "fidelity.json")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and budgets: a smoke run")
    parser.add_argument("--presets", nargs="*", default=list(PRESETS))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=256, help="longer side of the training images")
    parser.add_argument("--budgets", type=int, nargs="*", default=[300, 1000, 3000], help="steps to report")
    parser.add_argument("--torch-steps", type=int, default=0, help="stop the PyTorch runs here (default: all)")
    parser.add_argument("--up-sizes", type=int, nargs="*", default=[128, 256], help="train sizes for upscaling")
    parser.add_argument("--targets", type=int, nargs="*", default=[512], help="upscaling target sizes")
    parser.add_argument("--workers", type=int, default=0, help="parallel jobs (default: 1 on a GPU, else cores)")
    args = parser.parse_args()
    size, budgets, up_sizes, targets = args.size, sorted(args.budgets), args.up_sizes, args.targets
    if args.quick:
        size, budgets, up_sizes, targets = 32, [5, 10, 20], [16, 32], [64]
    steps = budgets[-1]
    backend_name = get_backend(args.device).name
    workers = args.workers or default_workers(backend_name)
    jobs = []
    for photo in PHOTOS:
        for preset in args.presets:
            for train_size in sorted(set(up_sizes) | {size}):
                jobs.append((ours_job, (args.device, workers, preset, photo, train_size, steps,
                                        budgets if train_size == size else [],
                                        targets if train_size in up_sizes else [])))
            if torch_available():
                jobs.append((torch_job, (preset, photo, size, steps, budgets, args.torch_steps or steps)))
    report = {"environment": environment(), "backend": backend_name, "size": size, "budgets": budgets,
              "curves": {}, "upscaling": {}}
    with worker_pool(workers) as pool:
        futures = [pool.submit(function, *job_args) for function, job_args in jobs]
        for future in futures:
            result = future.result()
            key = f"{result['photo']}/{result['preset']}"
            if result["kind"] == "torch":
                report["curves"].setdefault(key, {})["torch"] = result["curve"]
                print(f"{key:16s} torch {result['curve']}", flush=True)
                continue
            if result["curve"]:
                report["curves"].setdefault(key, {})["inr"] = result["curve"]
                print(f"{key:16s} inr   {result['curve']}", flush=True)
            for target, scores in result["upscales"].items():
                entry = report["upscaling"].setdefault(f"{result['photo']}/{result['train_size']}->{target}", {})
                entry[result["preset"]] = scores["inr"]
                entry["lanczos"], entry["bicubic"] = scores["lanczos"], scores["bicubic"]
                print(f"  {result['photo']} upscale {result['train_size']}->{target}: {result['preset']} "
                      f"{scores['inr']}, lanczos {scores['lanczos']}, bicubic {scores['bicubic']}", flush=True)
    save_json(report, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
