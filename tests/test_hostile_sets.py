"""Hostile and careless input on fit-many's output and on the sets it leaves: an -o that holds the
user's files, a tampered or damaged plan, shard or weights file, names a spreadsheet would run, and
what the viewer follows from a set. A refusal is one line on stderr, a non-zero exit, and nothing
changed outside the output (nothing changed in it either, where it is not inr's to change)."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli
from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.errors import UsageError
from inr_cli.formats.network_set import (
    DESCRIPTION,
    INDEX,
    PLAN,
    SHARDS,
    WEIGHTS,
    WEIGHTS_PART,
    load_network_set,
)
from inr_cli.sets import inputs
from inr_cli.sets.storage import shard_name
from inr_cli.viewer.server import ViewServer
from inr_cli.viewer.sources import THUMBNAIL_SIDE, open_view
from inr_cli.viewer.tiles import TileRenderer

runner = CliRunner()
NET = ["--hidden", "8", "--layers", "1", "--omega0", "30", "--lr", "3e-3", "--steps", "5", "--device", "cpu", "-q"]
PACK = ["--pack", "2"]


def make_images(folder: Path, names: list[str], size=(10, 8)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        yy, xx = np.mgrid[0:size[1], 0:size[0]]
        values = np.stack([np.sin(xx / (2 + i)), np.cos(yy / (3 + i)), np.sin((xx + yy) / (4 + i))], -1) * 0.4 + 0.5
        Image.fromarray((values * 255).astype(np.uint8)).save(folder / name)
    return folder


def fit(*args):
    return runner.invoke(app, ["fit-many", *map(str, args)])


def run(*args):
    return runner.invoke(app, list(map(str, args)))


def snapshot(folder: Path) -> dict:
    """Every path under `folder` with the hash of its bytes (None for a folder)."""
    return {path: None if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*"))}


def refused(result, *fragments: str, code: int | None = None) -> str:
    """One line on stderr, no traceback (no exception escaped the command), a non-zero exit."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert code is None or result.exit_code == code, (result.exit_code, result.stderr)
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Five images fitted in shards of two: the set every case starts from, and its weights."""
    base = tmp_path_factory.mktemp("hostile-sets")
    images = make_images(base / "images", [f"img{i}.png" for i in range(5)])
    result = fit(images, "-o", base / "set", *PACK, *NET)
    assert result.exit_code == 0, result.output
    return images, base / "set", np.load(base / "set" / WEIGHTS)


def copy_set(reference, tmp_path: Path) -> tuple[Path, Path]:
    images, out, _ = reference
    shutil.copytree(out, tmp_path / "set")
    return images, tmp_path / "set"


# --- one rule for outputs ----------------------------------------------------------------------

def users_files(folder: Path, names: tuple[str, ...]) -> None:
    folder.mkdir()
    for name in names:
        if name.endswith(".npy"):
            np.save(folder / name, np.arange(10, dtype=np.float64))
        else:
            (folder / name).write_text(f"the user's own {name}\n")


@pytest.mark.parametrize("names", [("index.csv", "network.json", "weights.npy"), ("index.csv", "network.json"),
                                   ("notes.txt",)])
def test_an_output_that_holds_the_users_files_is_refused_then_forced(reference, tmp_path, names):
    images = reference[0]
    users_files(tmp_path / "u", names)
    before = snapshot(tmp_path)
    for _ in range(2):  # the second run as refused as the first: nothing was renamed in between
        line = refused(fit(images, "-o", tmp_path / "u", *NET), "is not empty", "--force", code=2)
        assert snapshot(tmp_path) == before
    theirs = sorted(set(names) & {"index.csv", "network.json", "weights.npy"})
    assert (f"--force replaces its {', '.join(theirs)}" if theirs else "--force writes beside them") in line
    result = fit(images, "-o", tmp_path / "u", *NET, "--force")
    assert result.exit_code == 0, result.output
    assert len(load_network_set(tmp_path / "u").index) == 5
    if "notes.txt" in names:  # what is not a set's file stays as it was
        assert before[tmp_path / "u" / "notes.txt"] == snapshot(tmp_path)[tmp_path / "u" / "notes.txt"]


def test_the_api_refuses_as_the_command_does_and_force_replaces(reference, tmp_path):
    images = reference[0]
    users_files(tmp_path / "u", ("index.csv",))
    before = snapshot(tmp_path)
    with pytest.raises(UsageError, match="is not empty"):
        inr_cli.fit_many(images, tmp_path / "u", hidden=8, layers=1, steps=5, device="cpu", quiet=True)
    assert snapshot(tmp_path) == before
    trained = inr_cli.fit_many(images, tmp_path / "u", hidden=8, layers=1, steps=5, device="cpu", quiet=True,
                               force=True)
    assert len(trained) == 5


def test_another_set_needs_force_and_the_same_set_resumes_with_it(reference, tmp_path):
    images, out = copy_set(reference, tmp_path)
    six = [*PACK, *NET[:-5], "--steps", "6", "--device", "cpu"]
    before = snapshot(tmp_path)
    refused(fit(images, "-o", out, *six, "-q"), "training.steps = 5, not 6", "--force")
    assert snapshot(tmp_path) == before
    stale = out / SHARDS / "00099.pack-0.partial.npz"  # a pack saved in flight by the set replaced
    stale.write_bytes(b"state")
    result = fit(images, "-o", out, *six, "--force")
    assert result.exit_code == 0 and "is started again" in result.stderr, result.output
    assert not stale.exists()
    assert load_network_set(out).index[0]["steps"] == "6"
    (out / shard_name(1)).unlink()  # --force on this command's own set: resumed, not started again
    result = fit(images, "-o", out, *six, "--force")
    assert result.exit_code == 0 and "3 done" in result.stderr and "started again" not in result.stderr, result.output


def test_an_output_inside_its_input_is_refused(reference, tmp_path):
    images = make_images(tmp_path / "images", ["a.png", "b.png"])
    before = snapshot(tmp_path)
    for out in (images / "out", images):
        refused(fit(images, "-o", out, *NET, "--force"), "the input folder", "choose an -o outside", code=2)
        assert snapshot(tmp_path) == before


def test_a_file_named_as_the_output_and_a_set_file_that_is_an_input(reference, tmp_path):
    images = reference[0]
    (tmp_path / "u.npy").write_bytes(b"mine")
    before = snapshot(tmp_path)
    refused(fit(images, "-o", tmp_path / "u.npy", *NET, "--force"), "is a file")
    users_files(tmp_path / "u", ("weights.npy",))
    listing = tmp_path / "list.txt"
    listing.write_text(f"{images / 'img0.png'}\n{tmp_path / 'u' / 'weights.npy'}\n")
    before = snapshot(tmp_path)
    refused(fit(listing, "-o", tmp_path / "u", *NET, "--force"), "is an input of this command",
            "never overwritten", code=2)
    assert snapshot(tmp_path) == before
    (tmp_path / "elsewhere.npy").symlink_to(tmp_path / "u" / "weights.npy")  # the same file by another name
    listing.write_text(f"{images / 'img0.png'}\n{tmp_path / 'elsewhere.npy'}\n")
    before = snapshot(tmp_path)
    refused(fit(listing, "-o", tmp_path / "u", *NET, "--force"), "is an input of this command", code=2)
    assert snapshot(tmp_path) == before


# --- a tampered plan -----------------------------------------------------------------------------

def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(plan):
        target = plan
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


PLAN_CASES = {
    "unknown name in a shard": (lambda p: p["shards"][0].__setitem__(0, "nope.png"), "'nope.png' is not an image"),
    "network description not the settings'": (_set("spec", "hidden", 1000000), "hidden = 1000000"),
    "a number as text in the description": (_set("spec", "hidden", "8"), "hidden = '8'"),
    "a setting as text": (_set("config", "network", "hidden", "8"), "network.hidden must be an integer"),
    "an image twice": (lambda p: p["images"].append(p["images"][0]), "listed twice"),
    "a negative width": (lambda p: p["images"][0].__setitem__(p["fields"].index("width"), -3), "width -3"),
    "an image in no shard": (lambda p: p["shards"][0].pop(), "'img1.png' is in no shard"),
    "an image in two shards": (lambda p: p["shards"][-1].append(p["shards"][0][0]), "in another shard too"),
    "a seed out of range": (lambda p: p["images"][0].__setitem__(p["fields"].index("seed"), 2 ** 70), "seed"),

    "no images": (_set("images", []), "'images' is not a list"),
    "a pack of zero": (_set("pack", 0), "'pack' is 0"),
}


@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_a_tampered_plan_is_one_line_before_anything_is_renamed(reference, tmp_path, case):
    """A shard removed, so that the run would rename weights.npy to fit it again: refused first."""
    images, out = copy_set(reference, tmp_path)
    (out / shard_name(1)).unlink()
    plan = json.loads((out / PLAN).read_text())
    change, fragment = PLAN_CASES[case]
    change(plan)
    (out / PLAN).write_text(json.dumps(plan))
    before = snapshot(tmp_path)
    refused(fit(images, "-o", out, *PACK, *NET), "fit-many.json: not a plan this inr can read", fragment)
    assert snapshot(tmp_path) == before
    assert len(load_network_set(out).index) == 5  # still a set that loads, views and exports


def test_a_plan_of_a_newer_inr_is_one_line_even_with_force(reference, tmp_path):
    images, out = copy_set(reference, tmp_path)
    plan = json.loads((out / PLAN).read_text())
    plan["format_version"] = 99
    (out / PLAN).write_text(json.dumps(plan))
    before = snapshot(tmp_path)
    for force in ([], ["--force"]):
        refused(fit(images, "-o", out, *PACK, *NET, *force), "fit-many.json: written by a newer inr", "upgrade inr")
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("text,fragment", [("[" * 100000 + "]" * 100000, "nested too deeply"),
                                           ("{\"folder\": ", "not JSON"), ("[1, 2]", "a JSON list"),
                                           ("\xff\xfe", "not a plan")])
def test_a_plan_that_is_not_one_is_one_line_and_force_starts_again(reference, tmp_path, text, fragment):
    images, out = copy_set(reference, tmp_path)
    (out / PLAN).write_bytes(text.encode("latin-1"))
    before = snapshot(tmp_path)
    refused(fit(images, "-o", out, *PACK, *NET), fragment, "--force starts a new set")
    assert snapshot(tmp_path) == before
    result = fit(images, "-o", out, *PACK, *NET, "--force")
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(out / WEIGHTS), reference[2])


def test_a_rerun_reads_the_images_where_its_input_lists_them(reference, tmp_path):
    """A plan's locations (a URL here) are not followed: the rerun reads the images it lists."""
    images, out = copy_set(reference, tmp_path)
    (out / shard_name(1)).unlink()
    plan = json.loads((out / PLAN).read_text())
    where = plan["fields"].index("location")
    for row in plan["images"]:
        row[where] = "http://127.0.0.1:9/never-fetched.png"
    (out / PLAN).write_text(json.dumps(plan))
    result = fit(images, "-o", out, *PACK, *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(out / WEIGHTS), reference[2])


