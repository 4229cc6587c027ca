"""The CPU path against PyTorch on the CPU, side by side in one run, printing the ratio.

The setting of issue 12: SIREN 3x128 (omega0 30) on the coffee photo at 128x128 RGB, full batch,
Adam with the cosine schedule, 300 steps. Both start from the same parameters; both use every core
(NumPy's BLAS and PyTorch's intra-op threads). The two contestants alternate, `--rounds` times each,
each going first in every other round, so a machine that slows down mid-run slows both; the ratio of
the medians is the figure (the ratio of the best times is printed beside it).

    PYTHONPATH=. python benchmarks/cpu_vs_torch.py                    # ratio < 1: ours is faster
    PYTHONPATH=. python benchmarks/cpu_vs_torch.py --networks 8 --size 32 --hidden 64   # many small networks

With --networks N > 1 both fit N images at once (ours: the core's networks dimension; PyTorch:
stacked weights and torch.bmm), which is the fit-many setting.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import inr_cli  # noqa: E402,F401  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import ROOT, configure, environment, make_trainer, photo, save_json  # noqa: E402
from inr_cli.backends.cpu_backend import CpuBackend  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402


def run_ours(config, images, steps):
    trainer = make_trainer(CpuBackend(), config, images, seeds=range(len(images)))
    start = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    loss = trainer.read_loss()
    return time.perf_counter() - start, loss, trainer.state().params


def run_torch(torch, config, images, params, steps):
    from benchmarks.torch_reference import BatchedTorchTrainer, optimizer_settings

    opt = config.optimizer
    trainer = BatchedTorchTrainer(torch, configure_spec(config, images), params,
                                  pixel_grid(images[0].width, images[0].height),
                                  np.stack([im.targets() for im in images]), opt.lr, opt.lr_min, steps,
                                  **optimizer_settings(opt))
    start = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    loss = trainer.read_loss()
    return time.perf_counter() - start, loss


def configure_spec(config, images):
    from inr_cli.core.network import NetworkSpec

    return NetworkSpec.from_config(config, images[0].n_channels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--networks", type=int, default=1, help="images fitted at once (coffee and rocket in turn)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "cpu-vs-torch.json")
    args = parser.parse_args()
    import torch

    config = configure("siren", hidden=args.hidden, layers=args.layers, omega0=30.0, lr=1e-4, lr_min=1e-5,
                       steps=args.steps, device="cpu")
    names = ("coffee", "rocket")
    images = [photo(names[i % 2], args.size, args.size) for i in range(args.networks)]
    ours_s, torch_s = [], []
    for round_index in range(args.rounds):
        if round_index % 2:
            seconds_t, loss_t = run_torch(torch, config, images, params_at_start(config, images), args.steps)
            seconds, loss, _ = run_ours(config, images, args.steps)
        else:
            seconds, loss, _ = run_ours(config, images, args.steps)
            seconds_t, loss_t = run_torch(torch, config, images, params_at_start(config, images), args.steps)
        ours_s.append(seconds)
        torch_s.append(seconds_t)
        print(f"round {round_index + 1}: ours {seconds:.2f} s (PSNR {psnr_from_mse(float(loss.mean())):.2f} dB), "
              f"PyTorch {seconds_t:.2f} s (PSNR {psnr_from_mse(float(np.mean(loss_t))):.2f} dB)", flush=True)
    ratio = statistics.median(ours_s) / statistics.median(torch_s)
    best_ratio = min(ours_s) / min(torch_s)
    report = {"environment": {**environment(), "threads": torch.get_num_threads()},
              "setting": vars(args) | {"out": str(args.out)}, "ours_s": ours_s, "torch_s": torch_s,
              "ratio_ours_over_torch": round(ratio, 3), "ratio_of_best": round(best_ratio, 3)}
    print(f"median: ours {statistics.median(ours_s):.2f} s, PyTorch {statistics.median(torch_s):.2f} s, "
          f"ratio ours/PyTorch {ratio:.3f} (best against best: {best_ratio:.3f})")
    save_json(report, args.out)
    print(f"saved {args.out}")


def params_at_start(config, images):
    from inr_cli.core.network import init_networks

    return init_networks(configure_spec(config, images), range(len(images)))


if __name__ == "__main__":
    main()
