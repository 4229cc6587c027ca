"""The output folder of `inr fit-many`, a data set of networks: its file names, and reading it back.

    OUT/weights.npy     [N, P] float32, row i is the network of index.csv row i (np.load reads it)
    OUT/index.csv       name, psnr, loss, steps, seed, width, height (and label, for class folders)
    OUT/network.json    the network's description (NetworkSpec) and the configuration that fitted it
    OUT/fit-many.json   the plan, and OUT/shards/ the finished shards, for resuming
    OUT/weights.npy.part    weights.npy while it is being fitted (each network written at its row)

A name or label in index.csv that a spreadsheet would run as a formula (one beginning with = + - @,
a tab or a carriage return) is written behind an apostrophe, as spreadsheets expect, and so is one
that begins with an apostrophe before such a character or another apostrophe; inr's reader takes
the apostrophe off (index_cell writes a cell, index_text reads it), so every name reads back exactly.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError

PLAN = "fit-many.json"
SHARDS = "shards"
WEIGHTS = "weights.npy"
WEIGHTS_PART = "weights.npy.part"  # the rows as they are written, renamed weights.npy when all are there
INDEX = "index.csv"
DESCRIPTION = "network.json"
INDEX_COLUMNS = ("name", "psnr", "loss", "steps", "seed", "width", "height")
LABEL = "label"  # the last column when the images came in class folders (the first folder level)
FORMAT_VERSION = 1


@dataclass
class NetworkSet:
    """A finished `inr fit-many` folder, read back."""

    spec: NetworkSpec
    channels: tuple[str, ...]
    index: list[dict]
    weights: np.ndarray  # [N, P] float32, memory-mapped

    def row(self, name: str) -> int:
        for i, row in enumerate(self.index):
            if row["name"] == name:
                return i
        if not self.index:  # a set is never fitted empty: it was damaged
            raise InrError(f"no image named '{name}': this set holds no networks (a damaged set)")
        close = [r["name"] for r in self.index if r["name"].split(".")[0] == name.split(".")[0]]
        hint = f"; did you mean {close[0]}?" if close else f" ({len(self.index)} images, e.g. {self.index[0]['name']})"
        raise InrError(f"no image named '{name}' in this set{hint}")


def is_network_set(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / PLAN).is_file()


# A spreadsheet runs a cell that begins so as a formula (CSV injection): index.csv holds such a name
# or label behind an apostrophe, as spreadsheets expect, and so does one that would otherwise read
# back as escaped, so that every name reads back exactly.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE = "'"


def index_cell(text: str) -> str:
    """A name or label as index.csv holds it (index_text reads it back)."""
    escaped = text[:1] in FORMULA_STARTS or (text[:1] == ESCAPE and text[1:2] in FORMULA_STARTS + (ESCAPE,))
    return ESCAPE + text if escaped else text


def index_text(cell: str) -> str:
    """The name or label that index_cell wrote as `cell`."""
    return cell[1:] if cell[:1] == ESCAPE and cell[1:2] in FORMULA_STARTS + (ESCAPE,) else cell


def load_network_set(out: Path) -> NetworkSet:
    out = Path(out)
    if not (out / WEIGHTS).is_file():
        raise InrError(f"{out}: the set is not finished (no {WEIGHTS}); run the same inr fit-many command again")
    try:
        description = json.loads((out / DESCRIPTION).read_text())
        spec = NetworkSpec.from_json(json.dumps(description["spec"]))
        with open(out / INDEX, newline="") as handle:
            index = list(csv.DictReader(handle))
        for row in index:
            for column in ("name", LABEL):
                if isinstance(row.get(column), str):
                    row[column] = index_text(row[column])
        weights = np.load(out / WEIGHTS, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InrError(f"{out}: damaged network set ({exc})") from None
    if weights.shape != (len(index), spec.parameter_count()) or weights.dtype != np.float32:
        raise InrError(f"{out}: damaged network set: weights {weights.shape} {weights.dtype} for "
                       f"{len(index)} images of {spec.parameter_count()} parameters")
    return NetworkSet(spec, tuple(description["channels"]), index, weights)
