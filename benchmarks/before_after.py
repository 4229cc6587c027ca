"""Make docs/before-after.png: a small photo, its Lanczos upscale, and the network's render.

    PYTHONPATH=. python benchmarks/before_after.py [--train-size 96] [--steps N] [--device auto] [--results FILE]

Everything goes through the `inr` commands themselves (train on the shrunk photo with inr eval's
default road, or --preset's, for the preset's steps or --steps; render at the original size), then
the panels are put side by side with their PSNR against the original. The scores (inr eval's JSON)
go to --results, which the README's caption quotes (benchmarks/results/before-after-cpu.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typer.testing import CliRunner  # noqa: E402

from benchmarks.common import PHOTOS, ROOT, environment, save_json  # noqa: E402
from inr_cli.cli import app  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--photo", default="coffee")
    parser.add_argument("--train-size", type=int, default=96)
    parser.add_argument("--steps", type=int, help="default: the preset's")
    parser.add_argument("--preset", help="default: the one inr eval --train-size picks")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "before-after.png")
    parser.add_argument("--results", type=Path, help="where the scores go as JSON (default: none)")
    args = parser.parse_args()
    runner = CliRunner()
    photo = PHOTOS[args.photo]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        chosen = [*(["--steps", str(args.steps)] if args.steps else []),
                  *(["--preset", args.preset] if args.preset else [])]
        result = runner.invoke(app, ["eval", str(run_dir), str(photo), "--train-size", str(args.train_size),
                                     *chosen, "--device", args.device, "--json"])
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
        compose(panels, args.out)
        print(json.dumps(scores))
        print(f"saved {args.out}")
        if args.results:
            command = " ".join(["python benchmarks/before_after.py", *sys.argv[1:]])
            save_json({"environment": environment(), "command": command, "photo": args.photo, **scores}, args.results)
            print(f"saved {args.results}")


def compose(panels: list[tuple[Image.Image, str]], out: Path, columns: int = 2) -> None:
    """The panels in a grid (two by two: each picture twice as wide on a page as in one row), each
    under a label big enough to read when a page scales the whole down to ~800 px (30 px at 1206)."""
    width, height = panels[0][0].size
    gap, label_height = 8, max(24, height // 9)
    try:
        font = ImageFont.load_default(size=label_height * 2 // 3)
    except (TypeError, OSError):  # Pillow without FreeType: the small bitmap font
        font = ImageFont.load_default()
    rows = (len(panels) + columns - 1) // columns
    canvas = Image.new("RGB", (columns * width + (columns - 1) * gap,
                               rows * (height + label_height) + (rows - 1) * gap), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (panel, label) in enumerate(panels):
        x, y = (i % columns) * (width + gap), (i // columns) * (height + label_height + gap)
        draw.text((x + 4, y + label_height // 6), label, fill="black", font=font)
        canvas.paste(panel, (x, y + label_height))
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
