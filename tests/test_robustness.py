"""Crashes, signals, full disks, concurrent runs: nothing lost, every failure a clear line."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats import npz
from inr_cli.runs.directory import RunLock
from tests.conftest import make_image

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
NET = ["--hidden", "24", "--layers", "2", "--device", "cpu", "-q", "--preview-every", "0"]


def inr(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "inr_cli", *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture
def image(tmp_path):
    return make_image(tmp_path / "img.png", "RGB", size=(64, 48), seed=5)


def saved_step(run: Path) -> int:
    """The step of the checkpoint on disk, or -1 before the first one (it is always complete)."""
    return ckpt.load(run).step if (run / ckpt.FILENAME).is_file() else -1


def wait_for_progress(process: subprocess.Popen, run: Path, past: int) -> bool:
    """Wait until the run's checkpoint is past step `past` (True) or the process ends (False).
    An event, not a time: however slow the machine, the kill lands after this much progress."""
    while saved_step(run) <= past:
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    return True


def test_sigkill_at_any_moment_then_resume_is_bit_identical(tmp_path, image):
    """Kill a real `inr train` with SIGKILL at varied points of its progress (checkpointing every
    step, so many kills land inside a checkpoint write), resume each time, and compare with a run
    never killed. Each kill waits for the run to move a random number of steps past the last one."""
    args = [image, "--steps", "1000", "--checkpoint-every", "1", "--batch-size", "300", *NET]
    whole = inr("train", *args, "--run-dir", tmp_path / "whole")
    assert whole.wait(timeout=300) == 0, whole.stderr.read()

    run = tmp_path / "killed"
    rng = random.Random(7)
    kills, resumes = 0, 0
    process = inr("train", *args, "--run-dir", run)
    while kills < 12:
        # 12 kills at most 40 steps apart stay inside the 1000-step budget, even where the poll lags
        # the run by a few dozen steps (checkpoints are written while the next steps run).
        if not wait_for_progress(process, run, saved_step(run) + rng.randint(0, 40)):
            break
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        kills += 1
        ckpt.load(run)  # the checkpoint on disk is always complete
        process = inr("train", run, "--resume", "-q")
        resumes += 1
    assert process.wait(timeout=300) == 0, process.stderr.read()
    assert kills == 12, f"the run ended at step {saved_step(run)} after {kills} kills"
    print(f"{kills} kills, {resumes} resumes")
    a, b = ckpt.load(tmp_path / "whole"), ckpt.load(run)
    assert b.step == 1000
    assert np.array_equal(a.params, b.params) and np.array_equal(a.state.moment1, b.state.moment1)
    assert not list(run.glob(".*.tmp")), "temporary checkpoint files left behind"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_saves_and_says_how_to_resume(tmp_path, image, sig):
    run = tmp_path / "run"
    process = inr("train", image, "--steps", "100000", "--checkpoint-every", "100000", "--run-dir", run, *NET)
    deadline = time.time() + 60
    while not (run / "metrics.csv").is_file() or len((run / "metrics.csv").read_text().splitlines()) < 3:
        assert time.time() < deadline and process.poll() is None, process.stderr.read()
        time.sleep(0.1)
    process.send_signal(sig)
    code = process.wait(timeout=60)
    stderr = process.stderr.read()
    assert code == 128 + sig  # closing the terminal (SIGHUP) saves like Ctrl-C and SIGTERM
    assert f"inr train --resume {run}" in stderr
    assert "Traceback" not in stderr
    assert process.stdout.read().strip() == str(run)  # stdout names the run, as a finished run's does
    saved = ckpt.load(run)
    assert saved.step > 0 and np.isfinite(saved.last_loss)  # the loss the loop last read, for inr info


# A run whose background writer's lock is left by a signal at the worst moment: inside the lock's
# own __exit__ (Python code, where an exception raised by a handler leaves the lock held). Run
# as a child process, so that a run which would then wait for ever fails the test instead.
SIGNAL_IN_THE_WRITERS_LOCK = """
import os, signal, sys, threading
from inr_cli.runs import writer

class SignallingCondition(threading.Condition):
    exits = 0

    def __exit__(self, *exc):
        if threading.current_thread() is threading.main_thread():
            SignallingCondition.exits += 1
            if SignallingCondition.exits == 200:  # well into the steps
                os.kill(os.getpid(), signal.SIGINT)
        return super().__exit__(*exc)

