"""How a set being fitted is stored, and assembled when every shard is done.

Whoever fits a shard writes its networks straight into their rows of weights.npy.part, then the
shard's file (names and scores) atomically into shards/, so a killed run loses at most the shards
in flight. When every shard is done, weights.npy.part becomes weights.npy, and index.csv and
network.json are written (inr_cli/formats/network_set.py says what the files hold). An output in a
bucket, which cannot be written in place, gets the networks in the shards' files, and assemble
streams them into weights.npy, shard after shard (on a node of the cluster, cluster.OnRay.assemble,
or in the driver); so does a local folder on storage where rows written in place by several writers
are not safe (output_kind.py: SetFolder.rows_in_place).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
import zipfile
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.network_set import (
    BASE,
    DESCRIPTION,
    INDEX,
    PLAN,
    SHARDS,
    WEIGHTS,
    WEIGHTS_PART,
    format_version,
)
from inr_cli.formats.set_index import INDEX_COLUMNS, LABEL, index_cell
from inr_cli.sets.partial import PARTIAL
from inr_cli.sets.plan import Plan
from inr_cli.sets.set_folder import SetFolder

# The files of a set (and its folder of shards): what --force replaces, and all it replaces.
SET_FILES = (PLAN, WEIGHTS, WEIGHTS_PART, INDEX, DESCRIPTION, BASE)
SHARD_FILE = re.compile(r"\d{5,}\.npz|\..*\.tmp")  # a shard, or a write killed before its rename
SHARD_ARRAYS = {"names.npy", "psnr.npy", "loss.npy"}  # and steps.npy, and params.npy where it holds the networks
NPY_HEADER_ROOM = 4096  # a member's bytes beyond its data: the .npy header that np.save writes


class DamagedShard(Exception):
    """A shard file that is not what its shard of the plan needs; the message says why."""


def shard_name(index: int) -> str:
    return f"{SHARDS}/{index:05d}.npz"


def write_shard(folder: SetFolder, index: int, result: dict, rows: list[int]) -> None:
    """A finished shard. In a local folder its networks go straight to their rows of
    weights.npy.part (synced before the shard file says they are there), and the shard file keeps
    their names and scores; a bucket cannot be written in place, nor can storage where several
    writers' rows are not safe, so there the shard file keeps the networks too and the driver
    assembles them."""
    if folder.rows_in_place:
        write_rows(folder.local / WEIGHTS_PART, rows, result["params"])
        result = {key: value for key, value in result.items() if key != "params"}
    with folder.writing(shard_name(index)) as handle:
        np.savez(handle, **result)


def check_shard(folder: SetFolder, index: int, plan: Plan) -> bool:
    """Whether the file of shard `index` holds its networks (else they are in the rows file); a file
    that is not this shard's (its arrays, their types and shapes, the plan's names) is DamagedShard.
    Only the names and scores are read, each member's size checked first; of the networks, only the
    header."""
    names = plan.shards[index]
    count, width = len(names), plan.row_size
    sizes = {"names.npy": count * 4 * max(map(len, names)), "psnr.npy": count * 8, "loss.npy": count * 8,
             "steps.npy": count * 8, "params.npy": count * width * 4}
    try:
        with folder.opened(shard_name(index)) as handle, zipfile.ZipFile(handle) as archive:
            members = {info.filename: info for info in archive.infolist()}
            if not SHARD_ARRAYS <= members.keys() <= sizes.keys():
                raise DamagedShard(f"it holds {', '.join(sorted(members))[:80]}, not {', '.join(sorted(sizes))}")
            for member, info in members.items():
                if info.file_size > sizes[member] + NPY_HEADER_ROOM:
                    raise DamagedShard(f"its {member} holds {info.file_size:,} bytes, more than {count} images need")
            arrays = {}
            for member in SHARD_ARRAYS | ({"steps.npy"} & members.keys()):
                with archive.open(member) as data:
                    arrays[member] = np.lib.format.read_array(data, allow_pickle=False)
            if "params.npy" in members:
                with archive.open("params.npy") as data:
                    _check_params_header(data, members["params.npy"].file_size, (count, width))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError,
            RuntimeError) as exc:
        raise DamagedShard(str(exc)[:120] or type(exc).__name__) from None
    found = arrays["names.npy"]
    if found.dtype.kind != "U" or found.shape != (count,) or sorted(found.tolist()) != sorted(names):
        raise DamagedShard(f"its names are not the {count} of shard {index} in the plan")
    for member in ("psnr.npy", "loss.npy"):
        if arrays[member].dtype.kind != "f" or arrays[member].shape != (count,):
            raise DamagedShard(f"its {member} is {arrays[member].dtype} {arrays[member].shape}, not {count} numbers")
    steps = arrays.get("steps.npy")  # each network's steps: fewer than the budget where it reached its target
    if steps is not None and (steps.dtype.kind not in "iu" or steps.shape != (count,) or steps.min() < 0
                              or steps.max() > plan.config.training.steps):
        raise DamagedShard(f"its steps.npy is not {count} step counts of at most {plan.config.training.steps}")
    return "params.npy" in members


def _check_params_header(data, size: int, shape: tuple[int, int]) -> None:
    """The .npy member `data` of `size` bytes is float32 networks of `shape`, whole."""
    version = np.lib.format.read_magic(data)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    found, fortran, dtype = read_header(data)
    if fortran or dtype != np.dtype("<f4") or found != shape:
        raise DamagedShard(f"its networks are {dtype} {found}, not float32 {shape}")
    if size != data.tell() + shape[0] * shape[1] * 4:
        raise DamagedShard(f"its networks are {size:,} bytes with their header, not float32 {shape}")


def read_shard(folder: SetFolder, index: int, networks: bool = True) -> dict:
    """Shard `index`'s arrays (without its networks' params, not `networks`)."""
    with np.load(io.BytesIO(folder.read_bytes(shard_name(index))), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files if networks or name != "params"}


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


def rows_file_problem(path: Path, shape: tuple[int, int]) -> str | None:
    """Why the .npy file `path` is not whole float32 rows of `shape` (None when it is)."""
    try:
        with open(path, "rb") as handle:
            found, data_at = _npy_layout(handle.fileno())
            size = os.fstat(handle.fileno()).st_size
    except InrError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if found != shape:
        return f"{found[0]} networks of {found[1]} parameters, not {shape[0]} of {shape[1]}"
    if size < data_at + shape[0] * shape[1] * 4:
        return f"truncated: {size - data_at:,} bytes of rows, not {shape[0] * shape[1] * 4:,}"
    return None


def rows_file_ready(out: Path, plan: Plan, pending: list[int], with_networks: set[int], notices: list,
                    in_place: bool = True) -> list[int]:
    """weights.npy.part, where the workers write each network at its row, made ready for them; the
    shards to fit. A finished shard whose networks were in a rows file now gone or damaged is fitted
    again, unless its own file holds them (with_networks). Not `in_place` (whole shards), no rows
    file is made: one is kept only where finished shards' networks are in it alone, and the driver
    writes the new shards' networks into it at the end. Called once every check has passed: it
    renames and removes the set's files."""
    part, finished = out / WEIGHTS_PART, out / WEIGHTS
    shape = (len(plan.images), plan.row_size)
    waiting = set(pending)
    lost = [i for i in range(len(plan.shards)) if i not in waiting and i not in with_networks]  # rows only in a file
    damaged = None
    if part.is_file():
        if rows_file_problem(part, shape) is None:
            return pending
    elif finished.is_file():
        damaged = rows_file_problem(finished, shape)
        if damaged is None:
            # A finished set missing shards (removed to fit them again): its rows stay, unless the
            # shards' files hold them all (whole shards: the assembly makes weights.npy anew).
            if (in_place and pending) or (not in_place and lost):
                os.replace(finished, part)
            elif pending:
                finished.unlink()
            return pending
    if in_place:
        with atomic_path(part, suffix=".npy") as tmp:
            _new_rows_file(tmp, shape)
    else:
        part.unlink(missing_ok=True)  # damaged
    for index in lost:
        (out / shard_name(index)).unlink()
    if damaged is not None and not lost:
        finished.unlink()
        notices.append(f"{finished} is damaged ({damaged}); it is made again from the shards' files")
    elif damaged is not None:
        finished.unlink()
        notices.append(f"{finished} is damaged ({damaged}): {len(lost)} finished shards had their networks in it; "
                       f"they are fitted again")
    elif lost:
        notices.append(f"{len(lost)} finished shards had their networks only in the set's weights file ({WEIGHTS} "
                       f"or {WEIGHTS_PART}), which is gone; they are fitted again")
    return sorted(waiting.union(lost))


