"""A .safetensors file that `inr export` (or `inr meta-init`) wrote, read back as untrusted data: one
network (tensors layers.I.weight [out, in]) or a set (the same stacked over the networks, [N, out,
in]), its network description, channels, the size it was trained at and, for a set, the image names
and every index.csv column.

A regular file only; its header's size is bounded before it is read; the description is checked as
every other file's is (network_description.spec_from_dict); of the tensors, only those of the
network are read, each checked for its type and shape from the header first (a tensor the network
does not have is never read, however large); NaN and infinite weights are refused; every field of
the metadata is checked. Every fault is one line naming the file.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError
from inr_cli.extras import require
from inr_cli.formats.input_files import check_regular
from inr_cli.formats.network_description import BadDescription, spec_from_json
from inr_cli.formats.pixel_csv import CHANNEL_SETS
from inr_cli.formats.set_index import INDEX_COLUMNS, LABEL, index_cell, index_row, row_named
from inr_cli.limits import MAX_HEADER_BYTES, MAX_SIDE

LATENTS = "latents"  # a set of latents over one base in one file: [N, D] (formats/modulated.py)
INDEX_METADATA = "index"  # a set's index.csv rows, as JSON [{column: text}]


@dataclass
class Exported:
    spec: NetworkSpec
    channels: tuple[str, ...]
    params: np.ndarray  # [N, P] float32 (N = 1 for one network)
    stacked: bool  # a set: the tensors carry the networks dimension
    names: list[str] = field(default_factory=list)
    index: list[dict] = field(default_factory=list)  # a set's index.csv rows (text cells)
    metadata: dict = field(default_factory=dict)
    width: int = 1  # the size one network was trained at, where the export recorded it
    height: int = 1
    dtype: str = "float32"  # what its tensors are stored in (read back as float32)
    member: int | None = None  # a set read for one image (read_exported's member): its row; params [1, P]


def read_exported(path: Path, member: str | None = None) -> Exported:
    """The file's network or set, checked. `member`, an image of a set: its network alone is read
    (params [1, P], Exported.member its row), the others' never, so that drawing one image of a
    large set costs one network's bytes; of a file holding one network, it is ignored."""
    require("safetensors", "reading safetensors files", "export")
    from safetensors import safe_open

    path = Path(path)
    check_regular(path, expected="a safetensors file")
    _check_header_size(path)
    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = dict(handle.metadata() or {})
            spec = _spec(path, metadata)
            return _read(path, handle, spec, metadata, member)
    except InrError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError, and OS errors
        raise InrError(f"{path}: not a readable safetensors file ({str(exc)[:120]})") from None


