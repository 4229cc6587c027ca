"""Where inr writes: the one policy every file and folder a command writes goes through (a file
named by -o, a run directory, a study folder, a set folder, meta-init's start and its side files,
the scratch folders of join and fit-many --add).

- Nothing of the user's is replaced without --force, and then only what the command itself writes.
  A file named by -o that exists is refused (a usage problem: exit code 2) unless --force; a default
  name chosen by the tool (RUN/render-WxH.png, IMAGE-encoded.csv) is replaced with a one-line notice
  (encode and decode keep a file at IMAGE.csv or CSV.png: commands/paths.default_output). A side
  file named after the output (a log, a chart, a checkpoint) is checked as the output is. A folder
  output is new, empty, or the command's own (it holds the command's marker: a run's checkpoint, a
  study's journal, a set's plan); anything else is refused (--force, where a command has it, writes
  beside the files there, replacing only its own).
- An output is never one of the command's inputs, nor inside a folder it reads images from (they
  would be read as inputs next time), even with --force.
- Every file inr writes (an output, a side file, a file in a folder of its own) is a regular file or
  a path to create, checked before anything opens it (writable): a link there, whether it points to
  a file, a folder or nothing, is refused even with --force (writing through it would change a file
  the user never named; replacing it, the link they made), and so is a FIFO, a socket or a device (a
  write could block for ever or never end). `-o -` is standard output. A folder named through a link
  is the folder it names, as every folder on a path is; a folder inr goes on with (a run it resumes,
  its set, its study) holds no link and no special file among the files it writes.
- A scratch folder is the command's own: made with a marker inside, deleted only where the marker
  is (a folder of the user's at that name is refused), and removed on any failure.
- The folder an output goes in exists and takes a file, checked before the work where the work is
  long; a write that fails (read-only, full disk, a device) is one line naming the file, the earlier
  file kept and no partial file left (formats/atomic.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from inr_cli.errors import InrError, UsageError

SCRATCH_MARKER = ".inr-scratch"  # inside a scratch folder from its creation: what makes it ours to delete
# A folder holding only these is empty: a lock, a file manager's, a marker a killed release left.
IGNORED = frozenset({".lock", ".DS_Store", SCRATCH_MARKER})


def check_parent(path: Path) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise InrError(f"{path}: the folder {parent} does not exist")


def takes_files(folder: Path, what: str | None = None) -> None:
    """`folder` exists, is a folder and this process can create a file in it (a file made and
    removed there: the permission bits do not tell of a read-only mount). Checked before long work,
    so that it is not lost to a write refused at its end."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InrError(f"{what or folder}: the folder {folder} does not exist" if not folder.exists() else
                       f"{what or folder}: {folder} is not a folder")
    try:
        handle, name = tempfile.mkstemp(prefix=".inr-write-check-", dir=folder)
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise InrError(f"cannot write in {folder} ({exc.strerror or exc})") from None


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name one file, through any link (False where either does not exist)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_inputs(target: Path, inputs: Iterable[Path | str], flag: str = "-o") -> None:
    """An output that is one of the command's inputs is never written, even with --force."""
    for source in inputs:
        if source and str(source) != "-" and same_file(target, source):
            raise UsageError(f"{target} is the input ({source}); it is never overwritten, even with --force: "
                             f"choose another {flag}")


def refuse_inputs_among(targets: Iterable[Path], inputs: Iterable[Path | str], flag: str = "-o") -> None:
    """refuse_inputs for many outputs and many inputs (a set's files and its images): each file
    looked at once, compared as refuse_inputs compares them (one file, through any link)."""
    ids = {}
    for target in targets:
        try:
            found = os.stat(target)
        except (OSError, ValueError):
            continue
        ids[(found.st_dev, found.st_ino)] = target
    for source in inputs if ids else ():
        try:
            found = os.stat(source)
        except (OSError, ValueError):
            continue
        target = ids.get((found.st_dev, found.st_ino))
        if target is not None:
            raise UsageError(f"{target} is an input of this command ({source}); it is never overwritten, even "
                             f"with --force: choose another {flag}")


def _resolved(path: Path) -> Path:
    """The path with its folder's links followed (the path itself need not exist)."""
    path = Path(path)
    return path.parent.resolve() / path.name if path.name else path.resolve()


def refuse_inside(target: Path, folders: Iterable[Path | str], flag: str = "-o") -> None:
    """An output in a folder the command reads images from would be listed among them next time; a
    hidden file or folder there is never listed, so one may be written."""
    where = _resolved(target)
    for folder in folders:
        if not folder or "://" in str(folder) or not Path(folder).is_dir():
            continue
        root = Path(folder).resolve()
        if where != root and root not in where.parents:
            continue
        if where != root and any(part.startswith(".") for part in where.relative_to(root).parts):
            continue
        shown = "the input folder" if where == root else f"inside the input folder {folder}"
        raise UsageError(f"{flag} {target} is {shown}: its files would be read as inputs the next time; choose an "
                         f"{flag} outside it")


