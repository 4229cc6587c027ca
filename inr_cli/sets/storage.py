"""How a set being fitted is stored, and assembled when every shard is done.

Whoever fits a shard writes its networks straight into their rows of weights.npy.part, then the
shard's file (names and scores) atomically into shards/, so a killed run loses at most the shards
in flight. When every shard is done, weights.npy.part becomes weights.npy, and index.csv and
network.json are written (inr_cli/formats/network_set.py says what the files hold). An output in a
bucket, which cannot be written in place, gets the networks in the shards' files, and the driver
streams them into weights.npy, shard after shard.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.network_set import (DESCRIPTION, FORMAT_VERSION, INDEX, INDEX_COLUMNS, LABEL, SHARDS, WEIGHTS,
                                         WEIGHTS_PART)
from inr_cli.sets.plan import Plan
from inr_cli.sets.set_folder import SetFolder


def shard_name(index: int) -> str:
    return f"{SHARDS}/{index:05d}.npz"


def write_shard(folder: SetFolder, index: int, result: dict, rows: list[int]) -> None:
    """A finished shard. In a local folder its networks go straight to their rows of
    weights.npy.part (synced before the shard file says they are there), and the shard file keeps
    their names and scores; a bucket cannot be written in place, so there the shard file keeps the
    networks too and the driver assembles them."""
    if folder.local:
        write_rows(folder.local / WEIGHTS_PART, rows, result["params"])
        result = {key: value for key, value in result.items() if key != "params"}
    with folder.writing(shard_name(index)) as handle:
        np.savez(handle, **result)


def read_shard(folder: SetFolder, index: int) -> dict:
    with np.load(io.BytesIO(folder.read_bytes(shard_name(index))), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def write_rows(path: Path, rows: list[int], params: np.ndarray) -> None:
    """Networks into their rows of the .npy file `path`, each run of consecutive rows in one write."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise InrError(f"cannot write the networks into {path} ({exc.strerror or exc}): the output folder must be "
                       f"on storage every worker shares") from None
    try:
        shape, data_at = _npy_layout(fd)
        if shape[1] != params.shape[1] or max(rows) >= shape[0]:
            raise InrError(f"{path} holds {shape[0]} networks of {shape[1]} parameters, not this set's")
        _write_runs(fd, data_at, rows, params)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_runs(fd: int, data_at: int, rows, params: np.ndarray) -> None:
    rows, params = np.asarray(rows), np.ascontiguousarray(params, dtype="<f4")
    row_bytes = params.shape[1] * 4
    starts = np.concatenate([[0], np.flatnonzero(np.diff(rows) != 1) + 1, [len(rows)]]).tolist()
    for start, stop in zip(starts[:-1], starts[1:]):
        data, at = memoryview(params[start:stop]).cast("B"), data_at + int(rows[start]) * row_bytes
        while data:
            written = os.pwrite(fd, data, at)
            data, at = data[written:], at + written


def _npy_layout(fd: int) -> tuple[tuple[int, ...], int]:
    """The shape of the float32 .npy file open as `fd`, and where its data starts."""
    header = io.BytesIO(os.pread(fd, 4096, 0))
    try:
        version = np.lib.format.read_magic(header)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(header)
    except ValueError as exc:
        raise InrError(f"not a .npy file ({exc})") from None
    if fortran or dtype != np.dtype("<f4") or len(shape) != 2:
        raise InrError(f"a .npy file of {dtype} {shape}, not float32 networks")
    return shape, header.tell()


