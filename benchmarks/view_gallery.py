"""How quickly `inr view` answers the gallery of a set of 100,000 networks: opening the set, a page
sorted by PSNR or name (the first time, and again), filtered by label, and a page of thumbnails.

    PYTHONPATH=. python benchmarks/view_gallery.py [--networks 100000]

A real `inr fit-many` set of two small images (small networks, so that the weights stay small), its
index and weights then repeated to the size asked (new names, PSNRs and labels), so the server reads
a set laid out exactly as fit-many writes one.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.viewer.sources import PAGE_LIMIT, SetView
from inr_cli.viewer.tiles import TileRenderer


def make_set(folder: Path, networks: int) -> Path:
    images = folder / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
            images / f"img{i}.png")
    out = folder / "set"
    result = CliRunner().invoke(app, ["fit-many", str(images), "-o", str(out), "--steps", "10", "--hidden", "16",
                                      "--layers", "2", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    with open(out / "index.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rng = np.random.default_rng(0)
    with open(out / "index.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "label"])
        writer.writeheader()
        for i in range(networks):
            writer.writerow({**rows[i % 2], "name": f"image-{i:06d}.png", "psnr": f"{rng.uniform(15, 45):.4f}",
                             "label": f"class-{i % 10}"})
    weights = np.load(out / "weights.npy")
    np.save(out / "weights.npy", weights[np.arange(networks) % len(weights)])
    return out


def timed(label: str, action):
    start = time.perf_counter()
    result = action()
    print(f"{label:<44} {(time.perf_counter() - start) * 1000:9.1f} ms")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = make_set(Path(tmp), args.networks)
        view = timed(f"open a set of {args.networks} networks", lambda: SetView(out))
        timed("page 1 by PSNR (first: sorts)", lambda: view.page("-psnr", limit=60))
        timed("page 1 by PSNR (again)", lambda: view.page("-psnr", limit=60))
        timed("page 1 by name (first: sorts)", lambda: view.page("name", limit=60))
        timed("last page by name", lambda: view.page("name", offset=args.networks - 60, limit=60))
        timed("page 1 by PSNR, one label of ten", lambda: view.page("-psnr", label="class-3", limit=60))
        timed("page 1 by PSNR, names containing '4242'", lambda: view.page("-psnr", query="4242", limit=60))
        renderer = TileRenderer(CpuBackend())

        def thumbnails():
            for row in view.page("-psnr", limit=60)["rows"]:
                shown = view.network(row["net"])
                renderer.png(("thumb", row["net"]), shown.spec, shown.params, *view.thumbnail_size(row["net"]))

        timed(f"60 thumbnails drawn ({view.set.spec.hidden}-wide network)", thumbnails)
        print(f"(a page holds at most {PAGE_LIMIT} rows)")


if __name__ == "__main__":
    main()
