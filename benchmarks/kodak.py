"""Kodak-24 at equal model bytes, side by side in one run: the hashgrid preset sized to a byte budget
(its parameters stored in float16, as the preset stores them, and in float32: half the parameters
in the same bytes), the siren preset at the same bytes (the widest SIREN 3xN within them) and the
PyTorch hash grid (the hashgrid preset's network, start, batches and schedule:
benchmarks/torch_hashgrid.py). For each:
PSNR and SSIM of the whole image, the steps and training seconds to each target, and the network
trained on the image shrunk by 2 (Lanczos), drawn at the full size against Lanczos' enlargement.

The budgets are GaussianImage's table (ECCV 2024, Kodak): its models of 300k and 560k parameters,
as float32 bytes (1.2 MB and 2.24 MB at 768x512), and "image", the photo's own 8-bit bytes (the
size inr gives a hash grid by default). A budget is held in bytes per pixel value, so that an image
drawn smaller (--size) gets its share. The photos are not in the repository:

    PYTHONPATH=. python benchmarks/kodak.py --kodak ../shared/kodak --images 24 --device gpu \
        --out benchmarks/results/kodak-h200.json

Each finished row is written at once; --resume keeps the rows of an earlier run of the same
settings (a long CPU run goes on where it was cut).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as inr holds every product to one BLAS thread

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import environment, make_trainer, save_json, warm_trainer  # noqa: E402
from benchmarks.time_to_quality import race  # noqa: E402
from benchmarks.upscaling import upscale_scores  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.config import build_config, flags_to_values, parse_assignment  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.metrics import psnr, ssim  # noqa: E402
from inr_cli.core.network import init_parameters, output_means  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.core.sizing import fit_to_image, image_bytes, model_bytes  # noqa: E402
from inr_cli.core.training_loop import Signals, run_steps  # noqa: E402
from inr_cli.formats.checkpoint import STORED_DTYPES  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402

KODAK_VALUES = 768 * 512 * 3
# GaussianImage's budgets, in parameters at Kodak's size; stored as float32 (4 bytes each).
BUDGETS = {"300k": 300_000, "560k": 560_000}
# name: (preset, flags). The hash grid's tables and the SIREN's width are sized to the budget.
CONTESTANTS = {
    "hashgrid": ("hashgrid", {}),  # the preset: stored in float16
    "hashgrid-f32": ("hashgrid", {"dtype": "float32"}),
    "siren": ("siren", {"hidden": 4096}),  # the widest 3xN the budget holds
    "torch-hashgrid": ("hashgrid", {}),  # the preset's network, trained by PyTorch
}


def kodak_images(folder: Path, count: int) -> list[Path]:
    return sorted(folder.glob("kodim*.png"))[:count]


def budget_bytes(budget: str, image) -> int:
    """A budget's bytes for this image: its share of GaussianImage's float32 bytes at Kodak's size,
    or the image's own 8-bit bytes."""
    if budget == "image":
        return image_bytes(image.width, image.height, image.n_channels)
    values = image.width * image.height * image.n_channels
    return int(BUDGETS[budget] * 4 * values / KODAK_VALUES)


def configured(contestant: str, image, budget: str, args):
    """The contestant's configuration for this image, sized as inr train sizes it."""
    preset, flags = CONTESTANTS[contestant]
    flags = {**flags, "max_bytes": str(budget_bytes(budget, image)), "preview_every": 0, "log_every": args.check,
             "seed": args.seed}
    steps = args.steps if preset == "hashgrid" else args.siren_steps
    if steps:
        flags["steps"] = steps
    config = build_config(None, {**flags_to_values(flags), **dict(map(parse_assignment, args.set))}, preset)
    return fit_to_image(config, image.width, image.height, image.n_channels)[0]


def stored(params: np.ndarray, dtype: str) -> np.ndarray:
    """The parameters as the run's checkpoint holds them, read back as float32."""
    return params.astype(STORED_DTYPES[dtype]).astype(np.float32)


