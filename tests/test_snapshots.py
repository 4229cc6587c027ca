"""A run's checkpoints held in memory no longer than needed: snapshots copied on the trainer's device
and streamed to the file a chunk at a time (the file np.savez would write), one snapshot for a large
model (a checkpoint due while it is written is taken at the first step after), the moments read only
where a run resumes, straight into the trainer."""

from __future__ import annotations

import io
import threading
import types

import numpy as np
import pytest

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.core import state as state_module
from inr_cli.core.training_loop import Signals, run_steps
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats import npz
from inr_cli.runs.snapshots import Snapshots
from inr_cli.runs.training import write_checkpoint
from inr_cli.runs.writer import BackgroundWriter
from tests.test_wall_time import tiny_trainer


def checkpoint_of(trainer, spec, state) -> ckpt.Checkpoint:
    return ckpt.Checkpoint(spec=spec, config=trainer.config, state=state, total_steps=trainer.total_steps,
                           data_fingerprint="f", data_shape=(6, 7, 3), channels=("r", "g", "b"))


def test_a_checkpoint_is_the_file_np_savez_writes_read_a_chunk_at_a_time(tmp_path, monkeypatch):
    """The streamed writer's bytes are np.savez's for the same arrays (float32 with moments, and a
    finished run's float16), and the state's arrays pass through the host a chunk at a time."""
    trainer, spec = tiny_trainer()
    for _ in range(3):
        trainer.step()
    trainer.read_loss()
    monkeypatch.setattr(npz, "CHUNK_BYTES", 64)
    read_sizes = []

    def reader(array):
        read_sizes.append(np.asarray(array).nbytes)
        return np.asarray(array)

    for dtype in ("float32", "float16"):
        path = tmp_path / dtype / ckpt.FILENAME
        path.parent.mkdir()
        ckpt.save(checkpoint_of(trainer, spec, trainer.state()), path, dtype, reader)
        with np.load(path) as saved:
            assert saved["params"].dtype == dtype and ("moment1" in saved.files) == (dtype == "float32")
            again = io.BytesIO()
            np.savez(again, **{name: saved[name] for name in saved.files})
        assert path.read_bytes() == again.getvalue()
    assert max(read_sizes) <= 64 and sum(read_sizes) == 4 * trainer.params.nbytes  # 3 arrays, then the float16's


def test_one_snapshot_a_checkpoint_due_while_it_is_written_is_taken_at_the_first_step_after(tmp_path):
    """A large model's one snapshot: the checkpoint of step 2 falls due while step 0's is still being
    written, so it is owed (the loop does not wait, no second snapshot is made) and taken at step 3,
    the first step after that write ends; the file then holds step 3, bit for bit its state."""
    trainer, spec = tiny_trainer(steps=4)
    release, started, written = threading.Event(), threading.Event(), []

    def write(state, read):
        if state.step == 0:
            started.set()
            release.wait()
        written.append(state.step)
        if state.step == 3:
            write_checkpoint(checkpoint_of(trainer, spec, state), tmp_path, "float32", read)

    with BackgroundWriter() as writer:
        snapshots = Snapshots(trainer.backend, trainer.params.shape, writer, count=1)
        assert snapshots.take(trainer, write)
        started.wait()
        at_three = {}

        def on_step(step):
            if step == 3:
                release.set()
                writer.drain()
                at_three.update(params=trainer.params.copy(), moment2=trainer.moment2.copy())

        def checkpoint(step):
            return snapshots.take(trainer, write)

        run_steps(trainer, Signals(), 1, on_step=on_step, checkpoint=checkpoint, checkpoint_every=2,
                  can_checkpoint=snapshots.ready)
    assert written == [0, 3] and len(snapshots.held) == 1
    saved = ckpt.load(tmp_path)
    assert saved.step == 3 and np.array_equal(saved.state.params, at_three["params"])
    assert np.array_equal(saved.state.moment2, at_three["moment2"])


def test_a_checkpoint_still_waiting_behind_a_preview_is_replaced_in_the_same_snapshot(tmp_path):
    trainer, spec = tiny_trainer()
    release, started, written = threading.Event(), threading.Event(), []
    with BackgroundWriter() as writer:
        writer.submit(lambda: (started.set(), release.wait()), "pictures")
        started.wait()
        snapshots = Snapshots(trainer.backend, trainer.params.shape, writer, count=1)
        assert snapshots.take(trainer, lambda state, read: written.append(state.step))
        trainer.step()
        assert snapshots.ready()
        assert snapshots.take(trainer, lambda state, read: written.append((state.step, read(state.params).copy())))
        assert len(snapshots.held) == 1
        release.set()
    assert len(written) == 1 and written[0][0] == 1 and np.array_equal(written[0][1], trainer.params)


def test_a_small_model_keeps_two_snapshots_a_large_one_one_none_in_host_memory(monkeypatch):
    writer = BackgroundWriter()
    on_a_device = types.SimpleNamespace(in_host_memory=False)
    assert Snapshots(CpuBackend(), (1, 1000), writer).count == 2
    monkeypatch.setattr(state_module, "SMALL_SNAPSHOT_BYTES", 3 * 4 * 1000 - 1)
    assert Snapshots(on_a_device, (1, 1000), writer).count == 1
    assert Snapshots(CpuBackend(), (1, 1000), writer).count == 0
    writer.close()


