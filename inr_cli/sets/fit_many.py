"""`inr fit-many`: one network per image of a folder, fitted in packs through the core's networks dimension.

The folder becomes a plan (fit-many.json): every image with its size, the hash of its file and its
seed, the settings, and the shards (packs of images of one size, fitted together in one Trainer).
Each finished shard is written atomically to shards/; running the same command again skips the
shards that are there, so a killed run loses at most the shards in flight. When every shard is
done, the set is assembled (inr_cli/formats/network_set.py says what its files hold).

An image's seed comes from --seed and its file name alone (image_seed), and a network trained in a
pack gets the bits it would get alone, so its network does not depend on the pack, the worker or
the machine that fitted it: `inr train IMAGE --seed SEED` with the same settings gives the same one.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.config import Config, with_values
from inr_cli.formats.data import load_training_data
from inr_cli.errors import InrError, UsageError
from inr_cli.hooks import hook
from inr_cli.formats.images import PixelImage
from inr_cli.formats.network_set import (DESCRIPTION, FORMAT_VERSION, INDEX, INDEX_COLUMNS, PLAN, SHARDS,
                                         WEIGHTS)
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.sizing import AUTO, SIZED_KEYS, fit_to_image
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Signals, run_steps
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
    sha256: str
    seed: int


@dataclass
class Plan:
    folder: str
    config: Config
    spec: NetworkSpec
    images: list[ImageEntry]
    shards: list[list[str]]  # names, in fitting order
    pack: int

    def settings(self) -> dict:
        """What the fitted networks depend on: a rerun must match it."""
        values = {key: self.config.get(key) for key in configuration.KEY_TYPES if key not in FREE_KEYS}
        return {"settings": values, "images": [(e.name, e.sha256) for e in self.images], "pack": self.pack}

    def to_json(self) -> str:
        return json.dumps({"format_version": FORMAT_VERSION, "folder": self.folder,
                           "config": json.loads(configuration.to_json(self.config)),
                           "spec": json.loads(self.spec.to_json()), "pack": self.pack,
                           "images": [asdict(e) for e in self.images], "shards": self.shards}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        images = [ImageEntry(**{**e, "channels": tuple(e["channels"])}) for e in data["images"]]
        return cls(data["folder"], configuration.from_json(json.dumps(data["config"])),
                   NetworkSpec.from_json(json.dumps(data["spec"])), images, data["shards"], data["pack"])

    def entry(self, name: str) -> ImageEntry:
        return self.by_name[name]

    @functools.cached_property
    def by_name(self) -> dict[str, ImageEntry]:
        return {e.name: e for e in self.images}


def load_folder_image(folder: Path, name: str, config: Config) -> PixelImage:
    """An image of the folder exactly as `inr train FOLDER/NAME --size --gray` would load it."""
    return load_training_data(str(folder / name), config.data.size, config.data.gray)


def scan_folder(folder: Path, config: Config, skip_unreadable: bool) -> tuple[list[ImageEntry], list[str]]:
    """Every file of the folder (not hidden, not in subfolders) decoded once, before any work: one
    that does not decode is refused, naming it, or skipped and listed."""
    if not folder.is_dir():
        raise InrError(f"{folder}: not a folder of images")
    entries, skipped = [], []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            image = load_folder_image(folder, path.name, config)
        except InrError as exc:
            if not skip_unreadable:
                raise InrError(f"{exc} (pass --skip-unreadable to fit the other images and list this one)") from None
            skipped.append(f"{path.name}: {exc}")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        entries.append(ImageEntry(path.name, image.width, image.height, image.channels, digest,
                                  image_seed(config.training.seed, path.name)))
    if not entries:
        raise InrError(f"{folder}: no images to fit" + (f" ({len(skipped)} unreadable)" if skipped else ""))
    return entries, skipped


def make_plan(folder: Path, config: Config, entries: list[ImageEntry], pack: int) -> Plan:
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
    return Plan(str(folder.resolve()), config, spec, entries, shards, pack)


def default_pack(backend, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
    """As many networks per step as fill the device: the training workspace and parameters of a
    network against the backend's memory budget (half the GPU's free memory, a share of the host's)."""
    rows = width * height if config.training.batch_size == 0 else min(config.training.batch_size, width * height)
    widths = sum(out_f for out_f, _ in spec.layer_shapes())
    per_network = 4 * (rows * (3 * widths + 2 * spec.encoded_features + 2 * spec.out_features + 4)
                       + 5 * spec.parameter_count())
    budget = backend.memory_budget()
    return int(max(1, min(4096, budget // max(per_network, 1))))


def shard_path(out: Path, index: int) -> Path:
    return out / SHARDS / f"{index:05d}.npz"


def fit_shard(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None) -> dict:
    """Fit one shard: its networks trained together for the full budget (the training loop of `inr
    train`, without checkpoints: a shard is written whole or not at all), then scored on their
    images. A pack with a network that diverges stops, naming its images."""
    seeds = [plan.entry(name).seed for name in names]
    state = TrainingState.fresh(plan.spec, seeds, output_means(plan.config, images))
    trainer = Trainer(backend, plan.spec, plan.config, images, state, seeds)
    try:
        loss = run_steps(trainer, signals or Signals(), plan.config.training.log_every)
    except Diverged as exc:
        bad = [names[i] for i in np.flatnonzero(exc.which)]
        listed = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InrError(f"{listed}: {exc.describe(int(np.flatnonzero(exc.which)[0]))}; the pack stopped, the shards "
                       f"finished before it are kept. Try a smaller learning rate, e.g. "
                       f"--lr {plan.config.optimizer.lr / 10:g}") from None
    first = images[0]
    rendered = render_networks(backend, plan.spec, trainer.params, first.width, first.height)
    errors = [float(np.mean((rendered[i] - images[i].values) ** 2, dtype=np.float64)) for i in range(len(images))]
    return {"names": np.array(names), "params": np.array(backend.to_host(trainer.params)), "loss": loss,
            "psnr": np.array([psnr_from_mse(e) for e in errors])}


def write_shard(out: Path, index: int, result: dict) -> None:
    with atomic_path(shard_path(out, index), suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **result)


def read_shard(out: Path, index: int) -> dict:
    with np.load(shard_path(out, index), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def prepare(folder: Path, out: Path, config: Config, pack: int | None, backend, skip_unreadable: bool,
            notices: list) -> tuple[Plan, list[int]]:
    """The plan (new, or the one in OUT checked against this command) and the shards still to fit."""
    entries, skipped = scan_folder(folder, config, skip_unreadable)
    for line in skipped:
        notices.append(f"skipped {line}")
    existing = out / PLAN
    if existing.is_file():
        try:
            saved = Plan.from_json(existing.read_text())
        except (ValueError, KeyError, TypeError, UsageError) as exc:
            raise InrError(f"{existing}: not a plan this inr can read ({exc})") from None
        # A setting left to the size is the one this data set already got (an older inr may have
        # chosen it differently); one given by hand is checked against it below.
        config = with_values(config, {key: saved.config.get(key) for key in SIZED_KEYS if config.get(key) == AUTO})
        plan = make_plan(folder, config, entries, pack or saved.pack)
        _refuse_changes(out, saved, plan)
        plan = saved
        plan.config = config  # the free keys (device, ...) may differ; the rest was just checked
    else:
        config, reasons = fit_to_image(config, max(e.width for e in entries), max(e.height for e in entries))
        notices += reasons
        if pack is None:
            first = entries[0]
            spec = NetworkSpec.from_config(config, len(first.channels))
            pack = default_pack(backend, spec, config, first.width, first.height)
        plan = make_plan(folder, config, entries, pack)
        try:
            (out / SHARDS).mkdir(parents=True, exist_ok=True)
            atomic_write_text(existing, plan.to_json())
        except OSError as exc:
            raise InrError(f"cannot write to {out} ({exc.strerror or exc})") from None
    for leftover in (out / SHARDS).glob(".*.tmp"):  # a write killed before its rename
        leftover.unlink(missing_ok=True)
    pending = [i for i in range(len(plan.shards)) if not shard_path(out, i).is_file()]
    return plan, pending


def _refuse_changes(out: Path, saved: Plan, plan: Plan) -> None:
    old, new = saved.settings(), plan.settings()
    if old["images"] != new["images"]:
        raise InrError(f"{out} was started on other images (the folder changed since); use another -o")
    if old["pack"] != new["pack"]:
        raise InrError(f"{out} was started with --pack {old['pack']}, not {new['pack']}; "
                       f"rerun without --pack or with --pack {old['pack']}")
    for key, value in old["settings"].items():
        if new["settings"].get(key) != value:
            raise InrError(f"{out} was started with {key} = {value!r}, not {new['settings'].get(key)!r}; "
                           f"rerun with the same settings, or use another -o")


def shard_images(plan: Plan, index: int) -> list[PixelImage]:
    folder = Path(plan.folder)
    return [load_folder_image(folder, name, plan.config) for name in plan.shards[index]]


def run_in_process(backend, plan: Plan, out: Path, pending: list[int], on_shard, signals: Signals) -> None:
    for index in pending:
        result = fit_shard(backend, plan, shard_images(plan, index), plan.shards[index], signals)
        write_shard(out, index, result)
        on_shard(index, result)
        hook("shard-written", shards=out / SHARDS)


def assemble(out: Path, plan: Plan) -> int:
    """weights.npy, index.csv and network.json from the finished shards; returns the bytes per image."""
    names, params, rows = [], [], []
    for index in range(len(plan.shards)):
        shard = read_shard(out, index)
        for i, name in enumerate(shard["names"].tolist()):
            entry = plan.entry(name)
            names.append(name)
            params.append(shard["params"][i])
            rows.append((name, f"{shard['psnr'][i]:.4f}", f"{shard['loss'][i]:.8g}", plan.config.training.steps,
                         entry.seed, entry.width, entry.height))
    order = np.argsort(np.array(names), kind="stable")  # rows sorted by name, whatever the shards were
    weights = np.stack(params)[order].astype(np.float32)
    with atomic_path(out / WEIGHTS, suffix=".npy") as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, weights)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(INDEX_COLUMNS)
    writer.writerows(rows[i] for i in order)
    atomic_write_text(out / INDEX, buffer.getvalue())
    description = {"format_version": FORMAT_VERSION, "spec": json.loads(plan.spec.to_json()),
                   "config": json.loads(configuration.to_json(plan.config)), "channels": list(plan.images[0].channels),
                   "parameters_per_network": plan.spec.parameter_count(), "dtype": "float32"}
    atomic_write_text(out / DESCRIPTION, json.dumps(description, indent=1) + "\n")
    return plan.spec.parameter_count() * 4
