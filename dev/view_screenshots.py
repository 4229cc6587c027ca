"""The pictures of `inr view` in docs/viewer.md and the README: a run zoomed in, a run while it trains, a set's gallery.

    PYTHONPATH=. python dev/view_screenshots.py      # writes docs/view-run.png, view-training.png, view-set.png

Trains small networks on the CPU in a temporary folder (a minute or two on two cores) and takes the
screenshots in the system's Chromium through playwright.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.viewer.server import ViewServer
from inr_cli.viewer.sources import open_view
from inr_cli.viewer.tiles import TileRenderer

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOADED = """() => { const v = window.inrView && inrView.viewer();
    return !!v && v.world.getItemCount() > 0 && v.world.getItemAt(0).getFullyLoaded(); }"""


def inr(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "inr_cli", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def serve(path: Path) -> ViewServer:
    server = ViewServer(("127.0.0.1", 0), open_view(path), TileRenderer(CpuBackend()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def save(page, path: Path) -> None:
    page.screenshot(path=str(path))
    image = Image.open(path).convert("RGB")
    # 256 colours, dithered so that the smooth renders show no bands: small enough for the README.
    image.quantize(palette=image.quantize(256), dither=Image.Dither.FLOYDSTEINBERG).save(path, optimize=True)
    print(path, path.stat().st_size // 1024, "KB")


def main() -> None:
    docs = ROOT / "docs"
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        tmp = Path(tmp)
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 640})

        assert inr("train", FIXTURES / "coffee.png", "--size", "96", "--steps", "600", "--device", "cpu",
                   "--run-dir", tmp / "coffee").wait() == 0
        server = serve(tmp / "coffee")
        page.goto(server.url)
        page.wait_for_function(LOADED)
        page.evaluate("() => { const v = inrView.viewer(); v.viewport.zoomTo(v.viewport.getZoom() * 6, "
                      "new OpenSeadragon.Point(0.52, 0.3), true); }")
        page.wait_for_function(LOADED)
        save(page, docs / "view-run.png")
        server.shutdown()

        training = inr("train", FIXTURES / "rocket.jpg", "--size", "96", "--steps", "3000", "--device", "cpu",
                       "--checkpoint-every", "50", "--run-dir", tmp / "rocket")
        while not (tmp / "rocket" / "checkpoint.npz").is_file():
            if training.poll() is not None:
                raise SystemExit("the training run stopped")
            threading.Event().wait(0.5)
        server = serve(tmp / "rocket")
        page.goto(server.url)
        page.wait_for_function("() => window.inrView && inrView.shown() && inrView.shown().step >= 300",
                               timeout=600_000)
        page.wait_for_function(LOADED)
        save(page, docs / "view-training.png")
        training.terminate()
        training.wait()
        server.shutdown()

        images = tmp / "images"
        images.mkdir()
        for source in sorted(FIXTURES.glob("*.png")) + sorted(FIXTURES.glob("*.jpg")):
            for turn in range(4):
                Image.open(source).convert("RGB").rotate(90 * turn, expand=True).save(
                    images / f"{source.stem}-{turn}.png")
        assert inr("fit-many", images, "-o", tmp / "set", "--size", "48", "--steps", "300", "--hidden", "64",
                   "--device", "cpu").wait() == 0
        server = serve(tmp / "set")
        page.goto(server.url)
        page.wait_for_function("() => document.querySelectorAll('.card img').length > 0 && "
                               "[...document.querySelectorAll('.card img')].every(i => i.naturalWidth > 0)")
        save(page, docs / "view-set.png")
        server.shutdown()
        browser.close()


if __name__ == "__main__":
    main()
