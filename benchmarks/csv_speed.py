"""The pixel CSV's speed: `inr encode` and `inr decode` of a 1000x1000 RGB image (1M rows), the
whole command in-process, beside the floor under each (NumPy's C text reader alone for decode, the
PNG read alone for encode) and Python's csv module as the plain peer.

    PYTHONPATH=. python benchmarks/csv_speed.py [--size 1000] [--rounds 5]

Each figure is the best of --rounds; the image is random 8-bit pixels (the worst case for the
writer's table of distinct values is a 16-bit image: --depth 16).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import inr_cli  # noqa: E402,F401
from benchmarks.common import ROOT, environment, save_json  # noqa: E402
from inr_cli.cli import app  # noqa: E402
from inr_cli.core.pixels import PixelImage  # noqa: E402
from inr_cli.formats.images import load_image, save_image  # noqa: E402


def best_of(rounds: int, run) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--depth", type=int, choices=(8, 16), default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "csv-speed.json")
    args = parser.parse_args()
    levels = (1 << args.depth) - 1
    rng = np.random.default_rng(0)
    pixels = (rng.integers(0, levels + 1, (args.size, args.size, 3)) / levels).astype(np.float32)
    runner = CliRunner()

    def command(*argv: str) -> None:
        result = runner.invoke(app, list(argv))
        assert result.exit_code == 0, result.output

    with tempfile.TemporaryDirectory() as tmp:
        png, csv_path, back = Path(tmp) / "image.png", Path(tmp) / "image.csv", Path(tmp) / "back.png"
        save_image(PixelImage(pixels, ("r", "g", "b"), args.depth), png)
        figures = {
            "encode_s": best_of(args.rounds, lambda: command("encode", str(png), "-o", str(csv_path), "--force")),
            "decode_s": best_of(args.rounds, lambda: command("decode", str(csv_path), "-o", str(back), "--force")),
            "png_read_s": best_of(args.rounds, lambda: load_image(png)),
            "numpy_loadtxt_s": best_of(args.rounds, lambda: np.loadtxt(
                csv_path, delimiter=",", skiprows=1, comments=None)),
            "python_csv_read_s": best_of(1, lambda: [list(map(float, row)) for row in
                                                     list(csv.reader(open(csv_path)))[1:]]),
        }
        assert np.array_equal(np.asarray(load_image(back).values), np.asarray(load_image(png).values))
        figures["csv_bytes"] = csv_path.stat().st_size
    print(f"{args.size}x{args.size} RGB, {args.depth}-bit, {figures['csv_bytes'] / 1e6:.1f} MB of CSV, "
          f"best of {args.rounds}:")
    print(f"  inr encode  {figures['encode_s']:.2f} s   (PNG read alone {figures['png_read_s']:.2f} s)")
    print(f"  inr decode  {figures['decode_s']:.2f} s   (NumPy loadtxt alone {figures['numpy_loadtxt_s']:.2f} s, "
          f"Python csv module {figures['python_csv_read_s']:.2f} s: "
          f"{figures['python_csv_read_s'] / figures['decode_s']:.1f}x)")
    save_json({"environment": environment(), "size": args.size, "depth": args.depth, **figures}, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
