"""The sigmoid MLP on a line drawing (issue 16): PSNR of the training image along the way, for the
variants that were tried, each on the cub drawing at 200x164 px, grey, on the CPU (or --device gpu).

    PYTHONPATH=. python benchmarks/sigmoid_drawing.py '[{"name": "preset"},
        {"name": "before", "encoding": "none", "lr": 1e-2, "output_at_mean": false},
        {"name": "ridges30", "encoding": "none", "ridge": 30, "output_at_mean": false}]'

Each variant is a JSON object: the preset's flags to change (as benchmarks.common.configure takes
them), "output_at_mean" (network.init_output_at_mean), "ridge": scale the first layer's weights by
this and spread its biases so that each unit is a steep ridge somewhere in the image (a sigmoid MLP's
other way to reach sharp edges), "steps" (default: the preset's 3000) and "seconds": instead of a step
count, as many steps as fit in that many seconds of training (timed on a first, thrown-away run of
the same setting; the cosine schedule needs the count up front). Writes NAME.png beside the results
for a look. What the seed's network reached in its 1.2 million iterations, next to a minute on a GPU:

    PYTHONPATH=. python benchmarks/sigmoid_drawing.py --device gpu '[{"name": "gpu-60s", "seconds": 60}]'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from benchmarks.common import ROOT, configure, make_trainer, timed  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.metrics import psnr, psnr_from_mse  # noqa: E402
from inr_cli.core.network import layer_views  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402

DRAWING = ROOT / "tests" / "fixtures" / "drawing-cub.png"
REPORT_AT = (100, 300, 1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000)


def steps_in(seconds: float, backend, config, image) -> int:
    """How many steps of this setting take `seconds` on this backend: the steady-state time of a step,
    after warm-up steps (kernel compilation, the CUDA graph's capture)."""
    trainer = make_trainer(backend, config, [image])
    for _ in range(20):
        trainer.step()
    return max(1, int(seconds / timed(trainer.step, 200, backend.synchronize)))


def run(variant: dict, out: Path, device: str) -> str:
    variant = dict(variant)
    name, ridge = variant.pop("name"), variant.pop("ridge", 0)
    output_at_mean = variant.pop("output_at_mean", True)
    seconds = variant.pop("seconds", 0)
    image = load_image(DRAWING, size=200, gray=True)
    config = configure("sigmoid", 200, preview_every=0, **variant)
    config = replace(config, network=replace(config.network, init_output_at_mean=output_at_mean))
    backend = get_backend(device)
    if seconds:
        config = replace(config, training=replace(config.training, steps=steps_in(seconds, backend, config, image)))
    trainer = make_trainer(backend, config, [image])
    if ridge:
        weight, bias = layer_views(trainer.spec, trainer.params)[0]
        centres = np.random.default_rng(1).uniform(-1, 1, (weight.shape[1], 2)).astype(np.float32)
        weight[0] *= ridge
        bias[0, :] = -(weight[0] * centres).sum(axis=1)
    start, curve = time.perf_counter(), {}
    for step in range(1, config.training.steps + 1):
        trainer.step()
        if step in REPORT_AT:
            curve[step] = round(psnr_from_mse(float(trainer.read_loss()[0])), 2)
    rendered = render_float(backend, trainer.spec, trainer.params[:1], image.width, image.height)
    Image.fromarray((rendered[..., 0].clip(0, 1) * 255).round().astype(np.uint8)).save(out / f"{name}.png")
    return (f"{name} ({backend.name}): PSNR {psnr(rendered, image.values):.2f} dB after {config.training.steps} steps "
            f"in {time.perf_counter() - start:.1f} s, along the way {curve}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="?", default='[{"name": "preset"}]', help="a JSON list of variants")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "sigmoid-drawing",
                        help="where NAME.png go, and drawing.txt, a line for each variant")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in json.loads(args.variants):
        said = run(variant, args.out, args.device)
        print(said, flush=True)
        with open(args.out / "drawing.txt", "a") as handle:
            handle.write(said + "\n")
