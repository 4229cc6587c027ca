"""Every second of a run training: previews and checkpoints written by a background writer whose queue
is bounded and drains on exit and on a signal, pictures of a bounded size, and the run's last line
saying where the wall time went."""

from __future__ import annotations

import json
import os
import signal
import threading

import numpy as np
import pytest
from PIL import Image, ImageSequence

from inr_cli import limits
from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.config import build_config
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.formats import checkpoint as ckpt
from inr_cli.runs import pictures, training
from inr_cli.runs.wall_time import WallTime
from inr_cli.runs.writer import BackgroundWriter
from tests.conftest import make_image
from tests.test_cli import SMALL, run


def held_job(written: list, label: str):
    """(release, started, job): a writer's job that says it started, then waits for release before it
    appends label to written: a disk as slow as the test wants."""
    release, started = threading.Event(), threading.Event()

    def job():
        started.set()
        release.wait()
        written.append(label)

    return release, started, job


def test_the_writers_queue_is_bounded_and_drains_in_order_on_exit():
    """While one job is written, one more waits and the queue is full: a third submission would wait
    for the disk instead of holding a third snapshot. Leaving the writer writes every job, in order."""
    written = []
    release, started, slow = held_job(written, "slow")
    with BackgroundWriter() as writer:
        writer.submit(slow, "pictures")
        started.wait()
        writer.submit(lambda: written.append("next"), "checkpoints")
        assert writer.full()
        release.set()
        writer.submit(lambda: written.append("last"), "checkpoints")
    assert written == ["slow", "next", "last"] and not writer.thread.is_alive()


def test_a_newer_checkpoint_takes_the_place_of_one_still_waiting():
    """Checkpoints due faster than the disk writes them never hold the loop: the one waiting is
    replaced by the newer one, which is written; previews are all written, in order."""
    written = []
    release, started, slow = held_job(written, "step 1")
    with BackgroundWriter() as writer:
        writer.submit(slow, "checkpoints", latest_only=True)
        started.wait()
        writer.submit(lambda: written.append("step 2"), "checkpoints", latest_only=True)
        writer.submit(lambda: written.append("step 3"), "checkpoints", latest_only=True)  # does not wait
        assert writer.full()
        release.set()
        writer.submit(lambda: written.append("preview 3"), "pictures")
    assert written == ["step 1", "step 3", "preview 3"]


def test_a_failed_job_is_raised_on_the_loop_and_a_preview_only_warns(capsys):
    def broken():
        raise OSError("disk on fire")

    writer = BackgroundWriter()
    writer.submit(broken, "pictures", warn_only=True)
    writer.drain()  # a preview's failure: said, the run goes on
    assert "disk on fire" in capsys.readouterr().err
    writer.submit(broken, "checkpoints")
    with pytest.raises(OSError, match="disk on fire"):
        writer.drain()
    writer.close()


def tiny_trainer(steps: int = 8) -> tuple[Trainer, NetworkSpec]:
    config = build_config(None, {"network.hidden": 8, "network.layers": 2, "training.steps": steps,
                                 "training.device": "cpu"})
    config, _ = fit_to_image(config, 7, 6, 3)
    rng = np.random.default_rng(0)
    image = PixelImage(rng.random((6, 7, 3), dtype=np.float32), ("r", "g", "b"))
    spec = NetworkSpec.from_config(config, 3)
    return Trainer(CpuBackend(), spec, config, [image], TrainingState.fresh(spec, [0]), [0]), spec


