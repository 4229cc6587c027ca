"""The hash grid at a byte budget, one setting at a time: the hashgrid preset (with --set overrides)
trained on one photo, or a crop of it, the whole image's PSNR every --every steps. What chose the
preset's levels and storage (BENCHMARKS.md, "A model sized to the image"):

    PYTHONPATH=. python dev/hashgrid_budget.py ../shared/kodak/kodim01.png --crop 192 128 576 384 \
        --steps 400 --set encoding.levels=8 --out bench-results/levels.jsonl

The tables are sized as inr train sizes them (to the image's bytes, or --set network.max_bytes=...);
each run appends one JSON line to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.common import environment, make_trainer
from inr_cli.backends import get_backend
from inr_cli.config import build_config, parse_assignment
from inr_cli.core.metrics import psnr
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.core.render import render_float
from inr_cli.core.sizing import fit_to_image, image_bytes, model_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image", type=Path)
    parser.add_argument("--crop", type=int, nargs=4, metavar=("LEFT", "TOP", "RIGHT", "BOTTOM"))
    parser.add_argument("--steps", type=int, default=300, help="the run's steps (its cosine's length)")
    parser.add_argument("--every", type=int, default=100, help="steps between whole-image scores")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with Image.open(args.image) as im:
        picture = im.convert("RGB").crop(tuple(args.crop)) if args.crop else im.convert("RGB")
    image = PixelImage(np.asarray(picture, dtype=np.float32) / 255.0, ("r", "g", "b"))
    values = {**dict(map(parse_assignment, args.set)), "training.steps": args.steps}
    config, _ = fit_to_image(build_config(None, values, "hashgrid"), image.width, image.height, 3)
    spec = NetworkSpec.from_config(config, 3)
    backend = get_backend(args.device)
    trainer = make_trainer(backend, config, [image])
    curve, began = {}, time.perf_counter()
    for step in range(1, args.steps + 1):
        trainer.step()
        if step % args.every == 0 or step == args.steps:
            trainer.read_loss()
            drawn = render_float(backend, spec, trainer.params[:1], image.width, image.height)
            curve[step] = round(psnr(drawn, image.values), 3)
            print(f"step {step}: {curve[step]} dB, {time.perf_counter() - began:.0f} s", flush=True)
    count, dtype = spec.parameter_count(), config.network.dtype
    row = {"image": args.image.name, "crop": args.crop, "set": args.set, "steps": args.steps,
           "levels": spec.hash_levels, "features": spec.hash_features, "log2_table_size": round(spec.hash_log2_size, 4),
           "parameters": count, "dtype": dtype,
           "bytes_over_image": round(model_bytes(count, dtype) / image_bytes(image.width, image.height, 3), 4),
           "psnr": curve, "seconds": round(time.perf_counter() - began, 1), "environment": environment()}
    with open(args.out, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
