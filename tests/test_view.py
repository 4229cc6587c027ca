"""`inr view`: the server (tiles against `inr render`, refusals, the set's API, Ctrl-C) and the page in
a real headless Chromium (tiles drawn, deeper tiles on zoom, a training run followed, the gallery)."""

from __future__ import annotations

import csv
import dataclasses
import http.client
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
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
from inr_cli.core.network import Network
from inr_cli.core.render import CHUNK_PIXELS
from inr_cli.formats import checkpoint as ckpt
from inr_cli.viewer import tiles
from inr_cli.viewer.server import ViewServer
from inr_cli.viewer.sources import open_view
from inr_cli.viewer.tiles import DEEPEST_SIDE, TILE, Pyramid, TileJob, TileRenderer
from tests.test_fit_many import inr
from tests.tolerances import assert_same_pixels

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


SET_NAMES = ["even/img0.png", "odd/img1.png", "even/img2.png", "odd/img3.png",
             "even/img4-whose-name-is-longer-than-a-card-is-wide.png"]


@pytest.fixture(scope="module")
def network_set(tmp_path_factory):
    """A fitted set of five from class folders: the first folder level is each image's label."""
    folder = tmp_path_factory.mktemp("view-set")
    images = folder / "images"
    for i, name in enumerate(SET_NAMES):
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        smooth_image(images / name, (12, 8), phase=i)
    out = folder / "set"
    result = runner.invoke(app, ["fit-many", str(images), "-o", str(out), "--steps", "60", "--hidden", "16",
                                 "--layers", "1", "--lr", "0.003", "--device", "cpu"])
    assert result.exit_code == 0, result.output
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


def batch_frames(body: bytes) -> list[tuple[int, bytes]]:
    """The (position, PNG) frames of a /tiles/ answer, in the order they came."""
    frames, at = [], 0
    while at < len(body):
        position, length = struct.unpack(">II", body[at:at + 8])
        frames.append((position, body[at + 8:at + 8 + length]))
        at += 8 + length
    return frames


def tile_names(url: str) -> list[tuple[int, int, int]]:
    """The (level, x, y) of every tile a /tiles/ request names."""
    query = url.split("?", 1)[1]
    wanted = next(part[2:] for part in query.split("&") if part.startswith("t="))
    return [tuple(int(v) for v in name.split("-")) for name in wanted.split(",")]


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


@pytest.mark.numerics
def test_tiles_are_the_pixels_of_inr_render(run_dir, tmp_path):
    level = 4
    width, height = RUN_SIZE[0] << level, RUN_SIZE[1] << level  # 384 x 256: two tiles, the second 128 wide
    reference = inr_render(run_dir, width, height, tmp_path / "ref.png")
    with serving(run_dir) as server:
        for x in (0, 1):
            status, body = get(server, f"/tile/0/{level}/{x}/0.png")
            assert status == 200
            assert_same_pixels(png_pixels(body), reference[:, x * TILE:(x + 1) * TILE])


@pytest.mark.numerics
def test_deep_zoom_into_a_hash_grid_run_is_inr_render_and_smooth(tmp_path):
    """The hash grid between its finest cells: tiles 16x the image's size are inr render's pixels, their
    16x16 means the image again, and no step between neighbours is a pixel's (a blocky zoom's would be)."""
    image = smooth_image(tmp_path / "gradient.png", RUN_SIZE)
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", str(image), "--preset", "hashgrid", "--steps", "150", "--device", "cpu",
                                 "--preview-every", "0", "--run-dir", str(run), "-q"])
    assert result.exit_code == 0, result.output
    level = 4
    width, height = RUN_SIZE[0] << level, RUN_SIZE[1] << level
    reference = inr_render(run, width, height, tmp_path / "ref.png")
    with serving(run) as server:
        tiles = []
        for x in (0, 1):
            status, body = get(server, f"/tile/0/{level}/{x}/0.png")
            assert status == 200
            tiles.append(png_pixels(body))
    zoomed = np.concatenate(tiles, axis=1)
    assert_same_pixels(zoomed, reference)
    pixels = np.asarray(Image.open(image).convert("RGB"), dtype=np.float64) / 255
    cells = zoomed.astype(np.float64).reshape(RUN_SIZE[1], 16, RUN_SIZE[0], 16, 3).mean(axis=(1, 3)) / 255
    assert -10 * np.log10(np.mean((cells - pixels) ** 2)) > 35
    own_step = max(np.abs(np.diff(pixels, axis=a)).max() for a in (0, 1))  # the image's largest, pixel to pixel
    zoom_step = max(np.abs(np.diff(zoomed.astype(np.float64) / 255, axis=a)).max() for a in (0, 1))
    assert zoom_step < own_step / 2, (zoom_step, own_step)


