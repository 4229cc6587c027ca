"""The pictures a run leaves for people to look at: psnr.svg reads like a plotting library's chart,
previews.png says the step of each frame."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image, ImageSequence

from tests.conftest import make_image
from tests.test_cli import SMALL, run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("pictures")
    image = make_image(base / "photo.png", "RGB", size=(32, 24))
    result = run("train", image, "--steps", "40", "--log-every", "2", "--preview-every", "10", "--lr", "1e-3",
                 "--run-dir", base / "run", *SMALL)
    assert result.exit_code == 0, result.output
    return base / "run"


def test_psnr_svg_has_round_ticks_a_grid_and_a_title_clear_of_the_curve(run_dir):
    root = ET.parse(run_dir / "psnr.svg").getroot()
    texts = [(t.get("x"), t.get("y"), t.get("font-size") or root.get("font-size"), (t.text or "").strip())
             for t in root.iter(f"{SVG}text")]
    numbers = [float(text) for *_, text in texts if re.fullmatch(r"-?\d+(\.\d+)?", text)]
    steps = sorted({float(text) for x, y, size, text in texts if re.fullmatch(r"\d+", text) and float(text) % 10 == 0})
    assert {0, 10, 20, 30, 40} <= set(steps), texts  # intermediate steps, not just the ends
    assert len(numbers) >= 8, texts
    grid = [line for line in root.iter(f"{SVG}line") if line.get("stroke") not in ("black", None)]
    assert len(grid) >= 6
    curve = next(root.iter(f"{SVG}polyline"))
    xy = np.array([[float(v) for v in p.split(",")] for p in curve.get("points").split()])
    title = next(t for t in texts if t[3].startswith("PSNR of the training image"))
    size = float(title[2])
    half = len(title[3]) * size * 0.6 / 2  # a generous width for sans-serif at this size
    box = (float(title[0]) - half, float(title[1]) - size, float(title[0]) + half, float(title[1]) + 0.3 * size)
    curve_box = (xy[:, 0].min(), xy[:, 1].min(), xy[:, 0].max(), xy[:, 1].max())
    overlaps = box[0] < curve_box[2] and curve_box[0] < box[2] and box[1] < curve_box[3] and curve_box[1] < box[3]
    assert not overlaps, (box, curve_box)


def test_previews_png_frames_are_labelled_with_their_step(run_dir):
    with Image.open(run_dir / "previews.png") as animation:
        frames = [np.asarray(frame.convert("RGB")).copy() for frame in ImageSequence.Iterator(animation)]
    previews = sorted((run_dir / "previews").glob("step-*.png"))
    assert len(frames) == len(previews) + 1  # and the final render
    height = Image.open(previews[0]).height
    labels = [frame[height:] for frame in frames]
    assert all(label.size and (label < 128).any() for label in labels), "a frame has no label under it"
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            assert not np.array_equal(labels[i], labels[j]), (i, j)
