"""The output folder of `inr fit-many`, a data set of networks: its file names, and reading it back.

    OUT/weights.npy     [N, P] float32, row i is the network of index.csv row i (np.load reads it)
    OUT/index.csv       name, psnr, loss, steps, seed, width, height (and label, for class folders)
    OUT/network.json    the network's description (NetworkSpec) and the configuration that fitted it
    OUT/fit-many.json   the plan, and OUT/shards/ the finished shards, for resuming
    OUT/weights.npy.part    weights.npy while it is being fitted (each network written at its row)
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError
from inr_cli.formats.versions import refuse_newer

PLAN = "fit-many.json"
SHARDS = "shards"
WEIGHTS = "weights.npy"
WEIGHTS_PART = "weights.npy.part"  # the rows as they are written, renamed weights.npy when all are there
INDEX = "index.csv"
DESCRIPTION = "network.json"
INDEX_COLUMNS = ("name", "psnr", "loss", "steps", "seed", "width", "height")
LABEL = "label"  # the last column when the images came in class folders (the first folder level)
FORMAT_VERSION = 1  # of network.json and fit-many.json, written together


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
        close = [r["name"] for r in self.index if r["name"].split(".")[0] == name.split(".")[0]]
        hint = f"; did you mean {close[0]}?" if close else f" ({len(self.index)} images, e.g. {self.index[0]['name']})"
        raise InrError(f"no image named '{name}' in this set{hint}")


def is_network_set(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / PLAN).is_file()


def load_network_set(out: Path) -> NetworkSet:
    out = Path(out)
    if not (out / WEIGHTS).is_file():
        raise InrError(f"{out}: the set is not finished (no {WEIGHTS}); run the same inr fit-many command again")
    try:
        description = json.loads((out / DESCRIPTION).read_text())
        refuse_newer_set(out / DESCRIPTION, description)
        spec = NetworkSpec.from_json(json.dumps(description["spec"]))
        with open(out / INDEX, newline="") as handle:
            index = list(csv.DictReader(handle))
        weights = np.load(out / WEIGHTS, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InrError(f"{out}: damaged network set ({exc})") from None
    if weights.shape != (len(index), spec.parameter_count()) or weights.dtype != np.float32:
        raise InrError(f"{out}: damaged network set: weights {weights.shape} {weights.dtype} for "
                       f"{len(index)} images of {spec.parameter_count()} parameters")
    return NetworkSet(spec, tuple(description["channels"]), index, weights)


def refuse_newer_set(where: object, document) -> None:
    """InrError when a set's network.json or plan (`document`, parsed) was written by a newer inr."""
    version = document.get("format_version", 1) if isinstance(document, dict) else 1
    if isinstance(version, int):
        refuse_newer(where, version, FORMAT_VERSION)