# --- damaged shards and weights ----------------------------------------------------------------

class Payload:
    """Unpickling this would leave a file: a pickled shard must never be unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _garbage(out: Path, tmp_path: Path) -> None:
    (out / shard_name(1)).write_bytes(b"not a zip file at all")


def _pickled(out: Path, tmp_path: Path) -> None:
    names = np.array([Payload(tmp_path / "unpickled"), "img3.png"], dtype=object)
    np.savez(out / shard_name(1), names=names, psnr=np.zeros(2), loss=np.zeros(2))


def _other_names(out: Path, tmp_path: Path) -> None:
    np.savez(out / shard_name(1), names=np.array(["img0.png", "img1.png"]), psnr=np.zeros(2), loss=np.zeros(2))


def _bomb(out: Path, tmp_path: Path) -> None:
    """A deflated member that declares far more bytes than two names take (a few kilobytes on disk)."""
    with zipfile.ZipFile(out / shard_name(1), "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("names.npy", bytes(20_000_000))
        archive.writestr("psnr.npy", b"")
        archive.writestr("loss.npy", b"")


def _networks_of_another_shape(out: Path, tmp_path: Path) -> None:
    shard = dict(np.load(out / shard_name(1)))
    np.savez(out / shard_name(1), **shard, params=np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("damage", [_garbage, _pickled, _other_names, _bomb, _networks_of_another_shape])
def test_a_damaged_shard_is_fitted_again(reference, tmp_path, damage):
    images, out = copy_set(reference, tmp_path)
    damage(out, tmp_path)
    result = fit(images, "-o", out, *PACK, *NET[:-1])
    assert result.exit_code == 0, result.output
    assert f"{shard_name(1)} is damaged" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "unpickled").exists()
    assert np.array_equal(np.load(out / WEIGHTS), reference[2])
    assert not (out / WEIGHTS_PART).exists()


@pytest.mark.parametrize("damage", ["truncated", "no rows", "float64"])
def test_a_damaged_weights_file_is_fitted_again_never_called_finished(reference, tmp_path, damage):
    images, out = copy_set(reference, tmp_path)
    weights = out / WEIGHTS
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-7])
    elif damage == "no rows":
        np.save(weights, np.zeros((0, reference[2].shape[1]), np.float32))
    else:
        np.save(weights, reference[2].astype(np.float64))
    result = fit(images, "-o", out, *PACK, *NET[:-1])
    assert result.exit_code == 0, result.output
    assert f"{weights} is damaged" in result.stderr and "fitted again" in result.stderr, result.stderr
    assert np.array_equal(np.load(weights), reference[2])


def in_place_of(path: Path, kind: str) -> str:
    """A folder, a FIFO or a link to nothing where a set's file was: what the one line calls it."""
    path.unlink()
    if kind == "folder":
        path.mkdir()
        return "is a directory"
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO"
    path.symlink_to(path.parent / "nowhere")
    return "a link to nothing"


