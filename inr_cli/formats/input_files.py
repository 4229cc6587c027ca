"""An input file's bytes, read as untrusted: a local path only when it is a regular file (a FIFO
waits forever for a writer, a device such as /dev/zero never ends), a URL through fsspec with a
connect and read timeout, so that a server that accepts and never answers costs seconds, not the
run.

The timeout is INR_NETWORK_TIMEOUT seconds (default 60): it bounds each connection and each read
of http(s)://, s3://, gs://, ftp:// and sftp:// URLs; other fsspec protocols keep their own.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path

from inr_cli.errors import InrError, UsageError
from inr_cli.extras import require
from inr_cli.limits import NETWORK_TIMEOUT

TIMEOUT_VARIABLE = "INR_NETWORK_TIMEOUT"
DEFAULT_TIMEOUT = NETWORK_TIMEOUT


def network_timeout() -> float:
    """Seconds a connection or a read of a URL may wait: INR_NETWORK_TIMEOUT, or the default."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise UsageError(f"{TIMEOUT_VARIABLE}={text!r}: expected a positive number of seconds")
    return seconds


def is_url(text: str) -> bool:
    return "://" in text


def fsspec_module():
    return require("fsspec", "reading images from a URL", "remote", "and the package of your storage, e.g. s3fs")


def timeout_options(protocol: str, seconds: float) -> dict:
    """fsspec's storage options that bound each connection and read of `protocol` to `seconds`."""
    if protocol in ("http", "https", "gs", "gcs"):  # aiohttp underneath
        try:
            import aiohttp
        except ImportError:
            return {}  # fsspec refuses the URL itself, naming the package it needs
        timeout = aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=seconds)
        return {"client_kwargs" if protocol.startswith("http") else "session_kwargs": {"timeout": timeout}}
    if protocol in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": seconds, "read_timeout": seconds}}
    # One connection per file system object, which fsspec shares between calls alike: the probe reads
    # from several threads, so each gets its own.
    if protocol == "ftp":
        return {"timeout": seconds, "skip_instance_cache": True}
    if protocol in ("sftp", "ssh"):
        return {"timeout": seconds, "banner_timeout": seconds, "auth_timeout": seconds, "skip_instance_cache": True}
    return {}


def url_to_fs(url: str, file: bool = True):
    """(file system, path) of a URL (of a file, or else of a folder), its reads bounded by
    network_timeout(); what stops it (a missing package, a bad URL, a local device) is one line."""
    fsspec = fsspec_module()
    protocol = url.split("://", 1)[0].lower()
    options = timeout_options(protocol, network_timeout())
    configured = fsspec.config.conf.get(protocol, {})
    for key, value in options.items():  # the user's own fsspec configuration of these options is kept
        if isinstance(value, dict) and isinstance(configured.get(key), dict):
            options[key] = {**configured[key], **value}
    try:  # some file systems (ftp, sftp) connect here
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        raise InrError(f"{url}: cannot read it: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - every storage package has its own errors; each is one line here
        raise InrError(f"{url}: {network_failure(exc)}") from None
    if file and _is_local(fs):
        check_regular(path, url)
    return fs, path


def _is_local(fs) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def check_regular(path: str | Path, where: str | None = None, expected: str = "a file") -> None:
    """Refuse, in one line, a path that is not a regular file, before anything opens it."""
    where = where or str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InrError(f"{where}: no such file") from None
    except OSError as exc:
        raise InrError(f"{where}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise InrError(f"{where}: is a directory, expected {expected}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if _is_device(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise InrError(f"{where}: {kind}, not a file inr reads (it could block or never end)")


def _is_device(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def check_standard_input(expected: str) -> None:
    """Refuse, in one line, standard input that is a device (a terminal, /dev/zero) before anything
    reads it: a pipe or a redirected file is read, a device could wait for typing or never end.
    Standard input without a file descriptor (an embedding program's stream) is read as it is."""
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return
    if _is_device(mode):
        kind = "a terminal" if os.isatty(fd) else "a device"
        raise InrError(f"standard input: {kind}, not a file inr reads (it could block or never end); pipe "
                       f"{expected} in, or name its file")


# Bytes read from a stream at a time.
READ_BYTES = 1 << 20


def read_stream(stream, limit: int, where: str, what: str, start: bytes = b"") -> bytes:
    """`start` and the rest of a stream's bytes (standard input, a pipe), of at most `limit` bytes
    in all: read a block at a time, refused in one line once beyond (a stream never says its size)."""
    held = io.BytesIO()
    held.write(start)
    while held.tell() <= limit:
        block = stream.read(min(READ_BYTES, limit + 1 - held.tell()))
        if not block:
            return held.getvalue()
        held.write(block)
    raise InrError(f"{where}: more than {limit:,} bytes, more than {what} could be")


def read_local(path: str | Path, limit: int | None = None, what: str = "the file") -> bytes:
    """A local file's bytes: a regular file only, and, with `limit`, of at most that many bytes
    (checked before a byte is read)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            check_regular(path)  # says what it is instead
        with open(path, "rb") as handle:
            if limit is None:
                return handle.read()
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InrError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InrError(f"{path}: larger than {limit:,} bytes, more than {what} could be")
    return data


def read_url(url: str) -> bytes:
    fs, path = url_to_fs(url)
    try:
        with fs.open(path, "rb") as handle:
            return handle.read()
    except Exception as exc:  # noqa: BLE001 - every storage package has its own errors; each is one line here
        raise InrError(f"{url}: {network_failure(exc)}") from None


def url_size(url: str) -> int | None:
    fs, path = url_to_fs(url)
    return fs.size(path)


def network_failure(exc: BaseException) -> str:
    """A failed read of a URL in words."""
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        return (f"no answer within {network_timeout():g} s, given up (the environment variable "
                f"{TIMEOUT_VARIABLE} sets the limit)")
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"cannot read ({reason[:200]})"
