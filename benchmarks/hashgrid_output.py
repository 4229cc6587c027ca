"""The hash grid's output layer: a sigmoid (the relu model, the preset's) or linear, in steps to each
PSNR target. Steps do not depend on the machine, so this runs the PyTorch peer
(benchmarks/torch_hashgrid.py), which has both, from the same start: the linear output's biases at the
image's mean colour where the sigmoid's are at its logit.

    PYTHONPATH=. python benchmarks/hashgrid_output.py [--images coffee rocket text] [--size 256] [--steps 300]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, configure, environment, save_json  # noqa: E402
from benchmarks.time_to_quality import SUITE, suite_image  # noqa: E402
from benchmarks.torch_hashgrid import TorchHashGridTrainer  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402
from inr_cli.core.network import NetworkSpec, init_parameters, layer_views, output_means  # noqa: E402

TARGETS = (30.0, 35.0, 40.0)


def steps_to_targets(torch, image, steps: int, sigmoid: bool) -> dict:
    config = configure("hashgrid", max(image.width, image.height), steps=steps)
    spec = NetworkSpec.from_config(config, image.n_channels)
    mean = output_means(config, [image])[0]
    params = init_parameters(spec, config.training.seed, mean)[None]
    if not sigmoid:
        layer_views(spec, params)[-1][1][0] = mean  # a linear output starts at the mean itself
    trainer = TorchHashGridTrainer(torch, spec, params[0], pixel_grid(image.width, image.height), image.targets(),
                                   config, config.training.seed)
    trainer.sigmoid = sigmoid
    reached, best = {}, 0.0
    for step in range(1, steps + 1):
        trainer.step()
        if step % 10 == 0:
            quality = psnr_from_mse(float(np.mean((trainer.render(pixel_grid(image.width, image.height))
                                                   - image.targets()) ** 2)))
            best = max(best, quality)
            for target in TARGETS:
                if quality >= target:
                    reached.setdefault(f"{target:g}dB", step)
    return {"reached": reached, "best_psnr": round(best, 3)}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", nargs="*", default=["coffee", "rocket", "text"], choices=list(SUITE))
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "hashgrid-output.json")
    args = parser.parse_args()
    results = []
    for name in args.images:
        image = suite_image(name, args.size)
        for sigmoid in (True, False):
            result = {"image": name, "size": args.size, "output": "sigmoid" if sigmoid else "linear",
                      **steps_to_targets(torch, image, args.steps, sigmoid)}
            results.append(result)
            print(result, flush=True)
            save_json({"environment": environment(), "results": results}, args.out)


if __name__ == "__main__":
    main()
