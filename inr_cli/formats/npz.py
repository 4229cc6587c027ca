"""An .npz archive read as untrusted data: the archive's directory and every member's .npy header
are checked before a byte of any array is read, so that a small file cannot make inr allocate much
(a zip bomb: deflated zeros declaring gigabytes), a member that lies about its size is refused, and
a pickled member is never loaded. A member can also be read a chunk at a time (Stored), never whole.

np.savez stores its members uncompressed; a file that inr wrote is never refused here. `write` writes
the bytes np.savez writes, its arrays read a chunk at a time (from a device, through the backend):
a large table is never held whole on the host to be saved.
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.errors import InrError
from inr_cli.limits import MAX_COMPRESSION_RATIO, RATIO_EXEMPT_BYTES

METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # np.savez and np.savez_compressed
# What opening or decompressing a damaged archive can raise, besides our own InrError.
READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError)


class Archive(Mapping):
    """The members of an .npz archive by name (without .npy): their headers checked on opening,
    each array read when asked for. `where` names the file in errors, `what` its kind."""

    def __init__(self, source: Path | bytes, where: str, what: str = "archive"):
        self.where, self.what = where, what
        size = len(source) if isinstance(source, (bytes, bytearray)) else Path(source).stat().st_size
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
        except READ_ERRORS as exc:
            raise self.damaged(f"not a readable .npz archive ({exc})") from None
        try:
            self._infos = self._checked_directory(size)
            self.headers = {name: self._header(info) for name, info in self._infos.items()}
        except BaseException:
            self._zip.close()
            raise

    def damaged(self, why: str) -> InrError:
        return InrError(f"{self.where}: damaged {self.what}, {why}")

    def _checked_directory(self, size: int) -> dict[str, zipfile.ZipInfo]:
        infos, declared, held = {}, 0, 0
        for info in self._zip.infolist():
            name = info.filename
            if not name.endswith(".npy") or name[:-4] in infos:
                raise self.damaged(f"member '{name}' is not one array of an .npz archive")
            if info.flag_bits & 0x1:
                raise self.damaged(f"member '{name}' is encrypted")
            if info.compress_type not in METHODS:
                raise self.damaged(f"member '{name}' is compressed in a way np.savez never writes")
            if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
                raise self.damaged(f"member '{name}' declares {info.file_size} bytes but holds {info.compress_size}")
            declared += info.file_size
            held += info.compress_size
            infos[name[:-4]] = info
        if held > size:
            raise self.damaged(f"its members declare {held} bytes, more than the file's {size} (truncated?)")
        if declared > max(RATIO_EXEMPT_BYTES, MAX_COMPRESSION_RATIO * held):
            raise InrError(f"{self.where}: refused, its arrays would take {declared:,} bytes from {held:,} compressed "
                           f"(more than {MAX_COMPRESSION_RATIO}x: a zip bomb, not a file inr wrote)")
        return infos

    def _header(self, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
        """The member's shape and dtype, from its .npy header, checked against the bytes it declares."""
        name = info.filename[:-4]
        try:
            with self._zip.open(info) as handle:
                version = np.lib.format.read_magic(handle)
                reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = reader(handle)
                header_bytes = handle.tell()
        except READ_ERRORS as exc:
            raise self.damaged(f"array '{name}' has no readable .npy header ({exc})") from None
        if dtype.hasobject:
            raise InrError(f"{self.where}: holds pickled objects, refused (a {self.what} is data only; "
                           f"'{name}' is not)")
        data_bytes = math.prod(shape) * dtype.itemsize
        if header_bytes + data_bytes != info.file_size:
            raise self.damaged(f"array '{name}' of shape {tuple(shape)} {dtype} should take {data_bytes:,} bytes, "
                               f"the archive declares {info.file_size - header_bytes:,}")
        return tuple(shape), dtype

    def stored(self, name: str) -> "Stored":
        """The member, left in the file to be read a chunk at a time (its header already checked)."""
        if name not in self._infos:
            raise KeyError(name)
        return Stored(self, name, *self.headers[name])

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._infos:
            raise KeyError(name)
        try:
            with self._zip.open(self._infos[name]) as handle:
                return np.lib.format.read_array(handle, allow_pickle=False)
        except READ_ERRORS as exc:
            raise self.damaged(f"array '{name}' cannot be read ({exc})") from None

    def __contains__(self, name) -> bool:  # from the directory: Mapping's own would read the array
        return name in self._infos

    def __iter__(self):
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


CHUNK_BYTES = 1 << 26  # what passes through the host at a time when a large array is read or written


@dataclass
class Stored:
    """An array of an open Archive, read when asked, a chunk at a time: its values flat, in order."""

    archive: Archive
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def chunks(self, chunk_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first element, its values) of consecutive chunks of the array flattened in C order."""
        archive, per_chunk = self.archive, max(1, (chunk_bytes or CHUNK_BYTES) // self.dtype.itemsize)
        try:
            with archive._zip.open(archive._infos[self.name]) as handle:
                version = np.lib.format.read_magic(handle)
                reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                _, fortran_order, _ = reader(handle)
                if fortran_order and len(self.shape) > 1:
                    raise archive.damaged(f"array '{self.name}' is stored in Fortran order, which inr never writes")
                for first in range(0, self.size, per_chunk):
                    count = min(per_chunk, self.size - first)
                    data = handle.read(count * self.dtype.itemsize)
                    if len(data) != count * self.dtype.itemsize:
                        raise EOFError("the member ends early")
                    yield first, np.frombuffer(data, dtype=self.dtype)
        except READ_ERRORS as exc:
            raise archive.damaged(f"array '{self.name}' cannot be read ({exc})") from None


@dataclass
class Streamed:
    """A member to write from an array wherever it lives (a backend's device): `read` gives a host
    copy of a part of it (Backend.host_reader), `dtype` what the file stores."""

    array: object  # C-contiguous, with .shape and .reshape
    read: Callable
    dtype: np.dtype


def write(handle, members: dict[str, np.ndarray | Streamed], chunk_bytes: int | None = None) -> None:
    """The archive np.savez(handle, **members) writes, byte for byte (ZIP_STORED, zip64 members,
    .npy headers of format 1.0 as np.save makes them), a Streamed member's values read and written
    a chunk at a time."""
    with zipfile.ZipFile(handle, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in members.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                if not isinstance(value, Streamed):
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
                    continue
                dtype, shape = np.dtype(value.dtype), tuple(value.array.shape)
                np.lib.format.write_array_header_1_0(member, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                              "fortran_order": False, "shape": shape})
                flat = value.array.reshape(-1)
                per_chunk = max(1, (chunk_bytes or CHUNK_BYTES) // np.dtype(value.array.dtype).itemsize)
                for first in range(0, math.prod(shape), per_chunk):
                    chunk = value.read(flat[first:first + per_chunk])
                    member.write(np.ascontiguousarray(chunk, dtype=dtype).tobytes())