def test_a_checkpoint_written_in_the_background_is_the_foregrounds_bit_for_bit(tmp_path):
    """The writer holds a snapshot of the step: the steps run while it writes change nothing in it."""
    trainer, spec = tiny_trainer()
    for _ in range(3):
        trainer.step()
    trainer.read_loss()

    def checkpoint():
        return ckpt.Checkpoint(spec=spec, config=trainer.config, state=trainer.state(), total_steps=8,
                               data_fingerprint="f", data_shape=(6, 7, 3), channels=("r", "g", "b"))

    (tmp_path / "fg").mkdir()
    (tmp_path / "bg").mkdir()
    training.write_checkpoint(checkpoint(), tmp_path / "fg")
    steps_done = threading.Event()
    with BackgroundWriter() as writer:
        snapshot = checkpoint()
        writer.submit(lambda: (steps_done.wait(), training.write_checkpoint(snapshot, tmp_path / "bg")),
                      "checkpoints")
        for _ in range(3):
            trainer.step()  # while the job waits: the snapshot must not see these
        steps_done.set()
    with np.load(tmp_path / "fg" / ckpt.FILENAME) as fg, np.load(tmp_path / "bg" / ckpt.FILENAME) as bg:
        assert sorted(fg.files) == sorted(bg.files)
        for name in fg.files:
            assert fg[name].dtype == bg[name].dtype and fg[name].tobytes() == bg[name].tobytes(), name


def test_a_signal_during_a_background_write_waits_for_it_and_resumes_bit_exact(tmp_path, monkeypatch):
    """SIGINT arrives while the writer writes the step-4 checkpoint: the run waits for that write,
    saves its own step, exits 130, and the resumed run ends with the bits of a run never stopped."""
    image = make_image(tmp_path / "img.png", "RGB", size=(12, 10))
    args = ["--steps", "12", "--checkpoint-every", "4", "--preview-every", "3", *SMALL]
    assert run("train", image, "--run-dir", tmp_path / "whole", *args).exit_code == 0
    real_save, launch = ckpt.save, Trainer.step
    seen, first_written = [], threading.Event()

    def save_with_a_signal(checkpoint, path, *dtype):
        seen.append(checkpoint.step)
        if checkpoint.step == 4:
            os.kill(os.getpid(), signal.SIGINT)  # from the writer's thread, in the middle of its write
        real_save(checkpoint, path, *dtype)
        first_written.set()

    def step(self):
        if self.step_done == 3:  # the first checkpoint on disk before step 4's falls due: 4 is written next
            first_written.wait(timeout=60)
        launch(self)

    monkeypatch.setattr(ckpt, "save", save_with_a_signal)
    monkeypatch.setattr(Trainer, "step", step)
    stopped = run("train", image, "--run-dir", tmp_path / "stopped", *args)
    assert stopped.exit_code == 130, stopped.output
    saved = ckpt.load(tmp_path / "stopped")
    assert 4 in seen and saved.step == seen[-1] >= 4 and saved.step < 12
    monkeypatch.setattr(ckpt, "save", real_save)
    monkeypatch.setattr(Trainer, "step", launch)
    assert run("train", "--resume", tmp_path / "stopped", "-q").exit_code == 0
    a, b = ckpt.load(tmp_path / "whole"), ckpt.load(tmp_path / "stopped")
    assert b.step == 12
    assert np.array_equal(a.params, b.params) and np.array_equal(a.state.moment1, b.state.moment1)
    assert not list((tmp_path / "stopped").glob(".*.tmp"))