writer.threading = type("threading", (), {"Condition": SignallingCondition, "Thread": threading.Thread})
sys.argv = ["inr", *sys.argv[1:]]
from inr_cli.cli import run
run()
"""


def test_a_signal_inside_the_writers_lock_stops_the_run(tmp_path, image):
    run = tmp_path / "run"
    script = tmp_path / "signal_in_lock.py"
    script.write_text(SIGNAL_IN_THE_WRITERS_LOCK)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script), "train", str(image), "--steps", "100000",
                           "--checkpoint-every", "100000", "--run-dir", str(run), *NET],
                          env=env, capture_output=True, text=True, timeout=300)  # a hang, not a pace
    assert done.returncode == 130, done.stderr
    assert f"inr train --resume {run}" in done.stderr and "Traceback" not in done.stderr
    assert ckpt.load(run).step > 0


def test_disk_full_keeps_previous_checkpoint(tmp_path, image, monkeypatch):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", str(image), "--steps", "4", "--run-dir", str(run), *NET]).exit_code == 0
    before = ckpt.load(run)
    real_write = npz.write

    def full_disk(handle, members):
        real_write(handle, members)  # bytes written, then the disk fills before the end
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npz, "write", full_disk)
    result = runner.invoke(app, ["train", str(run), "--resume", "--steps", "8", "-q"])
    assert result.exit_code == 1
    assert "No space left on device" in result.output and "previous checkpoint is intact" in result.output
    monkeypatch.setattr(npz, "write", real_write)
    after = ckpt.load(run)
    assert after.step == before.step and np.array_equal(after.params, before.params)
    assert not list(run.glob(".*.tmp"))


def test_disk_full_at_the_first_checkpoint_leaves_no_run_to_trip_over(tmp_path, image, monkeypatch):
    run = tmp_path / "run"
    real_write = npz.write

    def full_disk(handle, members):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npz, "write", full_disk)
    result = runner.invoke(app, ["train", str(image), "--steps", "4", "--run-dir", str(run), *NET])
    assert result.exit_code == 1
    assert "no checkpoint of the run was written yet" in result.output, result.output
    assert f"nothing was saved, so {run} is removed" in result.output and not run.exists()
    monkeypatch.setattr(npz, "write", real_write)
    result = runner.invoke(app, ["train", str(image), "--steps", "4", "--run-dir", str(run), *NET])
    assert result.exit_code == 0, result.output  # the same command, once there is room
    assert ckpt.load(run).step == 4


def test_unwritable_run_directory(tmp_path, image):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = runner.invoke(app, ["train", str(image), "--run-dir", str(blocker / "run"), *NET])
    assert result.exit_code == 1 and "cannot create the run directory" in result.output


def test_second_trainer_on_same_run_refuses(tmp_path, image):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", str(image), "--steps", "2", "--run-dir", str(run), *NET]).exit_code == 0
    with RunLock(run):
        result = runner.invoke(app, ["train", str(run), "--resume", "--steps", "4", "-q"])
    assert result.exit_code == 1 and "another inr train is using this run directory" in result.output
    assert ckpt.load(run).step == 2


def test_failed_commands_leave_no_output_file(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    result = runner.invoke(app, ["encode", str(tmp_path / "bad.png"), "-o", str(tmp_path / "out.csv")])
    assert result.exit_code == 1 and not (tmp_path / "out.csv").exists()
    (tmp_path / "bad.csv").write_text("x,y,l\n0,0,0.5\n0,0,0.5\n")
    result = runner.invoke(app, ["decode", str(tmp_path / "bad.csv"), "-o", str(tmp_path / "out.png")])
    assert result.exit_code == 1 and not (tmp_path / "out.png").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("flag", ["--layers", "--hidden", "--steps", "--checkpoint-every", "--log-every"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_non_positive_options_refused(tmp_path, image, flag, value):
    result = runner.invoke(app, ["train", str(image), *NET, flag, value, "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "must be positive" in result.output
    assert not (tmp_path / "r").exists()


def test_two_train_processes_on_one_run(tmp_path, image):
    run = tmp_path / "run"
    first = inr("train", image, "--steps", "100000", "--checkpoint-every", "100000", "--run-dir", run, *NET)
    try:
        deadline = time.time() + 60
        while not (run / "metrics.csv").is_file():
            assert time.time() < deadline and first.poll() is None, first.stderr.read()
            time.sleep(0.1)
        second = inr("train", run, "--resume", "-q")
        assert second.wait(timeout=60) == 1
        message = second.stderr.read()
        assert "another inr train is using this run directory" in message and "Traceback" not in message
        assert first.poll() is None, "the first run must go on"
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert ckpt.load(run).step > 0
