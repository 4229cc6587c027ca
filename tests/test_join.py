"""Sets that grow: the new images fitted apart and joined give the set fitted at once, bit for bit."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

import inr_cli
from inr_cli.cli import app
from tests.test_fit_many import make_folder

runner = CliRunner()
NET = ["--hidden", "8", "--layers", "2", "--omega0", "40", "--lr", "3e-3", "--steps", "12", "--batch-size", "60",
       "--device", "cpu", "-q"]


def fit(folder, out, *extra):
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), *NET, *map(str, extra)])
    assert result.exit_code == 0, result.output


@pytest.mark.numerics
def test_a_grown_set_is_the_set_fitted_at_once(tmp_path):
    everything = make_folder(tmp_path / "all", count=5)
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir(), later.mkdir()
    for name in ("img0.png", "img2.png", "img4.png"):
        shutil.copy(everything / name, first / name)
    for name in ("img1.png", "img3.png"):
        shutil.copy(everything / name, later / name)
    fit(everything, tmp_path / "at-once")
    fit(first, tmp_path / "a")
    fit(later, tmp_path / "b", "--pack", "1")  # another pack size: the same networks
    result = runner.invoke(app, ["join", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "grown")])
    assert result.exit_code == 0, result.output
    grown, at_once = inr_cli.load(tmp_path / "grown"), inr_cli.load(tmp_path / "at-once")
    assert grown.names == at_once.names
    assert np.array_equal(np.asarray(grown.weights), np.asarray(at_once.weights))
    strip = [{k: v for k, v in row.items()} for row in at_once.index]
    assert grown.index == strip


def test_sets_fitted_differently_do_not_join(tmp_path):
    folder = make_folder(tmp_path / "images", count=2)
    fit(folder, tmp_path / "a")
    other = make_folder(tmp_path / "other", count=1, size=(14, 10))
    (other / "img0.png").rename(other / "x.png")
    fit(other, tmp_path / "b", "--init", "random")
    result = runner.invoke(app, ["join", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "c")])
    assert result.exit_code == 1 and "training.init" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["join", str(tmp_path / "a"), str(tmp_path / "a"), "-o", str(tmp_path / "d")])
    assert result.exit_code == 1 and "is in both" in result.output
    fit(other, tmp_path / "scaled", "--weight-scale", "2")  # another fit: a set records it
    result = runner.invoke(app, ["join", str(tmp_path / "a"), str(tmp_path / "scaled"), "-o", str(tmp_path / "e")])
    assert result.exit_code == 1 and "network.weight_scale = 1.0 but" in result.output


def test_a_hash_grid_setting_takes_no_part_without_a_hash_grid(tmp_path):
    """A SIREN set depends on no hash grid setting: sets that differ only there (a config file may
    hold every key) join, and a rerun from such a file goes on; given on the command line, where it
    does nothing, one is refused by name."""
    fit(make_folder(tmp_path / "images", count=2), tmp_path / "a")
    other = make_folder(tmp_path / "other", count=1)
    (other / "img0.png").rename(other / "x.png")
    (tmp_path / "grid.toml").write_text("[encoding]\nlevels = 8\nmax_resolution = 64\nlog2_table_size = 12\n")
    fit(other, tmp_path / "b", "--config", tmp_path / "grid.toml")
    result = runner.invoke(app, ["join", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    fit(tmp_path / "images", tmp_path / "a", "--config", tmp_path / "grid.toml")
    result = runner.invoke(app, ["fit-many", str(tmp_path / "images"), "-o", str(tmp_path / "a"), *NET,
                                 "--hash-log2-size", "12"])
    assert result.exit_code == 2 and "--hash-log2-size (encoding.log2_table_size) does nothing" in result.output


def test_an_add_that_fails_keeps_its_fitted_images_for_the_rerun(tmp_path, monkeypatch):
    """A failure after the new images are fitted (the join here: a full disk, say) leaves them in
    .OUT.adding, and the same command goes on from them; an .OUT.adding fitted for other images (an
    earlier --add's) is inr's own work and is started again. Either way: the set fitted at once."""
    from inr_cli.errors import InrError
    from inr_cli.sets import grow

    everything = make_folder(tmp_path / "all", count=4)
    growing, adding = tmp_path / "growing", tmp_path / ".set.adding"
    growing.mkdir()
    shutil.copy(everything / "img1.png", growing / "img1.png")
    fit(growing, tmp_path / "set")

    def add_failing_at_the_join(*new: str) -> None:
        for name in new:
            shutil.copy(everything / name, growing / name)

        def no_space(*args):
            raise InrError("cannot write the joined set (No space left on device)")

        with monkeypatch.context() as patched:
            patched.setattr(grow, "join_sets", no_space)
            result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *NET, "--add"])
        assert result.exit_code == 1 and "No space left" in result.output
        assert len(list((adding / "shards").iterdir())) == 1, "the fitted images were not kept"

    said = [arg for arg in NET if arg != "-q"]  # the rerun says how many images it found done
    add_failing_at_the_join("img0.png")
    result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *said, "--add"])
    assert result.exit_code == 0 and "(1 shard; 1 done)" in result.output, result.output
    assert not adding.exists()
    add_failing_at_the_join("img2.png")
    shutil.copy(everything / "img3.png", growing / "img3.png")  # one more since: the kept work is for others
    result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *said, "--add"])
    assert result.exit_code == 0 and "(1 shard; 0 done)" in result.output, result.output
    assert not adding.exists()
    fit(everything, tmp_path / "at-once")
    grown, at_once = inr_cli.load(tmp_path / "set"), inr_cli.load(tmp_path / "at-once")
    assert grown.names == at_once.names
    assert np.array_equal(np.asarray(grown.weights), np.asarray(at_once.weights))


def test_fit_many_add_grows_a_set_to_the_one_fitted_at_once(tmp_path):
    everything = make_folder(tmp_path / "all", count=5)
    growing = tmp_path / "growing"
    growing.mkdir()
    for name in ("img1.png", "img3.png"):
        shutil.copy(everything / name, growing / name)
    fit(growing, tmp_path / "set")
    before = np.load(tmp_path / "set" / "weights.npy")
    for name in ("img0.png", "img2.png", "img4.png"):
        shutil.copy(everything / name, growing / name)
    result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *NET])
    assert result.exit_code == 1 and "--add" in result.output
    fit(growing, tmp_path / "set", "--add")
    fit(everything, tmp_path / "at-once")
    grown, at_once = inr_cli.load(tmp_path / "set"), inr_cli.load(tmp_path / "at-once")
    assert grown.names == at_once.names
    assert np.array_equal(np.asarray(grown.weights), np.asarray(at_once.weights))
    assert np.array_equal(np.asarray(grown.weights)[[1, 3]], before)  # the networks there untouched
    fit(growing, tmp_path / "set")  # a rerun of the grown set: nothing to do
    result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *NET, "--add",
                                 "--init", "random"])
    assert result.exit_code == 0  # nothing new to add
    shutil.copy(everything / "img0.png", growing / "img9.png")
    result = runner.invoke(app, ["fit-many", str(growing), "-o", str(tmp_path / "set"), *NET, "--add",
                                 "--init", "random"])
    assert result.exit_code == 2 and "training.init" in result.output


def test_add_to_a_read_only_set_is_refused_before_any_fitting_and_leaves_nothing(tmp_path):
    """The swap writes in the set's folder: refused there at the end, the new images were fitted for
    nothing and .OUT.adding was left beside the set."""
    from tests.test_output_policy import read_only

    growing, out = make_folder(tmp_path / "growing", count=2), tmp_path / "set"
    fit(growing, out)
    make_folder(growing, count=3)  # img2.png is new
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(out))
    with read_only(out):
        result = runner.invoke(app, ["fit-many", str(growing), "-o", str(out), *NET, "--add"])
    assert result.exit_code == 1 and result.stderr.startswith(f"error: cannot write in {out} ("), result.output
    assert result.stderr.count("\n") == 1 and "done" not in result.output
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(out))) == before
    fit(growing, out, "--add")  # writable again: the same command adds it
    assert inr_cli.load(out).names == ["img0.png", "img1.png", "img2.png"]
