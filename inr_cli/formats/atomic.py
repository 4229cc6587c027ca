"""Atomic file writes: a temporary file beside the target, fsync, rename.

A crash at any moment leaves either the old file or the new one, never half of either. The new
file gets the mode a plain write would give it (the old file's, else 0666 less the umask). The
target is a regular file or a path to create (outputs.writable, checked again here before anything
is opened: a link, a FIFO or a device is refused). A write that fails is one line naming the file
and the system's reason, whatever words the library that wrote it used.
"""

import errno as errnos
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from inr_cli.errors import WriteError
from inr_cli.hooks import hook
from inr_cli.outputs import writable


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once: os.umask can only be read by setting it


# How libraries written in other languages put the system's error number in their words: h5py's
# "errno = 28, error message = ...", safetensors' "(os error 28)".
ERRNO_IN_WORDS = re.compile(r"errno = (\d+)|os error (\d+)")


def write_failure(exc: OSError) -> tuple[int | None, str]:
    """(errno, the system's words for it) of a failed write: the number itself where the error has
    it or a library's text names it, else the first line of its text (a library's may run to lines)."""
    number = exc.errno
    if number is None:
        found = ERRNO_IN_WORDS.search(str(exc))
        number = int(found.group(1) or found.group(2)) if found else None
    if number is not None and number in errnos.errorcode:
        return number, os.strerror(number)
    return number, (str(exc.strerror or exc).strip().splitlines() or [""])[0]


@contextmanager
def atomic_path(target: Path, suffix: str = ""):
    """Yield a temporary path in target's folder; on success it replaces target. A write that fails
    (here or in the block) is a WriteError naming the target; the earlier file is kept."""
    target = Path(target)
    writable(target)
    existed = False
    try:
        existed = target.exists()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode) if existed else 0o666 & ~UMASK
            yield tmp_path
            hook("file-written", path=target)  # a test may signal the process here, the file not yet in place
            with open(tmp_path, "rb+") as handle:
                os.fsync(handle.fileno())
            os.chmod(tmp_path, mode)
            os.replace(tmp_path, target)
            _fsync_dir(target.parent)
        except BaseException:
            tmp_path.unlink(missing_ok=True)
            raise
    except WriteError:
        raise
    except OSError as exc:
        kept = "; the earlier file is kept" if existed else ""
        number, said = write_failure(exc)
        raise WriteError(f"cannot write {target} ({said}){kept}", number, said) from None


def atomic_write_text(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
