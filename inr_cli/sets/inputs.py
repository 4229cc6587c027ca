"""What `inr fit-many` fits: the inputs listed (never decoded) by the driver, read and decoded where
the work runs. A worker that cannot reach them is sent their files' bytes by the driver, which
still decodes nothing.

An input is a folder, searched recursively (hidden files and folders left out), a list file (one
path or URL per line; a relative path is relative to the list), or a folder URL that fsspec can
list (s3://, gs://, file://, ...; the 'remote' extra of inr). An image's name is its path inside
the folder (the line itself for a list file); when the images of a folder are in subfolders, the
first folder level is their label. Listing costs a directory read and no decode, so the driver
of a million-image set only lists and plans.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from inr_cli.config import Config
from inr_cli.core.pixels import PixelImage, fit_longer_side
from inr_cli.errors import InrError
from inr_cli.formats import images as image_files
from inr_cli.formats import input_files
from inr_cli.formats.data import load_training_data
from inr_cli.limits import MAX_LIST_BYTES

LIST_SUFFIXES = (".txt", ".lst", ".list")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Listed(NamedTuple):  # one call to make (a frozen dataclass sets each field through object.__setattr__)
    name: str       # in index.csv, and what each image's seed is made from
    location: str   # a local path or a URL, where a worker reads it
    size: int       # the file's bytes: a rerun compares the listing, it does not read the files
    label: str


def is_url(text: str) -> bool:
    return input_files.is_url(text)


def fsspec_module():
    return input_files.fsspec_module()


def list_inputs(source: str) -> list[Listed]:
    """Every image of the input, sorted by name; a labelled list when the folder has class folders."""
    if is_url(source):
        listed = _list_url_folder(source)
    elif Path(source).is_dir():
        listed = _list_folder(Path(source))
    elif Path(source).is_file() and Path(source).suffix.lower() in LIST_SUFFIXES:
        listed = _list_file(Path(source))
    elif Path(source).is_file():
        raise InrError(f"{source}: not a folder of images nor a list of them (a list file ends in "
                       f"{', '.join(LIST_SUFFIXES)}: one path or URL per line)")
    elif os.path.lexists(source):  # a FIFO, a device, a dangling or looping link
        input_files.check_regular(source, expected="a folder or a list of images")
        raise InrError(f"{source}: not a folder of images nor a list of them")
    else:
        raise InrError(f"{source}: no such folder or list of images")
    if not listed:
        raise InrError(f"{source}: no images to fit")
    return sorted(listed, key=lambda entry: entry.name)


def _labelled(rows: list[tuple[str, str, int]]) -> list[Listed]:
    """(relative name, location, bytes): the first folder level is the label when every image is in one."""
    labelled = rows and all("/" in name for name, _, _ in rows)
    return [Listed(name, location, size, name.split("/", 1)[0] if labelled else "") for name, location, size in rows]


def _list_folder(folder: Path) -> list[Listed]:
    """Linked folders are followed; one that leads back to a folder it is in is refused. What is
    neither a folder nor a regular file (a FIFO, a device, a dangling link) is left out."""
    rows, stack = [], [(folder, "", frozenset())]
    while stack:  # os.scandir: the entries' kinds come with the directory read, one stat per file
        directory, prefix, above = stack.pop()
        try:
            here = os.stat(directory)
            entries = list(os.scandir(directory))
        except OSError as exc:
            raise InrError(f"{directory}: cannot list ({exc.strerror or exc})") from None
        if (here.st_dev, here.st_ino) in above:
            raise InrError(f"{directory}: a symbolic link loop (it leads back to a folder it is in)")
        above = above | {(here.st_dev, here.st_ino)}
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    stack.append((Path(entry.path), f"{prefix}{entry.name}/", above))
                elif entry.is_file():
                    rows.append((prefix + entry.name, entry.path, entry.stat().st_size))
            except OSError as exc:  # a link to itself: ELOOP
                raise InrError(f"{entry.path}: cannot follow ({exc.strerror or exc})") from None
    return _labelled(rows)


def _list_url_folder(url: str) -> list[Listed]:
    fs, root = input_files.url_to_fs(url, file=False)
    failures: list[Exception] = []  # fsspec's walk leaves out what it could not list, the root too
    try:
        found = fs.find(root, detail=True, on_error=failures.append)
        if not found and failures:
            raise failures[0]
    except Exception as exc:  # noqa: BLE001 - each storage package has its own errors; each is one line here
        raise InrError(f"{url}: {input_files.network_failure(exc).replace('cannot read', 'cannot list')}") from None
    root = root.rstrip("/") + "/"
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    local = "file" in protocols or "local" in protocols
    rows = []
    for path, info in found.items():
        name = path[len(root):] if path.startswith(root) else path.rsplit("/", 1)[-1]
        if info.get("type") == "file" and not any(part.startswith(".") for part in name.split("/")):
            # Some file systems (http, https) list whole URLs, the others paths without their
            # protocol: unstrip_protocol adds it only where it is missing.
            size = info.get("size")
            rows.append((name, path if local else fs.unstrip_protocol(path), -1 if size is None else int(size)))
    return _labelled(rows)


def _list_file(list_path: Path) -> list[Listed]:
    rows, seen = [], {}
    data = input_files.read_local(list_path, MAX_LIST_BYTES, "a list of images")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InrError(f"{list_path}, line {line}: not UTF-8 text (a list file holds one path or URL per "
                       f"line)") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "\0" in line:
            raise InrError(f"{list_path}, line {number}: holds a NUL byte, not a path or URL")
        if line in seen:
            raise InrError(f"{list_path}, line {number}: {line} is listed twice (first on line {seen[line]})")
        line, label = _label_column(line, list_path.parent)
        seen[line] = number
        location = line if is_url(line) or os.path.isabs(line) else str(list_path.parent / line)
        size = os.path.getsize(location) if not is_url(location) and os.path.isfile(location) else -1
        rows.append(Listed(line, location, size, label))
    if rows and all(is_url(row.location) for row in rows):
        return _named_from_common_prefix(rows)
    return rows


def _label_column(line: str, base: Path) -> tuple[str, str]:
    """PATH, or PATH<TAB>LABEL / PATH,LABEL / PATH LABEL (a second column: the image's label); a local
    path that exists as written keeps its commas and spaces."""
    if "\t" in line:
        path, _, label = line.partition("\t")
        return path.strip(), label.strip()
    exists = not is_url(line) and (base / line).exists()
    if "," in line and not exists:
        path, _, label = line.rpartition(",")
        return path.strip(), label.strip()
    if " " in line and not exists:
        path, _, label = line.rpartition(" ")
        if is_url(path) or (base / path.strip()).exists():  # else the path as written, said missing
            return path.strip(), label.strip()
    return line, ""


def _named_from_common_prefix(rows: list[Listed]) -> list[Listed]:
    """URLs named by their path below the folder all of them are in, labelled by its first level,
    as the images of that folder would be: the same names, and so the same seeds and networks. A
    label the list gives (its second column) stays the image's label."""
    prefix = os.path.commonprefix([row.location for row in rows])
    prefix = prefix[:prefix.rfind("/") + 1]
    if prefix.endswith("://") or not prefix:  # no folder in common: the URLs stay the names
        return rows
    named = _labelled([(row.location[len(prefix):], row.location, row.size) for row in rows])
    return [item._replace(label=row.label or item.label) for item, row in zip(named, rows)]


def read_bytes(location: str) -> bytes:
    """The file's bytes: a regular file, or a URL read within the network timeout (formats/input_files.py)."""
    return input_files.read_url(location) if is_url(location) else input_files.read_local(location)


def read_or_reason(location: str) -> bytes | str:
    """The file's bytes, read by the driver for a worker that cannot reach it, or the one-line reason
    the driver cannot read it either (the worker reports it as it would its own)."""
    try:
        return read_bytes(location)
    except InrError as exc:
        return str(exc)


def reaches(location: str, size: int) -> bool:
    """Whether this process can open the file at `location` and finds the size it was listed with
    (-1: not known), so that it reads the inputs itself; where not, the driver sends their bytes."""
    try:
        if is_url(location):
            found = input_files.url_size(location)
        else:
            input_files.check_regular(location)  # opening a FIFO would wait for a writer
            with open(location, "rb") as handle:
                found = os.fstat(handle.fileno()).st_size
    except Exception:  # whatever stops this process (a missing file, a storage package, credentials)
        return False
    return size < 0 or found is None or found == size


def fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def decode(name: str, data: bytes, config: Config) -> PixelImage:
    """The file's bytes decoded as `inr train FILE --size --gray` would load the file (the same decoder,
    from a private temporary copy), but never enlarged; errors name the image."""
    suffix = Path(name).suffix
    with tempfile.TemporaryDirectory(prefix="inr-image-") as folder:
        path = Path(folder) / f"image{suffix}"
        path.write_bytes(data)
        try:
            return load_training_data(str(path), config.data.size, config.data.gray, enlarge=False)
        except InrError as exc:
            raise InrError(str(exc).replace(str(path), name)) from None


def load(location: str, name: str, config: Config, expected: str | None = None,
         data: bytes | None = None) -> tuple[PixelImage, str]:
    """An image and the fingerprint of its file (its bytes `data` when the driver sent them); with
    `expected`, a file whose fingerprint differs (it changed since it was planned) is refused before
    it is decoded."""
    sent = data is not None
    if not sent:
        data = read_bytes(location)
    digest = fingerprint(data)
    if expected is not None and digest != expected:
        raise InrError(f"{location}: the file changed since this set was planned; fit it into another -o")
    if is_url(location) or sent:
        return decode(name, data, config), digest
    return load_training_data(location, config.data.size, config.data.gray, enlarge=False), digest


def probe(locations: list[tuple[str, str]], config: Config,
          contents: list[bytes | str] | None = None) -> list[tuple]:
    """(name, location) -> (width, height, channels, fingerprint) of each image as it will be fitted,
    or the one-line reason it cannot be: what the plan needs, learned where the images are read.
    The file is read once (for its fingerprint) and only its header is parsed, so that an image is
    decoded once, when it is fitted; a file whose header reads but whose pixels do not stops the
    run there, naming it. The files are read PROBE_READERS at a time, so that a server that never
    answers costs one network timeout, not one per file. `contents`: the files as read_or_reason gave
    them on the driver, for a worker that cannot reach them."""
    found = []
    for (name, _), data in zip(locations, _read_ahead(locations) if contents is None else contents, strict=True):
        try:
            if isinstance(data, str):  # it could not be read
                raise InrError(data)
            found.append((*describe(name, data, config), fingerprint(data)))
        except InrError as exc:
            found.append(("error", str(exc)))
    return found


PROBE_READERS = 16  # files read at once, so that a server that never answers holds one reader, not the probe


def _read_ahead(locations: list[tuple[str, str]]):
    """Each file's bytes (or the one-line reason it cannot be read), in order, read by a pool of
    threads: at most twice PROBE_READERS files are held ahead of the one described."""
    pool = ThreadPoolExecutor(PROBE_READERS, thread_name_prefix="inr-probe")
    try:
        waiting = iter(locations)
        reads = deque(pool.submit(read_or_reason, location) for _, location in islice(waiting, 2 * PROBE_READERS))
        while reads:
            data = reads.popleft().result()
            for _, location in islice(waiting, 1):
                reads.append(pool.submit(read_or_reason, location))
            yield data
    finally:  # a probe stopped early (Ctrl-C) starts no more reads
        pool.shutdown(wait=True, cancel_futures=True)


def describe(name: str, data: bytes, config: Config) -> tuple[int, int, str]:
    """Width, height and channels of the image in `data` as load_training_data will give them, from
    its header. What the header cannot say alone (a pixel CSV or array, a 16-bit colour PNG, which
    keeps its 16 bits through another reader, and a PNG whose EXIF comes after the pixels) is decoded."""
    png16_colour = (data[:8] == PNG_SIGNATURE and len(data) > 25 and data[24] == 16 and data[25] in (2, 4, 6)
                    and not config.data.gray)
    if Path(name).suffix.lower() in (".csv", ".npy") or png16_colour:
        image = decode(name, data, config)
        return image.width, image.height, ",".join(image.channels)
    width, height, mode, info, orientation = image_files.read_header(data, name)  # within inr's pixel limit
    if orientation in (5, 6, 7, 8):  # exif_transpose turns these a quarter
        width, height = height, width
    if 0 < config.data.size < max(width, height):  # a set's --size shrinks, never enlarges
        width, height = fit_longer_side(width, height, config.data.size)
    sample = image_files.decoded_sample(mode, info, config.data.gray)
    if sample is None:  # a mode Pillow reads but cannot make: the decoder says
        image = decode(name, data, config)
        return image.width, image.height, ",".join(image.channels)
    return width, height, ",".join(sample.channels)
