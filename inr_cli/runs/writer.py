"""Files a run writes while it goes on training: previews and checkpoints, encoded and written on a
thread of their own, so that the steps never wait for a PNG encoder or a disk.

The loop hands the writer a finished snapshot (a preview's pixels, a checkpoint's arrays), never
anything the next steps change. The queue is short: a slow disk holds the loop back (a submission
waits) rather than piling snapshots up in memory, so at most one job waits while another is written.
Jobs run one at a time, in order: the last checkpoint handed over is the last one written, and each
is written atomically (formats/atomic.py), so a crash leaves the one before it whole.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from inr_cli.console import notice

WAITING_JOBS = 1  # besides the one being written: two snapshots in memory at most


class BackgroundWriter:
    """One writing thread and its bounded queue. A job that fails stops the ones after it; its
    error is raised on the loop's thread at the next submit, check or drain. A job submitted with
    `warn_only` (a preview) says its failure as a notice instead, and the run goes on.

    A context: leaving it waits for every job handed over (on an error and on a signal too, so the
    last checkpoint is always complete), then ends the thread."""

    def __init__(self, waiting: int = WAITING_JOBS, on_wait: Callable[[dict[str, float]], None] | None = None):
        """on_wait({kind: seconds}): each time the loop waited for the writer, how long, shared among
        the kinds of job written meanwhile."""
        self.jobs: queue.Queue = queue.Queue(maxsize=waiting)
        self.failure: BaseException | None = None
        self.warnings: list[str] = []
        self.lock = threading.Lock()
        self.busy: dict[str, float] = {}  # seconds the thread spent on each kind of job
        self.last_kind = ""
        self.on_wait = on_wait
        self.thread = threading.Thread(target=self._work, name="inr-writer", daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[], None], kind: str, warn_only: bool = False) -> None:
        """Queue a job of a kind ("pictures", "checkpoints"); waits while the queue is full (the disk
        is behind)."""
        self.check()
        self.last_kind = kind
        self._waiting(lambda: self.jobs.put((job, kind, warn_only)))

    def check(self) -> None:
        """Say the warnings so far, and raise a failed job's error here, on the loop's thread."""
        with self.lock:
            warnings, self.warnings = self.warnings, []
            failure, self.failure = self.failure, None
        for message in warnings:
            notice(message)
        if failure is not None:
            raise failure

    def drain(self) -> None:
        """Wait until every job handed over is written, then check."""
        self._waiting(self.jobs.join)
        self.check()

    def _waiting(self, wait: Callable[[], None]) -> None:
        """wait(), its seconds counted against the kinds of job the thread worked on meanwhile."""
        start = time.perf_counter()
        with self.lock:
            before = dict(self.busy)
        try:
            wait()
        finally:
            waited = time.perf_counter() - start
            with self.lock:
                grown = {kind: seconds - before.get(kind, 0.0) for kind, seconds in self.busy.items()}
            worked = sum(grown.values())
            if self.on_wait is not None and (worked > 0 or self.last_kind):
                self.on_wait({kind: waited * seconds / worked for kind, seconds in grown.items()} if worked > 0
                             else {self.last_kind: waited})

    def close(self) -> None:
        """Wait for every job, then end the thread (the writer takes no more jobs)."""
        self.jobs.join()
        self.jobs.put(None)
        self.thread.join()

    def __enter__(self) -> "BackgroundWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _work(self) -> None:
        while True:
            item = self.jobs.get()
            try:
                if item is None:
                    return
                job, kind, warn_only = item
                with self.lock:
                    failed = self.failure is not None
                if failed:  # the error is said once; what came after it waits for nothing
                    continue
                start = time.perf_counter()
                try:
                    job()
                except Exception as exc:
                    with self.lock:
                        if warn_only:
                            self.warnings.append(str(exc))
                        else:
                            self.failure = exc
                with self.lock:
                    self.busy[kind] = self.busy.get(kind, 0.0) + time.perf_counter() - start
            finally:
                self.jobs.task_done()