def rows_file_ready(out: Path, plan: Plan, pending: list[int], notices: list) -> list[int]:
    """weights.npy.part, where the workers write each network at its row, made ready for them; the
    shards to fit (finished shards whose networks were in a rows file now gone are fitted again)."""
    part, finished = out / WEIGHTS_PART, out / WEIGHTS
    shape = (len(plan.images), plan.spec.parameter_count())
    if part.is_file():
        with open(part, "rb") as handle:
            try:
                if _npy_layout(handle.fileno())[0] == shape:
                    return pending
            except InrError:  # not a rows file of ours: made again below
                pass
    elif finished.is_file():
        if pending:  # a finished set missing shards (removed to fit them again): its rows stay
            os.replace(finished, part)
        return pending
    with atomic_path(part, suffix=".npy") as tmp:
        _new_rows_file(tmp, shape)
    waiting = set(pending)
    lost = [i for i in range(len(plan.shards)) if i not in waiting and "params.npy" not in _shard_members(out, i)]
    for index in lost:
        (out / shard_name(index)).unlink()
    if lost:
        notices.append(f"{len(lost)} finished shards had their networks in a {WEIGHTS_PART} that is gone; "
                       f"they are fitted again")
    return sorted(waiting.union(lost))


def _shard_members(out: Path, index: int) -> list[str]:
    with zipfile.ZipFile(out / shard_name(index)) as archive:
        return archive.namelist()


def assemble(folder: SetFolder, plan: Plan) -> int:
    """weights.npy, index.csv and network.json from the finished shards; returns the bytes per image.
    In a local folder the networks are in their rows already (weights.npy.part, renamed when whole);
    those a shard file holds (in a bucket, or from an older inr) are written at their rows, shard
    after shard, so the memory needed is one shard's whatever the size of the set."""
    count, width = len(plan.images), plan.spec.parameter_count()
    psnr, loss = np.full(count, np.nan), np.full(count, np.nan)
    # Each network's steps: fewer than the budget where it reached the target PSNR (shards written
    # before the target existed trained the whole budget).
    steps = np.full(count, plan.config.training.steps, dtype=np.int64)
    with _rows_file(folder, (count, width)) as fd:
        data_at = _npy_layout(fd)[1]
        for index in range(len(plan.shards)):
            shard = read_shard(folder, index)
            rows = np.array([plan.row_of[name] for name in shard["names"].tolist()])
            psnr[rows], loss[rows] = shard["psnr"], shard["loss"]
            if "steps" in shard:
                steps[rows] = shard["steps"]
            if "params" in shard:
                _write_runs(fd, data_at, rows, shard["params"])
    labelled = plan.labelled
    with folder.writing(INDEX) as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(INDEX_COLUMNS + ((LABEL,) if labelled else ()))
        for i, entry in enumerate(plan.images):
            writer.writerow((entry.name, f"{psnr[i]:.4f}", f"{loss[i]:.8g}", steps[i], entry.seed, entry.width,
                             entry.height) + ((entry.label,) if labelled else ()))
        text.flush()
        text.detach()
    description = {"format_version": FORMAT_VERSION, "spec": json.loads(plan.spec.to_json()),
                   "config": json.loads(configuration.to_json(plan.config)), "channels": list(plan.images[0].channels),
                   "parameters_per_network": plan.spec.parameter_count(), "dtype": "float32"}
    folder.write_bytes(DESCRIPTION, (json.dumps(description, indent=1) + "\n").encode())
    return plan.spec.parameter_count() * 4


@contextmanager
def _rows_file(folder: SetFolder, shape: tuple[int, int]):
    """An open descriptor on the set's rows; weights.npy appears, whole, when the block ends."""
    if folder.local:
        part, finished = folder.local / WEIGHTS_PART, folder.local / WEIGHTS
        rows = part if part.is_file() else finished  # a finished set run again: its rows are in place
        fd = os.open(rows, os.O_RDWR)
        try:
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
        if rows == part:
            os.replace(part, finished)
        return
    with tempfile.TemporaryDirectory(prefix="inr-set-") as scratch:  # a bucket: built here, then uploaded
        local = Path(scratch) / WEIGHTS
        _new_rows_file(local, shape)
        fd = os.open(local, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)
        folder.upload(local, WEIGHTS)


def _new_rows_file(path: Path, shape: tuple[int, int]) -> None:
    """A float32 .npy file of `shape` as np.save writes it (version 1.0), its rows not yet written:
    a sparse file, the rows take room as they are written."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": shape})
        handle.truncate(handle.tell() + shape[0] * shape[1] * 4)