def train_inr(backend, config, image, check: int, targets, name: str) -> tuple[dict, np.ndarray, object]:
    trainer = warm_trainer(backend, config, [image])
    result = race(trainer, backend, image, check, False, targets,
                  lambda step, quality: print(f"  {name} step {step}: {quality:.2f} dB, {trainer.seconds:.1f} s",
                                              flush=True))
    return result, np.array(backend.to_host(trainer.params[:1])), trainer.spec


def train_torch(config, image, spec, check: int, targets, device: str) -> tuple[dict, np.ndarray]:
    """The PyTorch hash grid from inr's start, the same batches and schedule; the whole image scored
    at each check (off the clock), as race scores inr's."""
    import torch

    from benchmarks.torch_hashgrid import TorchHashGridTrainer

    if device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    start = init_parameters(spec, config.training.seed, (output_means(config, [image]) or [None])[0])
    coords = pixel_grid(image.width, image.height)
    trainer = TorchHashGridTrainer(torch, spec, start, coords, image.targets(), config, config.training.seed,
                                   "cuda" if device == "gpu" else "cpu")
    synchronize = torch.cuda.synchronize if device == "gpu" else (lambda: None)
    reached, best, seconds = {f"{t:g}dB": None for t in targets}, float("-inf"), 0.0
    total = config.training.steps
    for step in range(1, total + 1):
        synchronize()
        began = time.perf_counter()
        trainer.step()
        synchronize()
        seconds += time.perf_counter() - began
        if step % check == 0 or step == total:
            quality = psnr(np.clip(trainer.render(coords), 0, 1).reshape(image.values.shape), image.values)
            best = max(best, quality)
            for target in targets:
                if reached[f"{target:g}dB"] is None and quality >= target:
                    reached[f"{target:g}dB"] = {"step": step, "seconds": round(seconds, 3)}
    drawn = np.clip(trainer.render(coords), 0, 1).reshape(image.values.shape)
    return {"reached": reached, "best_psnr": round(best, 3), "steps_run": total,
            "seconds_run": round(seconds, 3)}, drawn


def scores(drawn: np.ndarray, image) -> dict:
    return {"psnr": round(psnr(drawn, image.values), 3), "ssim": round(ssim(drawn, image.values), 4)}


