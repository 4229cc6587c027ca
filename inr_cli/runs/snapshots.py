"""Where a run's checkpoints wait for the background writer: copies of the trainer's parameters and
moments made on its device at the step (device to device, nothing through the host), read back a
chunk at a time as the writer writes the file (formats/npz.write), so that the host never holds a
checkpoint whole.

A snapshot is three copies of the model, in memory made once and used again. A small model has two
(one being written, one waiting, as the writer's queue allows), so a checkpoint is copied whenever
it falls due. A large model has one: a checkpoint falling due while the last one is being written is
copied at the first step after that write ends (the loop never waits for the disk, and holds no
second snapshot), and one falling due while the last one still waits (behind a preview) takes its
place, in the same memory. The run's last checkpoint, written once the steps are over, needs no copy:
the writer reads the trainer's own arrays.

On a backend whose arrays are the host's (the CPU), a large model's snapshot would be three more
copies of it in host memory, beside the four the training holds: it has none (count 0), and its
checkpoints are written from the trainer's own arrays while the steps wait for the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from inr_cli.core.state import TrainingState, snapshot_count
from inr_cli.runs.writer import BackgroundWriter, Job


@dataclass
class Snapshot:
    params: object  # [N, P] float32 arrays on the trainer's backend
    moment1: object
    moment2: object
    job: Job | None = field(default=None)  # the writer's job that holds it; None or done: free

    @property
    def free(self) -> bool:
        return self.job is None or self.job.state == "done"


class Snapshots:
    def __init__(self, backend, shape: tuple[int, int], writer: BackgroundWriter, count: int | None = None):
        self.backend, self.shape, self.writer = backend, shape, writer
        self.count = snapshot_count(math.prod(shape), backend.in_host_memory) if count is None else count
        self.held: list[Snapshot] = []

    def available(self) -> Snapshot | None:
        """Memory to copy a checkpoint into now: a free snapshot (made at the first use), or one whose
        job still waits, taken back from the writer; None while every one is being written."""
        for snapshot in self.held:
            if snapshot.free:
                return snapshot
        if len(self.held) < self.count:
            b = self.backend
            self.held.append(Snapshot(b.empty(self.shape), b.empty(self.shape), b.empty(self.shape)))
            return self.held[-1]
        for snapshot in self.held:
            if self.writer.withdraw(snapshot.job):
                return snapshot
        return None

    def ready(self) -> bool:
        """Whether a checkpoint can be copied now (see available), or written in place."""
        return (self.count == 0 or any(snapshot.free for snapshot in self.held) or len(self.held) < self.count
                or any(snapshot.job.state == "waiting" for snapshot in self.held))

    def take(self, trainer, write: Callable[[TrainingState, Callable], None]) -> bool:
        """Copy the trainer's state now and hand write(state, read) to the writer (read: the backend's
        host_reader for the copy); False, with nothing copied, while no snapshot is available. With no
        snapshot (count 0), the trainer's own arrays written, this waiting until they are."""
        if self.count == 0:
            state = trainer.device_state()
            read = self.backend.host_reader()
            self.writer.submit(lambda: write(state, read), "checkpoints", latest_only=True)
            self.writer.drain()  # the next step changes the arrays the file is read from
            return True
        snapshot = self.available()
        if snapshot is None:
            return False
        arrays = (snapshot.params, snapshot.moment1, snapshot.moment2)
        trainer.copy_state(*arrays)
        state = trainer.device_state(arrays)
        read = self.backend.host_reader()
        snapshot.job = self.writer.submit(lambda: write(state, read), "checkpoints", latest_only=True)
        return True

    def release(self) -> None:
        """Let the snapshots' memory go (a job still writing one keeps its arrays until it is done)."""
        self.held = []
