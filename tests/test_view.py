"""`inr view`: the server (tiles against `inr render`, refusals, the set's API, Ctrl-C) and the page in
a real headless Chromium (tiles drawn, deeper tiles on zoom, a training run followed, the gallery)."""

from __future__ import annotations

import csv
import dataclasses
import http.client
import io
import json
import shutil
import signal
import subprocess
import threading
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.formats import checkpoint as ckpt
from inr_cli.viewer.server import ViewServer
from inr_cli.viewer.sources import open_view
from inr_cli.viewer.tiles import DEEPEST_SIDE, TILE, Pyramid, TileRenderer
from tests.conftest import add_label_column
from tests.test_fit_many import inr

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_SIZE = (24, 16)  # small enough to be level 0 of the pyramid: level L is the canvas RUN_SIZE * 2**L


def smooth_image(path: Path, size, phase: float = 0.0) -> Path:
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    values = np.stack([xx / w, yy / h, 0.5 + 0.4 * np.sin((xx + yy) / 5 + phase)], -1)
    Image.fromarray(np.round(values * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("view-run")
    image = smooth_image(folder / "gradient.png", RUN_SIZE)
    result = runner.invoke(app, ["train", str(image), "--steps", "150", "--hidden", "32", "--layers", "2", "--lr",
                                 "0.003", "--device", "cpu", "--preview-every", "0", "--run-dir", str(folder / "run")])
    assert result.exit_code == 0, result.output
    return folder / "run"


@pytest.fixture(scope="module")
def network_set(tmp_path_factory):
    """A fitted set of five, with a label column added to its index as a labelled set has."""
    folder = tmp_path_factory.mktemp("view-set")
    images = folder / "images"
    images.mkdir()
    for i in range(5):
        smooth_image(images / f"img{i}.png", (12, 8), phase=i)
    out = folder / "set"
    result = runner.invoke(app, ["fit-many", str(images), "-o", str(out), "--steps", "60", "--hidden", "16",
                                 "--layers", "1", "--lr", "0.003", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    add_label_column(out, ["odd" if i % 2 else "even" for i in range(5)])
    return out


@contextmanager
def serving(path: Path):
    server = ViewServer(("127.0.0.1", 0), open_view(path), TileRenderer(CpuBackend()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def get(server: ViewServer, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    """A raw GET: the path goes out exactly as written (no client-side normalising of '..')."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body


def png_pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def inr_render(run: Path, width: int, height: int, out: Path) -> np.ndarray:
    result = runner.invoke(app, ["render", str(run), "--width", str(width), "--height", str(height), "--device",
                                 "cpu", "-q", "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    return np.asarray(Image.open(out).convert("RGB"))


def test_pyramid_covers_every_level_as_openseadragon_counts_it():
    for width, height in [(24, 16), (1, 1), (300, 7), (4000, 3000), (257, 256)]:
        pyramid = Pyramid.for_image(width, height)
        full = pyramid.to_json()
        assert max(full["width"], full["height"]) >= DEEPEST_SIDE  # zoom goes on to a million pixels a side
        assert pyramid.canvas(pyramid.base) == (width, height)
        assert max(pyramid.canvas(0)) <= TILE
        for level in range(pyramid.max_level + 1):
            scale = 2.0 ** (level - pyramid.max_level)  # OpenSeadragon's level scale
            cw, ch = pyramid.canvas(level)
            assert (cw, ch) == (int(np.ceil(full["width"] * scale)), int(np.ceil(full["height"] * scale)))
            columns, rows = pyramid.tiles(level)
            last = pyramid.region(level, columns - 1, rows - 1)[2]
            assert last[2:] == (cw, ch) and last[0] < cw and last[1] < ch
        with pytest.raises(ValueError):
            pyramid.region(pyramid.max_level + 1, 0, 0)
        with pytest.raises(ValueError):
            pyramid.region(0, 1, 0)


def test_tiles_are_the_pixels_of_inr_render(run_dir, tmp_path):
    level = 4
    width, height = RUN_SIZE[0] << level, RUN_SIZE[1] << level  # 384 x 256: two tiles, the second 128 wide
    reference = inr_render(run_dir, width, height, tmp_path / "ref.png")
    with serving(run_dir) as server:
        for x in (0, 1):
            status, body = get(server, f"/tile/0/{level}/{x}/0.png")
            assert status == 200
            np.testing.assert_array_equal(png_pixels(body), reference[:, x * TILE:(x + 1) * TILE])


def test_absurd_tiles_and_paths_are_refused(run_dir):
    secret = run_dir / "checkpoint.npz"
    with serving(run_dir) as server:
        # 400: a tile or argument that cannot exist; 404: no such network, or no such path at all
        for path, expected in [("/tile/0/99/0/0.png", 400), ("/tile/0/3/5/0.png", 400), ("/tile/0/0/0/999999999.png", 400),
                               ("/tile/7/0/0/0.png", 404), ("/tile/0/1234567890/0/0.png", 404),
                               ("/tile/0/-1/0/0.png", 404), ("/tile/0/a/0/0.png", 404), ("/api/state?net=x", 400),
                               ("/api/state?net=3", 404), ("/api/networks", 400)]:
            status, _ = get(server, path)
            assert status == expected, path
        for path in ["/static/../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2f..%2fetc%2fpasswd",
                     "/static/%252e%252e/etc/passwd", "//etc/passwd", "/static//etc/passwd", "/../checkpoint.npz",
                     "/checkpoint.npz", "/static/../../../" + str(secret), "/source/../checkpoint.npz",
                     "/static/openseadragon/../../sources.py", "/static/viewer.js/../../server.py"]:
            status, body = get(server, path)
            assert status == 404, path
            assert b"root:" not in body and b"inr-checkpoint" not in body and b"import" not in body
        status, _ = get(server, "/", {"Host": "attacker.example:80"})  # DNS rebinding
        assert status == 403
        status, body = get(server, "/static/openseadragon/LICENSE.txt")
        assert status == 200 and b"OpenSeadragon contributors" in body


def test_run_state_and_training_image(run_dir):
    with serving(run_dir) as server:
        status, body = get(server, "/api/state")
        state = json.loads(body)
        assert status == 200 and state["kind"] == "run" and state["step"] == 150
        assert (state["width"], state["height"]) == RUN_SIZE
        metrics = (run_dir / "metrics.csv").read_text().splitlines()[1:]
        assert state["curve"]["step"][-1] == int(metrics[-1].split(",")[0])
        assert state["psnr"] == pytest.approx(float(metrics[-1].split(",")[2]))
        status, body = get(server, "/source/0.png")
        source = np.asarray(Image.open(run_dir.parent / "gradient.png").convert("RGB"))
        np.testing.assert_array_equal(png_pixels(body), source)


def test_set_api_sorts_filters_and_pages(network_set):
    with open(network_set / "index.csv", newline="") as handle:
        index = list(csv.DictReader(handle))
    with serving(network_set) as server:
        def names(query):
            status, body = get(server, "/api/networks?" + query)
            assert status == 200, body
            return [row["name"] for row in json.loads(body)["rows"]]

        by_psnr = [r["name"] for r in sorted(index, key=lambda r: -float(r["psnr"]))]
        assert names("sort=-psnr") == by_psnr
        assert names("sort=psnr") == by_psnr[::-1]
        assert names("sort=-name") == sorted((r["name"] for r in index), reverse=True)
        assert names("sort=-psnr&offset=1&limit=2") == by_psnr[1:3]
        assert names("sort=name&label=odd") == sorted(r["name"] for r in index if r["label"] == "odd")
        assert names("sort=name&q=IMG3") == ["img3.png"]
        for bad in ("sort=size", "limit=0", "limit=100000", "offset=-1"):
            assert get(server, "/api/networks?" + bad)[0] == 400, bad
        status, body = get(server, "/thumb/2.png")
        assert status == 200 and png_pixels(body).shape == (85, 128, 3)


def view_process(path: Path) -> tuple[subprocess.Popen, str]:
    process = inr("view", path, "--no-browser", "--device", "cpu")
    return process, process.stdout.readline().strip()


def test_cli_prints_its_address_and_stops_cleanly_on_ctrl_c(run_dir):
    process, address = view_process(run_dir)
    try:
        assert address.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(address + "api/info", timeout=60) as response:
            assert json.loads(response.read())["kind"] == "run"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "stopped" in process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_cli_waits_for_the_first_checkpoint_of_a_run_that_has_just_started(run_dir, tmp_path):
    """`inr view` started beside `inr train`, before its first checkpoint: it waits, then serves it."""
    started = tmp_path / "started"
    started.mkdir()
    shutil.copy(run_dir / "config.toml", started / "config.toml")
    process = inr("view", started, "--no-browser", "--device", "cpu")
    try:
        assert "waiting for the first checkpoint" in process.stderr.readline()
        atomic_copy = started / "checkpoint.npz.part"
        shutil.copy(run_dir / "checkpoint.npz", atomic_copy)
        atomic_copy.rename(started / "checkpoint.npz")
        address = process.stdout.readline().strip()
        assert address.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(address + "api/state", timeout=60) as response:
            assert json.loads(response.read())["step"] == ckpt.load(run_dir).step
    finally:
        process.kill()
        process.wait()


def test_cli_errors_are_one_line(tmp_path):
    result = runner.invoke(app, ["view", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "no such run directory" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["view", str(tmp_path), "--port", "70000"])
    assert result.exit_code == 2 and "--port" in result.output


# --- the page, in a real browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: the page is "
                                   "tested in a real browser (pip install playwright)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Chromium is not installed (apt-get install chromium): the page is tested in a real browser")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


FULLY_LOADED = """() => { const v = window.inrView && inrView.viewer();
    return !!v && v.world.getItemCount() > 0 && v.world.getItemAt(0).getFullyLoaded(); }"""


def tile_level(url: str) -> int:
    return int(url.split("/tile/")[1].split("/")[1]) if "/tile/" in url else -1


def open_page(browser, server, hash_part: str = ""):
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(server.url + hash_part)
    return page, requested


def test_page_shows_tiles_drawn_by_the_network(browser, run_dir, tmp_path):
    with serving(run_dir) as server:
        page, requested = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        assert page.locator("#step").inner_text() == "step 150 / 150"
        assert "network.hidden" in page.locator("#settings").inner_text()
        # A tile the viewer asked for is, byte for byte, the canvas `inr render` draws there.
        url = next(u for u in requested if "/tile/" in u and tile_level(u) >= 1)
        level, x, y = (int(v) for v in url.split("/tile/")[1].split(".png")[0].split("/")[1:])
        width, height = RUN_SIZE[0] << level, RUN_SIZE[1] << level
        reference = inr_render(run_dir, width, height, tmp_path / "ref.png")
        with urllib.request.urlopen(url, timeout=60) as response:
            tile = png_pixels(response.read())
        np.testing.assert_array_equal(tile, reference[y * TILE:(y + 1) * TILE, x * TILE:(x + 1) * TILE])
        # What the page shows: the whole picture, as `inr render` draws it at the size on screen.
        box = page.evaluate("""() => { const v = inrView.viewer();
            v.controls.forEach(c => { c.element.style.visibility = 'hidden'; });
            const r = v.viewport.viewportToViewerElementRectangle(v.world.getItemAt(0).getBounds(true));
            const e = v.element.getBoundingClientRect();
            return [e.left + r.x, e.top + r.y, r.width, r.height]; }""")
        left, top, w, h = int(np.ceil(box[0])) + 2, int(np.ceil(box[1])) + 2, int(box[2]) - 4, int(box[3]) - 4
        shot = png_pixels(page.screenshot(clip={"x": left, "y": top, "width": w, "height": h})).astype(float)
        drawn = inr_render(run_dir, int(round(box[2])), int(round(box[3])), tmp_path / "screen.png")
        drawn = drawn[top - int(round(box[1])):][:h, left - int(round(box[0])):][:, :w].astype(float)
        error = np.abs(shot - drawn).mean()
        assert error < 4.0, error
        assert error < 0.1 * np.abs(shot - drawn[::-1, ::-1]).mean()  # a wrong picture would be far off
        page.close()


def test_zooming_in_asks_for_deeper_tiles(browser, run_dir):
    with serving(run_dir) as server:
        page, requested = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        deepest = max(tile_level(u) for u in requested)
        with page.expect_request(lambda request: tile_level(request.url) >= deepest + 4, timeout=60_000):
            page.evaluate("() => { const v = inrView.viewer(); v.viewport.zoomBy(40); v.viewport.applyConstraints(); }")
        page.close()


def test_page_follows_a_training_run(browser, run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    with serving(run) as server:
        page, requested = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        saved = ckpt.load(run)
        later = dataclasses.replace(saved.state, step=180, params=saved.state.params * 0.5)
        ckpt.save(dataclasses.replace(saved, state=later, total_steps=300), run / ckpt.FILENAME)
        with page.expect_request(lambda request: "/tile/" in request.url and "v=180-" in request.url, timeout=60_000):
            page.wait_for_function("() => document.querySelector('#step').textContent === 'step 180 / 300'")
        page.wait_for_function("() => inrView.layers().length === 1 && inrView.layers()[0].getFullyLoaded()")
        page.close()


def test_gallery_lists_sorts_filters_and_opens_a_network(browser, network_set):
    with open(network_set / "index.csv", newline="") as handle:
        index = list(csv.DictReader(handle))
    cards = "() => [...document.querySelectorAll('.card')].map(c => c.dataset.name)"
    with serving(network_set) as server:
        page, _ = open_page(browser, server)
        by_psnr = [r["name"] for r in sorted(index, key=lambda r: -float(r["psnr"]))]
        page.wait_for_function(f"() => ({cards})().join() === {json.dumps(','.join(by_psnr))}")
        page.wait_for_function("() => [...document.querySelectorAll('.card img')].every(i => i.naturalWidth > 0)")
        page.select_option("#sort", "-name")
        by_name = sorted((r["name"] for r in index), reverse=True)
        page.wait_for_function(f"() => ({cards})().join() === {json.dumps(','.join(by_name))}")
        page.select_option("#label", "odd")
        odd = sorted((r["name"] for r in index if r["label"] == "odd"), reverse=True)
        page.wait_for_function(f"() => ({cards})().join() === {json.dumps(','.join(odd))}")
        page.click(f".card[data-name='{odd[0]}']")
        page.wait_for_function(FULLY_LOADED)
        page.wait_for_function("() => document.querySelector('#source').naturalWidth === 12")
        assert page.locator("#title").inner_text() == odd[0]
        page.close()