def readers_of(out: Path, tmp_path: Path) -> list:
    """Every command that reads a set, each refusing before it writes anything."""
    return [run("render", out, "--image", "img0.png", "-o", tmp_path / "x.png", "--device", "cpu"),
            run("render", out, "-o", tmp_path / "x.png", "--device", "cpu"),
            run("info", out),
            run("export", out, "-o", tmp_path / "x.safetensors"),
            run("export", out, "--image", "img0.png", "-o", tmp_path / "x.safetensors"),
            run("view", out, "--no-browser", "--device", "cpu"),
            run("join", out, out, "-o", tmp_path / "joined")]


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link"])
def test_a_weights_file_that_is_no_file_is_a_damaged_set_not_an_unfinished_one(reference, tmp_path, kind):
    """A folder, a FIFO or a link to nothing where weights.npy was: said as what it is (never
    opened: a FIFO would wait for a writer), not as a set that is not finished."""
    _, out = copy_set(reference, tmp_path)
    what = in_place_of(out / WEIGHTS, kind)
    for result in readers_of(out, tmp_path):
        line = refused(result, f"{out / WEIGHTS}: {what}", "the set is damaged: remove it, then run the same "
                       "inr fit-many command again")
        assert "not finished" not in line, line
    with pytest.raises(inr_cli.InrError, match=f"{what}.*the set is damaged"):
        inr_cli.load(out)
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.safetensors").exists()


