"""`inr fit-many INPUT -o OUT --add`: a finished set grows by the images of INPUT it does not hold.
They are fitted into a set of their own beside OUT (.OUT.adding, with OUT's settings, start and
sizes), then joined to it (join.py) in .OUT.joined, which takes OUT's place: the networks already
there are untouched, and every network is the one a single fit of all the images gives. Killed or
failed while the new images fit or join, the same command resumes them (a .OUT.adding fitted for
other images is inr's own and started again); killed between the renames that swap the joined set
in, the same command finishes the swap. Each of those folders carries inr's scratch marker
(outputs.py): a folder of the user's at one of those names is refused, never deleted."""

from __future__ import annotations

import os
from pathlib import Path

from inr_cli.errors import InrError
from inr_cli.formats.network_set import PLAN, WEIGHTS, refuse_damaged_files
from inr_cli.outputs import SCRATCH_MARKER, is_scratch, mark_scratch, release, remove_scratch, scratch, takes_files
from inr_cli.sets import inputs
from inr_cli.sets.join import finished_set, join_sets
from inr_cli.sets.plan import Plan


def new_names(source: str, out: Path) -> set[str] | None:
    """The inputs of `source` that the set in `out` does not hold; None when there is no finished
    set there yet (the fit then starts it as usual). An image the set holds whose file changed since
    is refused: its network would no longer be its own. A set whose files are damaged is said so."""
    refuse_damaged_files(out)
    if not (out / PLAN).is_file() or not (out / WEIGHTS).is_file():
        return None
    saved = Plan.read(out / PLAN)
    listed = {item.name: item.size for item in inputs.list_inputs(source)}
    changed = next((e.name for e in saved.images if min(e.bytes, listed.get(e.name, -1)) >= 0
                    and listed[e.name] != e.bytes), None)
    if changed is not None:
        raise InrError(f"{changed} changed since the set in {out} was fitted; --add fits new images only: restore it, "
                       f"or fit the set again")
    held = {e.name for e in saved.images} | {name for name, _ in saved.skipped}
    return set(listed) - held


def scratch_names(out: Path) -> tuple[Path, Path, Path]:
    """(adding, joined, previous): the folders beside OUT that --add works in."""
    return tuple(out.with_name(f".{out.name}.{role}") for role in ("adding", "joined", "previous"))


def finish_swap(out: Path) -> None:
    """What a run killed between the steps of the swap left, put right: the joined set named OUT
    where a crash came between the two renames, the old set (.OUT.previous) removed once OUT holds
    the new one, a joined set that never took OUT's place removed (the join is made again)."""
    _, joined, previous = scratch_names(out)
    if os.path.lexists(previous):
        if not is_scratch(previous):
            remove_scratch(previous)  # refused: a folder of the user's
        if not os.path.lexists(out):
            source = joined if is_scratch(joined) and (joined / WEIGHTS).is_file() else previous
            release(source, out)
        remove_scratch(previous)
    if is_scratch(joined):
        remove_scratch(joined)
    if os.path.lexists(out / SCRATCH_MARKER):  # marked as it was about to become .OUT.previous
        (out / SCRATCH_MARKER).unlink()  # (unlink on a read-only mount fails even where there is none)


def _fitted_names(adding: Path) -> set[str] | None:
    """The images the set in the scratch folder is fitted for (None: it has no plan it can read)."""
    try:
        plan = Plan.read(adding / PLAN)
    except (InrError, OSError):
        return None
    return {e.name for e in plan.images} | {name for name, _ in plan.skipped}


def grow(source: str, out: Path, fit_new) -> None:
    """fit_new(scratch, names) fits the images `names` of source into the set folder `scratch`."""
    if inputs.is_url(str(out)):
        raise InrError("--add grows a set in a local folder; fit the new images apart and inr join them")
    adding, joined, previous = scratch_names(out)
    finish_swap(out)
    names = new_names(source, out)
    if names is None:
        raise InrError(f"{out} holds no finished set to add to; run without --add first")
    if not names:
        if is_scratch(adding):
            remove_scratch(adding)
        return
    remove_scratch(joined)  # refused where a folder of the user's is in the way, before any work
    finished_set(out)  # a damaged set refused before the new images are fitted, not after
    takes_files(out)  # the swap marks it: a read-only set refused before the fitting too, leaving nothing
    if is_scratch(adding) and _fitted_names(adding) != names:
        remove_scratch(adding)  # the work of an earlier --add of other images
    with scratch(adding, keep_on=(BaseException,), resume=True):  # what is fitted stays for the rerun
        try:
            fit_new(adding, names)
        except BaseException:
            if _fitted_names(adding) is None:  # refused before it planned anything: nothing to keep
                remove_scratch(adding)
            raise
        join_sets(out, adding, joined)
        mark_scratch(joined)
        mark_scratch(out)  # it becomes .OUT.previous, inr's to remove
        out.rename(previous)  # the two renames: a crash between them is put right by finish_swap
        release(joined, out)
        remove_scratch(previous)
    remove_scratch(adding)
