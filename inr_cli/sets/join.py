"""Two finished sets fitted with the same settings and the same start, joined into one: every
network kept as it was fitted (an image's network depends on its name, the settings and the start
only, so the joined set is the one a single fit-many of all the images gives), rows sorted by name.
This is how a set grows: fit the new images into a set of their own, then join."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from inr_cli.errors import InrError
from inr_cli.formats.network_set import PLAN, SHARDS, WEIGHTS, load_network_set
from inr_cli.sets.plan import Plan
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import assemble, shard_name, write_rows


def _plan(folder: Path) -> Plan:
    if not (folder / PLAN).is_file() or not (folder / WEIGHTS).is_file():
        raise InrError(f"{folder}: not a finished inr fit-many set (no {PLAN} or {WEIGHTS})")
    return Plan.from_json((folder / PLAN).read_text(), folder / PLAN)


def join_sets(first: Path, second: Path, out: Path) -> Plan:
    """`inr join A B -o C`: C holds the networks of A and B; refused in one line where they were
    fitted differently (a setting, the start or the network) or share an image name."""
    first, second, out = Path(first), Path(second), Path(out)
    if out.exists():
        raise InrError(f"{out} exists; join into a new folder")
    plans = [_plan(first), _plan(second)]
    a, b = (plan.settings() for plan in plans)
    for key, value in a["settings"].items():
        if b["settings"].get(key) != value:
            raise InrError(f"{first} was fitted with {key} = {value!r} but {second} with "
                           f"{b['settings'].get(key)!r}; only sets fitted alike join")
    if a["start_sha256"] != b["start_sha256"]:
        raise InrError(f"{first} and {second} started from different files; only sets fitted alike join")
    if plans[0].output_start != plans[1].output_start:  # a set of an older inr: each output at its image's mean
        raise InrError(f"{first} and {second} started from different shared starts (their outputs at "
                       f"{_colour(plans[0].output_start)} and {_colour(plans[1].output_start)}); only sets fitted "
                       f"alike join")
    if plans[0].spec != plans[1].spec:
        raise InrError(f"{first} and {second} hold different networks; only sets fitted alike join")
    both = {e.name for e in plans[0].images} & {e.name for e in plans[1].images}
    if both:
        raise InrError(f"{sorted(both)[0]} is in both {first} and {second}; a set has one network per image")
    images = sorted(plans[0].images + plans[1].images, key=lambda e: e.name)
    shards = plans[0].shards + plans[1].shards
    joined = Plan(str(first), plans[0].config, plans[0].spec, images, shards, plans[0].pack,
                  plans[0].skipped + plans[1].skipped, plans[0].start_sha256, plans[0].output_start)
    scratch = out.with_name(f".{out.name}.joining")
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / SHARDS).mkdir(parents=True)
    rows = scratch / WEIGHTS
    count, width = len(images), joined.spec.parameter_count()
    with open(rows, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (count, width)})
        handle.truncate(handle.tell() + count * width * 4)
    shard = 0
    for folder, plan in zip((first, second), plans):
        networks = load_network_set(folder)
        write_rows(rows, [joined.row_of[row["name"]] for row in networks.index], np.asarray(networks.weights))
        for index in range(len(plan.shards)):
            shutil.copyfile(folder / shard_name(index), scratch / shard_name(shard))
            shard += 1
    (scratch / PLAN).write_text(joined.to_json())
    assemble(SetFolder(scratch), joined)  # index.csv and network.json from the shards, the rows in place
    scratch.rename(out)
    return joined


def _colour(values: list[float] | None) -> str:
    return "each image's own mean" if values is None else "(" + ", ".join(f"{v:.3f}" for v in values) + ")"
