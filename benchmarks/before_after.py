"""Make docs/before-after.png: a small photo, its Lanczos upscale, and the network's render.

    PYTHONPATH=. python benchmarks/before_after.py [--train-size 96] [--steps 1500] [--device auto]

Everything goes through the `inr` commands themselves (train on the shrunk photo, render at the
original size), then the three panels are put side by side with their PSNR against the original.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typer.testing import CliRunner  # noqa: E402

from benchmarks.common import PHOTOS, ROOT  # noqa: E402
from inr_cli.cli import app  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--photo", default="coffee")
    parser.add_argument("--train-size", type=int, default=96)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "before-after.png")
    args = parser.parse_args()
    runner = CliRunner()
    photo = PHOTOS[args.photo]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        result = runner.invoke(app, ["eval", str(run_dir), str(photo), "--train-size", str(args.train_size),
                                     "--steps", str(args.steps), "--device", args.device, "--json"])
        assert result.exit_code == 0, result.output
        scores = json.loads(result.stdout.strip().splitlines()[-1])
        width, height = scores["width"], scores["height"]
        rendered = Path(tmp) / "render.png"
        result = runner.invoke(app, ["render", str(run_dir), "--width", str(width), "--height", str(height),
                                     "-o", str(rendered), "--device", args.device, "-q"])
        assert result.exit_code == 0, result.output
        original = Image.open(photo).convert("RGB")
        small = original.resize((scores["train_width"], scores["train_height"]), Image.LANCZOS)
        panels = [
            (small.resize((width, height), Image.NEAREST), f"input {small.width}x{small.height}"),
            (small.resize((width, height), Image.LANCZOS), f"Lanczos  {scores['lanczos']['psnr']:.1f} dB"),
            (Image.open(rendered).convert("RGB"), f"inr render  {scores['psnr']:.1f} dB"),
            (original, "original"),
        ]
        gap = 6
        canvas = Image.new("RGB", (len(panels) * width + (len(panels) - 1) * gap, height + 24), "white")
        draw = ImageDraw.Draw(canvas)
        for i, (panel, label) in enumerate(panels):
            canvas.paste(panel, (i * (width + gap), 24))
            draw.text((i * (width + gap) + 4, 6), label, fill="black")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        canvas.save(args.out)
        print(json.dumps(scores))
        print(f"saved {args.out}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
