"""Two finished sets fitted with the same settings and the same start, joined into one: every
network kept as it was fitted (an image's network depends on its name, the settings and the start
only, so the joined set is the one a single fit-many of all the images gives), rows sorted by name.
This is how a set grows: fit the new images into a set of their own, then join."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from inr_cli.errors import InrError
from inr_cli.formats.network_set import (
    BASE,
    INDEX,
    PLAN,
    SHARDS,
    WEIGHTS,
    NetworkSet,
    load_network_set,
    refuse_damaged_files,
    refuse_set_without_plan,
)
from inr_cli.outputs import check_parent, folder_output, release, scratch
from inr_cli.sets.plan import Plan
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import DamagedShard, assemble, check_shard, shard_name, write_rows


def finished_set(folder: Path) -> tuple[Plan, NetworkSet]:
    """A finished set read whole and checked: its plan, its files, its index against its plan and
    every shard against the plan, before anything is written from them."""
    folder = Path(folder)
    if not folder.exists():  # a mistyped name, not a set left unfinished
        raise InrError(f"{folder}: no such set")
    refuse_damaged_files(folder)  # a file that is no file is a damaged set, not an unfinished one
    refuse_set_without_plan(folder)  # and a set whose plan is gone is said as such
    if not (folder / PLAN).is_file() or not (folder / WEIGHTS).is_file():
        raise InrError(f"{folder}: not a finished inr fit-many set (no {PLAN} or {WEIGHTS})")
    plan = Plan.read(folder / PLAN)
    networks = load_network_set(folder)
    listed = {row["name"] for row in networks.index}
    if listed != set(plan.row_of):
        odd = sorted(listed - set(plan.row_of)) or sorted(set(plan.row_of) - listed)
        raise InrError(f"{folder / INDEX} and {folder / PLAN} do not name the same images ({odd[0][:60]} is in one "
                       f"only): a damaged set")
    local = SetFolder(folder)
    for index in range(len(plan.shards)):
        try:
            check_shard(local, index, plan)
        except DamagedShard as exc:
            raise InrError(f"{local.join(shard_name(index))}: damaged ({exc}); the same inr fit-many command "
                           f"fits it again") from None
    return plan, networks


def join_sets(first: Path, second: Path, out: Path) -> Plan:
    """`inr join A B -o C`: C holds the networks of A and B; refused in one line where they were
    fitted differently (a setting, the start, the network, the labels) or share an image name.
    C is written in a scratch folder beside it (.C.joining), renamed C when whole; a failure
    leaves neither."""
    first, second, out = Path(first), Path(second), Path(out)
    check_parent(out)
    folder_output(out, lambda folder: False, "joined set", inside=[first, second])  # new, or empty
    out = out.resolve() if out.is_symlink() else out  # a link to an empty folder: that folder, its scratch beside it
    (plan_a, set_a), (plan_b, set_b) = finished_set(first), finished_set(second)
    plans = [plan_a, plan_b]
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
    if plans[0].labelled != plans[1].labelled:
        labelled, other = (first, second) if plans[0].labelled else (second, first)
        raise InrError(f"{labelled} is labelled and {other} is not; label both (fit-many --labels) or neither")
    both = {e.name for e in plans[0].images} & {e.name for e in plans[1].images}
    if both:
        raise InrError(f"{sorted(both)[0]} is in both {first} and {second}; a set has one network per image")
    images = sorted(plans[0].images + plans[1].images, key=lambda e: e.name)
    shards = plans[0].shards + plans[1].shards
    joined = Plan(str(first), plans[0].config, plans[0].spec, images, shards, plans[0].pack,
                  plans[0].skipped + plans[1].skipped, plans[0].start_sha256, plans[0].output_start, plans[0].latent)
    with scratch(out.with_name(f".{out.name}.joining")) as work:
        try:
            _write(work, joined, [(first, plan_a, set_a), (second, plan_b, set_b)])
        except OSError as exc:
            raise InrError(f"cannot write the joined set in {work} ({exc.strerror or exc})") from None
        try:
            if out.is_dir():  # an empty folder but for a file manager's files: they go with it
                for name in os.listdir(out):
                    os.rename(out / name, work / name)
            release(work, out)
        except OSError as exc:
            raise InrError(f"cannot name the joined set {out} ({exc.strerror or exc})") from None
    return joined


def _write(work: Path, joined: Plan, sets: list[tuple[Path, Plan, NetworkSet]]) -> None:
    (work / SHARDS).mkdir()
    rows = work / WEIGHTS
    count, width = len(joined.images), joined.row_size
    with open(rows, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (count, width)})
        handle.truncate(handle.tell() + count * width * 4)
    shard = 0
    for folder, plan, networks in sets:
        write_rows(rows, [joined.row_of[row["name"]] for row in networks.index], np.asarray(networks.weights))
        for index in range(len(plan.shards)):
            shutil.copyfile(folder / shard_name(index), work / shard_name(shard))
            shard += 1
    if joined.latent:  # the one base of both sets of latents (their start's sha256 is one)
        shutil.copyfile(sets[0][0] / BASE, work / BASE)
    (work / PLAN).write_text(joined.to_json())
    assemble(SetFolder(work), joined)  # index.csv and network.json from the shards, the rows in place


def _colour(values: list[float] | None) -> str:
    return "each image's own mean" if values is None else "(" + ", ".join(f"{v:.3f}" for v in values) + ")"