def test_a_large_model_in_host_memory_writes_its_checkpoints_from_the_trainers_arrays(tmp_path):
    """No snapshot (three more copies of a large model in host memory): each checkpoint due is
    written from the trainer's own arrays, the steps waiting until the file is whole; the file then
    holds its step bit for bit, nothing copied."""
    trainer, spec = tiny_trainer(steps=5)
    written, at_step = [], {}

    def write(state, read):
        assert state.params is trainer.params  # the trainer's arrays, no copy
        written.append(state.step)
        write_checkpoint(checkpoint_of(trainer, spec, state), tmp_path / str(state.step), "float32", read)

    def on_step(step):
        assert written == [due for due in (2, 4) if due < step]  # each written before the next step
        at_step[step] = (trainer.params.copy(), trainer.moment1.copy())

    with BackgroundWriter() as writer:
        snapshots = Snapshots(trainer.backend, trainer.params.shape, writer, count=0)
        for step in (2, 4):
            (tmp_path / str(step)).mkdir()
        run_steps(trainer, Signals(), 1, on_step=on_step, checkpoint=lambda step: snapshots.take(trainer, write),
                  checkpoint_every=2, can_checkpoint=snapshots.ready)
    assert written == [2, 4] and not snapshots.held
    for step in (2, 4):
        saved = ckpt.load(tmp_path / str(step))
        assert saved.step == step and np.array_equal(saved.state.params, at_step[step][0])
        assert np.array_equal(saved.state.moment1, at_step[step][1])


def trainer_on(backend, steps: int = 8):
    """tiny_trainer's network, image and start on another backend."""
    from inr_cli.core.pixels import PixelImage
    from inr_cli.core.state import TrainingState
    from inr_cli.core.trainer import Trainer

    trainer, spec = tiny_trainer(steps)
    image = PixelImage(np.random.default_rng(0).random((6, 7, 3), dtype=np.float32), ("r", "g", "b"))
    return Trainer(backend, spec, trainer.config, [image], TrainingState.fresh(spec, [0]), [0]), spec


def test_the_kernel_backend_snapshots_and_streams_the_checkpoint_a_run_writes(emulated, tmp_path, monkeypatch):
    """The same code on the kernels' backend (emulated on the CPU): the snapshot copied at the step
    and streamed through its host_reader is the file of the state read back whole."""
    trainer, spec = trainer_on(emulated)
    monkeypatch.setattr(npz, "CHUNK_BYTES", 256)
    (tmp_path / "a").mkdir()
    with BackgroundWriter() as writer:
        snapshots = Snapshots(emulated, trainer.params.shape, writer, count=1)
        trainer.step()
        trainer.read_loss()
        whole = trainer.state()
        assert snapshots.take(trainer, lambda state, read: write_checkpoint(checkpoint_of(trainer, spec, state),
                                                                             tmp_path / "a", "float32", read))
        trainer.step()  # while the writer writes: the snapshot does not see it
    (tmp_path / "b").mkdir()
    write_checkpoint(checkpoint_of(trainer, spec, whole), tmp_path / "b")
    assert (tmp_path / "a" / ckpt.FILENAME).read_bytes() == (tmp_path / "b" / ckpt.FILENAME).read_bytes()


@pytest.mark.parametrize("moments", [True, False])
def test_render_reads_the_parameters_alone_and_a_resume_reads_into_the_trainer(tmp_path, moments, monkeypatch):
    """inr render, view and inr_cli.load read no moment; a resume's arrays stay in the file until the
    trainer reads them into place, a chunk at a time, to the same bits."""
    trainer, spec = tiny_trainer()
    trainer.step()
    trainer.read_loss()
    write_checkpoint(checkpoint_of(trainer, spec, trainer.state()), tmp_path)
    read = []
    real = npz.Archive.__getitem__
    monkeypatch.setattr(npz.Archive, "__getitem__", lambda self, name: read.append(name) or real(self, name))
    saved = ckpt.load(tmp_path, moments=moments, deferred=moments)
    if moments:
        from inr_cli.core.pixels import PixelImage
        from inr_cli.core.trainer import Trainer

        assert not {"params", "moment1", "moment2"} & set(read)
        monkeypatch.setattr(npz, "CHUNK_BYTES", 128)
        image = PixelImage(np.zeros((6, 7, 3), dtype=np.float32), ("r", "g", "b"))
        resumed = Trainer(CpuBackend(), spec, trainer.config, [image], saved.state, [0])
        for name in ("params", "moment1", "moment2"):
            assert np.array_equal(getattr(resumed, name), getattr(trainer, name)), name
    else:
        assert "params" in read and not {"moment1", "moment2"} & set(read)
        assert saved.state.moment1 is None and np.array_equal(saved.params, trainer.params[0])
