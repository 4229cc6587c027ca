"""Packs in flight, saved: the training state of a pack not yet finished (parameters, moments,
step), written under the set folder when fit-many is interrupted and at the clock interval, so
that the same command continues the pack where it stopped and fits the very networks an
uninterrupted run fits.

A pack's state is a checkpoint of `inr train`'s format (formats/checkpoint.py) for the networks
still training, at shards/NNNNN.pack-K.partial.npz (pack K of shard NNNNN), written atomically and
removed once its shard is written. Its data fingerprint is those networks' images (names and
contents), so a state is taken up only by the very pack it was saved from. With a target PSNR,
the networks that have reached it are kept beside it, in NNNNN.pack-K.finished.npz (names,
parameters, losses, steps), written before the state of the rest: a state that does not match
them is dropped with them.
"""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from inr_cli.core.state import TrainingState
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.network_set import SHARDS
from inr_cli.sets.plan import Plan
from inr_cli.sets.set_folder import SetFolder

PARTIAL = re.compile(r"(\d{5})\.pack-(\d+)\.(partial|finished)\.npz")


def partial_name(shard: int, pack: int, kind: str = "partial") -> str:
    return f"{SHARDS}/{shard:05d}.pack-{pack}.{kind}.npz"


def pack_fingerprint(plan: Plan, names: list[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        digest.update(f"{name}\0{plan.entry(name).sha256}\n".encode())
    return digest.hexdigest()


class PackState:
    """Where pack `pack` of shard `shard` keeps its state in flight (a local folder or a bucket)."""

    def __init__(self, folder: SetFolder, shard: int, pack: int):
        self.folder, self.shard, self.pack = folder, shard, pack
        self.name = partial_name(shard, pack)
        self.saved_step: int | None = None  # the step of the last state written or taken up

    def __str__(self) -> str:
        return self.folder.join(self.name)

    def load(self, plan: Plan, names: list[str]) -> TrainingState | None:
        """The state saved for this very pack (same images, network and step budget), else None; a
        state saved for another pack (the packs of a shard are sized by the device that fits
        them) is not this one's, and is dropped."""
        if not self.folder.exists(self.name):
            return None
        try:
            saved = self._read()
        except InrError:
            saved = None  # damaged: the pack starts again, as if it had never been saved
        if (saved is None or saved.data_fingerprint != pack_fingerprint(plan, names)
                or saved.spec.to_json() != plan.spec.to_json() or saved.total_steps != plan.config.training.steps
                or saved.state.networks != len(names) or saved.step > saved.total_steps):
            self.folder.remove(self.name)
            return None
        self.saved_step = saved.step
        return saved.state

    def load_finished(self, plan: Plan, names: list[str]) -> dict | None:
        """{name: (params, loss, step)} of the pack's networks saved as finished, or None."""
        finished = partial_name(self.shard, self.pack, "finished")
        if not self.folder.exists(finished):
            return None
        try:
            with np.load(io.BytesIO(self.folder.read_bytes(finished)), allow_pickle=False) as data:
                saved = {key: data[key] for key in ("names", "params", "loss", "steps")}
            rows = saved["names"].tolist()
            if not set(rows) <= set(names) or saved["params"].shape != (len(rows), plan.spec.parameter_count()):
                raise ValueError("not this pack's networks")
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            self.remove()  # damaged or another pack's: the pack starts again
            return None
        return {name: (saved["params"][i], float(saved["loss"][i]), int(saved["steps"][i]))
                for i, name in enumerate(rows)}

    def save_finished(self, plan: Plan, result) -> None:
        """The pack's networks that have reached their target (a PackResult's finished rows)."""
        rows = np.flatnonzero(result.finished)
        buffer = io.BytesIO()
        np.savez(buffer, names=np.array([result.names[i] for i in rows]), params=result.params[rows],
                 loss=result.loss[rows], steps=result.steps[rows])
        try:
            with self.folder.writing(partial_name(self.shard, self.pack, "finished")) as handle:
                handle.write(buffer.getvalue())
        except OSError as exc:
            raise InrError(f"cannot write {self} ({exc.strerror or exc})") from None

    def remove(self) -> None:
        for kind in ("partial", "finished"):
            name = partial_name(self.shard, self.pack, kind)
            if self.folder.exists(name):
                self.folder.remove(name)

    def save(self, plan: Plan, names: list[str], state: TrainingState, shape: tuple, channels) -> None:
        """The pack's state (`shape`: its images' height, width and channels), written whole or not at all."""
        checkpoint = ckpt.Checkpoint(spec=plan.spec, config=plan.config, state=state,
                                     total_steps=plan.config.training.steps,
                                     data_fingerprint=pack_fingerprint(plan, names), data_shape=shape,
                                     channels=tuple(channels))
        try:
            if self.folder.local:
                ckpt.save(checkpoint, self.folder.local / self.name)
            else:
                with tempfile.TemporaryDirectory(prefix="inr-pack-") as scratch:
                    local = Path(scratch) / "pack.npz"
                    ckpt.save(checkpoint, local)
                    self.folder.upload(local, self.name)
        except OSError as exc:
            raise InrError(f"cannot write {self} ({exc.strerror or exc})") from None
        self.saved_step = state.step

    def _read(self) -> ckpt.Checkpoint:
        if self.folder.local:
            return ckpt.load(self.folder.local / self.name)
        with tempfile.TemporaryDirectory(prefix="inr-pack-") as scratch:
            local = Path(scratch) / "pack.npz"
            local.write_bytes(self.folder.read_bytes(self.name))
            return ckpt.load(local)


def remove_partials(folder: SetFolder, shards) -> None:
    """The saved packs of `shards` (their shards are written: the packs are in them)."""
    wanted = set(shards)
    for name in folder.files(SHARDS):
        match = PARTIAL.fullmatch(name)
        if match and int(match.group(1)) in wanted:
            folder.remove(f"{SHARDS}/{name}")


def saved_packs(folder: SetFolder) -> list[str]:
    """The names of the packs in flight saved in the folder."""
    return sorted(name for name in folder.files(SHARDS) if PARTIAL.fullmatch(name))

