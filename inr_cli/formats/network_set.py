"""The output folder of `inr fit-many`, a data set of networks: its file names, and reading it back.

    OUT/weights.npy     [N, P] float32, row i is the network of index.csv row i (np.load reads it)
    OUT/index.csv       name, psnr, loss, steps, seed, width, height (and label, for class folders);
                        a name or label a spreadsheet would run as a formula behind an apostrophe
    OUT/network.json    the network's description (NetworkSpec) and the configuration that fitted it
    OUT/fit-many.json   the plan, and OUT/shards/ the finished shards, for resuming
    OUT/weights.npy.part    weights.npy while it is being fitted (each network written at its row)

Everything read back is checked against its format and against the other files before anything is
sized from it: a damaged set is one line naming the file (and the line of index.csv).

index.csv's columns and its rows, written and read back: formats/set_index.py.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from inr_cli.core.modulations import ModulatedBase
from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError
from inr_cli.formats.input_files import check_regular
from inr_cli.formats.network_description import BadDescription, spec_from_dict
from inr_cli.formats.pixel_csv import CHANNEL_SETS
from inr_cli.formats.set_index import INDEX_COLUMNS, LABEL, index_row, row_named
from inr_cli.formats.versions import refuse_newer
from inr_cli.limits import MAX_TEXT_BYTES

PLAN = "fit-many.json"
SHARDS = "shards"
WEIGHTS = "weights.npy"
WEIGHTS_PART = "weights.npy.part"  # the rows as they are written, renamed weights.npy when all are there
INDEX = "index.csv"
DESCRIPTION = "network.json"
FORMAT_VERSION = 2  # of network.json and fit-many.json, written together: the newest this inr reads
BASE = "base.safetensors"  # a set of latents: the base they are drawn through (formats/modulated.py)


def format_version(latent: int) -> int:
    """The format a set's network.json and plan are written in: 1 for whole networks (read by every
    inr), 2 for latents over a base (an inr before them refuses it by name rather than misreads it)."""
    return 2 if latent else 1


@dataclass
class NetworkSet:
    """A finished `inr fit-many` folder, read back."""

    spec: NetworkSpec
    channels: tuple[str, ...]
    index: list[dict]
    weights: np.ndarray  # [N, P] float32, memory-mapped; a set of latents: [N, D], each row a latent
    base: ModulatedBase | None = None  # what a set of latents is drawn through; None: whole networks

    @property
    def latent(self) -> int:
        """The numbers of each latent; 0 in a set of whole networks."""
        return 0 if self.base is None else self.base.latent

    def stored(self, rows) -> np.ndarray:
        """[len(rows), P] float32 (a set of latents: [len(rows), D]): these rows of weights.npy, read and
        checked: a row holding NaN or infinite values is a damaged set, named by its image."""
        weights = np.asarray(self.weights[rows], dtype=np.float32)
        finite = np.isfinite(weights).all(axis=1)
        if not finite.all():
            raise self._damaged(int(np.arange(len(self.index))[rows][int(np.argmin(finite))]))
        return weights

    def networks(self, rows) -> np.ndarray:
        """[len(rows), P] float32: the networks of these rows, a latent's drawn through the base."""
        weights = self.stored(rows)
        return weights if self.base is None else self.base.expand(weights)

    def _damaged(self, row: int) -> InrError:
        return InrError(f"{self.index[row]['name']}: its network's parameters in {WEIGHTS} hold NaN or infinite "
                        f"values (a damaged set); there is nothing to draw")

    @cached_property
    def _rows(self) -> dict[str, int]:  # a set of a million is looked up by name, one network at a time
        return {row["name"]: i for i, row in enumerate(self.index)}

    def row(self, name: str) -> int:
        if name in self._rows:
            return self._rows[name]
        return row_named(self.index, name)

    def params(self, row: int) -> np.ndarray:
        """The [P] parameters of the network of index row `row`, read from the file and checked."""
        params = np.array(self.weights[row])
        if not np.isfinite(params).all():
            raise self._damaged(row)
        return params if self.base is None else self.base.expand(params[None])[0]


def is_network_set(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / PLAN).is_file()


