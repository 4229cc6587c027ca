"""The hash grid end to end: `inr train` choosing it for a large image, and its peer in the benchmarks
agreeing with the reference (resuming: test_training.py)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.config import read_toml
from inr_cli.runs import start
from tests.conftest import make_image

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def large_from(monkeypatch):
    """Images of at least this many pixels train the hash grid (the real threshold is 96x64)."""
    def set_threshold(pixels: int) -> None:
        monkeypatch.setattr(start, "HASH_GRID_PIXELS", pixels)
    return set_threshold


def test_a_large_image_trains_the_hash_grid_and_a_small_one_siren(tmp_path, large_from):
    large_from(20 * 20)
    small = make_image(tmp_path / "small.png", "RGB", (19, 19))
    large = make_image(tmp_path / "large.png", "RGB", (24, 20))
    for image, expected in ((small, "siren"), (large, "hashgrid")):
        result = run("train", image, "--steps", "3", "--device", "cpu", "--run-dir", tmp_path / image.stem)
        assert result.exit_code == 0, result.output
        saved = read_toml(tmp_path / image.stem / "config.toml")
        assert saved["encoding.name"] == ("hashgrid" if expected == "hashgrid" else "none")
        assert saved["network.model"] == ("relu" if expected == "hashgrid" else "siren")
    assert "24x20: training the hashgrid preset" in result.output
    assert "relu, 2 hidden x 64, linear output, hash grid" in run("info", tmp_path / "large").stdout  # the preset's


@pytest.mark.parametrize("named", [["--preset", "siren"], ["--model", "siren"], ["--encoding", "none"],
                                   ["--omega0", "30"], ["--weight-scale", "2"], ["--set", "network.omega0=30"]])
def test_a_named_preset_model_or_encoding_wins_over_the_size(tmp_path, large_from, named):
    """So does a flag only SIREN or Fourier features take: a large image trains the network it was given for."""
    large_from(20 * 20)
    image = make_image(tmp_path / "large.png", "RGB", (24, 20))
    result = run("train", image, "--steps", "2", "--device", "cpu", "-q", "--run-dir", tmp_path / "r", *named)
    assert result.exit_code == 0, result.output
    assert read_toml(tmp_path / "r" / "config.toml")["encoding.name"] == "none"


def test_eval_train_size_takes_the_road_inr_train_takes(tmp_path, large_from):
    """inr eval --train-size trains the preset inr train would for the shrunk image, and says so; a
    named preset wins."""
    large_from(20 * 20)
    image = make_image(tmp_path / "photo.png", "RGB", (48, 40))
    for train_size, named, expected in ((24, [], "hashgrid"), (16, [], "none"), (24, ["--preset", "siren"], "none")):
        run_dir = tmp_path / f"eval-{train_size}-{len(named)}"
        result = run("eval", run_dir, image, "--train-size", train_size, "--steps", "2", "--device", "cpu", *named)
        assert result.exit_code == 0, result.output
        assert read_toml(run_dir / "config.toml")["encoding.name"] == expected
        assert ("24x20: training the hashgrid preset" in result.output) == (expected == "hashgrid")


def test_the_docs_say_where_inr_train_picks_the_hash_grid():
    """The threshold the guides and the help quote is the one start.py holds: a change to it fails
    here until the words follow."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    assert start.HASH_GRID_PIXELS == 96 * 64
    for doc in ("README.md", "docs/hashgrid.md", "docs/training.md", "docs/upscaling.md"):
        assert "96x64 pixels" in " ".join((root / doc).read_text(encoding="utf-8").split()), doc
    assert "96x64 pixels" in run("train", "--help").output


def test_a_file_start_wins_over_the_size(tmp_path, large_from):
    """--init START names its network: a large image trains from it, not the hash grid."""
    pytest.importorskip("safetensors")
    small = make_image(tmp_path / "small.png", "RGB", (19, 19))
    net = ["--hidden", "8", "--layers", "2", "--device", "cpu", "-q"]
    assert run("train", small, "--steps", "2", "--run-dir", tmp_path / "s", *net).exit_code == 0
    start = tmp_path / "start.safetensors"
    assert run("export", tmp_path / "s", "-o", start).exit_code == 0
    large_from(20 * 20)
    large = make_image(tmp_path / "large.png", "RGB", (24, 20))
    result = run("train", large, "--steps", "2", "--init", start, "--run-dir", tmp_path / "r", *net)
    assert result.exit_code == 0, result.output
    assert read_toml(tmp_path / "r" / "config.toml")["encoding.name"] == "none"


def test_the_torch_peer_encodes_as_the_reference():
    """The benchmarks' PyTorch hash grid reads the same entries with the same weights: its encoding and
    the gradient autograd scatters back match the NumPy reference's."""
    torch = pytest.importorskip("torch")
    from benchmarks.torch_hashgrid import TorchHashGrid
    from inr_cli.backends.numpy_backend import NumpyBackend
    from inr_cli.core.network import NetworkSpec
    from tests.kernel_checks import hashgrid_levels

    grid = hashgrid_levels(features=2)
    spec = NetworkSpec(model="relu", out_features=3, hidden=4, layers=1, omega0=1.0, encoding="hashgrid",
                       fourier_features=0, fourier_sigma=0.0, hash_levels=4, hash_features=2, hash_log2_size=6,
                       hash_min_resolution=2, hash_max_resolution=20)
    assert (grid.level_table == TorchHashGrid(torch, spec, np.zeros(grid.parameter_count), "cpu").levels).all()
    rng = np.random.default_rng(1)
    tables = rng.uniform(-1, 1, grid.parameter_count).astype(np.float32)
    x = rng.uniform(-1, 1, (50, 2)).astype(np.float32)
    g = rng.standard_normal((50, grid.features)).astype(np.float32)
    peer = TorchHashGrid(torch, spec, tables, "cpu")
    encoded = peer(torch.from_numpy(x))
    (encoded * torch.from_numpy(g)).sum().backward()
    out, table_grads = np.empty((1, 50, grid.features), np.float32), np.empty((1, grid.parameter_count), np.float32)
    NumpyBackend().hashgrid_encode(x[None], tables[None], out, grid.level_table)
    NumpyBackend().hashgrid_backward(x[None], g[None], table_grads, grid.level_table)
    np.testing.assert_allclose(encoded.detach().numpy(), out[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(peer.tables.grad.numpy(), table_grads[0], rtol=1e-4, atol=1e-5)


def test_a_large_image_ends_with_pictures_within_their_limits(tmp_path, monkeypatch):
    """Beyond a picture's limits the final render, the comparison's panels and the previews, pictures to
    look at, are drawn at every k-th pixel (a gigapixel's full render would take gigabytes: inr render
    draws it in tiles), and the run says how to draw the whole image."""
    from PIL import Image

    from inr_cli import limits

    monkeypatch.setattr(limits, "MAX_PICTURE_SIDE", 10)  # every 4th pixel of 40 x 20
    image = make_image(tmp_path / "wide.png", "RGB", (40, 20))
    result = run("train", image, "--preset", "hashgrid", "--steps", "4", "--preview-every", "2", "--device", "cpu",
                 "--run-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert Image.open(tmp_path / "r" / "render.png").size == (10, 5)
    assert Image.open(tmp_path / "r" / "previews" / "step-000002.png").size == (10, 5)
    assert Image.open(tmp_path / "r" / "comparison.png").size[1] == 5  # panels of 10 x 5, no caption at that width
    assert f"the whole 40x20: inr render {tmp_path / 'r'}" in " ".join(result.output.split())
