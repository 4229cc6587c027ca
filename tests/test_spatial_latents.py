"""dev/spatial_latents.py, the PyTorch prototype of a grid of latents: its bilinear read of the grid
reproduces a linear function of the cell centres (what bilinear interpolation must), and a run
end to end on a few tiny images writes its readings, its ceiling and its tensors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parent.parent / "dev" / "spatial_latents.py"
spec = importlib.util.spec_from_file_location("spatial_latents", SCRIPT)
spatial_latents = importlib.util.module_from_spec(spec)
spec.loader.exec_module(spatial_latents)


def test_each_pixel_reads_a_linear_function_of_the_cell_centres_exactly_within_the_grid():
    side, cells = 16, 4
    centres = (np.arange(side) + 0.5) / side * 2 - 1
    coords = np.stack(np.meshgrid(centres, centres, indexing="xy"), -1).reshape(-1, 2).astype(np.float32)
    mix = spatial_latents.bilinear(side, cells, coords).numpy()
    assert np.allclose(mix.sum(axis=1), 1.0, atol=1e-6) and (mix >= 0).all()
    cell_centres = (np.arange(cells) + 0.5) / cells * 2 - 1
    cx, cy = np.meshgrid(cell_centres, cell_centres, indexing="xy")
    values = (0.3 * cx - 0.7 * cy + 0.1).ravel()  # a linear function at the cells, row by row as the grid's
    inside = (np.abs(coords) <= cell_centres[-1]).all(axis=1)  # beyond the outer centres the grid clamps
    expected = 0.3 * coords[:, 0] - 0.7 * coords[:, 1] + 0.1
    assert inside.sum() > side * side // 2
    assert np.allclose((mix @ values)[inside], expected[inside], atol=1e-5)
    assert not np.allclose((mix @ values)[~inside], expected[~inside], atol=1e-3)


@pytest.mark.parametrize("kind", [["--kind", "functa", "--latents", "6"], ["--kind", "grid", "--grid", "2",
                                                                             "--channels", "2", "--first-only"]])
def test_a_run_end_to_end_writes_its_readings_ceiling_and_tensors(tmp_path, kind):
    rng = np.random.default_rng(0)
    for group in ("a", "b"):
        (tmp_path / "data" / group).mkdir(parents=True)
        for i in range(4):
            Image.fromarray((rng.random((4, 4, 3)) * 255).astype(np.uint8)).save(tmp_path / "data" / group / f"{i}.png")
    out = tmp_path / "run.json"
    subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path / "data"), *kind, "--hidden", "4",
                    "--layers", "2", "--outer", "2", "--every", "1", "--batch", "2", "--out", str(out)],
                   check=True, capture_output=True)
    written = json.loads(out.read_text())
    assert [reading["step"] for reading in written["log"]] == [1, 2]
    assert set(written["log"][-1]) >= {"3", "10", "train_psnr"} and np.isfinite(written["ceiling"]["mean"])
    assert len(written["ceiling"]["worst"]) == 2  # 30% of 8 images held out
    assert out.with_suffix(".pt").is_file()
