"""The one training loop of `inr train` and `inr fit-many`: divergence, checkpoints on the clock,
and the messages around a run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends import Backend, CpuBackend
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.cli import app
from inr_cli.config import build_config, flags_to_values
from inr_cli.core import training_loop
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.formats import checkpoint as ckpt
from inr_cli.runs.directory import RunLock
from inr_cli.runs.training import slow_run_hint, suggested_rate
from inr_cli.sets import driver
from inr_cli.sets.storage import shard_name
from tests.conftest import FIXTURES

runner = CliRunner()
NET = ["--hidden", "32", "--layers", "2", "--device", "cpu", "-q"]


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.open(FIXTURES / "coffee.png").convert("RGB").resize((48, 32)).save(path)
    return path


def train(*args):
    return runner.invoke(app, ["train", *map(str, args)])


def test_a_blow_up_before_any_checkpoint_leaves_no_run_and_names_the_presets_rate(photo, tmp_path):
    """Nothing past the start was saved: the run is removed (the same command at a better rate starts
    it again), and the rate to try is the preset's, which trains, not a tenth of one that blew up."""
    run = tmp_path / "run"
    result = train(photo, "--lr", "1e6", "--steps", "60", "--run-dir", run, *NET)
    assert result.exit_code == 1, result.output
    assert "training blew up" in result.output and f"{run} is removed" in result.output
    assert "--lr 0.0004 (the siren preset's rate)" in result.output
    assert not run.exists()
    assert train(photo, "--lr", "0.0004", "--steps", "60", "--run-dir", run, *NET).exit_code == 0
    kept = tmp_path / "made-by-hand"
    kept.mkdir()
    assert train(photo, "--lr", "1e6", "--steps", "60", "--run-dir", kept, *NET).exit_code == 1
    assert kept.is_dir() and not any(kept.iterdir())  # a folder it did not make stays, emptied of the run
    at_or_below = build_config(None, flags_to_values({"lr": 1e-4, "model": "sigmoid"}))
    assert suggested_rate(at_or_below) == "a smaller learning rate, e.g. --lr 1e-05"  # the preset's is no help
    assert suggested_rate(build_config(None, flags_to_values({"lr": 1.0, "model": "sigmoid"}))) == (
        "--lr 0.003 (the sigmoid preset's rate)")
    # a hash grid's network (a ReLU MLP, whose model's preset is fourier's) is given the hashgrid preset's
    assert suggested_rate(build_config(None, flags_to_values({"lr": 1.0}), "hashgrid")) == (
        "--lr 0.005 (the hashgrid preset's rate)")


def test_a_bare_resume_passes_by_a_run_that_blew_up(photo, tmp_path, monkeypatch):
    """A run that blew up after a good checkpoint is kept, and marked: a bare --resume would blow it up
    again at the same rate, so it takes the latest other run; named, the run still resumes."""
    monkeypatch.chdir(tmp_path)
    assert train(photo, "--steps", "20", *NET).exit_code == 0  # runs/photo, finished
    result = train(photo, "--steps", "200", "--lr", "1e3", "--lr-min", "1e3", "--checkpoint-every", "1",
                   "--log-every", "1", *NET)
    assert result.exit_code == 1 and "blew up" in result.output, result.output
    assert "is kept in runs/photo-2" in result.output and "passes it by" in result.output
    assert 0 < ckpt.load("runs/photo-2").step < 200
    result = train("--resume")
    assert "runs/photo " in result.output + " " and "photo-2" not in result.output, result.output
    (tmp_path / "runs" / "photo" / "checkpoint.npz").unlink()
    result = train("--resume")
    assert result.exit_code == 1 and "1 that blew up passed by" in result.output, result.output
    result = train("--resume", "runs/photo-2")
    assert "resuming runs/photo-2 at step" in result.output  # named, it goes on (and fails again, here)


def test_a_run_that_learned_nothing_ends_with_an_error(photo, tmp_path):
    """A ReLU network at lr 1e3 saturates and sits far below the image's mean colour: not a success."""
    run = tmp_path / "run"
    result = train(photo, "--model", "relu", "--lr", "1e3", "--steps", "100", "--run-dir", run, *NET)
    assert result.exit_code == 1, result.output
    assert "learned nothing" in result.output and "--lr 0.003 (the fourier preset's rate)" in result.output
    assert ckpt.load(run).step == 100 and (run / "render.png").is_file()  # the run is kept, as it ended