def regular_files(folder: Path) -> dict:
    """Every regular file under `folder` with the hash of its bytes: nothing else is opened (a FIFO
    would wait for a writer)."""
    return {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.is_symlink()}


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link"])
@pytest.mark.parametrize("name", [WEIGHTS, WEIGHTS_PART, INDEX, DESCRIPTION])
def test_a_set_file_that_is_no_file_stops_the_rerun_by_its_name_and_removing_it_finishes(reference, tmp_path, name,
                                                                                         kind):
    """The same fit-many over a set where one of its files is a folder, a FIFO or a link to nothing:
    one line naming that file, as the readers say it, before anything is opened or fitted. Was: a
    folder at weights.npy fitted every shard again, then "SET/weights.npy.part: Is a directory"; a
    folder at index.csv "is a folder; -o names the file to write"; a FIFO or a link "choose another
    -o". What the line says to do finishes the set: the networks of the set fitted at once."""
    images, out = copy_set(reference, tmp_path)
    (out / name).touch(exist_ok=True)  # weights.npy.part: where a set being fitted has its rows
    what = in_place_of(out / name, kind)
    before = regular_files(out)
    line = refused(fit(images, "-o", out, *PACK, *NET), f"{out / name}: {what}", code=1)
    assert line.endswith("; the set is damaged: remove it, then run the same inr fit-many command again"), line
    # --add says the same (it said "holds no finished set to add to" of a weights.npy that is no file)
    assert refused(fit(images, "-o", out, "--add", *PACK, *NET), f"{out / name}: {what}", code=1) == line
    assert regular_files(out) == before
    os.rmdir(out / name) if kind == "folder" else os.unlink(out / name)
    result = fit(images, "-o", out, *PACK, *NET)
    assert result.exit_code == 0 and "Traceback" not in result.stderr, result.output
    if name == WEIGHTS:  # the networks only it held are fitted again (was said of weights.npy.part, never removed)
        assert f"their networks only in the set's weights file ({WEIGHTS} or {WEIGHTS_PART}), which is gone; they " \
               f"are fitted again" in result.stderr, result.stderr
    assert np.array_equal(load_network_set(out).weights, reference[2])
    assert not os.path.lexists(out / WEIGHTS_PART)


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link"])
def test_a_plan_that_is_no_file_stops_the_rerun_and_says_what_finishes_the_set(reference, tmp_path, kind):
    """Without its plan the folder is no set to go on with: the line says to put the plan back or,
    without it, to fit the set again with --force, and each does."""
    images, out = copy_set(reference, tmp_path)
    plan = (out / PLAN).read_bytes()
    what = in_place_of(out / PLAN, kind)
    for force in ((), ("--force",)):  # --force replaces the set's files, never a folder, a FIFO or a link
        line = refused(fit(images, "-o", out, *PACK, *NET, *force), f"{out / PLAN}: {what}", code=1)
        assert line.endswith("the set is damaged: remove it and put the plan back, or remove it and fit the set "
                             "again (the same inr fit-many command with --force)"), line
    os.rmdir(out / PLAN) if kind == "folder" else os.unlink(out / PLAN)
    (out / PLAN).write_bytes(plan)
    assert fit(images, "-o", out, *PACK, *NET).exit_code == 0
    os.unlink(out / PLAN)
    refused(fit(images, "-o", out, *PACK, *NET), "holds no inr fit-many set", "--force")
    assert fit(images, "-o", out, *PACK, *NET, "--force").exit_code == 0
    assert np.array_equal(load_network_set(out).weights, reference[2])