def refuse_set_without_plan(folder: Path) -> None:
    """A folder that holds a set's files but no plan (fit-many.json deleted, or not a file) is no
    set to the commands (is_network_set) and would be read as a run, "no checkpoint.npz": it is said
    as what it is instead. Called only where a folder holds no run's checkpoint."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    if os.path.lexists(folder / PLAN):
        set_file(folder / PLAN, SET_FILE_ROLES[PLAN], PLAN_DAMAGED)
        return
    found = [name for name in (WEIGHTS, WEIGHTS_PART, INDEX, DESCRIPTION) if os.path.lexists(folder / name)]
    if found:  # without its plan, fit-many starts over (--force)
        raise InrError(f"{folder}: an inr fit-many set (it holds {', '.join(found)}) whose {PLAN} is missing, so "
                       f"it cannot be read: put {PLAN} back, or fit the set again (the same inr fit-many command "
                       f"with --force)")


# A spreadsheet runs a cell that begins so as a formula (CSV injection): index.csv holds such a name
# or label behind an apostrophe, as spreadsheets expect, and so does one that would otherwise read
# back as escaped, so that every name reads back exactly.
MAX_DESCRIPTION_BYTES = MAX_TEXT_BYTES  # network.json: the spec and the configuration, a few kilobytes


def load_network_set(out: Path) -> NetworkSet:
    """The set in `out`, every file checked against its format and against the others (the
    description against the weights' shape, the index against their rows) before anything is
    sized from them; a damaged set is one line naming the file."""
    out = Path(out)
    if not set_file(out / WEIGHTS, SET_FILE_ROLES[WEIGHTS]):
        raise InrError(f"{out}: the set is not finished (no {WEIGHTS}); run the same inr fit-many command again")
    spec, channels, latent = read_description(out / DESCRIPTION)
    base = _set_base(out, spec, channels, latent) if latent else None
    rows = _weights_rows(out / WEIGHTS, latent or spec.parameter_count())
    index = read_index(out / INDEX, rows)
    try:
        weights = np.load(out / WEIGHTS, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InrError(f"{out / WEIGHTS}: damaged set, cannot be mapped ({exc})") from None
    return NetworkSet(spec, channels, index, weights, base)


def _set_base(out: Path, spec: NetworkSpec, channels: tuple[str, ...], latent: int) -> ModulatedBase:
    """The base a set of latents holds, checked against its description."""
    from inr_cli.formats.modulated import read_base

    if not set_file(out / BASE, SET_FILE_ROLES[BASE]):
        raise InrError(f"{out / BASE}: missing; a set of latents is drawn through its base (the file fit-many copied "
                       f"there from --init)")
    base, base_channels, _ = read_base(out / BASE)
    if base.spec != spec or base.latent != latent or base_channels != channels:
        raise InrError(f"{out / BASE}: not the base of this set ({DESCRIPTION} describes another network, latent "
                       f"size or channels)")
    return base


def read_description(path: Path) -> tuple[NetworkSpec, tuple[str, ...], int]:
    """network.json: the network's description, the channels it draws and the numbers of each latent
    in a set of latents (0: whole networks)."""
    document = _json_file(path)
    version = document.get("format_version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InrError(f"{path}: damaged set description, 'format_version' is not an integer")
    refuse_newer(path, version, FORMAT_VERSION)
    try:
        spec = spec_from_dict(document.get("spec"))
    except BadDescription as exc:
        raise InrError(f"{path}: damaged set description, {exc}") from None
    channels = document.get("channels")
    if not isinstance(channels, list) or tuple(channels) not in CHANNEL_SETS or len(channels) != spec.out_features:
        raise InrError(f"{path}: damaged set description, 'channels' is not l, r,g,b or r,g,b,a for a network of "
                       f"{spec.out_features} outputs")
    declared = document.get("parameters_per_network", spec.parameter_count())
    if declared != spec.parameter_count() or document.get("dtype", "float32") != "float32":
        raise InrError(f"{path}: damaged set description, it declares {declared!r} {document.get('dtype')!r} "
                       f"parameters, the network has {spec.parameter_count()} float32")
    latent = document.get("latent", 0)  # absent in a set of whole networks
    if type(latent) is not int or latent < 0 or (latent and document.get("base") != BASE):
        raise InrError(f"{path}: damaged set description, 'latent' {latent!r} is not the numbers per image of a set "
                       f"over {BASE}")
    return spec, tuple(channels), latent


DAMAGED = "the set is damaged: remove it, then run the same inr fit-many command again"
# Without its plan a folder is no set to go on with: the plan put back, or the set fitted afresh.
PLAN_DAMAGED = ("the set is damaged: remove it and put the plan back, or remove it and fit the set again (the same "
                "inr fit-many command with --force)")


def set_file(path: Path, what: str, damaged: str = DAMAGED) -> bool:
    """Whether a set's file is there (False: nothing by its name, not even a link). Anything else in
    its place, a folder, a FIFO, a device or a link to nothing, is a damaged set, said as what it is
    (input_files.check_regular's words) before anything opens it: a FIFO would wait for a writer."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False  # another OSError (a name too long) is the system's line, as for any file
    if not os.path.exists(path):
        try:
            points = os.readlink(path)
        except OSError:
            points = "?"
        raise InrError(f"{path}: a link to nothing ({points} does not exist), expected {what}; {damaged}")
    try:
        check_regular(path, expected=what)
    except InrError as exc:
        raise InrError(f"{exc}; {damaged}") from None
    return True


# What each of a set's files is, in the line that refuses something else in its place (set_file's).
SET_FILE_ROLES = {PLAN: "the set's plan", WEIGHTS: "the set's weights", WEIGHTS_PART: "the set's weights as they "
                  "are fitted", INDEX: f"a set's {INDEX}", DESCRIPTION: f"a set's {DESCRIPTION}",
                  BASE: "the base of a set of latents"}


def refuse_damaged_files(folder: Path) -> None:
    """A set fit-many goes on with (run again, or grown by --add) where one of its files is not a file
    (a folder, a FIFO, a device or a link to nothing in its place): one line naming it, as the
    readers say it (set_file), before anything is opened, renamed or fitted; --force too, which
    replaces the set's files, never these. Removing it and running the same command again finishes
    the set (fitting again what only a lost weights file held), except for the plan: without it the
    folder is no set to go on with. A folder named as the base is refused once the plan says the set
    is one of latents."""
    if not folder.is_dir() or not os.path.lexists(folder / PLAN):
        return
    set_file(folder / PLAN, SET_FILE_ROLES[PLAN], PLAN_DAMAGED)
    for name in (WEIGHTS, WEIGHTS_PART, INDEX, DESCRIPTION):
        set_file(folder / name, SET_FILE_ROLES[name])
    if os.path.lexists(folder / BASE) and _of_latents(folder):  # nothing of a set of whole networks
        set_file(folder / BASE, SET_FILE_ROLES[BASE])


def _of_latents(folder: Path) -> bool:
    """Whether the set's description says it is one of latents (False where it cannot be read: its
    reader says why, later)."""
    try:
        return bool(read_description(folder / DESCRIPTION)[2])
    except InrError:
        return False


def _refuse_special(path: Path) -> None:
    """Opening a FIFO waits for a writer and a device never ends: only regular files are read."""
    set_file(path, SET_FILE_ROLES.get(path.name, f"a set's {path.name}"))


def _json_file(path: Path) -> dict:
    _refuse_special(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DESCRIPTION_BYTES + 1)
    except OSError as exc:
        raise InrError(f"{path}: cannot read the set's description ({exc.strerror or exc})") from None
    if len(data) > MAX_DESCRIPTION_BYTES:
        raise InrError(f"{path}: damaged set description, larger than {MAX_DESCRIPTION_BYTES:,} bytes")
    try:
        document = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise InrError(f"{path}: damaged set description, not JSON ({str(exc)[:80]})") from None
    if not isinstance(document, dict):
        raise InrError(f"{path}: damaged set description, a JSON {type(document).__name__}, not an object")
    return document


def _weights_rows(path: Path, parameters: int) -> int:
    """The networks in weights.npy, from its header, checked against the description and the file's
    size: a truncated or empty file is a damaged set."""
    _refuse_special(path)
    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = reader(handle)
            data_at, size = handle.tell(), os.fstat(handle.fileno()).st_size
    except (OSError, ValueError, EOFError) as exc:
        raise InrError(f"{path}: damaged set, not a .npy file ({str(exc)[:80]})") from None
    if fortran or dtype != np.float32 or len(shape) != 2 or shape[1] != parameters:
        raise InrError(f"{path}: damaged set, weights of shape {shape} {dtype}, expected (N, {parameters}) float32 "
                       f"as network.json says")
    if shape[0] == 0:
        raise InrError(f"{path}: damaged set, it holds no networks")
    if size < data_at + shape[0] * parameters * 4:
        raise InrError(f"{path}: damaged set, truncated: {shape[0]} networks need {shape[0] * parameters * 4:,} "
                       f"bytes, the file holds {max(size - data_at, 0):,}")
    return shape[0]


def read_index(path: Path, rows: int) -> list[dict]:
    """index.csv, one dict of its text per network (names and labels as they were given), checked
    row by row: its width, every number, one row per network of weights.npy."""
    _refuse_special(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            try:
                header = next(reader, None)
                if header is None or tuple(header) not in (INDEX_COLUMNS, INDEX_COLUMNS + (LABEL,)):
                    raise InrError(f"{path}, line 1: the columns are not {','.join(INDEX_COLUMNS)}[,{LABEL}]")
                index, seen = [], {}
                for cells in reader:
                    if len(index) == rows:
                        raise InrError(f"{path}, line {reader.line_num}: more rows than the {rows} networks of "
                                       f"{WEIGHTS}")
                    row = index_row(path, reader.line_num, header, cells)
                    if row["name"] in seen:
                        raise InrError(f"{path}, line {reader.line_num}: '{row['name'][:60]}' is also on line "
                                       f"{seen[row['name']]}")
                    seen[row["name"]] = reader.line_num
                    index.append(row)
            except (csv.Error, UnicodeDecodeError) as exc:
                raise InrError(f"{path}, line {reader.line_num + 1}: not a readable CSV row ({exc})") from None
    except OSError as exc:
        raise InrError(f"{path}: cannot read the set's index ({exc.strerror or exc})") from None
    if len(index) != rows:
        raise InrError(f"{path}: damaged set, {len(index)} rows for the {rows} networks of {WEIGHTS}")
    return index


def refuse_newer_set(where: object, document) -> None:
    """InrError when a set's network.json or plan (`document`, parsed) was written by a newer inr."""
    version = document.get("format_version", 1) if isinstance(document, dict) else 1
    if isinstance(version, int):
        refuse_newer(where, version, FORMAT_VERSION)