def test_a_sane_run_of_the_same_length_passes(photo, tmp_path):
    result = train(photo, "--model", "relu", "--steps", "100", "--run-dir", tmp_path / "run", *NET)
    assert result.exit_code == 0, result.output


def test_fit_many_stops_a_pack_that_diverges_naming_its_images(tmp_path, monkeypatch):
    """The second pack's targets hold a NaN, so its loss does: the pack stops, its images are named,
    and the first pack's shard stays on disk for the rerun."""
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (8, 10, 3), dtype=np.uint8)).save(folder / f"img{i}.png")
    real = driver.shard_images

    def poisoned(plan, index):
        images = real(plan, index)
        if index == 1:  # an 8-bit image holds no NaN: its values as floats, one of them poisoned
            values = images[0].values
            values[0, 0, 0] = np.nan
            images[0] = dataclasses.replace(images[0], pixels=values)
        return images

    monkeypatch.setattr(driver, "shard_images", poisoned)
    out = tmp_path / "out"
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--pack", "2", "--steps", "5",
                                 "--hidden", "8", "--device", "cpu", "-q"])
    assert result.exit_code == 1, result.output
    assert "img2.png" in result.output and "img0.png" not in result.output and "--lr" in result.output
    assert (out / shard_name(0)).is_file() and not (out / shard_name(1)).exists()


def test_checkpoints_follow_the_clock_as_well_as_the_steps(monkeypatch):
    """A fake clock that advances 25 s a reading: with checkpoint_seconds 60 a checkpoint lands every
    third clock reading, whatever checkpoint_every says; with 0, only the step interval counts."""
    config = build_config(None, flags_to_values({"steps": 12, "hidden": 8, "layers": 1, "omega0": 30.0,
                                                  "device": "cpu"}))
    spec = NetworkSpec.from_config(config, 3)
    image = PixelImage(np.random.default_rng(1).random((6, 7, 3)).astype(np.float32), ("r", "g", "b"))
    ticks = iter(range(0, 10_000, 25))
    monkeypatch.setattr(training_loop.time, "perf_counter", lambda: float(next(ticks)))

    def saved_steps(every: int, seconds: float) -> list[int]:
        trainer = Trainer(CpuBackend(), spec, config, [image], TrainingState.fresh(spec, [0]), [0])
        steps = []
        with training_loop.Signals() as signals:
            training_loop.run_steps(trainer, signals, 4, checkpoint=steps.append, checkpoint_every=every,
                                    checkpoint_seconds=seconds)
        return steps

    assert saved_steps(1000, 0.0) == []
    assert saved_steps(5, 0.0) == [5, 10]
    clocked = saved_steps(1000, 60.0)
    assert clocked and all(later - earlier <= 3 for earlier, later in zip([0, *clocked], clocked))


def test_messages_that_used_to_mislead(photo, tmp_path):
    run = tmp_path / "run"
    assert train(photo, "--steps", "20", "--run-dir", run, *NET).exit_code == 0
    # --steps on resume is the new total: one below the step reached is refused, not "finished".
    result = train(run, "--resume", "--steps", "5", "-q")
    assert result.exit_code == 2 and "new total" in result.output and "above 20" in result.output
    # --resume names a run, not the data.
    result = train(photo, "--resume", "-q")
    assert result.exit_code == 2 and "is not a run" in result.output
    # A run directory in use: its lock is said, not a --resume that would fail the same way.
    with RunLock(run):
        result = train(photo, "--run-dir", run, *NET)
    assert result.exit_code == 1 and "another inr train is using" in result.output and "--resume" not in result.output


def test_every_backend_implements_the_interface(emulated):
    for backend in (NumpyBackend(), CpuBackend(), emulated):
        assert isinstance(backend, Backend), type(backend).__name__