def named_file(output: str | os.PathLike | None, flag: str = "-o") -> Path | None:
    """A file option as the user typed it. A name ending in a separator names a folder, which a file
    option never is: refused here, on the text, because a Path drops the separator and would write a
    file of the folder's name."""
    if output is None:
        return None
    text = os.fspath(output)
    if text != "-" and text.endswith(("/", os.sep)):
        raise UsageError(f"{text}: {flag} names the file to write, and a name ending in {text[-1]} names a folder; "
                         f"give the file's own name")
    return Path(text)


def output_target(output: str | os.PathLike | None, default: Path | None, force: bool,
                  protected: Iterable[Path | str] = (), flag: str = "-o", announce: bool = True) -> Path:
    """The file to write: `output` as named by the user (named_file), else `default`; refused or
    announced by the rule above (`protected`: the inputs). Standard output
    ("-") passes through. Checked before any work is done; announce=False leaves the notice to
    say_replacing, once the input has been read (a bad input is then the only message)."""
    output = named_file(output, flag)
    if output is not None and str(output) == "-":
        return Path("-")
    named = output is not None
    target = Path(output) if named else Path(default)
    check_parent(target)
    refuse_inputs(target, protected, flag)
    writable(target, flag)
    if not target.exists():
        return target
    if named and not force:
        raise UsageError(f"{target} already exists; --force replaces it")
    if not named and announce:
        say_replacing(target, flag)
    return target


def say_replacing(target: Path, flag: str = "-o") -> None:
    """The notice for a default output name that exists and is about to be replaced."""
    if os.path.isfile(target) and not os.path.islink(target):
        from inr_cli.console import notice  # Rich only where something is said: the writers import this module

        notice(f"replacing {target} (the default output name; {flag} chooses another)")


