"""Atomic file writes: a temporary file beside the target, fsync, rename.

A crash at any moment leaves either the old file or the new one, never half of either. The new
file gets the mode a plain write would give it (the old file's, else 0666 less the umask), a
symbolic link is followed (the link stays, the file it names is replaced), and a target that is not
a regular file (a device such as /dev/stdout, a pipe) is written straight through: there is nothing
to replace atomically, and replacing it would be wrong.
"""

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from inr_cli.errors import WriteError
from inr_cli.hooks import hook


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once: os.umask can only be read by setting it


def is_special(path: Path) -> bool:
    """True for an existing target that is not a regular file (after following links)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def atomic_path(target: Path, suffix: str = ""):
    """Yield a temporary path in target's folder; on success it replaces target. A write that fails
    (here or in the block) is a WriteError naming the target; the earlier file is kept."""
    target = Path(target)
    existed = False
    try:
        if is_special(target):
            if target.is_dir():
                raise IsADirectoryError(21, "Is a directory", str(target))
            yield target
            return
        if target.is_symlink():
            target = target.resolve()
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
        said = (str(exc.strerror or exc).strip().splitlines() or [""])[0]  # a library's may run to lines (h5py's)
        raise WriteError(f"cannot write {target} ({said}){kept}", exc.errno, exc.strerror) from None


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