def test_feedback_from_the_first_step_and_previews_for_short_runs(photo, tmp_path):
    """Off a terminal the first status line comes after the first step, not at the logging interval;
    a run shorter than the preview interval still gets previews."""
    run = tmp_path / "run"
    result = train(photo, "--steps", "8", "--log-every", "4", "--run-dir", run, "--hidden", "16", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "step 1/8" in result.output
    assert sorted(p.name for p in (run / "previews").glob("step-*.png")) == ["step-000002.png", "step-000004.png",
                                                                          "step-000006.png"]


def test_a_slow_full_batch_run_gets_a_hint():
    assert slow_run_hint(10.0, 1000, True, 3_000_000) is not None
    assert "--batch-size" in slow_run_hint(10.0, 1000, True, 3_000_000)
    assert slow_run_hint(0.01, 1000, True, 3_000_000) is None
    assert slow_run_hint(10.0, 1000, False, 3_000_000) is None  # mini-batches already


def test_a_checkpoint_on_a_logging_step_reads_the_loss_once(photo, tmp_path):
    """A checkpoint due on a step whose loss was just read does not read it again: one metrics row."""
    run = tmp_path / "run"
    result = train(photo, "--steps", "8", "--log-every", "2", "--checkpoint-every", "4", "--run-dir", run, *NET)
    assert result.exit_code == 0, result.output
    steps = [int(row.split(",")[0]) for row in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == [2, 4, 6, 8]


def test_until_psnr_stops_at_a_reading_and_a_higher_target_resumes_as_one_run(photo, tmp_path):
    """--until-psnr stops at the first loss reading (a multiple of --log-every) at or above the target; a
    resume with the same target has nothing to do, and one with a higher target ends bit for bit where a
    run started with that target ends."""
    budget = ["--steps", "400", "--log-every", "10", "--preview-every", "0", *NET]
    run, whole = tmp_path / "run", tmp_path / "whole"
    result = train(photo, "--until-psnr", "15", "--run-dir", run, *budget)
    assert result.exit_code == 0, result.output
    first = ckpt.load(run)
    assert 0 < first.step < 400 and first.step % 10 == 0
    rows = (run / "metrics.csv").read_text().splitlines()[1:]
    psnrs = [float(row.split(",")[2]) for row in rows]
    assert psnrs[-1] >= 15 and all(p < 15 for p in psnrs[:-1])  # no earlier reading reached it
    result = train("--resume", run, "-q")
    assert result.exit_code == 0 and "already reached 15 dB" in result.output
    assert ckpt.load(run).step == first.step
    result = train("--resume", run, "--until-psnr", "18", "-q")
    assert result.exit_code == 0, result.output
    result = train(photo, "--until-psnr", "18", "--run-dir", whole, *budget)
    assert result.exit_code == 0, result.output
    resumed, uninterrupted = ckpt.load(run), ckpt.load(whole)
    assert first.step < resumed.step == uninterrupted.step < 400
    assert np.array_equal(resumed.params, uninterrupted.params)


def test_a_signal_in_the_step_that_reaches_the_target_resumes_to_where_the_run_would_stop(photo, tmp_path,
                                                                                          monkeypatch):
    """Ctrl-C landing inside the step at which --until-psnr is reached: the checkpoint holds that step's
    loss (read before the signal is acted on), so the resumed run stops where an uninterrupted one stops."""
    import os
    import signal

    budget = ["--until-psnr", "15", "--steps", "400", "--log-every", "10", "--preview-every", "0", *NET]
    whole, run = tmp_path / "whole", tmp_path / "run"
    assert train(photo, "--run-dir", whole, *budget).exit_code == 0
    stop = ckpt.load(whole).step
    step = Trainer.step

    def interrupted_at_stop(self):
        step(self)
        if self.step_done == stop:
            os.kill(os.getpid(), signal.SIGINT)  # lands while the step is in flight: acted on once it is whole

    monkeypatch.setattr(Trainer, "step", interrupted_at_stop)
    result = train(photo, "--run-dir", run, *budget)
    monkeypatch.setattr(Trainer, "step", step)
    assert ckpt.load(run).step == stop, result.output
    train("--resume", run, "-q")
    resumed, uninterrupted = ckpt.load(run), ckpt.load(whole)
    assert resumed.step == uninterrupted.step and np.array_equal(resumed.params, uninterrupted.params)
