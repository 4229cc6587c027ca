"""Where `inr fit-many` writes a set: a local folder (for a cluster, on storage every worker mounts
at the same path) or a URL that fsspec can write (s3://, gs://, ...: the 'remote' extra).

Every file appears whole or not at all: written under a temporary name beside it, then renamed
(in a bucket the rename is a server-side copy, and an upload is whole anyway).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.input_files import read_local, url_to_fs
from inr_cli.sets.inputs import is_url


class SetFolder:
    def __init__(self, where: str | Path, rows_in_place: bool | None = None):
        self.where = str(where)
        self.local: Path | None = None if is_url(self.where) else Path(self.where)
        # Whether each network is written straight into its row of weights.npy.part (a local folder
        # where that is safe, output_kind.py), rather than whole in its shard's file.
        self.rows_in_place = self.local is not None if rows_in_place is None else rows_in_place and bool(self.local)
        # Whether weights.npy can only be written front to back here (a FUSE mount of an object
        # store), so that the driver builds it elsewhere and copies it, rather than writing its rows.
        self.front_to_back = False
        self._fs = None

    def __str__(self) -> str:
        return self.where

    def join(self, name: str) -> str:
        return str(self.local / name) if self.local else f"{self.where.rstrip('/')}/{name}"

    @property
    def fs(self):
        """The fsspec file system of a URL, and the folder's path in it, each read bounded by the
        network deadline (input_files.network_timeout)."""
        if self._fs is None:
            self._fs = url_to_fs(self.where, file=False)
        return self._fs

    def _remote(self, name: str) -> str:
        fs, root = self.fs
        return f"{root.rstrip('/')}/{name}"

    def exists(self, name: str) -> bool:
        if self.local:
            return (self.local / name).is_file()
        fs, _ = self.fs
        return fs.isfile(self._remote(name))

    def read_bytes(self, name: str, limit: int | None = None) -> bytes:
        """The file `name` whole: a regular file only, and, with `limit`, of at most that many bytes."""
        if self.local:
            return read_local(self.local / name, limit, f"a set's {name}")
        try:
            fs, _ = self.fs
            with fs.open(self._remote(name), "rb") as handle:
                data = handle.read() if limit is None else handle.read(limit + 1)
        except OSError as exc:
            raise InrError(f"{self.join(name)}: cannot read ({exc.strerror or exc})") from None
        if limit is not None and len(data) > limit:
            raise InrError(f"{self.join(name)}: larger than {limit:,} bytes, more than a set's {name} could be")
        return data

    @contextmanager
    def opened(self, name: str):
        """A binary handle on the file `name` for reading parts of it (a bucket's file is read by range)."""
        try:
            if self.local:
                handle = open(self.local / name, "rb")
            else:
                fs, _ = self.fs
                handle = fs.open(self._remote(name), "rb")
        except OSError as exc:
            raise InrError(f"{self.join(name)}: cannot read ({exc.strerror or exc})") from None
        with handle:
            yield handle

    def listing(self) -> list[str]:
        """The names in the folder itself (empty when it does not exist); a file there is refused."""
        if self.local:
            if self.local.exists() and not self.local.is_dir():
                raise InrError(f"{self.local} is a file; -o names the folder of the set")
            try:
                return os.listdir(self.local) if self.local.is_dir() else []
            except OSError as exc:
                raise InrError(f"{self.local}: cannot list ({exc.strerror or exc})") from None
        fs, root = self.fs
        try:
            return [info["name"].rstrip("/").rsplit("/", 1)[-1] for info in fs.ls(root, detail=True)]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise InrError(f"{self.where}: cannot list ({exc})") from None

    @contextmanager
    def writing(self, name: str):
        """A binary handle on the file `name`, which appears only once the block ends without error."""
        try:
            if self.local:
                with atomic_path(self.local / name) as tmp, open(tmp, "wb") as handle:
                    yield handle
                return
            fs, _ = self.fs
            tmp = self._remote(_temporary(name))
            try:
                with fs.open(tmp, "wb") as handle:
                    yield handle
                fs.mv(tmp, self._remote(name))
            except BaseException:
                if fs.exists(tmp):
                    fs.rm_file(tmp)
                raise
        except OSError as exc:
            raise InrError(f"cannot write {self.join(name)} ({exc.strerror or exc})") from None

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.writing(name) as handle:
            handle.write(data)

    def upload(self, local_file: Path, name: str) -> None:
        """A local file copied to the URL's `name`, whole or not at all (a file too big to hold)."""
        fs, _ = self.fs
        tmp = self._remote(_temporary(name))
        try:
            fs.put_file(str(local_file), tmp)
            fs.mv(tmp, self._remote(name))
        except OSError as exc:
            raise InrError(f"cannot write {self.join(name)} ({exc.strerror or exc})") from None

    def make_folder(self, name: str) -> None:
        try:
            if self.local:
                (self.local / name).mkdir(parents=True, exist_ok=True)
            else:
                fs, _ = self.fs
                fs.makedirs(self._remote(name), exist_ok=True)
        except OSError as exc:
            raise InrError(f"cannot write to {self.where} ({exc.strerror or exc})") from None

    def files(self, folder: str) -> list[str]:
        """The names of the files in `folder` (empty when it does not exist)."""
        if self.local:
            path = self.local / folder
            return [entry.name for entry in os.scandir(path) if entry.is_file()] if path.is_dir() else []
        fs, _ = self.fs
        try:
            return [info["name"].rstrip("/").rsplit("/", 1)[-1]
                    for info in fs.ls(self._remote(folder), detail=True) if info.get("type") == "file"]
        except FileNotFoundError:
            return []

    def remove(self, name: str) -> None:
        if self.local:
            (self.local / name).unlink(missing_ok=True)
        else:
            fs, _ = self.fs
            try:
                fs.rm_file(self._remote(name))
            except FileNotFoundError:
                pass

    def cannot_write(self, folder: str) -> str | None:
        """Why this process cannot write into `folder` (None when it can): a worker asks it of the
        output before it is sent work. A file is written and removed there, as the permission bits
        do not tell (a read-only mount, a root squashed by NFS, a FUSE mount that refuses writes)."""
        name = f"{folder}/{_temporary('write-check')}"
        try:
            self.write_bytes(name, b"")
            self.remove(name)
        except InrError as exc:
            return str(exc)
        return None


def _temporary(name: str) -> str:
    """A hidden name beside `name`, unique to this writer, ending in .tmp (leftovers are removed)."""
    folder, _, base = name.rpartition("/")
    return f"{folder + '/' if folder else ''}.{base}.{uuid.uuid4().hex[:12]}.tmp"
