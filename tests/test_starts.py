"""Where the networks start (training.init): one shared draw, each its own draw, or the weights of
a file; the start is part of what a set and a run are, so a changed one is refused."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.config import build_config
from inr_cli.core.network import NetworkSpec, init_networks
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.export import write_safetensors
from inr_cli.formats.network_set import PLAN, WEIGHTS, load_network_set
from inr_cli.formats.start import initial_params, read_start
from tests.test_fit_many import make_folder

runner = CliRunner()
NET = ["--hidden", "10", "--layers", "2", "--omega0", "40", "--lr", "3e-3", "--steps", "15", "--device", "cpu", "-q"]
SPEC = NetworkSpec("siren", 3, 10, 2, 40.0, "none", 0, 0.0)


def inr(*args):
    return runner.invoke(app, list(map(str, args)))


def test_shared_draws_one_start_for_every_network_and_random_one_each():
    shared = initial_params("shared", SPEC, 7, [11, 12, 13])
    assert all(np.array_equal(row, init_networks(SPEC, [7])[0]) for row in shared)
    drawn = initial_params("random", SPEC, 7, [11, 12, 13])
    assert np.array_equal(drawn, init_networks(SPEC, [11, 12, 13]))
    assert not np.array_equal(drawn[0], drawn[1])


@pytest.mark.numerics
def test_a_shared_set_holds_the_networks_inr_train_fits_alone(tmp_path):
    """The default start of fit-many is shared: every network starts from the draw of --seed, so
    (full batch: the image's seed then picks nothing; the outputs at 0, where a set's start would
    put them at its mean colour and one image's at its own) each is `inr train IMAGE --init shared`."""
    folder = make_folder(tmp_path / "images", count=3)
    at_zero = [*NET, "--no-init-output-at-mean"]
    assert inr("fit-many", folder, "-o", tmp_path / "set", *at_zero).exit_code == 0
    networks = load_network_set(tmp_path / "set")
    for name in ("img0.png", "img2.png"):
        result = inr("train", folder / name, "--init", "shared", "--seed", "0", "--run-dir", tmp_path / name,
                     "--preview-every", "0", *at_zero)
        assert result.exit_code == 0, result.output
        assert np.array_equal(ckpt.load(tmp_path / name).params, networks.weights[networks.row(name)])
    random = tmp_path / "random"
    assert inr("fit-many", folder, "-o", random, "--init", "random", *NET).exit_code == 0
    assert not np.array_equal(np.load(random / WEIGHTS), networks.weights)


def test_a_shared_start_begins_at_mid_grey_a_random_one_at_each_images_mean(tmp_path):
    """One start for every network, its outputs at mid-grey (recorded in the plan, kept by --add); a
    random start's each at its own image's mean. After one Adam step (lr 3e-3) the output biases are
    still within a step of where they began."""
    import json

    from PIL import Image

    folder = make_folder(tmp_path / "images", count=4)
    means = {p.name: np.asarray(Image.open(p), dtype=np.float64).reshape(-1, 3).mean(axis=0) / 255
             for p in sorted(folder.iterdir())}
    one_step = [*NET[:NET.index("--steps")], "--steps", "1", "--device", "cpu", "-q"]
    assert inr("fit-many", folder, "-o", tmp_path / "set", *one_step).exit_code == 0
    assert json.loads((tmp_path / "set" / PLAN).read_text())["output_start"] == [0.5, 0.5, 0.5]
    networks = load_network_set(tmp_path / "set")
    assert np.abs(np.asarray(networks.weights)[:, -3:] - 0.5).max() < 4e-3  # the output biases: the last three
    assert inr("fit-many", folder, "-o", tmp_path / "random", "--init", "random", *one_step).exit_code == 0
    assert json.loads((tmp_path / "random" / PLAN).read_text())["output_start"] is None
    drawn = load_network_set(tmp_path / "random")
    for i, row in enumerate(drawn.index):
        assert np.abs(np.asarray(drawn.weights)[i, -3:] - means[row["name"]]).max() < 4e-3
    assert max(np.abs(m - 0.5).max() for m in means.values()) > 0.02  # the two starts are told apart above
    at_zero = tmp_path / "zero"
    assert inr("fit-many", folder, "-o", at_zero, "--no-init-output-at-mean", *one_step).exit_code == 0
    assert json.loads((at_zero / PLAN).read_text())["output_start"] is None
    from inr_cli.sets.plan import BadPlan, Plan

    plan = json.loads((tmp_path / "set" / PLAN).read_text())
    for damaged in ([0.5, 0.5], [0.5, 0.5, 2.0], "grey"):  # a plan's colour is checked as it is read
        with pytest.raises(BadPlan, match="'output_start' is"):
            Plan.from_json(json.dumps({**plan, "output_start": damaged}))


def test_a_file_start_gives_its_weights_to_every_network(tmp_path):
    folder = make_folder(tmp_path / "images", count=3)
    start_weights = init_networks(SPEC, [99])[0] * 0.5
    start = tmp_path / "start.safetensors"
    write_safetensors(SPEC, start_weights, ("r", "g", "b"), start)
    spec, read = read_start(str(start))
    assert spec == SPEC and np.array_equal(read, start_weights)
    assert np.array_equal(initial_params(str(start), SPEC, 0, [1, 2]), np.stack([start_weights] * 2))
    # a set from the file: each network is inr train's from the same file (its seed: its mini-batches)
    assert inr("fit-many", folder, "-o", tmp_path / "set", "--init", start, "--batch-size", "50", *NET).exit_code == 0
    networks = load_network_set(tmp_path / "set")
    row = networks.row("img1.png")
    run = tmp_path / "run"
    result = inr("train", folder / "img1.png", "--init", start, "--seed", networks.index[row]["seed"],
                 "--batch-size", "50", "--run-dir", run, "--preview-every", "0", *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(ckpt.load(run).params, networks.weights[row])
    # a run directory is a start too: its weights
    again = tmp_path / "again"
    assert inr("train", folder / "img1.png", "--init", run, "--run-dir", again, "--steps", "1",
               *NET[:8], "--device", "cpu", "-q").exit_code == 0
    assert not np.array_equal(ckpt.load(again).params, ckpt.load(run).params)  # one step on from it
    assert np.abs(ckpt.load(again).params - ckpt.load(run).params).max() < 0.05


def test_a_start_of_another_network_or_no_file_is_one_line(tmp_path):
    folder = make_folder(tmp_path / "images", count=2)
    start = tmp_path / "start.safetensors"
    write_safetensors(NetworkSpec("siren", 3, 12, 2, 40.0, "none", 0, 0.0), init_networks(
        NetworkSpec("siren", 3, 12, 2, 40.0, "none", 0, 0.0), [1])[0], ("r", "g", "b"), start)
    result = inr("fit-many", folder, "-o", tmp_path / "set", "--init", start, *NET)
    assert result.exit_code == 1
    assert "hidden 12 (the start) vs 10" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "set").exists()  # refused before the folder was touched: the right command then works
    assert inr("fit-many", folder, "-o", tmp_path / "set", "--init", start, *NET, "--hidden", "12").exit_code == 0
    result = inr("train", folder / "img0.png", "--init", tmp_path / "nothing.safetensors", *NET)
    assert result.exit_code != 0 and "not random, shared or a file" in result.output


def test_a_rerun_or_resume_refuses_a_changed_start(tmp_path):
    folder = make_folder(tmp_path / "images", count=2)
    start = tmp_path / "start.safetensors"
    write_safetensors(SPEC, init_networks(SPEC, [5])[0], ("r", "g", "b"), start)
    out = tmp_path / "set"
    assert inr("fit-many", folder, "-o", out, "--init", start, *NET).exit_code == 0
    assert str(start) in (out / PLAN).read_text()
    assert inr("fit-many", folder, "-o", out, "--init", start, *NET).exit_code == 0  # the same: done
    assert inr("fit-many", folder, "-o", out, *NET).exit_code == 0  # what it does not say is the set's: its start
    result = inr("fit-many", folder, "-o", out, "--init", "shared", *NET)
    assert result.exit_code == 2 and "training.init" in result.output and "'shared'" in result.output
    write_safetensors(SPEC, init_networks(SPEC, [6])[0], ("r", "g", "b"), start)
    for given in (["--init", start], []):
        result = inr("fit-many", folder, "-o", out, *given, *NET)
        assert result.exit_code == 1 and "changed since" in result.output
    run = tmp_path / "run"
    assert inr("train", folder / "img0.png", "--run-dir", run, "--preview-every", "0", *NET).exit_code == 0
    result = inr("train", "--resume", run, "--init", "random", "--steps", "30")
    assert result.exit_code == 2 and "--init cannot change when resuming" in result.output
    # said at the value the run was started with, it changes nothing: the run goes on
    assert inr("train", "--resume", run, "--init", "shared", "--steps", "30").exit_code == 0


def test_a_file_start_at_each_images_mean_colour(tmp_path):
    """network.start_output_at_mean: every network from the file's weights, but for its output biases,
    set to its own image's mean colour (a file start keeps its own without it); fit-many and train
    alike, the plan recording the outputs at the mean as the fit did. After one Adam step (lr 3e-3)
    the output biases are still within a step of where they began."""
    import json

    from PIL import Image

    folder = make_folder(tmp_path / "images", count=3)
    means = {p.name: np.asarray(Image.open(p), dtype=np.float64).reshape(-1, 3).mean(axis=0) / 255
             for p in sorted(folder.iterdir())}
    start_weights = init_networks(SPEC, [99])[0]
    start = tmp_path / "start.safetensors"
    write_safetensors(SPEC, start_weights, ("r", "g", "b"), start)
    colours = [np.array([0.1, 0.2, 0.3]), np.array([0.9, 0.8, 0.7])]
    drawn = initial_params(str(start), SPEC, 0, [1, 2], colours)
    for row, colour in zip(drawn, colours):  # SIREN's output is linear: its biases are the colour, the last three
        assert np.array_equal(row[:-3], start_weights[:-3]) and np.array_equal(row[-3:], colour.astype(np.float32))
    assert np.array_equal(initial_params(str(start), SPEC, 0, [1]), start_weights[None])  # read, never written
    one_step = [*NET[:NET.index("--steps")], "--steps", "1", "--device", "cpu", "-q"]
    for flag, expected in (("--start-output-at-mean", lambda name: means[name]), ("--no-start-output-at-mean",
                                                                                  lambda name: start_weights[-3:])):
        out = tmp_path / f"set{flag}"
        assert inr("fit-many", folder, "-o", out, "--init", start, flag, *one_step).exit_code == 0
        network = json.loads((out / PLAN).read_text())["config"]["network"]
        assert network["init_output_at_mean"] == network["start_output_at_mean"] == (flag == "--start-output-at-mean")
        networks = load_network_set(out)
        for i, row in enumerate(networks.index):
            assert np.abs(np.asarray(networks.weights)[i, -3:] - expected(row["name"])).max() < 4e-3
    assert max(np.abs(m - start_weights[-3:]).max() for m in means.values()) > 0.02  # told apart above
    run = tmp_path / "run"
    assert inr("train", folder / "img1.png", "--init", start, "--start-output-at-mean", "--run-dir", run,
               "--preview-every", "0", *one_step).exit_code == 0
    assert np.abs(ckpt.load(run).params[-3:] - means["img1.png"]).max() < 4e-3


def test_a_file_start_names_its_network_where_nothing_else_does(tmp_path):
    """`inr train IMAGE --init RUN` with no network setting fits RUN's network (here a hash grid,
    where the default would be a SIREN), and the preset tuned for it; a setting given still wins
    and a difference with the start is named alone."""
    folder = make_folder(tmp_path / "images", count=2)
    grid = ["--encoding", "hashgrid", "--hash-levels", "2", "--hash-log2-size", "6", "--hidden", "8", "--layers", "1"]
    common = ["--steps", "2", "--device", "cpu", "-q", "--preview-every", "0"]
    assert inr("train", folder / "img0.png", "--run-dir", tmp_path / "start", *grid, *common).exit_code == 0
    result = inr("train", folder / "img1.png", "--init", tmp_path / "start", "--run-dir", tmp_path / "run", *common)
    assert result.exit_code == 0, result.output
    assert ckpt.load(tmp_path / "run").spec == ckpt.load(tmp_path / "start").spec
    assert ckpt.load(tmp_path / "run").config.optimizer.lr == build_config(None, {}, "hashgrid").optimizer.lr
    result = inr("train", folder / "img1.png", "--init", tmp_path / "start", "--run-dir", tmp_path / "other",
                 "--hidden", "16", *common)
    assert result.exit_code == 1 and result.output.count(" vs ") == 1 and "hidden 8 (the start) vs 16" in result.output
