"""Variants of meta-learning a start, tried against meta-init's recipe (Reptile, Adam inner fits at a
held rate, a plain outer step decaying linearly): the outer step as Adam on the Reptile direction,
SGD with momentum inner fits and test fits (Tancik et al. 2021 fit with SGD inside and at test
time), other inner rates and lengths; or a random start alone, at other learning rates.

The outer loop is written out here (meta.inner_fit: the engine meta-init uses), so that a variant
needs no option in the shipped command; the held-out images of learned_start.py are then fitted with
fit-many --init from the start, --until-psnr 30 and 35, and the median steps appended as one row
to the results file.

    PYTHONPATH=. python benchmarks/learned_start_variants.py --name adam-outer --outer adam --outer-lr 1e-3
    PYTHONPATH=. python benchmarks/learned_start_variants.py --name random --random --test-lrs 1e-3 3e-3
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import inr_cli  # noqa: E402  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import environment  # noqa: E402
from benchmarks.weights_classification import draw_shapes  # noqa: E402
from inr_cli.backends.cpu_backend import CpuBackend  # noqa: E402
from inr_cli.config import build_config, flags_to_values, with_values  # noqa: E402
from inr_cli.core.network import NetworkSpec  # noqa: E402
from inr_cli.formats.export import write_safetensors  # noqa: E402
from inr_cli.formats.start import initial_params  # noqa: E402
from inr_cli.sets.meta import inner_fit, load_images  # noqa: E402
from inr_cli.sets.plan import image_seed  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def learn(train: Path, args, net: dict) -> np.ndarray:
    config = build_config(None, flags_to_values({**net, "source": str(train), "preview_every": 0}))
    images, names, config = load_images(str(train), config)
    spec = NetworkSpec.from_config(config, images[0].n_channels)
    seeds = [image_seed(0, name) for name in names]
    inner = with_values(config, {"training.steps": args.inner_steps, "training.target_psnr": 0.0,
                                 "optimizer.name": args.inner_optimizer, "optimizer.lr": args.inner_lr,
                                 "optimizer.lr_min": args.inner_lr if args.inner_held else config.optimizer.lr_min})
    start = initial_params("shared", spec, 0, [0])[0].astype(np.float64)
    first, second = np.zeros_like(start), np.zeros_like(start)  # the outer Adam's moments
    backend = CpuBackend()
    for step in range(args.outer_steps):
        chosen = np.random.default_rng([0, step]).choice(len(images), size=args.meta_batch, replace=False)
        adapted, losses = inner_fit(backend, spec, inner, start.astype(np.float32), [images[i] for i in chosen],
                                    [seeds[i] for i in chosen])
        toward = adapted.astype(np.float64).mean(axis=0) - start
        if args.outer == "reptile":
            start += args.outer_lr * (1 - step / args.outer_steps) * toward
        else:  # Adam on the gradient -toward
            first = 0.9 * first - 0.1 * toward
            second = 0.999 * second + 0.001 * toward * toward
            start -= args.outer_lr * (first / (1 - 0.9 ** (step + 1))) / (
                np.sqrt(second / (1 - 0.999 ** (step + 1))) + 1e-8)
        if step % 100 == 0:
            print(f"outer step {step}: inner fits' PSNR {-10 * np.log10(float(np.mean(losses))):.2f} dB", flush=True)
    return spec, start.astype(np.float32), images[0].channels


def median_steps(images: Path, out: Path, init: str, target: float, net: dict, lr: float, optimizer: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    inr_cli.fit_many(images, out, init=init, steps=2000, until_psnr=target, quiet=True,
                     **{**net, "lr": lr, "optimizer": optimizer})
    with open(out / "index.csv", newline="") as handle:
        steps = np.array([int(row["steps"]) for row in csv.DictReader(handle)])
    return {"median_steps": float(np.median(steps)), "reached": int((steps < 2000).sum()), "networks": len(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the row's name")
    parser.add_argument("--random", action="store_true", help="no meta-learning: a random start, fitted")
    parser.add_argument("--outer-steps", type=int, default=500)
    parser.add_argument("--inner-steps", type=int, default=32)
    parser.add_argument("--meta-batch", type=int, default=8)
    parser.add_argument("--outer", choices=("reptile", "adam"), default="reptile")
    parser.add_argument("--outer-lr", type=float, default=1.0)
    parser.add_argument("--inner-optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--inner-lr", type=float, default=1e-3)
    parser.add_argument("--inner-cosine", dest="inner_held", action="store_false", help="inner rate annealed over k")
    parser.add_argument("--test-optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--test-lrs", type=float, nargs="+", default=[1e-3])
    parser.add_argument("--results", type=Path, default=RESULTS / "learned-start-variants-cpu-32.json")
    args = parser.parse_args()
    net = {"hidden": 32, "layers": 2, "omega0": 30.0, "lr": 1e-3, "device": "cpu", "size": 32}
    row = {"name": args.name, "settings": vars(args) | {"results": str(args.results)}, "environment": environment(),
           "fits": {}}
    with tempfile.TemporaryDirectory(prefix="inr-variants-") as scratch:
        scratch = Path(scratch)
        draw_shapes(scratch / "train", 50, 32, 0)  # learned_start.py's images (its defaults)
        draw_shapes(scratch / "test", 10, 32, 1)
        init = "random"
        if not args.random:
            began = time.perf_counter()
            spec, start, channels = learn(scratch / "train", args, net)
            row["meta_seconds"] = time.perf_counter() - began
            init = str(scratch / "start.safetensors")
            write_safetensors(spec, start, channels, Path(init))
        for lr in args.test_lrs:
            for target in (30.0, 35.0):
                found = median_steps(scratch / "test", scratch / "set", init, target, net, lr, args.test_optimizer)
                row["fits"][f"lr {lr:g}, {target:g} dB"] = found
                print(f"{args.name}: lr {lr:g}, {target:g} dB: {found}", flush=True)
    rows = json.loads(args.results.read_text())["rows"] if args.results.exists() else []
    args.results.write_text(json.dumps({"rows": [r for r in rows if r["name"] != args.name] + [row]}, indent=2) + "\n")
    print(f"-> {args.results}")


if __name__ == "__main__":
    main()