@pytest.mark.numerics
def test_a_batch_of_tiles_is_one_chunked_forward_streamed_coarse_first(run_dir, tmp_path, monkeypatch):
    """Every tile of levels 0 to 4 in one request: one forward pass per chunk of all their pixels together
    (not one per tile), each tile the pixels of `inr render` at its level, the coarse levels first."""
    forwards = []
    original = Network.forward

    def counted(self, backend, ws, x, rows):
        forwards.append(rows)
        return original(self, backend, ws, x, rows)

    monkeypatch.setattr(Network, "forward", counted)
    pyramid = Pyramid.for_image(*RUN_SIZE)
    wanted = [(level, x, y) for level in (4, 3, 2, 1, 0) for y in range(pyramid.tiles(level)[1])
              for x in range(pyramid.tiles(level)[0])]
    assert len(wanted) == 6
    with serving(run_dir) as server:
        status, body = get(server, "/tiles/0?t=" + ",".join(f"{level}-{x}-{y}" for level, x, y in wanted))
    assert status == 200
    frames = batch_frames(body)
    assert sorted(position for position, _ in frames) == list(range(len(wanted)))
    pixels = sum(int(np.prod(pyramid.canvas(level))) for level in range(5))
    assert forwards == [CHUNK_PIXELS, pixels - CHUNK_PIXELS]  # 6 tiles, 2 chunks
    assert [wanted[position][0] for position, _ in frames] == [0, 1, 2, 3, 4, 4]
    for position, data in frames:
        level, x, y = wanted[position]
        width, height = pyramid.canvas(level)
        reference = inr_render(run_dir, width, height, tmp_path / f"ref-{level}.png")
        assert_same_pixels(png_pixels(data), reference[y * TILE:(y + 1) * TILE, x * TILE:(x + 1) * TILE])


def test_the_newest_batch_is_drawn_first(monkeypatch):
    """While a round of one batch is drawn, a newer batch comes: it is drawn before the older one's rest."""
    drawing, release = threading.Event(), threading.Event()
    drawn: list[str] = []

    def fake_draw(backend, spec, params, jobs, chunk_pixels=CHUNK_PIXELS):
        drawing.set()
        release.wait(60)
        for index, job in enumerate(jobs):
            drawn.append(job.key)
            yield index, np.zeros((*job.shape, 3), dtype=np.uint8)

    monkeypatch.setattr(tiles, "draw_tiles", fake_draw)
    renderer = TileRenderer(CpuBackend(), round_pixels=TILE * TILE)  # one tile a round

    def jobs(name, count):
        return [TileJob(f"{name}{i}", TILE, TILE, (0, 0, TILE, TILE)) for i in range(count)]

    def consume(batch, into):
        into.extend(position for position, _ in renderer.pngs(None, None, batch))

    older, newer = [], []
    first = threading.Thread(target=consume, args=(jobs("old", 3), older))
    first.start()
    assert drawing.wait(60)  # the first round of the older batch is being drawn
    second = threading.Thread(target=consume, args=(jobs("new", 2), newer))
    second.start()
    while len(renderer.pending) < 2 and second.is_alive():
        second.join(0.01)  # until the newer batch is queued (a state, not a time)
    release.set()
    first.join(60)
    second.join(60)
    renderer.close()
    assert drawn == ["old0", "new0", "new1", "old1", "old2"]
    assert sorted(older) == [0, 1, 2] and sorted(newer) == [0, 1]


