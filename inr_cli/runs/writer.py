"""Files a run writes while it goes on training: previews and checkpoints, encoded and written on a
thread of their own, so that the steps never wait for a PNG encoder or a disk.

The loop hands the writer a finished snapshot (a preview's pixels, a checkpoint's arrays), never
anything the next steps change. The queue is short: a slow disk holds the loop back (a submission
waits) rather than piling snapshots up in memory, so at most one job waits while another is written.
A checkpoint handed over while an older one still waits takes its place (the older one would be
out of date before it was written), so checkpoints due faster than the disk writes them never hold
the loop. Jobs run one at a time, in order: the last checkpoint handed over is the last one
written, and each is written atomically (formats/atomic.py), so a crash leaves the one before it
whole.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from inr_cli.console import notice

WAITING_JOBS = 1  # besides the one being written: two snapshots in memory at most


@dataclass
class Job:
    write: Callable[[], None]
    kind: str  # "pictures", "checkpoints": what the loop's waits for it are counted as
    warn_only: bool  # a failure is said, and the run goes on (a preview)
    latest_only: bool  # a newer job of its kind takes its place while it waits (a checkpoint)
    state: str = "waiting"  # then "writing", then "done" (written, failed, skipped, replaced or withdrawn)


class BackgroundWriter:
    """One writing thread and its bounded queue. A job that fails stops the ones after it; its
    error is raised on the loop's thread at the next submit, check or drain. A job submitted with
    `warn_only` (a preview) says its failure as a notice instead, and the run goes on.

    A context: leaving it waits for every job handed over (on an error and on a signal too, so the
    last checkpoint is always complete), then ends the thread."""

    def __init__(self, waiting: int = WAITING_JOBS, on_wait: Callable[[dict[str, float]], None] | None = None):
        """on_wait({kind: seconds}): each time the loop waited for the writer, how long, shared among
        the kinds of job written meanwhile."""
        self.limit = waiting
        self.waiting: deque[Job] = deque()
        self.unfinished = 0  # jobs handed over and not yet written (or skipped)
        self.closing = False
        self.changed = threading.Condition()
        self.failure: BaseException | None = None
        self.warnings: list[str] = []
        self.busy: dict[str, float] = {}  # seconds the thread spent on each kind of job
        self.last_kind = ""
        self.on_wait = on_wait
        self.thread = threading.Thread(target=self._work, name="inr-writer", daemon=True)
        self.thread.start()

    def submit(self, write: Callable[[], None], kind: str, warn_only: bool = False, latest_only: bool = False) -> Job:
        """Queue a job of a kind; waits while the queue is full (the disk is behind), unless it is
        `latest_only` and an older job of its kind waits, which it then replaces. Returns the job,
        whose `state` says how far it got."""
        self.check()
        self.last_kind = kind
        job = Job(write, kind, warn_only, latest_only)

        def put() -> None:
            with self.changed:
                if latest_only:
                    for i, waiting in enumerate(self.waiting):
                        if waiting.kind == kind and waiting.latest_only:
                            waiting.state = "done"
                            self.waiting[i] = job
                            return
                while len(self.waiting) >= self.limit:
                    self.changed.wait()
                self.waiting.append(job)
                self.unfinished += 1
                self.changed.notify_all()

        self._waiting(put)
        return job

    def withdraw(self, job: Job) -> bool:
        """Take back a job that still waits (its snapshot's memory is then the caller's again);
        False when the thread has begun it or it is done."""
        with self.changed:
            if job.state != "waiting" or job not in self.waiting:
                return False
            self.waiting.remove(job)
            job.state = "done"
            self.unfinished -= 1
            self.changed.notify_all()
            return True

    def full(self) -> bool:
        with self.changed:
            return len(self.waiting) >= self.limit

    def check(self) -> None:
        """Say the warnings so far, and raise a failed job's error here, on the loop's thread."""
        with self.changed:
            warnings, self.warnings = self.warnings, []
            failure, self.failure = self.failure, None
        for message in warnings:
            notice(message)
        if failure is not None:
            raise failure

    def drain(self) -> None:
        """Wait until every job handed over is written, then check."""
        self._waiting(self._written)
        self.check()

    def close(self) -> None:
        """Wait for every job, then end the thread (the writer takes no more jobs)."""
        self._written()
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        self.thread.join()

    def __enter__(self) -> "BackgroundWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _written(self) -> None:
        with self.changed:
            while self.unfinished:
                self.changed.wait()

    def _waiting(self, wait: Callable[[], None]) -> None:
        """wait(), its seconds counted against the kinds of job the thread worked on meanwhile."""
        start = time.perf_counter()
        with self.changed:
            before = dict(self.busy)
        try:
            wait()
        finally:
            waited = time.perf_counter() - start
            with self.changed:
                grown = {kind: seconds - before.get(kind, 0.0) for kind, seconds in self.busy.items()}
            worked = sum(grown.values())
            if self.on_wait is not None and (worked > 0 or self.last_kind):
                self.on_wait({kind: waited * seconds / worked for kind, seconds in grown.items()} if worked > 0
                             else {self.last_kind: waited})

    def _work(self) -> None:
        while True:
            with self.changed:
                while not self.waiting and not self.closing:
                    self.changed.wait()
                if not self.waiting:
                    return
                job = self.waiting.popleft()
                job.state = "writing"
                failed = self.failure is not None
                self.changed.notify_all()  # room in the queue
            start = time.perf_counter()
            error = None
            if not failed:  # after a failure the error is said once; what came after it waits for nothing
                try:
                    job.write()
                except Exception as exc:
                    error = exc
            with self.changed:
                if error is not None and job.warn_only:
                    self.warnings.append(str(error))
                elif error is not None:
                    self.failure = error
                self.busy[job.kind] = self.busy.get(job.kind, 0.0) + time.perf_counter() - start
                job.state = "done"
                self.unfinished -= 1
                self.changed.notify_all()
