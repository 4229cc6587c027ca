"""Where a command writes: the one rule for output files, shared by every command that takes -o.

- A file named with -o that exists is refused unless --force (a usage problem: exit code 2).
- A default name chosen by the tool (RUN/render-WxH.png, IMAGE.csv, ...) that exists is replaced,
  with a one-line notice.
- A command's own input, or the image a run was trained on, is never written over, even with --force.
- A target that is not a regular file (a pipe, /dev/stdout) is written through, as a stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from inr_cli.console import notice
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.atomic import is_special
from inr_cli.formats.network_set import PLAN, is_network_set


def default_output(source: Path, suffix: str, fallback: str | None = None) -> Path:
    """SOURCE with `suffix`; if that exists, SOURCE-`fallback` with it (decode after encode finds the
    original image there). The caller passes it to output_target, which says when it replaces a file."""
    target = Path(source).with_suffix(suffix)
    if target.exists() and fallback:
        target = Path(source).with_name(f"{Path(source).stem}-{fallback}{suffix}")
    return target


def shown_path(path: Path | str) -> str:
    """A path as a message shows it: relative to the working directory when it lies inside it (an
    absolute run directory alone can fill half a line), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def check_parent(path: Path) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise InrError(f"{path}: the folder {parent} does not exist")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def output_target(output: Path | None, default: Path | None, force: bool, protected: Iterable[Path | str] = (),
                  flag: str = "-o", announce: bool = True) -> Path:
    """The path to write: `output` as named by the user, else `default`; refused or announced by the
    rule above. Standard output ("-") passes through. Checked before any work is done; announce=False
    leaves the notice to say_replacing, once the input has been read (a bad input is then the only
    message)."""
    if output is not None and str(output) == "-":
        return Path("-")
    named = output is not None
    target = Path(output) if named else Path(default)
    check_parent(target)
    if target.is_dir():
        raise UsageError(f"{target} is a folder; {flag} names the file to write")
    for source in protected:
        if source and str(source) != "-" and _same_file(target, Path(source)):
            raise UsageError(f"{target} is the input ({source}); it is never overwritten, even with --force: "
                             f"choose another {flag}")
    if not target.exists() or is_special(target):
        return target
    if named and not force:
        raise UsageError(f"{target} already exists; --force replaces it")
    if not named and announce:
        say_replacing(target, flag)
    return target


def say_replacing(target: Path, flag: str = "-o") -> None:
    """The notice for a default output name that exists and is about to be replaced."""
    if target.exists() and not is_special(target):
        notice(f"replacing {target} (the default output name; {flag} chooses another)")


def run_sources(run: Path, image: str | None = None) -> list[Path]:
    """The images a run (or, with --image, a fit-many set) was trained on, as far as it recorded them:
    never to be overwritten by its renders or exports. Best effort: an unreadable record protects nothing
    (loading the network reports it)."""
    run = Path(run)
    try:
        plan = run / PLAN
        if is_network_set(run):
            folder = json.loads(plan.read_text()).get("folder")
            return [Path(folder) / image] if folder and image else []
        from inr_cli.formats import checkpoint as ckpt

        source = ckpt.load(run).config.data.source
    except (InrError, OSError, ValueError, AttributeError, TypeError, RecursionError):  # a plan as anyone wrote it
        return []
    return [Path(source)] if source else []
