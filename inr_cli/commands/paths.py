"""Where a command writes: the names it picks and shows; the rule every output follows is the
output policy's (inr_cli/outputs.py), from where output_target and say_replacing are taken."""

from __future__ import annotations

import os
from pathlib import Path

from inr_cli.console import notice
from inr_cli.errors import InrError
from inr_cli.formats.network_set import PLAN, is_network_set
from inr_cli.outputs import named_file, output_target, say_replacing  # noqa: F401 - the commands' -o rule


def default_output(source: Path, suffix: str, fallback: str | None = None) -> Path:
    """SOURCE with `suffix`; if that exists, SOURCE-`fallback` with it (decode after encode finds the
    original image there, encode may find notes of the user's: neither is the tool's to replace). The
    caller passes it to output_target, and says which it writes with say_default_output."""
    target = Path(source).with_suffix(suffix)
    if target.exists() and fallback:
        target = Path(source).with_name(f"{Path(source).stem}-{fallback}{suffix}")
    return target


def say_default_output(source: Path, suffix: str, target: Path, why: str = "") -> None:
    """The one note for default_output's `target`, once the input has been read: where SOURCE with
    `suffix` exists it is kept (`why`: what it is, perhaps) and the note says which name is written
    instead; else say_replacing's, where that name exists."""
    plain = Path(source).with_suffix(suffix)
    if Path(target) == plain:
        say_replacing(target)
        return
    replaced = os.path.isfile(target) and not os.path.islink(target)
    doing = f"replacing {target} (the default output name)" if replaced else f"writing {target}"
    notice(f"{plain} exists{why} and is kept: {doing}; -o names another")


def shown_path(path: Path | str) -> str:
    """A path as a message shows it: relative to the working directory when it lies inside it (an
    absolute run directory alone can fill half a line), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def run_sources(run: Path, image: str | None = None) -> list[Path]:
    """What a render or an export of `run` never writes over, even with --force: the run's checkpoint
    or the set's files, and the image it was trained on (with --image, a set's) as far as the record
    says. Best effort: an unreadable record protects its files only (loading the network reports it)."""
    from inr_cli.formats import checkpoint as ckpt
    from inr_cli.sets.plan import Plan
    from inr_cli.sets.storage import SET_FILES

    run = Path(run)
    if is_network_set(run):
        own = [run / name for name in SET_FILES]
        try:
            folder = Plan.read(run / PLAN).folder
        except InrError:
            return own
        return own + ([Path(folder) / image] if image and "://" not in folder else [])
    own = [ckpt.resolve(run)] if ckpt.resolve_exists(run) else []
    try:
        source = ckpt.load(run, deferred=True, moments=False).config.data.source
    except InrError:
        return own
    return own + ([Path(source)] if source else [])