def clear_set(folder: SetFolder) -> None:
    """The set's own files removed, so that a new set starts there (--force); nothing else in the
    folder is touched."""
    for name in SET_FILES:
        folder.remove(name)
    for name in folder.files(SHARDS):
        if SHARD_FILE.fullmatch(name) or PARTIAL.fullmatch(name):  # PARTIAL: a pack saved in flight
            folder.remove(f"{SHARDS}/{name}")


def assemble(folder: SetFolder, plan: Plan, networks: bool = True) -> int:
    """weights.npy, index.csv and network.json from the finished shards; returns the bytes per image.
    In a local folder the networks are in their rows already (weights.npy.part, renamed when whole);
    those a shard file holds (in a bucket, or from an older inr) are written at their rows, shard
    after shard, so the memory needed is one shard's whatever the size of the set. Not `networks`
    (a finished set run again, its weights.npy in place), only index.csv and network.json."""
    count, width = len(plan.images), plan.row_size
    psnr, loss = np.full(count, np.nan), np.full(count, np.nan)
    # Each network's steps: fewer than the budget where it reached the target PSNR (shards written
    # before the target existed trained the whole budget).
    steps = np.full(count, plan.config.training.steps, dtype=np.int64)
    with _rows_file(folder, (count, width)) if networks else nullcontext() as fd:
        data_at = _npy_layout(fd)[1] if networks else 0
        for index in range(len(plan.shards)):
            shard = read_shard(folder, index, networks)
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
            writer.writerow((index_cell(entry.name), f"{psnr[i]:.4f}", f"{loss[i]:.8g}", steps[i], entry.seed,
                             entry.width, entry.height) + ((index_cell(entry.label),) if labelled else ()))
        text.flush()
        text.detach()
    description = {"format_version": format_version(plan.latent), "spec": json.loads(plan.spec.to_json()),
                   "config": json.loads(configuration.to_json(plan.config)), "channels": list(plan.images[0].channels),
                   "parameters_per_network": plan.spec.parameter_count(), "dtype": "float32"}
    if plan.latent:  # each row a latent, drawn through the base beside it
        description.update(latent=plan.latent, base=BASE)
    folder.write_bytes(DESCRIPTION, (json.dumps(description, indent=1) + "\n").encode())
    return plan.row_size * 4