@pytest.mark.parametrize("kind", ["deleted", "folder", "fifo"])
def test_a_set_without_its_plan_is_said_as_such_not_as_no_run(reference, tmp_path, kind):
    """A set whose fit-many.json is gone (or is not a file) is no set to the commands, and was
    read as a run: "no checkpoint.npz ... is it a run directory?", "--image ... is a single run"."""
    _, out = copy_set(reference, tmp_path)
    if kind == "deleted":
        (out / PLAN).unlink()
        fragments = (f"{out}: an inr fit-many set (it holds {WEIGHTS}, {INDEX}", f"whose {PLAN} is missing, so "
                     f"it cannot be read: put {PLAN} back, or fit the set again")
    else:
        fragments = (f"{out / PLAN}: {in_place_of(out / PLAN, kind)}", "the set is damaged: remove it and put the "
                     "plan back, or remove it and fit the set again (the same inr fit-many command with --force)")
    for result in readers_of(out, tmp_path):
        line = refused(result, *fragments)
        assert "checkpoint" not in line and "single run" not in line, line
    with pytest.raises(inr_cli.InrError, match=re.escape(fragments[0])):
        inr_cli.load(out)
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.safetensors").exists()


def test_a_set_of_no_rows_is_one_line_for_export_and_render(reference, tmp_path):
    images, out = copy_set(reference, tmp_path)
    np.save(out / WEIGHTS, np.zeros((0, reference[2].shape[1]), np.float32))
    (out / INDEX).write_text("name,psnr,loss,steps,seed,width,height\n")
    before = snapshot(tmp_path)
    refused(run("export", out, "--image", "x.png", "-o", tmp_path / "x.safetensors"), "holds no networks")
    refused(run("export", out, "-o", tmp_path / "x.safetensors"), "holds no networks")
    refused(run("render", out, "--image", "x.png", "-o", tmp_path / "x.png", "--device", "cpu"), "holds no networks")
    assert snapshot(tmp_path) == before


