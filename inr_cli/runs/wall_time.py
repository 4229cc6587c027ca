"""Where a run's wall time went: training (the trainer's own clock), reading the image, pictures
(previews, the final render, comparison and animation), checkpoints, and the rest (setting up the
backend and the trainer). Counted on the loop's thread: what the background writer does while the
steps run costs nothing here, what the loop waits for it does."""

from __future__ import annotations

import time
from contextlib import contextmanager

PHASES = ("reading", "pictures", "checkpoints")
# The run's last line says where the time went when training took less than this share of it.
TRAINING_SHARE = 0.9


class WallTime:
    def __init__(self):
        self.started = time.perf_counter()
        self.spent = dict.fromkeys(PHASES, 0.0)
        self.training = 0.0
        self.total: float | None = None  # set by stop()
        self.waited = 0.0  # seconds waited for the background writer (in spent already)

    @contextmanager
    def phase(self, name: str):
        """Time spent in the block, but for what it waited for the writer (counted by waited)."""
        start, waited = time.perf_counter(), self.waited
        try:
            yield
        finally:
            self.spent[name] += time.perf_counter() - start - (self.waited - waited)

    def writer_waited(self, seconds: dict[str, float]) -> None:
        """The loop waited for the background writer: seconds by the kind of job it was writing."""
        for name, value in seconds.items():
            self.spent[name] = self.spent.get(name, 0.0) + value
            self.waited += value

    def stop(self, training_seconds: float) -> None:
        """The run is over: `training_seconds` of its wall time were training steps."""
        self.training = training_seconds
        self.total = time.perf_counter() - self.started

    def split(self) -> dict[str, float]:
        """Seconds: the whole run, training, each phase, and the rest."""
        total = self.total if self.total is not None else time.perf_counter() - self.started
        rest = max(0.0, total - self.training - sum(self.spent.values()))
        return {"total": total, "training": self.training, **self.spent, "rest": rest}

    def summary(self) -> str | None:
        """'9.1 s in all: reading 1.2 s, ...' when training was under TRAINING_SHARE of the run, else None."""
        split = self.split()
        if split["total"] <= 0 or split["training"] >= TRAINING_SHARE * split["total"]:
            return None
        parts = ", ".join(f"{name} {split[name]:.1f} s" for name in (*PHASES, "rest"))
        return f"{split['total']:.1f} s in all ({parts})"