@contextmanager
def _rows_file(folder: SetFolder, shape: tuple[int, int]):
    """An open descriptor on the set's rows; weights.npy appears, whole, when the block ends."""
    part = folder.local / WEIGHTS_PART if folder.local else None
    finished = folder.local / WEIGHTS if folder.local else None
    if folder.local and not folder.front_to_back and (part.is_file() or folder.rows_in_place and finished.is_file()):
        # Rows in place (a finished set run again: in weights.npy), or, with whole shards, finished
        # shards' rows that only a rows file holds (rows_file_ready): the driver alone writes now.
        rows = part if part.is_file() else finished
        with _opened(rows) as fd:
            yield fd
            os.fsync(fd)
        if rows == part:
            os.replace(part, finished)
        return
    if folder.local and not folder.front_to_back:  # whole shards: the driver alone writes the rows
        with atomic_path(finished, suffix=".npy") as tmp:
            _new_rows_file(tmp, shape)
            with _opened(tmp) as fd:
                yield fd
        return
    # A bucket, or a FUSE mount (which cannot take writes at rows): built here, from the rows file
    # of finished shards where the mount holds one, then copied there front to back.
    with tempfile.TemporaryDirectory(prefix="inr-set-") as scratch:
        local = Path(scratch) / WEIGHTS
        from_part = bool(folder.local) and part.is_file()
        if from_part:
            _copy(part, local, finished)
        else:
            _new_rows_file(local, shape)
        with _opened(local) as fd:
            yield fd
        if folder.local:
            with atomic_path(finished, suffix=".npy") as tmp:
                _copy(local, tmp, finished)
            if from_part:
                part.unlink()
        else:
            folder.upload(local, WEIGHTS)


@contextmanager
def _opened(path: Path):
    """A read-write descriptor on `path`, closed when the block ends."""
    fd = os.open(path, os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


def _copy(source: Path, target: Path, finished: Path) -> None:
    try:
        shutil.copyfile(source, target)
    except OSError as exc:
        raise InrError(f"cannot write {finished} ({exc.strerror or exc})") from None


def _new_rows_file(path: Path, shape: tuple[int, int]) -> None:
    """A float32 .npy file of `shape` as np.save writes it (version 1.0), its rows not yet written:
    a sparse file, the rows take room as they are written."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": shape})
        handle.truncate(handle.tell() + shape[0] * shape[1] * 4)