def test_absurd_tiles_and_paths_are_refused(run_dir):
    secret = run_dir / "checkpoint.npz"
    with serving(run_dir) as server:
        # 400: a tile or argument that cannot exist; 404: no such network, or no such path at all
        for path, expected in [("/tile/0/99/0/0.png", 400), ("/tile/0/3/5/0.png", 400),
                               ("/tile/0/0/0/999999999.png", 400), ("/tile/7/0/0/0.png", 404),
                               ("/tile/0/1234567890/0/0.png", 404), ("/tile/0/-1/0/0.png", 404),
                               ("/tile/0/a/0/0.png", 404), ("/api/state?net=x", 400),
                               ("/api/state?net=3", 404), ("/api/networks", 400), ("/tiles/0?t=99-0-0", 400),
                               ("/tiles/0?t=0-0-0,x", 400), ("/tiles/0", 400), ("/tiles/3?t=0-0-0", 404),
                               ("/source/0/99/0/0.png", 400), ("/source/0/0/0/0.png", 200)]:
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
        # the settings panel: what a SIREN trained alone uses, not Fourier features' nor a set's start
        assert state["settings"]["network"]["omega0"] > 0 and state["settings"]["encoding"] == {"name": "none"}
        assert "init" not in state["settings"]["training"] and "momentum" not in state["settings"]["optimizer"]
        assert (state["width"], state["height"]) == RUN_SIZE
        metrics = (run_dir / "metrics.csv").read_text().splitlines()[1:]
        assert state["curve"]["step"][-1] == int(metrics[-1].split(",")[0])
        assert state["psnr"] == pytest.approx(float(metrics[-1].split(",")[2]))
        status, body = get(server, "/source/0.png")
        source = np.asarray(Image.open(run_dir.parent / "gradient.png").convert("RGB"))
        np.testing.assert_array_equal(png_pixels(body), source)
        # Its tiles show each training pixel as a square of 2**level pixels (level 0 is the training size).
        status, body = get(server, "/source/0/3/0/0.png")
        np.testing.assert_array_equal(png_pixels(body), source.repeat(8, axis=0).repeat(8, axis=1))


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
        assert names("sort=name&q=IMG3") == ["odd/img3.png"]
        # A network's place in the gallery's list: the page says "2 of 3" and links its neighbours.
        odd_by_name = [i for i in sorted(range(len(index)), key=lambda i: index[i]["name"])
                       if index[i]["label"] == "odd"]
        state = json.loads(get(server, f"/api/state?net={odd_by_name[1]}&sort=name&label=odd")[1])
        assert state["position"] == {"index": 1, "total": 2, "previous": odd_by_name[0], "next": None}
        assert state["settings"]["training"]["init"] == "shared"  # a set's start tells its networks apart
        assert json.loads(get(server, f"/api/state?net={odd_by_name[1]}&label=even")[1])["position"] is None
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