def _check_header_size(path: Path) -> None:
    """The header's length (the file's first 8 bytes) within the file and within the limit, before
    the header is read."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            size = handle.seek(0, 2)
    except OSError as exc:
        raise InrError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(head) < 8:
        raise InrError(f"{path}: not a safetensors file (it ends before its header)")
    declared = struct.unpack("<Q", head)[0]
    if declared > MAX_HEADER_BYTES or declared + 8 > size:
        raise InrError(f"{path}: not a readable safetensors file (a header of {declared:,} bytes in a file of "
                       f"{size:,}; at most {MAX_HEADER_BYTES:,})")


def _spec(path: Path, metadata: dict) -> NetworkSpec:
    if "spec" not in metadata:
        raise InrError(f"{path}: no network description in its metadata; not written by inr export")
    try:
        return spec_from_json(metadata["spec"])
    except BadDescription as exc:
        raise InrError(f"{path}: damaged network description, {exc}") from None


def _read(path: Path, handle, spec: NetworkSpec, metadata: dict, member: str | None) -> Exported:
    from inr_cli.formats.export import tensor_views

    wanted = {name: view.shape[1:] for name, view in tensor_views(spec, np.empty((0, spec.parameter_count()),
                                                                                   np.float32)).items()}
    found = set(handle.keys())
    missing = sorted(set(wanted) - found)
    if missing:
        raise InrError(f"{path}: its tensors do not match its network description (no '{missing[0]}')")
    shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in wanted}
    first = shapes["layers.0.weight"]
    stacked = len(first) == len(wanted["layers.0.weight"]) + 1
    holds_set = stacked or LATENTS in found  # networks stacked, or the latents of a set over one base
    if holds_set != ("names" in metadata or INDEX_METADATA in metadata):  # what it says it is, and what it holds
        raise InrError(f"{path}: its metadata names the images of a set, but its tensors hold one network"
                       if not holds_set else f"{path}: a set of networks without their images' names in its metadata: "
                       f"a damaged set export")
    networks = first[0] if stacked else 1
    for name, shape in wanted.items():
        expected = (networks, *shape) if stacked else shape
        dtype = handle.get_slice(name).get_dtype()
        if shapes[name] != expected or dtype not in ("F32", "F16"):  # F16: stored in float16, read as float32
            raise InrError(f"{path}: its tensors do not match its network description ('{name}' is {dtype} "
                           f"{list(shapes[name])}, expected F32 or F16 {list(expected)})")
    if networks < 1:
        raise InrError(f"{path}: a set of no networks")
    names, index, row = [], [], None
    if stacked:
        names, index = set_rows(path, metadata, networks)
        if member is not None:
            row = row_named(index, member)
    # Every tensor is in the file at its size (safetensors checks the offsets): the parameters
    # take no more memory than the file holds.
    params = np.empty((networks if row is None else 1, spec.parameter_count()), dtype=np.float32)
    for name, view in tensor_views(spec, params).items():
        if row is not None:
            view[...] = handle.get_slice(name)[row:row + 1]
        else:
            tensor = handle.get_tensor(name)
            view[...] = tensor if stacked else tensor[None]
    if not np.isfinite(params).all():
        bad = int(np.argmin(np.isfinite(params).all(axis=1))) if row is None else row
        which = f"network {bad}'s" if stacked else "its"
        raise InrError(f"{path}: {which} weights hold NaN or infinite values; nothing can be drawn from them, nor "
                       f"fitted from them")
    channels = tuple(metadata.get("channels", "").split(","))
    if channels not in CHANNEL_SETS or len(channels) != spec.out_features:
        raise InrError(f"{path}: its channels '{metadata.get('channels', '')[:40]}' are not l, r,g,b or r,g,b,a for "
                       f"a network of {spec.out_features} outputs")
    stored = "float16" if any(handle.get_slice(name).get_dtype() == "F16" for name in wanted) else "float32"
    exported = Exported(spec, channels, params, stacked, names, index, metadata=metadata, dtype=stored, member=row)
    if not stacked:
        exported.width, exported.height = (_side(path, metadata, key) for key in ("width", "height"))
    return exported


def _side(path: Path, metadata: dict, key: str) -> int:
    """The width or height one network was trained at (1 where the export did not record it)."""
    text = metadata.get(key, "1")
    if not (text.isascii() and text.isdigit() and len(text) <= 8 and 1 <= int(text) <= MAX_SIDE):
        raise InrError(f"{path}: its {key} '{text[:40]}' is not a number of pixels (1 to {MAX_SIDE})")
    return int(text)


def set_rows(path: Path, metadata: dict, networks: int) -> tuple[list[str], list[dict]]:
    """A set's image names and index rows: one per network, each a name (text without NUL, each
    once) and text cells."""
    def document(key: str):
        try:
            return json.loads(metadata[key])
        except (ValueError, RecursionError):
            raise InrError(f"{path}: its '{key}' metadata is not JSON") from None

    names = document("names") if "names" in metadata else None
    index = document(INDEX_METADATA) if INDEX_METADATA in metadata else None
    if names is None and index is None:
        raise InrError(f"{path}: a set of {networks} networks without their images' names")
    if index is None:
        index = [{"name": name} for name in names] if isinstance(names, list) else names
    if not (isinstance(index, list) and len(index) == networks and all(
            isinstance(row, dict) and isinstance(row.get("name"), str)
            and all(isinstance(key, str) and isinstance(value, str) for key, value in row.items()) for row in index)):
        raise InrError(f"{path}: its index is not {networks} rows of text, one per network, each with a name")
    listed = [row["name"] for row in index]
    if names is not None and names != listed:
        raise InrError(f"{path}: its 'names' and its index do not name the same images")
    if any(not name or "\0" in name for name in listed) or len(set(listed)) != len(listed):
        raise InrError(f"{path}: its image names are not each given once, as text without NUL")
    columns = list(index[0])
    if columns != ["name"]:  # a file of an older inr holds the names alone
        if tuple(columns) not in (INDEX_COLUMNS, INDEX_COLUMNS + (LABEL,)):
            raise InrError(f"{path}: its index's columns are not {','.join(INDEX_COLUMNS)}[,{LABEL}]")
        where = f"{path} (index)"  # checked as index.csv's rows are, the names and labels as that file holds them
        cells = [[index_cell(row.get(c, "")) if c in ("name", LABEL) else row.get(c, "") for c in columns]
                 for row in index]
        index = [index_row(where, i + 1, columns, row) for i, row in enumerate(cells)]
    return listed, index
