"""The plan of a set (fit-many.json): every image with its size, a fingerprint of its file and its
seed, the settings, and the shards (images of one size, fitted together). A rerun is checked
against it, and the workers are sent pieces of it.

An image's seed comes from --seed and its name alone (image_seed), so its network does not depend
on the pack, the worker or the machine that fitted it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import MAX_IMAGE_PIXELS, beyond_image_limits
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import input_files
from inr_cli.formats.network_set import FORMAT_VERSION, PLAN, format_version, refuse_newer_set
from inr_cli.formats.pixel_csv import CHANNEL_SETS
from inr_cli.formats.start import SHARED, start_sha256
from inr_cli.limits import MAX_LIST_BYTES
from inr_cli.sets import inputs


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
REQUIRED_FIELDS = ("name", "width", "height", "channels", "sha256", "seed")  # an older plan may lack the others
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
    start_sha256: str = ""  # the content of a file start (training.init = PATH): a rerun notices it changed
    # A shared start's outputs, one colour for every network (shared_output_start); None: each
    # network's own image's mean (a random start, no mean asked for, or a set of an older inr)
    output_start: list[float] | None = None
    # A set of latents over a base (training.init names it, formats/modulated.py): the numbers per
    # image, each row of weights.npy one image's latent; 0: a set of whole networks
    latent: int = 0

    @property
    def row_size(self) -> int:
        """The float32 numbers of each row of weights.npy: a latent's, or a whole network's."""
        return self.latent or self.spec.parameter_count()

    def settings(self) -> dict:
        """What the fitted networks depend on, besides the images: a rerun must match it."""
        return {"settings": configuration.fitted_settings(self.config), "pack": self.pack,
                "start_sha256": self.start_sha256}

    def to_json(self) -> str:
        # One row per image (and no indent: the C encoder), so that a million-image plan is written
        # in seconds; fields names them once.
        return json.dumps({"format_version": format_version(self.latent), "folder": self.folder,
                           "config": json.loads(configuration.to_json(self.config)),
                           "spec": json.loads(self.spec.to_json()), "pack": self.pack, "fields": IMAGE_FIELDS,
                           "images": list(map(entry_values, self.images)),  # tuples: lists in JSON
                           "shards": self.shards, "skipped": self.skipped, "start_sha256": self.start_sha256,
                           "output_start": self.output_start, **({"latent": self.latent} if self.latent else {})})

    @classmethod
    def from_json(cls, text: str, where: object = PLAN) -> "Plan":
        """The plan in `text` (the file `where`), checked whole before anything acts on it (a rerun
        renames files by it, a worker is sent its images, the viewer reads where it says): BadPlan
        says what is wrong; a plan of a newer inr is an InrError that says so."""
        data = _document(text)
        refuse_newer_set(where, data)  # before its unknown contents read as damage
        return plan_from_document(data)

    @classmethod
    def read(cls, path: Path) -> "Plan":
        """A set's fit-many.json read as untrusted (a regular file of bounded size, then from_json),
        every fault one line naming the file."""
        data = input_files.read_local(path, MAX_LIST_BYTES, "a set's plan")
        try:
            return cls.from_json(data.decode("utf-8"), path)
        except (BadPlan, UnicodeDecodeError) as exc:
            raise InrError(f"{path}: damaged plan ({exc})") from None

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


MID_GREY = 0.5


def shared_output_start(channels: int) -> list[float]:
    """Where a shared start's outputs begin: mid-grey in every channel, one start for every network
    and the same whatever the other images of the set (so that a set grown by --add, or joined, is
    the set fitted at once). Each network's own image's mean would make the starts differ and put
    the mean colour, a photo's strongest cue, in three biases, where a model on the weights finds it
    less (BENCHMARKS.md, the weights suite); the set's mean colour would tie a network to the rest."""
    return [MID_GREY] * channels


def make_plan(source: str, config: Config, entries: list[ImageEntry], pack: int,
              skipped: list[list[str]] | None = None) -> Plan:
    first = entries[0]
    for entry in entries[1:]:
        if entry.channels != first.channels:
            raise InrError(f"{first.name} has channels {','.join(first.channels)} but {entry.name} has "
                           f"{','.join(entry.channels)}; one network shape needs one kind of image "
                           f"(--gray makes all grey)")
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
    shared = config.training.init == SHARED and config.network.init_output_at_mean
    return Plan(source, config, spec, entries, shards, pack, skipped or [], start_sha256(config.training.init),
                shared_output_start(len(first.channels)) if shared else None)


class BadPlan(ValueError):
    """A fit-many.json that this inr cannot act on; the message says what in it is wrong."""


SEED_LIMIT = 1 << 63  # image_seed's range
FINGERPRINT = re.compile(r"[0-9a-f]{1,64}")