def writable(path: Path, flag: str = "-o") -> None:
    """The rule for every file inr writes, checked before anything opens it: `path` is a regular
    file or nothing yet. A link (to a file, a folder or nothing) is refused, even with --force, and
    so is a FIFO, a socket, a device or a folder (the module's docstring says why)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a parent that is a file, a folder it may not look into
        raise InrError(f"cannot write {path} ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        try:
            points = os.readlink(path)
        except OSError:
            points = "?"
        nothing = "" if os.path.exists(path) else ", which does not exist"
        raise UsageError(f"{path} is a link (to {points}{nothing}); inr never writes through a link nor replaces "
                         f"one, even with --force: remove it or choose another {flag}")
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path} is a folder; {flag} names the file to write")
    raise UsageError(f"{path} is not a regular file (a FIFO, a socket or a device); inr writes only to a regular "
                     f"file or a new one: choose another {flag}")


def writable_inside(folder: Path, flag: str = "-o") -> None:
    """A folder of its own that a command goes on with (a run, a set, a study) holds no link and no
    special file among its files: each is refused (writable) before the work, not when a
    checkpoint meets it. Nothing is opened."""
    pending = [Path(folder)]
    while pending:
        try:
            with os.scandir(pending.pop()) as found:
                entries = list(found)
        except OSError as exc:
            raise InrError(f"{folder}: cannot list ({exc.strerror or exc})") from None
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                writable(Path(entry.path), flag)


def refuse_dangling(path: Path, flag: str = "-o") -> None:
    """A folder output named through a link names a folder: a link to nothing is refused (making it
    would make a folder wherever it points), and so is a link to anything else, by its own name."""
    if not os.path.islink(path):
        return
    if not os.path.exists(path):
        raise UsageError(f"{path} is a link to nothing; inr never writes through it: choose another {flag}")
    if not os.path.isdir(path):
        raise UsageError(f"{path} is a link to a file, not a folder; {flag} names a folder: choose another")


def side_files(paths: Iterable[Path], force: bool, own: Iterable[Path] = (), protected: Iterable[Path | str] = (),
               flag: str = "-o") -> None:
    """Files a command writes beside its output, named after it: each absent, the command's own
    (`own`: ones it wrote, as its checkpoint records), or replaced with --force; never an input,
    never a link, a FIFO, a device or a folder (writable)."""
    own = {_resolved(path) for path in own}
    for path in paths:
        refuse_inputs(path, protected, flag)
        writable(path, flag)
        if os.path.exists(path) and _resolved(path) not in own and not force:
            raise UsageError(f"{path} already exists (this command writes there); --force replaces it, or choose "
                             f"another {flag}")


def folder_output(folder: Path, own, what: str, flag: str = "-o", force: bool | None = None,
                  protected: Iterable[Path | str] = (), inside: Iterable[Path | str] = (),
                  placed: Iterable[str] = (), writes: Iterable[str] = ()) -> bool:
    """A folder a command writes its files in: new, empty (but for files it `placed` there itself,
    which it never writes over), or its own (own(folder) is true: it holds the command's marker),
    which it goes on with; True for the last. Anything else is refused (force=None: the command has
    no --force; with --force the command writes beside what is there, replacing only its own files,
    `writes`: the names it writes there). What it will write in a folder that exists is checked
    as every file is (writable, writable_inside)."""
    folder = Path(folder)
    refuse_inputs(folder, protected, flag)
    refuse_inside(folder, inside, flag)
    refuse_dangling(folder, flag)
    if not os.path.lexists(folder):
        existing = next(parent for parent in _resolved(folder).parents if parent.exists())
        if existing.is_dir():  # where it will be made, checked before the work (a file there: making it says so)
            takes_files(existing, f"{flag} {folder}")
        return False
    if not folder.is_dir():
        raise UsageError(f"{folder} is {'a file' if folder.is_file() else 'not a folder'}; {flag} names a "
                         f"folder: choose another")
    if own(folder):
        writable_inside(folder, flag)
        takes_files(folder, f"{flag} {folder}")
        return True
    try:
        others = sorted(set(os.listdir(folder)) - IGNORED - set(placed))
    except OSError as exc:
        raise InrError(f"{folder}: cannot list ({exc.strerror or exc})") from None
    ours = sorted(set(writes) & set(others))
    if others and not force:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        later = "" if force is None else f" (--force replaces its {', '.join(ours)})" if ours else \
            " (--force writes beside them)"
        raise UsageError(f"{folder} is not empty ({shown}) and holds no {what}: choose another {flag}{later}")
    for name in ours:
        writable(folder / name, flag)
    takes_files(folder, f"{flag} {folder}")
    return False


def make_folder(folder: Path) -> None:
    """A folder output created (its parents too), in one line where that fails."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InrError(f"cannot create the folder {folder} ({exc.strerror or exc})") from None


def is_scratch(folder: Path) -> bool:
    folder = Path(folder)
    return folder.is_dir() and not folder.is_symlink() and (folder / SCRATCH_MARKER).is_file()


def _empty_folder(folder: Path) -> bool:
    """A folder (not a link) holding nothing: what a command killed between making its scratch
    folder and marking it leaves; removing it loses nothing of anyone's."""
    try:
        return Path(folder).is_dir() and not Path(folder).is_symlink() and not os.listdir(folder)
    except OSError:
        return False


def remove_scratch(folder: Path) -> None:
    """A scratch folder of inr's removed (nothing to do where there is none, an empty folder removed
    too); a folder of the user's at its name (no marker inside) is refused, never deleted."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if _empty_folder(folder):
        folder.rmdir()
        return
    if not is_scratch(folder):
        raise UsageError(f"{folder} is in the way: inr keeps its work in progress there, and never deletes what "
                         f"it did not make; move it or remove it")
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise InrError(f"cannot remove inr's scratch folder {folder} ({exc.strerror or exc})") from None


def new_scratch(folder: Path, resume: bool = False) -> Path:
    """A scratch folder made afresh, its marker inside (a leftover of inr's removed first; with
    `resume`, kept as it is: work a rerun goes on with). Killed between the folder and its marker,
    it leaves an empty folder, which the next command takes as its own (remove_scratch)."""
    folder = Path(folder)
    if resume and is_scratch(folder):
        return folder
    remove_scratch(folder)
    try:
        folder.mkdir()
        mark_scratch(folder)
    except OSError as exc:
        if is_scratch(folder) or _empty_folder(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise InrError(f"cannot create {folder} ({exc.strerror or exc})") from None
    return folder


def mark_scratch(folder: Path) -> None:
    """The marker that makes `folder` inr's to delete, in a folder inr has just made."""
    (Path(folder) / SCRATCH_MARKER).write_text("inr's work in progress: removed when its command is done\n")


@contextmanager
def scratch(folder: Path, keep_on=(), resume: bool = False):
    """new_scratch(folder, resume) for the block, removed if the block fails (but for the
    exceptions of `keep_on`: work that a rerun resumes)."""
    folder = new_scratch(folder, resume)
    try:
        yield folder
    except BaseException as exc:
        if not isinstance(exc, tuple(keep_on)) and is_scratch(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise


def release(folder: Path, output: Path) -> Path:
    """A scratch folder renamed to become `output`, then its marker taken out. Killed between the
    two, the output is whole and its leftover marker is ignored where folders are looked at
    (IGNORED); killed before, the scratch folder is still inr's to remove or go on with."""
    os.rename(folder, output)
    (Path(output) / SCRATCH_MARKER).unlink(missing_ok=True)
    return Path(output)
