"""`inr fit-many`: one network per image of a folder, fitted in packs through the core's networks dimension.

The folder becomes a plan (fit-many.json): every image with its size, the hash of its file and its
seed, the settings, and the shards (packs of images of one size, fitted together in one Trainer).
Each finished shard is written atomically to shards/; running the same command again skips the
shards that are there, so a killed run loses at most the shards in flight. When every shard is
done, the set is assembled:

    OUT/weights.npy     [N, P] float32, row i is the network of index.csv row i (np.load reads it)
    OUT/index.csv       name, psnr, loss, steps, seed, width, height
    OUT/network.json    the network's description (NetworkSpec) and the configuration that fitted it

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
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.config import Config, with_values
from inr_cli.formats.data import load_training_data
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.images import PixelImage
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.sizing import AUTO, SIZED_KEYS, fit_to_image
from inr_cli.progress import clock
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.settings import FIT_MANY_FREE_KEYS

PLAN = "fit-many.json"
SHARDS = "shards"
WEIGHTS = "weights.npy"
INDEX = "index.csv"
DESCRIPTION = "network.json"
INDEX_COLUMNS = ("name", "psnr", "loss", "steps", "seed", "width", "height")
FORMAT_VERSION = 1
# The settings a rerun may change: they decide where and how fast, not what is fitted.
FREE_KEYS = FIT_MANY_FREE_KEYS


def failpoint(kind: str, value: str, out: Path, wanted: str | None = None) -> None:
    """Fault injection for the test suite, off unless INR_FAILPOINT is set: "driver-after=K" SIGKILLs
    the driver once K shards are on disk; "worker-at=NAME" SIGKILLs the worker that starts fitting
    NAME's shard, once (a marker in OUT remembers it; Ray workers get the setting from the driver).
    A real kill of a real process, at a moment
    the test does not have to catch."""
    wanted = os.environ.get("INR_FAILPOINT", "") if wanted is None else wanted
    if wanted != f"{kind}={value}":
        return
    marker = Path(out) / f".failpoint-{kind}-{value}"
    if kind == "worker-at":
        if marker.exists():
            return
        marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


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
    network against half the GPU's free memory, or 2 GiB of host memory for the CPU."""
    rows = width * height if config.training.batch_size == 0 else min(config.training.batch_size, width * height)
    widths = sum(out_f for out_f, _ in spec.layer_shapes())
    per_network = 4 * (rows * (3 * widths + 2 * spec.encoded_features + 2 * spec.out_features + 4)
                       + 5 * spec.parameter_count())
    budget = backend.free_memory() // 2 if hasattr(backend, "free_memory") else 2 << 30
    return int(max(1, min(4096, budget // max(per_network, 1))))


def shard_path(out: Path, index: int) -> Path:
    return out / SHARDS / f"{index:05d}.npz"


def fit_shard(backend, plan: Plan, images: list[PixelImage], names: list[str]) -> dict:
    """Fit one shard: its networks trained together for the full budget, then scored on their images."""
    seeds = [plan.entry(name).seed for name in names]
    state = TrainingState.fresh(plan.spec, seeds, output_means(plan.config, images))
    trainer = Trainer(backend, plan.spec, plan.config, images, state, seeds)
    for _ in range(plan.config.training.steps):
        trainer.step()
    loss = trainer.read_loss()
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


def run_in_process(backend, plan: Plan, out: Path, pending: list[int], on_shard) -> None:
    for index in pending:
        result = fit_shard(backend, plan, shard_images(plan, index), plan.shards[index])
        write_shard(out, index, result)
        on_shard(index, result)
        failpoint("driver-after", str(len(list((out / SHARDS).glob("*.npz")))), out)


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


@dataclass
class OneNetwork:
    """The network a command draws or exports: from a run, or from a set with --image."""

    spec: NetworkSpec
    params: np.ndarray  # [P]
    channels: tuple[str, ...]
    width: int  # the size it was trained at
    height: int
    label: str  # "render", or the image's stem: a default file name


def one_network(run: Path, image: str | None) -> OneNetwork:
    from inr_cli.formats import checkpoint as ckpt

    if is_network_set(run):
        if image is None:
            raise UsageError(f"{run} is a set of networks: name one with --image NAME")
        networks = load_network_set(run)
        row = networks.row(image)
        entry = networks.index[row]
        return OneNetwork(networks.spec, np.array(networks.weights[row]), networks.channels, int(entry["width"]),
                          int(entry["height"]), f"render-{Path(image).stem}")
    if image is not None:
        raise UsageError(f"--image names an image of an inr fit-many folder; {run} is a single run")
    saved = ckpt.load(run)
    height, width, _ = saved.data_shape
    return OneNetwork(saved.spec, saved.params, saved.channels, width, height, "render")


def is_network_set(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / PLAN).is_file()


def load_network_set(out: Path) -> NetworkSet:
    out = Path(out)
    if not (out / WEIGHTS).is_file():
        raise InrError(f"{out}: the set is not finished (no {WEIGHTS}); run the same inr fit-many command again")
    try:
        description = json.loads((out / DESCRIPTION).read_text())
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


class ImageProgress:
    """Images done, images/s, time left and mean PSNR so far: a Rich bar on a terminal, else a plain
    line every `every` seconds (batch jobs, logs)."""

    def __init__(self, total: int, done: int, quiet: bool, every: float = 10.0):
        from inr_cli.console import err

        self.total, self.done, self.quiet, self.every = total, done, quiet, every
        self.start_done, self.start = done, time.perf_counter()
        self.psnrs: list[float] = []
        self.last_line = self.start
        self.console = err
        self.bar = None
        if not quiet and err.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            counter = f"images {total}/{total}"
            self.bar = Progress(  # counts and times first and never squeezed, as in training's progress
                TextColumn("images {task.completed}/{task.total}", table_column=Column(no_wrap=True,
                                                                                      min_width=len(counter))),
                TextColumn("{task.fields[elapsed]} left {task.fields[left]}", table_column=Column(no_wrap=True,
                                                                                                min_width=20)),
                TextColumn("{task.fields[rate]} images/s  mean PSNR {task.fields[psnr]}",
                           table_column=Column(no_wrap=True, overflow="ellipsis", ratio=2)),
                BarColumn(bar_width=None, table_column=Column(ratio=1)), console=err)
            self.task = self.bar.add_task("fit", total=total, completed=done, rate="-", psnr="-",
                                          elapsed=clock(0), left="-:--:--")

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def add(self, count: int, psnrs) -> None:
        self.done += count
        self.psnrs.extend(float(p) for p in psnrs)
        elapsed = time.perf_counter() - self.start
        rate = (self.done - self.start_done) / max(elapsed, 1e-9)
        mean = float(np.mean(self.psnrs))
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, rate=f"{rate:.1f}", psnr=f"{mean:.2f} dB",
                            elapsed=clock(elapsed), left=clock(left))
        elif not self.quiet and (time.perf_counter() - self.last_line >= self.every or self.done == self.total):
            self.console.print(f"images {self.done}/{self.total}  {rate:.1f} images/s  mean PSNR {mean:.2f} dB  "
                               f"elapsed {clock(elapsed)}  left {clock(left)}", soft_wrap=True, highlight=False)
            self.last_line = time.perf_counter()
