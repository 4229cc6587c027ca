"""What an older inr wrote goes on under this one with the command that wrote it: a set rerun and
grown (--add), joined with a set fitted alike now, a meta-init resumed from its checkpoint, a study
of inr tune resumed; a setting the command really changes is refused in one line naming it. The
fixtures (tests/fixtures/c0a6ee9, its README says how) were written by inr at commit c0a6ee9, on
another machine: what is fitted again is compared with them within tests/tolerances.py's bounds,
and bit for bit only with what this test computes itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.formats.start import read_start
from tests.tolerances import assert_reproduced

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "c0a6ee9"
SET = ["--hidden", "8", "--layers", "2", "--steps", "20", "--pack", "1", "--device", "cpu", "-q"]
META = ["--hidden", "8", "--layers", "2", "--outer-steps", "4", "--inner-steps", "3", "--meta-batch", "2",
        "--eval-every", "2", "--holdout", "0.3", "--device", "cpu", "-q"]
TUNE = ["--steps", "10", "--hidden", "8", "--layers", "2", "--size", "24", "--device", "cpu", "--quiet"]

runner = CliRunner()


def copied(tmp_path: Path, *names: str) -> Path:
    for name in names:
        source = FIXTURES / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    return tmp_path


def run(*args) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def refused(*args) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def weights(folder: Path) -> np.ndarray:
    return np.load(folder / "weights.npy")


@pytest.mark.numerics
def test_a_set_resumes_with_the_command_that_made_it(tmp_path):
    """The set's default start changed since (the sets preset: omega0 30, lr 1e-3): what the command
    does not say is the set's own, so the shard a killed run lost is fitted again as it was."""
    work = copied(tmp_path, "images", "set")
    rows = np.lib.format.open_memmap(work / "set" / "weights.npy", mode="r+")
    rows[1] = np.nan  # b.png's network, as a run killed before its shard was written leaves it
    rows.flush()
    del rows
    (work / "set" / "shards" / "00001.npz").unlink()
    run("fit-many", work / "images", "-o", work / "set", *SET)
    fixture, now = weights(FIXTURES / "set"), weights(work / "set")
    assert_reproduced(now[1], fixture[1], "b.png's network fitted again")
    assert np.array_equal(now[[0, 2]], fixture[[0, 2]])  # the networks it held, kept as they were


@pytest.mark.parametrize("changed, said", [
    (["--lr", "1e-3"], "was started with optimizer.lr = 0.0004, not 0.001"),
    (["--preset", "sets"], "was started with network.omega0 = 15.0, not 30.0"),  # a preset named counts as given
    (["--weight-scale", "2"], "was started with network.weight_scale = 1.0, not 2.0"),
])
def test_a_set_rerun_or_grown_with_a_setting_changed_is_refused_naming_it(tmp_path, changed, said):
    work = copied(tmp_path, "images", "more", "set")
    assert said in refused("fit-many", work / "images", "-o", work / "set", *SET, *changed)
    assert said in refused("fit-many", work / "more", "-o", work / "set", "--add", *SET, *changed)
    assert np.array_equal(weights(work / "set"), weights(FIXTURES / "set"))  # untouched


@pytest.mark.numerics
def test_a_set_grows_into_the_set_the_older_inr_fitted_at_once(tmp_path):
    """--add with the command that made the set: the new image's network is fitted with the set's
    settings and start (each output at its own image's mean, as that inr began them), so the grown
    set is the one that inr fitted of all four images at once."""
    work = copied(tmp_path, "images", "set")
    shutil.copy(FIXTURES / "more" / "d.png", work / "images")
    run("fit-many", work / "images", "-o", work / "set", "--add", *SET)
    grown, at_once = weights(work / "set"), weights(FIXTURES / "set-abcd")
    assert_reproduced(grown, at_once, "the grown set")
    assert np.array_equal(grown[:3], weights(FIXTURES / "set"))
    assert json.loads((work / "set" / "fit-many.json").read_text())["output_start"] is None


@pytest.mark.numerics
def test_a_set_joins_one_fitted_alike_now_and_grows_into_the_same(tmp_path):
    """A set of random starts (each network's own draw, its output at its image's mean: the same in
    both versions) joins a set this inr fits of the fourth image with the siren preset (which gave
    that inr's defaults); the hash grid's settings, which no siren set depends on, take no part. The
    join is the set grown by --add, bit for bit (both fitted here)."""
    work = copied(tmp_path, "images", "more", "set-random", "set")
    run("fit-many", work / "more", "-o", work / "new", *SET, "--init", "random", "--preset", "siren")
    run("join", work / "set-random", work / "new", "-o", work / "joined")
    run("fit-many", work / "more", "-o", work / "set-random", "--add", *SET, "--init", "random")
    assert np.array_equal(weights(work / "joined"), weights(work / "set-random"))
    assert np.array_equal(weights(work / "joined")[:3], weights(FIXTURES / "set-random"))
    # the default shared start of that inr began each output at its own image's mean, this one at mid-grey:
    # sets fitted so do not join, and the start is named, not a setting
    run("fit-many", work / "more", "-o", work / "new-shared", *SET, "--preset", "siren")
    said = refused("join", work / "set", work / "new-shared", "-o", work / "refused")
    assert "started from different shared starts (their outputs at each image's own mean and (0.500" in said


@pytest.mark.numerics
def test_a_meta_init_resumes_to_the_start_an_uninterrupted_run_learned(tmp_path):
    """The uninterrupted run's best held-out measure was its first start's (four outer steps of a
    tiny network improved nothing), which that inr wrote as learned and this one refuses to: the
    resumed run ends in that refusal, its checkpoint holding, as the best start, the one the
    uninterrupted run wrote."""
    work = copied(tmp_path, "images", "meta-init")
    start = work / "meta-init" / "start.safetensors"
    said = refused("meta-init", work / "images", "-o", start, *META, "--lr", "1e-3")
    assert "was learned with optimizer.lr = 0.0004, not 0.001" in said
    said = refused("meta-init", work / "images", "-o", start, *META)
    assert "no outer step improved on the first start" in said and not start.exists()
    with np.load(f"{start}.meta.npz") as saved:
        assert int(saved["step"]) == 4
        best = saved["best"]
    assert_reproduced(best.astype(np.float32), read_start(str(FIXTURES / "whole.safetensors"))[1], "the start")
    steps = [line.split(",")[0] for line in (work / "meta-init" / "start.csv").read_text().splitlines()[1:]]
    assert steps == ["0", "2", "4"]


def test_a_study_resumes_with_its_trials(tmp_path):
    optuna = pytest.importorskip("optuna", reason="Optuna is the optional extra inr[tune]")
    from inr_cli.tune.storage import STUDY_NAME, open_storage

    def trials() -> list:
        return optuna.load_study(study_name=STUDY_NAME, storage=open_storage(work / "study")).trials

    work = copied(tmp_path, "study")  # of the built-in sample: a study records where its images are
    before = [(t.params, t.value) for t in trials()]
    said = refused("tune", "sample", "-o", work / "study", "--trials", "3", "--resume", *TUNE, "--batch-size", "50")
    assert "was started with training.batch_size = 0, not 50" in said
    run("tune", "sample", "-o", work / "study", "--trials", "3", "--resume", *TUNE)
    after = trials()
    assert len(before) == 2 and len(after) == 3
    assert [(t.params, t.value) for t in after[:2]] == before  # the trials it held, kept
