"""Files written by a newer inr (a checkpoint, a fit-many set's network.json and plan) are refused with
one line that says so and what to do, not as damage, whatever new contents they hold."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import inr_cli
from inr_cli.cli import app
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint, network_set
from tests.conftest import make_image

runner = CliRunner()
TINY = ["--hidden", "8", "--layers", "2", "--steps", "3", "--device", "cpu", "-q"]


def newer(where, version: int, readable: int) -> str:
    return f"{where}: written by a newer inr (format {version}); this inr reads up to format {readable}: upgrade inr"


def refused(*args) -> str:
    """The one line a command prints on stderr for a file it refuses (exit code 1)."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    return result.output.strip().removeprefix("error: ")


@pytest.fixture
def image(tmp_path):
    return make_image(tmp_path / "photo.png", "RGB", size=(6, 5))


def test_a_checkpoint_of_a_newer_format(tmp_path, image):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", str(image), "--run-dir", str(run), *TINY]).exit_code == 0
    path = run / checkpoint.FILENAME
    with np.load(path) as npz:
        arrays = dict(npz)
    version = checkpoint.FORMAT_VERSION + 1
    config = json.loads(str(arrays["config"]))
    config["network"]["a_later_setting"] = 1  # what a newer format may hold: unknown keys, arrays
    np.savez(path, **{**arrays, "format_version": np.array(version), "config": np.array(json.dumps(config)),
                      "a_later_array": np.zeros(3)})
    expected = newer(path, version, checkpoint.FORMAT_VERSION)
    assert refused("info", run) == expected
    assert refused("render", run, "-o", tmp_path / "out.png") == expected
    assert refused("train", "--resume", run, "-q") == expected
    with pytest.raises(InrError) as raised:
        inr_cli.load(run)
    assert str(raised.value) == expected


@pytest.fixture
def finished_set(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for seed in range(2):
        make_image(folder / f"img{seed}.png", "RGB", size=(6, 5), seed=seed)
    out = tmp_path / "set"
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), *TINY])
    assert result.exit_code == 0, result.output
    return folder, out


def rewrite_as_newer(path, section: str) -> int:
    """The JSON file at `path` as a newer inr might write it: its format above this inr's, an unknown key."""
    document = json.loads(path.read_text())
    version = network_set.FORMAT_VERSION + 1
    document["format_version"] = version
    document[section]["a_later_key"] = 1
    path.write_text(json.dumps(document))
    return version


def test_a_set_of_a_newer_format(finished_set):
    _, out = finished_set
    description = out / network_set.DESCRIPTION
    version = rewrite_as_newer(description, "spec")
    expected = newer(description, version, network_set.FORMAT_VERSION)
    assert refused("info", out) == expected
    assert refused("render", out, "--image", "img0.png", "-o", out / "img0-render.png") == expected
    with pytest.raises(InrError) as raised:
        inr_cli.load(out)
    assert str(raised.value) == expected


def test_a_plan_of_a_newer_format(finished_set):
    folder, out = finished_set
    plan = out / network_set.PLAN
    version = rewrite_as_newer(plan, "config")
    assert refused("fit-many", folder, "-o", out, *TINY) == newer(plan, version, network_set.FORMAT_VERSION)
