"""`inr fit-many INPUT -o OUT --add`: a finished set grows by the images of INPUT it does not hold.
They are fitted into a set of their own beside OUT (with OUT's settings, start and sizes), then
joined to it (join.py): the networks already there are untouched, and every network is the one a
single fit of all the images gives. Killed while the new images fit, the same command resumes them."""

from __future__ import annotations

import shutil
from pathlib import Path

from inr_cli.errors import InrError
from inr_cli.formats.network_set import PLAN, WEIGHTS
from inr_cli.sets import inputs
from inr_cli.sets.join import join_sets
from inr_cli.sets.plan import Plan


def new_names(source: str, out: Path) -> set[str] | None:
    """The inputs of `source` that the set in `out` does not hold; None when there is no finished
    set there yet (the fit then starts it as usual)."""
    if not (out / PLAN).is_file() or not (out / WEIGHTS).is_file():
        return None
    saved = Plan.from_json((out / PLAN).read_text(), out / PLAN)
    held = {e.name for e in saved.images} | {name for name, _ in saved.skipped}
    return {item.name for item in inputs.list_inputs(source)} - held


def grow(source: str, out: Path, fit_new) -> None:
    """fit_new(scratch, names) fits the images `names` of source into the set folder `scratch`."""
    if inputs.is_url(str(out)):
        raise InrError("--add grows a set in a local folder; fit the new images apart and inr join them")
    names = new_names(source, out)
    if names is None:
        raise InrError(f"{out} holds no finished set to add to; run without --add first")
    if not names:
        return
    scratch = out.with_name(f".{out.name}.adding")
    fit_new(scratch, names)
    joined, previous = out.with_name(f".{out.name}.joined"), out.with_name(f".{out.name}.previous")
    shutil.rmtree(joined, ignore_errors=True)
    join_sets(out, scratch, joined)
    out.rename(previous)  # the two renames: a crash between them leaves both folders, named
    joined.rename(out)
    shutil.rmtree(previous, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
