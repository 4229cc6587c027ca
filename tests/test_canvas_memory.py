"""A large canvas never held as floats: inr eval scores a strip of rows at a time (PSNR and SSIM over
every pixel), net.render() draws a region or writes tiles beyond a size, integer renders are
rounded a chunk at a time; inr render cleans its temporary file on a signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli
from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.core import canvas, render
from inr_cli.core.metrics import StreamingScores, psnr, ssim
from inr_cli.formats import checkpoint as ckpt
from tests.test_large_images import small_run  # noqa: F401 - the fixture

runner = CliRunner()


@pytest.mark.parametrize("rows", [1, 4, 40])
def test_streaming_scores_are_the_whole_images(rows):
    """Fed in strips of any height (one row, fewer than the window, the whole image), PSNR and SSIM are
    those of the whole arrays: SSIM's window reaches across the strips."""
    rng = np.random.default_rng(0)
    image, reference = rng.random((40, 23, 3)), rng.random((40, 23, 3))
    reference[10:30] = image[10:30] * 0.9
    scores = StreamingScores(23, 40, 3)
    for top in range(0, 40, rows):
        scores.add(image[top:top + rows], reference[top:top + rows])
    if rows == 40:  # one strip: the same sums
        assert scores.psnr() == psnr(image, reference) and scores.ssim() == ssim(image, reference)
    assert scores.psnr() == pytest.approx(psnr(image, reference), abs=1e-9)
    assert scores.ssim() == pytest.approx(ssim(image, reference), abs=1e-12)


def test_eval_scores_every_pixel_a_strip_at_a_time(small_run, tmp_path, monkeypatch):  # noqa: F811
    """inr eval's figures are those of the whole render against the whole reference, drawn and read a
    few rows at a time."""
    saved = ckpt.load(small_run, moments=False)
    reference = np.asarray(Image.open(saved.config.data.source))
    whole = render.render_float(CpuBackend(), saved.spec, saved.params, 13, 9)
    values = reference.astype(np.float32) / np.float32(255.0)
    monkeypatch.setattr(render, "SCORED_PIXELS", 20)  # strips of 2 rows
    result = runner.invoke(app, ["eval", str(small_run), saved.config.data.source, "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    # the strips' render and sums may differ from the whole's in the last bits (another BLAS kernel for
    # fewer rows): within the rounding eval prints
    assert scores["psnr"] == pytest.approx(psnr(whole, values), abs=2e-4)
    assert scores["ssim"] == pytest.approx(ssim(whole, values), abs=2e-5)


def test_net_render_beyond_a_size_draws_a_region_or_writes_tiles(small_run, tmp_path, monkeypatch):  # noqa: F811
    import tifffile

    net = inr_cli.load(small_run)
    whole = net.render(width=60, height=40)
    sixteen = net.render(width=60, height=40, depth=16)
    floats = render.render_float(CpuBackend(), net.spec, net.params, 60, 40)
    assert np.array_equal(sixteen, np.round(floats * 65535).astype(np.uint16))  # rounded a chunk at a time
    monkeypatch.setattr(canvas, "WHOLE_CANVAS_PIXELS", 1000)
    with pytest.raises(inr_cli.UsageError, match=r"region=\(0, 0, 60, 40\)\), or write it in tiles"):
        net.render(width=60, height=40)
    assert np.array_equal(net.render(width=60, height=40, region=(5, 3, 50, 30)), whole[3:30, 5:50])
    with pytest.raises(inr_cli.UsageError, match="not a part of the 60x40 canvas"):
        net.render(width=60, height=40, region=(0, 0, 61, 4))
    written = net.write_tiles(tmp_path / "canvas.tif", width=60, height=40)
    with tifffile.TiffFile(written) as tiff:
        assert np.array_equal(tiff.series[0].levels[0].asarray(), whole)
    with pytest.raises(inr_cli.UsageError, match="already exists"):
        net.write_tiles(written, width=60, height=40)


def test_eval_train_size_refuses_a_reference_too_large_to_hold_as_floats(tmp_path, monkeypatch):
    Image.fromarray(np.zeros((40, 30, 3), dtype=np.uint8)).save(tmp_path / "ref.png")
    monkeypatch.setattr(canvas, "WHOLE_CANVAS_PIXELS", 1000)
    from inr_cli.commands import evaluate

    monkeypatch.setattr(evaluate, "WHOLE_CANVAS_PIXELS", 1000)
    result = runner.invoke(app, ["eval", str(tmp_path / "run"), str(tmp_path / "ref.png"), "--train-size", "10"])
    assert result.exit_code == 2 and "without --train-size" in result.output
    assert not (tmp_path / "run").exists()


def test_sigterm_to_inr_render_leaves_no_temporary_file(small_run, tmp_path):  # noqa: F811
    """A signal while the picture is written: the command stops with 128 + the signal and its
    temporary file is gone, the output never half-written."""
    out = tmp_path / "part.png"
    process = subprocess.run([sys.executable, "-m", "inr_cli", "render", str(small_run), "--width", "30",
                              "--height", "20", "--device", "cpu", "-o", str(out)], capture_output=True, text=True,
                             env={**os.environ, "INR_HOOKS": "tests.failpoints",
                                  "INR_FAILPOINT": "signal-on-write=SIGTERM@part.png"}, timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, process.stderr
    assert "SIGTERM" in process.stderr and "Traceback" not in process.stderr
    assert not list(tmp_path.iterdir())

