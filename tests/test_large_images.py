"""Images of any size, up to gigapixels: 8-bit pixels kept as bytes and drawn into batches as they are,
the PSNR read from a subset of the pixels, a region or a tiled pyramid rendered, large files decoded
without Pillow's copy, the viewer's coarse tiles from the image's own blocks. Tiny images throughout."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.core.metrics import psnr
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.core.render import render_float
from inr_cli.core.state import TrainingState
from inr_cli.core.subset_psnr import PixelSubset
from inr_cli.core.trainer import Trainer
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats import images as image_files
from inr_cli.formats.data import float_fingerprint, same_data
from inr_cli.viewer.tiles import Pyramid, block_mean, source_tile
from tests.test_networks import config_for

runner = CliRunner()
HASHGRID = dict(hidden=8, layers=2, hash_levels=3, hash_log2_size=6, hash_min_res=2, batch_size=50)


def bytes_and_floats(seed: int = 0) -> tuple[PixelImage, PixelImage]:
    levels = np.random.default_rng(seed).integers(0, 256, (9, 13, 3)).astype(np.uint8)
    floats = (levels.astype(np.float32) / 255.0).astype(np.float32)
    return PixelImage(levels, ("r", "g", "b")), PixelImage(floats, ("r", "g", "b"))


@pytest.mark.numerics
def test_8bit_pixels_train_to_the_bits_of_their_floats():
    """An image kept as bytes, its batches converted as they are drawn, trains to the very parameters
    that the same image held as float32 (the way every image was held before) trains to; the trainer
    reads the bytes themselves, without a copy."""
    results = []
    for image in bytes_and_floats():
        config = config_for("hashgrid", 13, 9, **HASHGRID)
        spec = NetworkSpec.from_config(config, 3)
        backend = CpuBackend()
        trainer = Trainer(backend, spec, config, [image], TrainingState.fresh(spec, [7]), [7])
        assert trainer.targets.dtype == image.pixels.dtype
        assert np.shares_memory(trainer.targets, image.pixels)
        for _ in range(4):
            trainer.step()
        results.append((np.array(trainer.params), trainer.read_loss()))
    (params_8bit, loss_8bit), (params_float, loss_float) = results
    assert np.array_equal(params_8bit, params_float) and np.array_equal(loss_8bit, loss_float)


def test_an_8bit_image_is_read_as_bytes_and_written_back_unchanged(tmp_path):
    levels = np.random.default_rng(1).integers(0, 256, (9, 13, 3)).astype(np.uint8)
    Image.fromarray(levels).save(tmp_path / "a.png")
    image = image_files.load_image(tmp_path / "a.png")
    assert image.pixels.dtype == np.uint8 and np.array_equal(image.pixels, levels)
    assert np.array_equal(image.values, levels.astype(np.float32) / 255.0)
    assert image_files.resize(image, 6).pixels.dtype == np.uint8


def test_a_fingerprint_of_before_8bit_storage_still_matches():
    """A run or study started when every image was fingerprinted as floats resumes on the same image."""
    image, floats = bytes_and_floats()
    assert same_data(image, float_fingerprint(floats)) and same_data(image, float_fingerprint(image))
    other, _ = bytes_and_floats(seed=2)
    assert not same_data(other, float_fingerprint(floats))


def trained_spec_and_params():
    image, _ = bytes_and_floats()
    config = config_for("hashgrid", 13, 9, **HASHGRID)
    spec = NetworkSpec.from_config(config, 3)
    trainer = Trainer(CpuBackend(), spec, config, [image], TrainingState.fresh(spec, [3]), [3])
    for _ in range(3):
        trainer.step()
    return image, spec, np.array(trainer.params[0])


@pytest.mark.numerics
def test_the_subset_psnr_against_the_whole_images():
    """On every pixel it is the PSNR of the whole render; on a third of them, the mean squared error
    of the render at those very pixels, and close to the whole image's."""
    image, spec, params = trained_spec_and_params()
    backend = CpuBackend()
    rendered = render_float(backend, spec, params, image.width, image.height)
    whole = PixelSubset.of(image, count=10**6)
    assert whole.whole and whole.describe() == ""
    assert whole.psnr(backend, spec, params) == pytest.approx(psnr(rendered, image.values), abs=1e-4)
    part = PixelSubset.of(image, count=40)
    assert not part.whole and "40 of its 117 pixels" in part.describe()
    rows, columns = np.divmod(part.index, image.width)
    by_hand = np.mean((rendered[rows, columns].astype(np.float64) - image.values[rows, columns]) ** 2)
    assert part.mse(backend, spec, params) == pytest.approx(by_hand, rel=1e-5)
    assert abs(part.psnr(backend, spec, params) - psnr(rendered, image.values)) < 1.0
    assert np.array_equal(part.index, PixelSubset.of(image, count=40).index)  # fixed: readings differ by the network


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("large")
    image, _ = bytes_and_floats()
    Image.fromarray(image.pixels).save(folder / "photo.png")
    run = folder / "run"
    flags = ["--preset", "hashgrid", "--hidden", "8", "--hash-levels", "3", "--hash-log2-size", "6",
             "--hash-min-res", "2", "--batch-size", "50"]
    result = runner.invoke(app, ["train", str(folder / "photo.png"), "--steps", "3", *flags, "--device", "cpu", "-q",
                                 "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    return run


def render(*args):
    result = runner.invoke(app, ["render", *map(str, args), "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    return result


def within_a_level(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


def test_a_region_is_that_part_of_the_whole_render(small_run, tmp_path):
    render(small_run, "--width", "70", "--height", "40", "-o", tmp_path / "whole.png")
    render(small_run, "--width", "70", "--height", "40", "--region", "9,5,61,33", "-o", tmp_path / "part.png")
    whole, part = np.asarray(Image.open(tmp_path / "whole.png")), np.asarray(Image.open(tmp_path / "part.png"))
    within_a_level(part, whole[5:33, 9:61])
    result = render(small_run, "--width", "70", "--height", "40", "--region", "0,0,10,10")
    assert result.stdout.strip().endswith("run/render-70x40-0_0_10_10.png")


@pytest.mark.parametrize("region, says", [("1,2,3", "LEFT,TOP,RIGHT,BOTTOM"), ("5,5,5,9", "not a part of"),
                                          ("0,0,71,10", "not a part of the 70x40 canvas")])
def test_a_bad_region_is_one_line(small_run, tmp_path, region, says):
    result = runner.invoke(app, ["render", str(small_run), "--width", "70", "--height", "40", "--region", region,
                                 "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.png").exists()


def test_a_tiled_pyramid_reads_back_as_the_renders_of_its_levels(small_run, tmp_path):
    """Each level of the TIFF, as tifffile (and Pillow, its first) reads it, is the network drawn at
    that level's size, within one 8-bit level; the levels halve down to one tile."""
    import tifffile

    render(small_run, "--width", "600", "--height", "300", "--tiles", "-o", tmp_path / "pyramid.tif")
    with tifffile.TiffFile(tmp_path / "pyramid.tif") as tiff:
        levels = tiff.series[0].levels
        assert [level.shape for level in levels] == [(300, 600, 3), (150, 300, 3), (75, 150, 3)]
        assert tiff.series[0].pages[0].is_tiled and tiff.series[0].pages[0].tilewidth == 256
        pixels = [level.asarray() for level in levels]
    for array, (width, height) in zip(pixels, [(600, 300), (300, 150), (150, 75)]):
        render(small_run, "--width", width, "--height", height, "-o", tmp_path / f"{width}.png")
        within_a_level(array, np.asarray(Image.open(tmp_path / f"{width}.png")))
    assert np.array_equal(np.asarray(Image.open(tmp_path / "pyramid.tif")), pixels[0])


def test_tiles_are_written_as_tiff_at_8_bits(small_run, tmp_path):
    for extra, says in [(["-o", tmp_path / "p.png"], "written as a TIFF"), (["--depth", "16", "-o", tmp_path / "p.tif"],
                                                                          "8 bits"),
                        (["--region", "0,0,4,4", "-o", tmp_path / "p.tif"], "whole canvas")]:
        result = runner.invoke(app, ["render", str(small_run), "--tiles", *map(str, extra)])
        assert result.exit_code == 2 and says in result.output, result.output


@pytest.mark.parametrize("suffix", [".tif", ".jpg", ".png"])
def test_a_large_file_is_decoded_without_pillow_to_what_pillow_decodes(tmp_path, monkeypatch, suffix):
    """Above LARGE_DECODE_PIXELS an 8-bit TIFF goes through tifffile, a JPEG or PNG through imagecodecs:
    the same pixels as Pillow's, kept as bytes."""
    levels = np.random.default_rng(3).integers(0, 256, (40, 60, 3)).astype(np.uint8)
    path = tmp_path / f"a{suffix}"
    Image.fromarray(levels).save(path)
    by_pillow = image_files.load_image(path)
    decoded = []
    monkeypatch.setattr(image_files, "LARGE_DECODE_PIXELS", 100)
    real = image_files._read_large
    monkeypatch.setattr(image_files, "_read_large", lambda *a: decoded.append(real(*a)) or decoded[-1])
    direct = image_files.load_image(path)
    assert decoded[0] is not None, "decoded by Pillow after all"
    assert direct.pixels.dtype == np.uint8 and np.array_equal(direct.pixels, by_pillow.pixels)


def test_coarse_source_tiles_are_block_means_of_the_image():
    """The viewer's tiles of the training image below its own size: each pixel the mean of the block
    beneath it (fewer pixels at the edges), read from that part of the image alone."""
    pixels = np.random.default_rng(4).integers(0, 256, (300, 530, 3)).astype(np.uint8)
    shrink = 4
    expected = np.empty((75, 133, 3))
    for i in range(75):
        for j in range(133):
            expected[i, j] = pixels[i * 4:i * 4 + 4, j * 4:j * 4 + 4].reshape(-1, 3).mean(axis=0)
    assert np.array_equal(block_mean(pixels, shrink), np.floor(expected + 0.5))
    pyramid = Pyramid.for_image(530, 300)
    tile = source_tile(pixels, pyramid, pyramid.base - 2, 0, 0)
    assert np.array_equal(tile, np.floor(expected + 0.5)[:256, :256])


def test_a_checkpoint_of_an_8bit_run_names_its_bytes(small_run):
    saved = ckpt.load(small_run)
    image = image_files.load_image(saved.config.data.source)
    assert same_data(image, saved.data_fingerprint) and saved.data_shape == (9, 13, 3)


def test_a_large_canvas_without_o_is_written_as_tiles(small_run, monkeypatch):
    """Beyond TILED_DEFAULT_PIXELS, the default output is the tiled pyramid (one PNG of a gigapixel canvas
    is gigabytes that few viewers open); -o NAME.png still writes one PNG."""
    import tifffile

    from inr_cli.commands import render as render_command

    monkeypatch.setattr(render_command, "TILED_DEFAULT_PIXELS", 1000)
    written = render(small_run, "--width", "60", "--height", "40").stdout.strip()
    assert written.endswith("render-60x40.tif")
    with tifffile.TiffFile(written) as tiff:
        assert tiff.pages[0].is_tiled and tiff.series[0].levels[0].shape == (40, 60, 3)


def test_a_large_run_ends_with_the_psnr_of_its_subset(tmp_path, monkeypatch):
    """An image beyond a picture's limits is never drawn whole at the end: the run's last line gives the
    whole image's PSNR read on the subset, said as such, the subset's PSNR of the saved network."""
    from inr_cli import limits
    from inr_cli.core import subset_psnr

    monkeypatch.setattr(limits, "MAX_PICTURE_SIDE", 10)
    monkeypatch.setattr(subset_psnr, "SUBSET_PIXELS", 60)
    image, _ = bytes_and_floats()
    Image.fromarray(image.pixels).save(tmp_path / "photo.png")
    result = runner.invoke(app, ["train", str(tmp_path / "photo.png"), "--steps", "3", "--preset", "hashgrid",
                                 "--hidden", "8", "--hash-levels", "3", "--hash-log2-size", "6", "--hash-min-res", "2",
                                 "--batch-size", "50", "--device", "cpu", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    saved = ckpt.load(tmp_path / "run")
    expected = PixelSubset.of(image, count=60).psnr(CpuBackend(), saved.spec, saved.params)
    assert f"the whole image {expected:.2f} dB (on 60 of its 117 pixels, drawn at random)" in result.output