# --- names a spreadsheet would run -------------------------------------------------------------

def test_names_that_a_spreadsheet_would_run_are_escaped_and_read_back(tmp_path):
    names = ["=cmd.png", "+1.png", "-2.png", "@sum.png", "'=quoted.png", "plain.png", "'apostrophe.png"]
    images = make_images(tmp_path / "images", names)
    result = fit(images, "-o", tmp_path / "set", *NET)
    assert result.exit_code == 0, result.output
    with open(tmp_path / "set" / INDEX, newline="") as handle:
        cells = [row[0] for row in csv.reader(handle)][1:]
    assert not [cell for cell in cells if cell[:1] in "=+-@"]
    assert "'=cmd.png" in cells and "''=quoted.png" in cells and "'apostrophe.png" in cells and "plain.png" in cells
    networks = load_network_set(tmp_path / "set")
    assert sorted(row["name"] for row in networks.index) == sorted(names)
    assert networks.row("=cmd.png") == [row["name"] for row in networks.index].index("=cmd.png")
    result = run("export", tmp_path / "set", "--image", "=cmd.png", "-o", tmp_path / "cmd.safetensors")
    assert result.exit_code == 0, result.output


# --- the viewer ------------------------------------------------------------------------------------

def _locate(out: Path, location: str, sha256: str | None = None) -> None:
    plan = json.loads((out / PLAN).read_text())
    fields = plan["fields"]
    plan["images"][0][fields.index("location")] = location
    if sha256 is not None:
        plan["images"][0][fields.index("sha256")] = sha256
    (out / PLAN).write_text(json.dumps(plan))


def test_the_viewer_reads_no_url_a_plan_names_without_trust(reference, tmp_path, monkeypatch):
    _, out = copy_set(reference, tmp_path)
    _locate(out, "http://127.0.0.1:9/tracker.png")
    read = []
    monkeypatch.setattr(inputs, "read_bytes", lambda location: read.append(location) or b"")
    view = open_view(out)
    assert view.sources_allowed.withheld == 1
    assert view.state(0)["source"] is False and view.training_image(0) is None
    assert read == []
    trusted = open_view(out, trust=True)
    assert trusted.state(0)["source"] is True and trusted.training_image(0) is None  # read, but not the image planned
    assert read == ["http://127.0.0.1:9/tracker.png"]


def test_the_viewer_reads_no_path_outside_the_input_without_trust(reference, tmp_path):
    images, out = copy_set(reference, tmp_path)
    outside = tmp_path / "private" / "photo.png"
    outside.parent.mkdir()
    shutil.copy(images / "img0.png", outside)  # the plan even names its fingerprint
    _locate(out, str(outside), inputs.fingerprint(outside.read_bytes()))
    view = open_view(out)
    assert view.state(0)["source"] is False and view.training_image(0) is None
    assert view.training_image(1) is not None  # inside the input folder: shown
    assert open_view(out, trust=True).training_image(0) is not None


def test_the_viewer_shows_only_the_image_planned(reference, tmp_path):
    """A file inside the input folder whose bytes are not those planned is not shown."""
    images, out = copy_set(reference, tmp_path)
    _locate(out, str(images / "img1.png"))  # image 0's entry pointed at image 1's file
    view = open_view(out)
    assert view.training_image(0) is None and view.training_image(1) is not None