def job(args, path: Path, contestant: str, budget: str, backend) -> dict:
    image = load_image(path, size=args.size)
    config = configured(contestant, image, budget, args)
    dtype = config.network.dtype
    row = {"image": path.stem, "contestant": contestant, "budget": budget, "width": image.width,
           "height": image.height, "budget_bytes": budget_bytes(budget, image), "dtype": dtype}
    from inr_cli.core.network import NetworkSpec

    spec = NetworkSpec.from_config(config, image.n_channels)
    row["parameters"] = spec.parameter_count()
    row["model_bytes"] = model_bytes(row["parameters"], dtype)
    row["steps"] = config.training.steps
    row["network"] = {"hidden": spec.hidden, "layers": spec.layers, "encoding": spec.encoding,
                      "log2_table_size": round(spec.hash_log2_size, 4) if spec.encoding == "hashgrid" else None}
    if contestant.startswith("torch"):
        result, drawn = train_torch(config, image, spec, args.check, args.targets, backend.name)
        row.update(result)
        row.update(scores(drawn, image))
        return row
    result, params, spec = train_inr(backend, config, image, args.check, args.targets, f"{path.stem} {contestant}")
    row.update(result)
    full = render_float(backend, spec, params, image.width, image.height)
    row["float32"] = scores(full, image)  # before the parameters are stored
    row.update(scores(render_float(backend, spec, stored(params, dtype), image.width, image.height), image))
    if args.upscale:  # trained at half the size (the budget's share of it), drawn at the full size
        small = load_image(path, size=max(image.width, image.height) // 2)
        small_config = configured(contestant, small, budget, args)
        trainer = make_trainer(backend, small_config, [small])
        with Signals() as signals:
            run_steps(trainer, signals, small_config.training.steps)
        params = stored(np.array(backend.to_host(trainer.params[:1])), dtype)
        rendered = render_float(backend, trainer.spec, params, image.width, image.height)
        row["upscale"] = upscale_scores(rendered, small, image)
    return row


def job_key(row: dict) -> tuple:
    return row["image"], row["contestant"], row["budget"]


def summary(rows: list[dict]) -> list[str]:
    """One line per contestant and budget: means over the images."""
    lines = ["| contestant | budget | images | parameters | model bytes | PSNR | SSIM | steps | seconds | "
             "2x: inr - Lanczos (dB) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["contestant"], row["budget"]), []).append(row)
    for (contestant, budget), group in groups.items():
        def mean(values):
            values = [v for v in values if v is not None]
            return statistics.fmean(values) if values else float("nan")

        gap = mean([r["upscale"]["inr"]["psnr"] - r["upscale"]["lanczos"]["psnr"] for r in group if "upscale" in r])
        lines.append(f"| {contestant} | {budget} | {len(group)} | {mean([r['parameters'] for r in group]):,.0f} | "
                     f"{mean([r['model_bytes'] for r in group]):,.0f} | {mean([r['psnr'] for r in group]):.2f} | "
                     f"{mean([r['ssim'] for r in group]):.4f} | {mean([r['steps_run'] for r in group]):.0f} | "
                     f"{mean([r['seconds_run'] for r in group]):.2f} | {gap:+.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kodak", type=Path, default=Path("../shared/kodak"), help="the folder of kodim*.png")
    parser.add_argument("--images", type=int, default=24, help="the first N of the 24")
    parser.add_argument("--size", type=int, default=None, help="draw each photo this many pixels on its longer "
                        "side (default: as it is, 768)")
    parser.add_argument("--contestants", nargs="+", default=list(CONTESTANTS), choices=list(CONTESTANTS))
    parser.add_argument("--budgets", nargs="+", default=["300k", "560k"], choices=[*BUDGETS, "image"])
    parser.add_argument("--steps", type=int, default=2000, help="the hash grids' steps (siren: its preset's)")
    parser.add_argument("--siren-steps", type=int, default=None, help="the siren's steps (default: its preset's)")
    parser.add_argument("--check", type=int, default=250, help="steps between whole-image scores")
    parser.add_argument("--targets", type=float, nargs="+", default=[40.0, 43.9])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="every contestant's settings "
                        "changed so, as inr train --set does (e.g. encoding.levels=8)")
    parser.add_argument("--no-upscale", dest="upscale", action="store_false", help="leave out the 2x renders")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--resume", action="store_true", help="keep the rows --out already holds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    backend = get_backend(args.device)
    paths = kodak_images(args.kodak, args.images)
    if not paths:
        raise SystemExit(f"no kodim*.png in {args.kodak}")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("resume", "out")}
    rows = []
    if args.resume and args.out.exists():
        earlier = json.loads(args.out.read_text())
        if {k: v for k, v in earlier["settings"].items() if k not in ("images", "contestants", "budgets")} == \
                {k: v for k, v in settings.items() if k not in ("images", "contestants", "budgets")}:
            rows = earlier["rows"]
    done = {job_key(row) for row in rows}
    for path in paths:
        for budget in args.budgets:
            for contestant in args.contestants:
                if (path.stem, contestant, budget) in done:
                    continue
                began = time.perf_counter()
                row = job(args, path, contestant, budget, backend)
                row["wall_seconds"] = round(time.perf_counter() - began, 1)
                rows.append(row)
                save_json({"environment": environment(), "settings": settings, "rows": rows}, args.out)
                print(f"{path.stem} {contestant:15s} {budget:5s} {row['parameters']:>9,} params "
                      f"{row['psnr']:6.2f} dB  SSIM {row['ssim']:.4f}  {row['seconds_run']:8.2f} s"
                      + (f"  2x {row['upscale']['inr']['psnr'] - row['upscale']['lanczos']['psnr']:+.2f} dB"
                         if "upscale" in row else ""), flush=True)
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
