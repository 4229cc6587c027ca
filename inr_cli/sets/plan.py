"""The plan of a set (fit-many.json): every image with its size, a fingerprint of its file and its
seed, the settings, and the shards (images of one size, fitted together). A rerun is checked
against it, and the workers are sent pieces of it.

An image's seed comes from --seed and its name alone (image_seed), so its network does not depend
on the pack, the worker or the machine that fitted it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
from dataclasses import dataclass, field, fields

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError
from inr_cli.formats.network_set import FORMAT_VERSION, PLAN, refuse_newer_set
from inr_cli.sets import inputs
from inr_cli.settings import FIT_MANY_FREE_KEYS

# The settings a rerun may change: they decide where and how fast, not what is fitted.
FREE_KEYS = FIT_MANY_FREE_KEYS


def image_seed(seed: int, name: str) -> int:
    """The initialisation and mini-batch seed of the image `name`: from the run's seed and the name
    alone, below 2^63 so that it fits every integer type it passes through."""
    digest = hashlib.sha256(f"inr-fit-many/{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class ImageEntry:
    name: str
    width: int
    height: int
    channels: tuple[str, ...]
    sha256: str  # the start of the file's sha256: a worker checks it before fitting the image
    seed: int
    location: str = ""  # where the workers read it (a path or a URL)
    bytes: int = -1  # the file's size when listed: a rerun compares the listing, it reads nothing
    label: str = ""


IMAGE_FIELDS = [f.name for f in fields(ImageEntry)]
entry_values = operator.attrgetter(*IMAGE_FIELDS)  # an entry as the tuple of its fields, in one C call


@dataclass
class Plan:
    folder: str  # the input: a folder, a list file or a URL
    config: Config
    spec: NetworkSpec
    images: list[ImageEntry]  # sorted by name: row i of weights.npy is images[i]
    shards: list[list[str]]  # names, in fitting order
    pack: int
    skipped: list[list[str]] = field(default_factory=list)  # [name, why] of the inputs that do not decode

    def settings(self) -> dict:
        """What the fitted networks depend on, besides the images: a rerun must match it."""
        values = {key: self.config.get(key) for key in configuration.KEY_TYPES if key not in FREE_KEYS}
        return {"settings": values, "pack": self.pack}

    def to_json(self) -> str:
        # One row per image (and no indent: the C encoder), so that a million-image plan is written
        # in seconds; fields names them once.
        return json.dumps({"format_version": FORMAT_VERSION, "folder": self.folder,
                           "config": json.loads(configuration.to_json(self.config)),
                           "spec": json.loads(self.spec.to_json()), "pack": self.pack, "fields": IMAGE_FIELDS,
                           "images": list(map(entry_values, self.images)),  # tuples: lists in JSON
                           "shards": self.shards, "skipped": self.skipped})

    @classmethod
    def from_json(cls, text: str, where: object = PLAN) -> "Plan":
        data = json.loads(text)
        refuse_newer_set(where, data)  # before its unknown contents read as damage
        folder = data["folder"]
        rows = data["images"]
        if "fields" in data:  # else an older plan: one object per image
            rows = [dict(zip(data["fields"], row)) for row in rows]
        images = [ImageEntry(**{"location": os.path.join(folder, e["name"]), **e,
                                "channels": tuple(e["channels"])}) for e in rows]
        return cls(folder, configuration.from_json(json.dumps(data["config"])),
                   NetworkSpec.from_json(json.dumps(data["spec"])), images, data["shards"], data["pack"],
                   data.get("skipped", []))

    def entry(self, name: str) -> ImageEntry:
        return self.images[self.row_of[name]]

    @functools.cached_property
    def row_of(self) -> dict[str, int]:
        """Each image's row of weights.npy."""
        return {e.name: i for i, e in enumerate(self.images)}

    @property
    def labelled(self) -> bool:
        return any(e.label for e in self.images)


def entries_from_probe(listed: list[inputs.Listed], found: list[tuple], config: Config,
                       skip_unreadable: bool) -> tuple[list[ImageEntry], list[list[str]]]:
    """The plan's images from what the probe learned; an input that does not decode is refused,
    naming it, or skipped and listed."""
    entries, skipped = [], []
    if found and all(result[0] == "error" for result in found):  # --skip-unreadable would skip them all
        raise InrError(f"none of the {len(found)} images can be read; the first: {found[0][1]}")
    for item, result in zip(listed, found):
        if result[0] == "error":
            if not skip_unreadable:
                raise InrError(f"{result[1]} (pass --skip-unreadable to fit the other images and list this one)")
            skipped.append([item.name, result[1]])
            continue
        width, height, channels, digest = result
        entries.append(ImageEntry(item.name, width, height, tuple(channels.split(",")), digest,
                                  image_seed(config.training.seed, item.name), item.location, item.size, item.label))
    if not entries:
        raise InrError("no images to fit" + (f" ({len(skipped)} unreadable)" if skipped else ""))
    return entries, skipped


def make_plan(source: str, config: Config, entries: list[ImageEntry], pack: int,
              skipped: list[list[str]] | None = None) -> Plan:
    first = entries[0]
    for entry in entries[1:]:
        if entry.channels != first.channels:
            raise InrError(f"{first.name} has channels {','.join(first.channels)} but {entry.name} has "
                           f"{','.join(entry.channels)}; one network shape needs one kind of image (--gray makes all grey)")
        if (entry.width, entry.height) != (first.width, first.height) and not config.data.size:
            raise InrError(f"{first.name} is {first.width}x{first.height} but {entry.name} is "
                           f"{entry.width}x{entry.height}; pass --size N to fit every image inside N x N")
    spec = NetworkSpec.from_config(config, len(first.channels))
    shards = []
    by_size: dict[tuple[int, int], list[str]] = {}
    for entry in entries:  # a pack holds images of one size: they share one table of coordinates
        by_size.setdefault((entry.width, entry.height), []).append(entry.name)
    for names in by_size.values():
        shards += [names[i:i + pack] for i in range(0, len(names), pack)]
    return Plan(source, config, spec, entries, shards, pack, skipped or [])
