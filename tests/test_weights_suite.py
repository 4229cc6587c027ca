"""The labelled suite of benchmarks/weights_suite.py, made small: letters in Debian's fonts split by
font, tiles of photos that do not overlap, scikit-learn's digits; and a set's weights probed through
the loader's split, the same images as the suite's own split. Skipped where the fonts or
scikit-learn are missing (apt-get install fonts-dejavu-core fonts-liberation; pip install
'.[benchmark]')."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from benchmarks import weights_suite as suite


def test_letters_are_classes_across_fonts_split_by_font(tmp_path):
    if len(suite.text_fonts()) < 4:
        pytest.skip("fewer than 4 text fonts: apt-get install fonts-dejavu-core fonts-liberation fonts-freefont-ttf")
    groups = suite.make_letters(tmp_path, 16, limit=4)
    fonts = sorted(set(groups.values()))
    assert len(fonts) == 4 and len(groups) == 4 * len(suite.LETTERS)
    assert sorted(p.name for p in tmp_path.iterdir()) == list(suite.LETTERS)
    pixels = {name: np.asarray(Image.open(tmp_path / name), dtype=np.float32) for name in groups}
    assert all(image.shape == (16, 16) for image in pixels.values())
    font = fonts[0]
    a, b = pixels[f"A/{font}.png"], pixels[f"B/{font}.png"]
    assert np.abs(a - b).mean() > 10  # two letters of one font differ
    assert a[0].min() > 250 and a.min() < 60  # a dark letter on a white page
    train, test = suite.split_names(sorted(groups), groups, grouped=True, seed=0)
    held = {groups[n] for n in test}
    assert len(held) == 1 and not held & {groups[n] for n in train}  # a font is on one side only
    assert len(test) == len(suite.LETTERS) and len(train) + len(test) == len(groups)


def test_photo_tiles_do_not_overlap_and_are_classed_by_photo(tmp_path):
    pytest.importorskip("sklearn")
    groups = suite.make_photos(tmp_path, 16, side=48, limit=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["china", "coffee", "flower", "rocket"]
    for photo in ("china", "coffee"):
        names = [n for n in groups if n.startswith(photo + "/")]
        places = [tuple(int(v) for v in n.split("/")[1][:-4].split("-")) for n in names]
        assert len(places) == 5 and all(x % 16 == 0 and y % 16 == 0 for x, y in places)  # on the grid
        assert len(set(places)) == 5
    train, test = suite.split_names(sorted(groups), groups, grouped=False, seed=0)
    counts = {photo: sum(n.startswith(photo + "/") for n in test) for photo in ("china", "coffee", "flower", "rocket")}
    assert set(counts.values()) == {2} and not set(train) & set(test)  # 30% of 5 per photo, rounded


def test_the_weights_are_probed_through_the_loaders_split(tmp_path):
    """A tiny digits set fitted, then both probes on the weights and on the pixels: the loader's
    split must hold out the very images the suite held out."""
    pytest.importorskip("sklearn")
    torch = pytest.importorskip("torch")
    import inr_cli

    groups = suite.make_digits(tmp_path / "digits", 8, per_class=4)
    assert len(groups) == 40 and sorted(p.name for p in (tmp_path / "digits").iterdir()) == [str(d) for d in range(10)]
    train, test = suite.split_names(sorted(groups), groups, grouped=False, seed=0)
    inr_cli.fit_many(tmp_path / "digits", tmp_path / "set", hidden=4, layers=1, steps=2, gray=True, device="cpu",
                     quiet=True)
    accuracy = suite.from_weights(torch, tmp_path / "set", None, test, seed=0)
    assert set(accuracy) == {"linear", "mlp"} and all(0 <= v <= 1 for v in accuracy.values())
    with pytest.raises(AssertionError, match="not the suite's"):
        suite.from_weights(torch, tmp_path / "set", None, test[1:] + train[:1], seed=0)
    pixels = suite.from_pixels(torch, tmp_path / "digits", train, test, seed=0, gray=True)
    assert pixels["linear"] > 0.5  # digits from their pixels, 3 training images a class: far above chance


def test_fidelity_reads_each_images_psnr_against_the_30_db_goal():
    rows = [{"name": "a", "psnr": "31.5", "steps": "3"}, {"name": "b", "psnr": "29.9", "steps": "3"},
            {"name": "c", "psnr": "30.0", "steps": "10"}]
    read = suite.fidelity(rows)
    assert read["min_psnr"] == 29.9 and read["share_at_30_db"] == 2 / 3
    assert read["mean_psnr"] == pytest.approx((31.5 + 29.9 + 30.0) / 3) and read["median_steps"] == 3
    assert suite.fidelity(rows, {"a"})["share_at_30_db"] == 1.0


def test_the_linear_probe_reads_nan_without_scikit_learn(monkeypatch):
    """The GPU machine's Python has no scikit-learn: the suite goes on (its MLP probe is PyTorch's)."""
    x, y = np.random.default_rng(0).standard_normal((12, 3)), np.arange(12) % 2
    monkeypatch.setitem(sys.modules, "sklearn.linear_model", None)  # an import of it raises ImportError
    assert np.isnan(suite.linear_probe(x, y, x, y))
