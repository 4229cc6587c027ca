"""How long `inr view` takes to settle after a zoom, and how many tiles its server draws for it: ten
wheel notches (x1.2 each, 0.15 s apart) into a run's picture, and a jump to the deepest zoom, in the
system's Chromium (headless, through Playwright).

    PYTHONPATH=. python benchmarks/view_zoom.py [--hidden 256] [--layers 3] [--device cpu]

A run of a 96 x 64 image is trained for a few steps (the time per tile depends on the network's size
only); "settled" is the page's main layer fully loaded with no tile left to draw.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image
from playwright.sync_api import sync_playwright
from typer.testing import CliRunner

from inr_cli.backends import make_backend
from inr_cli.cli import app
from inr_cli.viewer import tiles
from inr_cli.viewer.server import ViewServer
from inr_cli.viewer.sources import open_view

SETTLED = """() => { const v = window.inrView && inrView.viewer();
    return !!v && v.world.getItemCount() > 0 && v.world.getItemAt(0).getFullyLoaded() &&
        inrView.pendingTiles() === 0; }"""
NOTCH = """() => { const v = inrView.viewer();
    v.viewport.zoomBy(1.2, v.viewport.pointFromPixel(new OpenSeadragon.Point(300, 300)));
    v.viewport.applyConstraints(); }"""
DEEPEST = "() => { const v = inrView.viewer(); v.viewport.zoomTo(v.viewport.getMaxZoom()); }"


def train(folder: Path, hidden: int, layers: int) -> Path:
    yy, xx = np.mgrid[0:64, 0:96]
    values = np.stack([xx / 96, yy / 64, 0.5 + 0.4 * np.sin((xx + yy) / 5)], -1)
    Image.fromarray(np.round(values * 255).astype(np.uint8)).save(folder / "image.png")
    result = CliRunner().invoke(app, ["train", str(folder / "image.png"), "--steps", "2", "--hidden", str(hidden),
                                      "--layers", str(layers), "--device", "cpu", "-q", "--run-dir",
                                      str(folder / "run")])
    assert result.exit_code == 0, result.output
    return folder / "run"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["auto", "cpu", "gpu"])
    args = parser.parse_args()
    drawn: list = []
    draw = tiles.draw_tiles

    def counted(backend, spec, params, jobs, *rest, **options):
        drawn.extend(job.key for job in jobs)
        yield from draw(backend, spec, params, jobs, *rest, **options)

    tiles.draw_tiles = counted
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        run = train(Path(tmp), args.hidden, args.layers)
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"),
                                             args=["--headless", "--no-sandbox", "--disable-gpu"])
        for label, steps in [("10 wheel notches", [NOTCH] * 10), ("the deepest zoom at once", [DEEPEST])]:
            server = ViewServer(("127.0.0.1", 0), open_view(run), tiles.TileRenderer(make_backend(args.device)))
            threading.Thread(target=server.serve_forever, daemon=True).start()
            page = browser.new_page(viewport={"width": 1000, "height": 700})
            page.goto(server.url)
            page.wait_for_function(SETTLED, timeout=600_000)
            before, start = len(drawn), time.perf_counter()
            for step in steps:
                page.evaluate(step)
                time.sleep(0.15)
            page.wait_for_timeout(500)  # the page sends a view's tiles once it has stopped moving
            page.wait_for_function(SETTLED, timeout=600_000, polling=50)
            print(f"{label:<26} settled in {time.perf_counter() - start:6.1f} s, {len(drawn) - before:3d} tiles "
                  f"drawn ({args.layers}x{args.hidden} network, {server.renderer.backend.name})")
            page.close()
            server.shutdown()
            server.server_close()
        browser.close()


if __name__ == "__main__":
    main()