def test_cli_follows_the_next_run_started_after_it(run_dir, tmp_path):
    """`inr view --next`, started before `inr train`: an earlier run under runs/ is not the one it
    follows; the next run to write its config.toml is, once its first checkpoint is there."""
    runs = tmp_path / "runs"
    shutil.copytree(run_dir, runs / "photo")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    process = subprocess.Popen([sys.executable, "-m", "inr_cli", "view", "--next", "--no-browser", "--device", "cpu"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "waiting for the next run under runs/" in process.stderr.readline()
        (runs / "photo-2").mkdir()
        shutil.copy(run_dir / "config.toml", runs / "photo-2" / "config.toml")
        assert "following runs/photo-2" in process.stderr.readline()
        assert "waiting for the first checkpoint of runs/photo-2" in process.stderr.readline()
        shutil.copy(run_dir / "checkpoint.npz", runs / "photo-2" / "checkpoint.npz.part")
        (runs / "photo-2" / "checkpoint.npz.part").rename(runs / "photo-2" / "checkpoint.npz")
        address = process.stdout.readline().strip()
        with urllib.request.urlopen(address + "api/info", timeout=60) as response:
            assert json.loads(response.read())["name"] == "photo-2"
    finally:
        process.kill()
        process.wait()


def test_cli_errors_are_one_line(tmp_path):
    result = runner.invoke(app, ["view", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "no such run directory" in result.output and "inr view --next" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["view", str(tmp_path)])
    assert result.exit_code == 1 and "an empty folder" in result.output
    result = runner.invoke(app, ["view", str(tmp_path), "--next"])
    assert result.exit_code == 2 and "not both" in result.output
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
    return !!v && v.world.getItemCount() > 0 && v.world.getItemAt(0).getFullyLoaded() &&
        inrView.pendingTiles() === 0; }"""
HIDE_CONTROLS = """() => { const v = inrView.viewer();
    v.controls.forEach(c => { c.element.style.visibility = 'hidden'; });
    if (v.navigator) v.navigator.element.style.visibility = 'hidden'; }"""
IMAGE_BOX = """() => { const v = inrView.viewer();
    const r = v.viewport.viewportToViewerElementRectangle(v.world.getItemAt(0).getBounds(true));
    const e = v.element.getBoundingClientRect();
    return [e.left, e.top, e.width, e.height, r.x, r.y, r.width, r.height]; }"""


def batches(requested: list[str]) -> list[list[tuple[int, int, int]]]:
    """The tiles of each /tiles/ request the page made, in order."""
    return [tile_names(url) for url in requested if "/tiles/" in url]


def levels_of(batch) -> set[int]:
    return {level for level, _, _ in batch}


def open_page(browser, server, hash_part: str = ""):
    """A page on the server, with every request it makes and every one that failed."""
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    requested: list[str] = []
    failed: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    page.goto(server.url + hash_part)
    return page, requested, failed


def zoom_by(page, factor: float) -> None:
    page.evaluate(f"() => {{ const v = inrView.viewer(); v.viewport.zoomBy({factor}, undefined, true); "
                  f"v.viewport.applyConstraints(true); }}")


@contextmanager
def held_drawing(monkeypatch):
    """The server draws no tile until the event is set: what the page shows while it waits."""
    release = threading.Event()
    draw = tiles.draw_tiles

    def held(*args, **kwargs):
        release.wait(120)
        yield from draw(*args, **kwargs)

    monkeypatch.setattr(tiles, "draw_tiles", held)
    try:
        yield release
    finally:
        release.set()


def test_page_shows_tiles_drawn_by_the_network(browser, run_dir, tmp_path):
    with serving(run_dir) as server:
        page, requested, failed = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        assert page.locator("#step").inner_text() == "step 150 / 150"
        assert "network.hidden" in page.locator("#settings").inner_text()
        # The first view's tiles, every level of them, in one request; none asked for alone.
        [first] = batches(requested)
        assert len(levels_of(first)) >= 2 and not any("/tile/" in url for url in requested)
        # Each tile of that batch is the canvas `inr render` draws at its level (within a level: tolerances.py).
        url = next(url for url in requested if "/tiles/" in url)
        with urllib.request.urlopen(url, timeout=60) as response:
            frames = batch_frames(response.read())
        assert sorted(position for position, _ in frames) == list(range(len(first)))
        for position, data in frames:
            level, x, y = first[position]
            reference = inr_render(run_dir, RUN_SIZE[0] << level, RUN_SIZE[1] << level, tmp_path / f"{level}.png")
            assert_same_pixels(png_pixels(data), reference[y * TILE:(y + 1) * TILE, x * TILE:(x + 1) * TILE])
        # What the page shows: the whole picture, as `inr render` draws it at the size on screen.
        page.evaluate(HIDE_CONTROLS)
        left, top, _, _, x, y, w, h = page.evaluate(IMAGE_BOX)
        box = [left + x, top + y, w, h]
        left, top, w, h = int(np.ceil(box[0])) + 2, int(np.ceil(box[1])) + 2, int(box[2]) - 4, int(box[3]) - 4
        shot = png_pixels(page.screenshot(clip={"x": left, "y": top, "width": w, "height": h})).astype(float)
        drawn = inr_render(run_dir, int(round(box[2])), int(round(box[3])), tmp_path / "screen.png")
        drawn = drawn[top - int(round(box[1])):][:h, left - int(round(box[0])):][:, :w].astype(float)
        error = np.abs(shot - drawn).mean()
        assert error < 4.0, error
        assert error < 0.1 * np.abs(shot - drawn[::-1, ::-1]).mean()  # a wrong picture would be far off
        assert failed == [] and not any("favicon" in url for url in requested)
        page.close()


def test_zooming_in_asks_for_the_deeper_levels_in_one_request_and_says_how_deep(browser, run_dir, monkeypatch):
    with serving(run_dir) as server:
        page, requested, _ = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        before = len(batches(requested))
        deepest = max(max(levels_of(batch)) for batch in batches(requested))
        with held_drawing(monkeypatch) as release:
            with page.expect_request(lambda request: "/tiles/" in request.url
                                     and max(levels_of(tile_names(request.url))) >= deepest + 4, timeout=60_000):
                zoom_by(page, 40)
            # While the server draws, the page says so.
            page.wait_for_function("() => !document.querySelector('#loading').hidden && "
                                   "/^drawing [1-9][0-9]* tiles?$/"
                                   ".test(document.querySelector('#loading').textContent)")
            release.set()
            page.wait_for_function(FULLY_LOADED)
        assert page.locator("#loading").is_hidden()
        [zoomed] = batches(requested)[before:]  # the new view in one request: its level and two coarser ones
        finest = max(levels_of(zoomed))
        assert levels_of(zoomed) == {finest - 2, finest - 1, finest}
        # The readout: the zoom, and how many screen pixels a training pixel covers.
        _, _, _, _, _, _, width, _ = page.evaluate(IMAGE_BOX)
        readout = page.locator("#readout")
        assert float(readout.get_attribute("data-per-pixel")) == pytest.approx(width / RUN_SIZE[0], rel=1e-3)
        assert readout.inner_text().startswith("zoom 40.0x · 1 training pixel = ")
        page.close()


def test_the_training_image_shows_its_pixels_as_pixels_beside_the_network(browser, run_dir):
    """Zoomed in, the training image covers the viewer's left half, each of its pixels a flat square of
    its exact colour; the network, on the right, varies within each square."""
    source = np.asarray(Image.open(run_dir.parent / "gradient.png").convert("RGB")).astype(int)
    with serving(run_dir) as server:
        page, _, failed = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        zoom_by(page, 2)
        page.check("#compare")
        page.wait_for_function("() => inrView.sourceLayer() && inrView.sourceLayer().getFullyLoaded()")
        page.wait_for_function(FULLY_LOADED)
        page.evaluate(HIDE_CONTROLS)
        left, top, width, height, x0, y0, image_width, _ = page.evaluate(IMAGE_BOX)
        shot = png_pixels(page.screenshot(clip={"x": left, "y": top, "width": width, "height": height})).astype(int)
        side = image_width / RUN_SIZE[0]  # screen pixels per training pixel
        assert side > 40
        split = width / 2
        flat, varied = 0, []
        for row in range(RUN_SIZE[1]):
            for column in range(RUN_SIZE[0]):
                x1, y1 = x0 + column * side, y0 + row * side
                if x1 < 0 or y1 < 0 or x1 + side > width or y1 + side > height:
                    continue
                inner = shot[int(y1) + 3:int(y1 + side) - 3, int(x1) + 3:int(x1 + side) - 3]
                if x1 + side < split - 2:
                    assert np.abs(inner - source[row, column]).max() <= 2, (row, column)
                    flat += 1
                elif x1 > split + 2:
                    varied.append(np.ptp(inner, axis=(0, 1)).max())
        assert flat >= 10 and len(varied) >= 10
        assert np.mean(varied) > 3  # the network's function is continuous inside a training pixel
        assert failed == []
        page.close()


def test_page_follows_a_training_run(browser, run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    with serving(run) as server:
        page, _, _ = open_page(browser, server)
        page.wait_for_function(FULLY_LOADED)
        saved = ckpt.load(run)
        later = dataclasses.replace(saved.state, step=180, params=saved.state.params * 0.5)
        ckpt.save(dataclasses.replace(saved, state=later, total_steps=300), run / ckpt.FILENAME)
        with page.expect_request(lambda request: "/tiles/" in request.url and "v=180-" in request.url, timeout=60_000):
            page.wait_for_function("() => document.querySelector('#step').textContent === 'step 180 / 300'")
        page.wait_for_function("() => inrView.layers().length === 1 && inrView.layers()[0].getFullyLoaded()")
        page.close()


def test_gallery_lists_sorts_filters_and_opens_a_network(browser, network_set):
    with open(network_set / "index.csv", newline="") as handle:
        index = list(csv.DictReader(handle))
    cards = "() => [...document.querySelectorAll('.card')].map(c => c.dataset.name)"
    with serving(network_set) as server:
        page, requested, failed = open_page(browser, server)
        by_psnr = [r["name"] for r in sorted(index, key=lambda r: -float(r["psnr"]))]
        page.wait_for_function(f"() => ({cards})().join() === {json.dumps(','.join(by_psnr))}")
        page.wait_for_function("() => [...document.querySelectorAll('.card img')].every(i => i.naturalWidth > 0)")
        # A card names its image once, whole (the label's folder left out of it), and its label once.
        for name in SET_NAMES:
            label, short = name.split("/")
            card = page.locator(f".card[data-name='{name}']")
            assert card.locator(".name").inner_text() == short
            assert card.inner_text().count(label) == 1
            assert card.locator(".name").evaluate("e => e.scrollWidth <= e.clientWidth && "
                                                  "e.scrollHeight <= e.clientHeight")
        # The first card opens as the first of the list, with a link to the next.
        page.click(f".card[data-name='{by_psnr[0]}']")
        page.wait_for_function(FULLY_LOADED)
        assert page.locator("#step").inner_text().startswith("1 of 5 by PSNR, best first")
        assert page.locator("#previous").is_hidden() and page.locator("#following").is_visible()
        page.click("#back")
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
        assert page.locator("#step").inner_text() == "1 of 2 by name, Z to A · label odd"
        # The training image at a size that shows it, not as a stamp.
        assert page.locator("#source").evaluate("e => e.clientWidth") >= 200
        page.click("#following")
        page.wait_for_function(f"() => document.querySelector('#title').textContent === {json.dumps(odd[1])}")
        assert failed == [] and not any("favicon" in url for url in requested)
        page.close()