def test_an_idle_connection_is_closed(reference, tmp_path):
    _, out = copy_set(reference, tmp_path)
    server = ViewServer(("127.0.0.1", 0), open_view(out), TileRenderer(CpuBackend()))
    server.idle_timeout = 0.2
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=60) as idle:
            assert idle.recv(1) == b""  # the server closed it; a timeout here would raise instead
        connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
        connection.request("GET", "/api/info")  # the server still answers
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_runs_thumbnail_is_drawn_at_thumbnail_size(tmp_path):
    image = make_images(tmp_path, ["photo.png"], size=(300, 200)) / "photo.png"
    result = run("train", image, "--steps", "2", "--hidden", "8", "--layers", "1", "--device", "cpu",
                 "--preview-every", "0", "--run-dir", tmp_path / "run", "-q")
    assert result.exit_code == 0, result.output
    view = open_view(tmp_path / "run")
    assert view.thumbnail_size(0) == (THUMBNAIL_SIDE, round(200 * THUMBNAIL_SIDE / 300))
    view.shown = dataclasses.replace(view.shown, width=100000, height=100000)  # as a tampered run says
    assert view.thumbnail_size(0) == (THUMBNAIL_SIDE, THUMBNAIL_SIDE)
    assert view.source is not None
    make_images(tmp_path, ["photo.png"], size=(300, 200)[::-1])  # the training image replaced since
    assert open_view(tmp_path / "run").source is None


def test_an_output_in_a_hidden_folder_of_its_input_resumes(tmp_path):
    """The listing leaves hidden folders out, so a set there is never listed as its own images."""
    images = make_images(tmp_path / "images", ["a.png", "b.png"])
    for _ in range(2):
        result = fit(images, "-o", images / ".inr" / "set", *NET)
        assert result.exit_code == 0, result.output
    assert len(load_network_set(images / ".inr" / "set").index) == 2


@pytest.mark.parametrize("plan", ["[" * 100000 + "]" * 100000, '{"folder": 5}', "[]"])
def test_export_and_view_of_a_set_whose_plan_is_not_one(reference, tmp_path, plan):
    """export reads a set's plan only to protect its inputs: a plan that is not one protects
    nothing and the set still exports; the viewer, which follows the plan, refuses it in one line."""
    _, out = copy_set(reference, tmp_path)
    (out / PLAN).write_text(plan)
    result = run("export", out, "--image", "img0.png", "-o", tmp_path / "one.safetensors")
    assert result.exit_code == 0, result.output
    before = snapshot(tmp_path)
    refused(run("view", out, "--no-browser", "--device", "cpu"), "damaged plan")
    assert snapshot(tmp_path) == before


def test_a_shards_steps_are_checked_with_the_rest(tmp_path):
    """Shards of a set fitted to a target PSNR keep each network's steps: a rerun finds them whole
    (nothing fitted again), and steps beyond the budget mark the shard damaged."""
    from tests.test_fit_many import NET as FITTING
    from tests.test_fit_many import make_folder

    images = make_folder(tmp_path / "images", count=3)
    args = [images, "-o", tmp_path / "set", "--pack", "1", "--until-psnr", "22",
            *FITTING[:FITTING.index("--steps")], "--steps", "300", "--device", "cpu"]
    assert fit(*args, "-q").exit_code == 0
    steps = [int(row["steps"]) for row in load_network_set(tmp_path / "set").index]
    assert min(steps) < 300, steps
    result = fit(*args)
    assert result.exit_code == 0 and "3 done" in result.stderr and "damaged" not in result.stderr, result.stderr
    shard = dict(np.load(tmp_path / "set" / shard_name(0)))
    np.savez(tmp_path / "set" / shard_name(0), **{**shard, "steps": np.array([301])})
    result = fit(*args)
    assert result.exit_code == 0 and f"{shard_name(0)} is damaged (its steps.npy" in result.stderr, result.stderr
    assert [int(row["steps"]) for row in load_network_set(tmp_path / "set").index] == steps