def _document(text: str) -> dict:
    try:
        data = json.loads(text)
    except RecursionError:  # before the parser's own ValueError: the JSON decoder recurses per level
        raise BadPlan("its JSON is nested too deeply") from None
    except ValueError as exc:
        raise BadPlan(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise BadPlan(f"a JSON {type(data).__name__}, not an object")
    return data


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def plan_from_document(data: dict) -> Plan:
    """Every field's type and range, then the fields against each other: the network description
    against the settings, every shard's names against the images."""
    version = data.get("format_version", FORMAT_VERSION)  # absent in the first plans; a newer one refused before
    if type(version) is not int:
        raise BadPlan(f"'format_version' is {_shown(version)}, not an integer")
    folder, pack = data.get("folder"), data.get("pack")
    if type(folder) is not str:
        raise BadPlan(f"'folder' is {_shown(folder)}, not the input's path")
    if type(pack) is not int or pack < 1:
        raise BadPlan(f"'pack' is {_shown(pack)}, not a positive number of networks")
    config = _config(data.get("config"))
    images = _images(data, folder)
    spec = _spec(data.get("spec"), config, len(images[0].channels))
    row_of = {entry.name: i for i, entry in enumerate(images)}
    shards = _shards(data.get("shards"), images, row_of, pack)
    start = data.get("start_sha256", "")  # absent before starts were recorded
    if type(start) is not str or (start and not FINGERPRINT.fullmatch(start)):
        raise BadPlan(f"'start_sha256' is {_shown(start)}, not a fingerprint")
    output_start = data.get("output_start")  # absent before a shared start's outputs began at one colour
    if output_start is not None and not (isinstance(output_start, list) and len(output_start) == len(images[0].channels)
                                         and all(type(v) in (int, float) and 0 <= v <= 1 for v in output_start)):
        raise BadPlan(f"'output_start' is {_shown(output_start)}, not a colour of {len(images[0].channels)} values "
                      f"in [0, 1]")
    latent = data.get("latent", 0)  # absent in a set of whole networks
    if type(latent) is not int or latent < 0 or (latent and not start):
        raise BadPlan(f"'latent' is {_shown(latent)}, not the numbers per image of a set over a base file")
    plan = Plan(folder, config, spec, images, shards, pack, _skipped(data.get("skipped", []), row_of), start,
                None if output_start is None else [float(v) for v in output_start], latent)
    plan.__dict__["row_of"] = row_of  # the cached property, already made
    return plan


def _config(value) -> Config:
    if not isinstance(value, dict):
        raise BadPlan(f"'config' is {_shown(value)}, not the settings")
    try:
        return configuration.validate(configuration.from_json(json.dumps(value)))
    except UsageError as exc:
        raise BadPlan(f"its settings: {str(exc).removeprefix('checkpoint: ')}") from None


def _spec(value, config: Config, out_features: int) -> NetworkSpec:
    """The network the plan's settings give, which the plan's own description must be."""
    try:
        expected = NetworkSpec.from_config(config, out_features)
    except (ValueError, UsageError) as exc:
        raise BadPlan(f"its settings do not give a network ({exc})") from None
    wanted = json.loads(expected.to_json())
    if not isinstance(value, dict):
        raise BadPlan(f"'spec' is {_shown(value)}, not the network's description")
    given = {"in_features": expected.in_features, **value}  # the first plans did not write it
    for key in sorted(wanted.keys() | given.keys()):
        if key not in wanted or given.get(key) != wanted[key] or type(given.get(key)) is bool:
            raise BadPlan(f"its network description says {key} = {_shown(given.get(key))}, its settings give "
                          f"{_shown(wanted.get(key))}")
    return expected


def _images(data: dict, folder: str) -> list[ImageEntry]:
    """The images, checked column by column (a million-image plan is read in seconds)."""
    rows = data.get("images")
    if type(rows) is not list or not rows:
        raise BadPlan("'images' is not a list of images")
    if "fields" in data:
        names = data["fields"]
        if (type(names) is not list or not all(type(n) is str for n in names) or len(set(names)) != len(names)
                or not set(REQUIRED_FIELDS) <= set(names) <= set(IMAGE_FIELDS)):
            raise BadPlan(f"'fields' is {_shown(names)}, not {', '.join(IMAGE_FIELDS)}")
        bad = next((i for i, row in enumerate(rows) if type(row) is not list or len(row) != len(names)), None)
        if bad is not None:
            raise BadPlan(f"image {bad + 1} is {_shown(rows[bad])}, not a list of its {len(names)} fields")
        columns = dict(zip(names, zip(*rows)))
    else:  # an older plan: one object per image
        bad = next((i for i, row in enumerate(rows) if type(row) is not dict
                    or not set(REQUIRED_FIELDS) <= row.keys() <= set(IMAGE_FIELDS)), None)
        if bad is not None:
            raise BadPlan(f"image {bad + 1} is {_shown(rows[bad])}, not an object of {', '.join(REQUIRED_FIELDS)}")
        columns = {name: tuple(row[name] for row in rows) for name in IMAGE_FIELDS if name in rows[0]}
        if any(columns.keys() != row.keys() for row in rows):
            raise BadPlan("its images do not all have the same fields")
    count = len(rows)
    _check(columns, "name", _texts, lambda v: type(v) is str and v != "" and "\0" not in v, "a file name")
    _check(columns, "width", _whole(1, MAX_IMAGE_PIXELS), None, "a width in pixels")
    _check(columns, "height", _whole(1, MAX_IMAGE_PIXELS), None, "a height in pixels")
    _check(columns, "channels", lambda c: set(map(type, c)) == {list} and set(map(tuple, c)) <= CHANNEL_SETS.keys(),
           lambda v: type(v) is list and tuple(v) in CHANNEL_SETS, "l, r,g,b or r,g,b,a")
    _check(columns, "sha256", lambda c: set(map(type, c)) == {str} and all(map(FINGERPRINT.fullmatch, c)),
           lambda v: type(v) is str and FINGERPRINT.fullmatch(v) is not None, "a fingerprint")
    _check(columns, "seed", _whole(0, SEED_LIMIT - 1), None, "a seed below 2^63")
    _check(columns, "location", _texts, None, "a path or a URL")
    _check(columns, "bytes", _whole(-1, None), None, "a file size")
    _check(columns, "label", _texts, None, "a label")
    names = columns["name"]
    unique = set(names)
    if "" in unique:
        raise BadPlan(f"image {names.index('') + 1}: its name is empty")
    if len(unique) != count:
        seen: set[str] = set()
        twice = next(name for name in names if name in seen or seen.add(name))
        raise BadPlan(f"{_shown(twice)} is listed twice in 'images'")
    big = next((i for i, (w, h) in enumerate(zip(columns["width"], columns["height"])) if beyond_image_limits(w, h)),
               None)
    if big is not None:
        raise BadPlan(f"{_shown(names[big])}: {beyond_image_limits(columns['width'][big], columns['height'][big])}")
    if len(set(map(tuple, columns["channels"]))) != 1:
        raise BadPlan("its images do not all have the same channels (one network shape needs one kind of image)")
    channels = tuple(columns["channels"][0])
    locations = columns.get("location") or ("",) * count
    locations = [location or os.path.join(folder, name) for location, name in zip(locations, names)]
    return list(map(ImageEntry, names, columns["width"], columns["height"], (channels,) * count, columns["sha256"],
                    columns["seed"], locations, columns.get("bytes") or (-1,) * count,
                    columns.get("label") or ("",) * count))


def _texts(column) -> bool:
    return set(map(type, column)) <= {str} and "\0" not in "".join(column)


def _whole(low: int, high: int | None):
    def valid(column) -> bool:  # bool is a type of its own here, so true and false are refused
        return set(map(type, column)) == {int} and min(column) >= low and (high is None or max(column) <= high)
    return valid


def _check(columns: dict, name: str, valid_column, valid, what: str) -> None:
    """A column checked at C speed (valid_column); where it fails, the first bad value found (valid:
    the same test for one value, by default valid_column of it alone) and named."""
    column = columns.get(name)
    if column is None or valid_column(column):
        return
    valid = valid or (lambda value: valid_column((value,)))
    bad = next(i for i, value in enumerate(column) if not valid(value))
    raise BadPlan(f"image {bad + 1}: its {name} {_shown(column[bad])} is not {what}")


def _shards(value, images: list[ImageEntry], row_of: dict[str, int], pack: int) -> list[list[str]]:
    """Every image in exactly one shard; a shard of at most `pack` images, all of one size."""
    if type(value) is not list or not value:
        raise BadPlan("'shards' is not a list of shards")
    if not all(type(shard) is list and 1 <= len(shard) <= pack for shard in value):
        number = next(i for i, shard in enumerate(value) if not (type(shard) is list and 1 <= len(shard) <= pack))
        raise BadPlan(f"shard {number} is not a list of 1 to {pack} (the pack) image names")
    named = list(itertools.chain.from_iterable(value))
    if set(map(type, named)) != {str} or len(named) != len(images) or set(named) != row_of.keys():  # each image once
        seen: set[str] = set()
        for number, shard in enumerate(value):
            for name in shard:
                if type(name) is not str or name not in row_of:
                    raise BadPlan(f"shard {number}: {_shown(name)} is not an image of the plan")
                if name in seen:
                    raise BadPlan(f"shard {number}: {_shown(name)} is in another shard too")
                seen.add(name)
        missing = next(entry.name for entry in images if entry.name not in seen)
        raise BadPlan(f"{_shown(missing)} is in no shard")
    size_of = [(entry.width, entry.height) for entry in images]
    for number, shard in enumerate(value):
        if len(set(map(size_of.__getitem__, map(row_of.__getitem__, shard)))) != 1:
            raise BadPlan(f"shard {number} holds images of different sizes")
    return value


def _skipped(value, row_of: dict[str, int]) -> list[list[str]]:
    if type(value) is not list or not all(type(item) is list and len(item) == 2 and all(type(t) is str for t in item)
                                          for item in value):
        raise BadPlan("'skipped' is not a list of [name, reason]")
    fitted = next((name for name, _ in value if name in row_of), None)
    if fitted is not None:
        raise BadPlan(f"{_shown(fitted)} is both skipped and an image to fit")
    return value