def test_previews_frames_and_final_pictures_are_bounded(tmp_path, monkeypatch):
    """Within their limits whatever the image's size: previews at every 3rd pixel of a 30 x 24 image
    (limit 100 pixels), the animation's frames smaller still, the final render and the comparison's
    panels at every 2nd pixel (limit 200), the comparison's reference panel those very pixels."""
    monkeypatch.setattr(limits, "MAX_PREVIEW_PIXELS", 100)
    monkeypatch.setattr(pictures, "MAX_FRAME_PIXELS", 30)
    monkeypatch.setattr(limits, "MAX_PICTURE_PIXELS", 200)
    image = make_image(tmp_path / "img.png", "RGB", size=(30, 24))
    result = run("train", image, "--steps", "6", "--preview-every", "2", "--run-dir", tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "r"
    assert [Image.open(p).size for p in sorted((run_dir / "previews").glob("*.png"))] == [(10, 8)] * 2
    assert Image.open(run_dir / "render.png").size == (15, 12)
    comparison = np.asarray(Image.open(run_dir / "comparison.png").convert("RGB"))
    assert comparison.shape[:2] == (12, 3 * 15 + 8)
    assert np.array_equal(comparison[:, :15], np.asarray(Image.open(image))[::2, ::2])
    with Image.open(run_dir / "previews.png") as animation:
        assert sum(1 for _ in ImageSequence.Iterator(animation)) == 3  # two previews and the final render
    assert pictures.frame(Image.new("RGB", (30, 24))).size == (6, 5)  # every 5th pixel: within 30


def test_the_animation_is_built_from_small_frames():
    big = Image.new("RGB", (4000, 2250))
    assert pictures.frame(big).size == (667, 375)
    assert 667 * 375 <= pictures.MAX_FRAME_PIXELS


def test_the_last_line_says_where_the_wall_time_went(tmp_path):
    """A tiny image trains in a blink beside its reading, pictures and setup: the last line splits the
    wall time; --json gives the split whatever it is, and its parts add up to the whole."""
    image = make_image(tmp_path / "img.png", "RGB", size=(16, 12))
    result = run("train", image, "--steps", "3", "--run-dir", tmp_path / "r", *SMALL[:-1])
    assert result.exit_code == 0, result.output
    last = next(line for line in result.output.splitlines() if line.startswith("done:"))
    assert last.startswith("done: step 3") and " s in all (reading " in last, last
    assert all(f"{part} " in last for part in ("pictures", "checkpoints", "rest")), last
    result = run("train", image, "--steps", "3", "--run-dir", tmp_path / "j", "--json", *SMALL)
    wall = json.loads(result.stdout)["wall"]
    assert set(wall) == {"total", "training", "reading", "pictures", "checkpoints", "rest"}
    assert wall["total"] == pytest.approx(sum(v for k, v in wall.items() if k != "total"), abs=0.01)


def test_the_split_is_said_only_when_a_tenth_of_the_run_was_not_training():
    wall = WallTime()
    wall.started -= 10.0
    wall.stop(9.5)
    assert wall.summary() is None
    wall.stop(5.0)
    wall.spent["pictures"] = 4.0
    said = wall.summary()
    assert said.startswith("10.0 s in all (") and "pictures 4.0 s" in said and "rest 1.0 s" in said, said


def test_a_readings_bookkeeping_runs_while_the_next_step_does(tmp_path, monkeypatch):
    """inr train reads the loss after its step and judges it at once, but writes its metrics row once
    the next step is launched (on a GPU the host's bookkeeping then overlaps the device's work); a
    checkpoint and the run's end write it first."""
    from inr_cli.runs.metrics_csv import MetricsLog

    events, launch, append, snapshot = [], Trainer.step, MetricsLog.append, Trainer.copy_state

    def step(self):
        launch(self)
        events.append(("step", self.step_done))

    def row(self, step, *values):
        events.append(("row", step))
        append(self, step, *values)

    def state(self, *arrays):
        events.append(("checkpoint", self.step_done))  # taken as a checkpoint is handed to the writer
        return snapshot(self, *arrays)

    monkeypatch.setattr(Trainer, "step", step)
    monkeypatch.setattr(MetricsLog, "append", row)
    monkeypatch.setattr(Trainer, "copy_state", state)
    image = make_image(tmp_path / "img.png", "RGB", size=(12, 10))
    result = run("train", image, "--steps", "9", "--log-every", "4", "--checkpoint-every", "8", "--preview-every",
                 "0", "--run-dir", tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    assert [s for kind, s in events if kind == "row"] == [4, 8, 9]
    assert events.index(("row", 4)) == events.index(("step", 5)) + 1
    assert events.index(("row", 8)) < events.index(("checkpoint", 8)) < events.index(("step", 9))
    assert events.index(("row", 9)) > events.index(("step", 9))
