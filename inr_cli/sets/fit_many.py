"""`inr fit-many`: one network per image of a folder (or a list, or a bucket), fitted in packs
through the core's networks dimension.

The inputs become a plan (fit-many.json): every image with its size, a fingerprint of its file and
its seed, the settings, and the shards (images of one size, fitted together). What the plan needs
to know of each image is learned by a probe that runs where the images are read (on the workers,
with --ray); the driver itself only lists the inputs, plans and records. Each finished shard is
written atomically to shards/ by whoever fitted it; running the same command again lists the
inputs, compares them with the plan and fits only the shards that are missing, so a killed run
loses at most the shards in flight. When every shard is done, the set is assembled by streaming
shard after shard into weights.npy (inr_cli/formats/network_set.py says what its files hold).

An image's seed comes from --seed and its name alone (image_seed), and a network trained in a pack
gets the bits it would get alone, so its network does not depend on the pack, the worker or the
machine that fitted it: `inr train IMAGE --seed SEED` with the same settings gives the same one.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import struct
import zipfile
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.console import info, notice
from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.config import Config, with_values
from inr_cli.errors import InrError, UsageError
from inr_cli.hooks import hook
from inr_cli.formats.images import PixelImage
from inr_cli.formats.network_set import (DESCRIPTION, FORMAT_VERSION, INDEX, INDEX_COLUMNS, LABEL, PLAN, SHARDS,
                                         WEIGHTS)
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.sizing import AUTO, SIZED_KEYS, fit_to_image
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Interrupted, Signals, run_steps
from inr_cli.sets import inputs
from inr_cli.settings import FIT_MANY_FREE_KEYS

# The settings a rerun may change: they decide where and how fast, not what is fitted.
FREE_KEYS = FIT_MANY_FREE_KEYS
# Images per shard on a Ray cluster when --pack is not given: the unit of work, of resuming and of
# the driver's bookkeeping. Each worker fits a shard in packs sized from its own device.
RAY_SHARD = 512


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
                           "images": [[getattr(e, f) for f in IMAGE_FIELDS] for e in self.images],
                           "shards": self.shards, "skipped": self.skipped})

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
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
        return self.by_name[name]

    @functools.cached_property
    def by_name(self) -> dict[str, ImageEntry]:
        return {e.name: e for e in self.images}

    @property
    def labelled(self) -> bool:
        return any(e.label for e in self.images)


def probe_in_process(listed: list[inputs.Listed], config: Config) -> list[tuple]:
    return inputs.probe([(item.name, item.location) for item in listed], config)


def entries_from_probe(listed: list[inputs.Listed], found: list[tuple], config: Config,
                       skip_unreadable: bool) -> tuple[list[ImageEntry], list[list[str]]]:
    """The plan's images from what the probe learned; an input that does not decode is refused,
    naming it, or skipped and listed."""
    entries, skipped = [], []
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


def fit_pack(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None) -> dict:
    """Fit one pack: its networks trained together for the full budget (the training loop of `inr
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
    return {"names": np.array(names), "params": np.array(backend.to_host(trainer.params)),
            "loss": np.asarray(loss, dtype=np.float64).reshape(-1), "psnr": np.array([psnr_from_mse(e) for e in errors])}


def fit_shard(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
              pack: int | None = None) -> dict:
    """A shard (images of one size) in packs of at most `pack` networks: a worker's own device may
    hold fewer than the plan's shard. The networks are the same whatever the packs."""
    pack = pack or len(names)
    parts = [fit_pack(backend, plan, images[i:i + pack], names[i:i + pack], signals)
             for i in range(0, len(names), pack)]
    if len(parts) == 1:
        return parts[0]
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def write_shard(out: Path, index: int, result: dict) -> None:
    with atomic_path(shard_path(out, index), suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **result)


def read_shard(out: Path, index: int) -> dict:
    with np.load(shard_path(out, index), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def load_entry(entry: ImageEntry, config: Config, data: bytes | None = None) -> PixelImage:
    """An image of the plan, as `inr train FILE --size --gray` loads it (from its file's bytes `data`
    when the driver sent them), checked to be the file planned and to decode to the size and
    channels its header promised."""
    image = inputs.load(entry.location, entry.name, config, expected=entry.sha256, data=data)[0]
    if (image.width, image.height, image.channels) != (entry.width, entry.height, entry.channels):
        raise InrError(f"{entry.name}: decodes to {image.width}x{image.height} {','.join(image.channels)}, but its "
                       f"header said {entry.width}x{entry.height} {','.join(entry.channels)}")
    return image


def shard_images(plan: Plan, index: int) -> list[PixelImage]:
    return [load_entry(plan.entry(name), plan.config) for name in plan.shards[index]]


def prepare(source: str, out: Path, config: Config, pack: int | None, skip_unreadable: bool, notices: list,
            probe=probe_in_process, default_pack_for=None) -> tuple[Plan, list[int]]:
    """The plan (new, or the one in OUT checked against this command) and the shards still to fit.
    `probe(listed, config)` learns each image's size and fingerprint (in-process, or on the workers);
    `default_pack_for(spec, config, width, height)` is the shard size when --pack is not given."""
    listed = inputs.list_inputs(source)
    existing = out / PLAN
    if existing.is_file():
        try:
            saved = Plan.from_json(existing.read_text())
        except (ValueError, KeyError, TypeError, UsageError) as exc:
            raise InrError(f"{existing}: not a plan this inr can read ({exc})") from None
        _refuse_changed_inputs(out, saved, listed)
        # A setting left to the size is the one this data set already got (an older inr may have
        # chosen it differently); one given by hand is checked against it below.
        config = with_values(config, {key: saved.config.get(key) for key in SIZED_KEYS if config.get(key) == AUTO})
        wanted = Plan(saved.folder, config, saved.spec, [], [], pack or saved.pack)
        _refuse_changed_settings(out, saved, wanted)
        plan = saved
        plan.config = config  # the free keys (device, ...) may differ; the rest was just checked
    else:
        entries, skipped = entries_from_probe(listed, probe(listed, config), config, skip_unreadable)
        config, reasons = fit_to_image(config, max(e.width for e in entries), max(e.height for e in entries))
        notices += reasons
        if pack is None:
            first = entries[0]
            spec = NetworkSpec.from_config(config, len(first.channels))
            pack = default_pack_for(spec, config, first.width, first.height) if default_pack_for else RAY_SHARD
        plan = make_plan(source, config, entries, pack, skipped)
        try:
            (out / SHARDS).mkdir(parents=True, exist_ok=True)
            atomic_write_text(existing, plan.to_json())
        except OSError as exc:
            raise InrError(f"cannot write to {out} ({exc.strerror or exc})") from None
    for name, why in plan.skipped:
        notices.append(f"skipped {name}: {why}")
    for leftover in (out / SHARDS).glob(".*.tmp"):  # a write killed before its rename
        leftover.unlink(missing_ok=True)
    done = {path.name for path in (out / SHARDS).glob("*.npz")}
    pending = [i for i in range(len(plan.shards)) if shard_path(out, i).name not in done]
    return plan, pending


def _refuse_changed_inputs(out: Path, saved: Plan, listed: list[inputs.Listed]) -> None:
    planned = {e.name: e.bytes for e in saved.images}
    planned.update((name, -1) for name, _ in saved.skipped)
    now = {item.name: item.size for item in listed}
    if planned.keys() != now.keys():
        added, gone = sorted(now.keys() - planned.keys()), sorted(planned.keys() - now.keys())
        change = f"{added[0]} is new" if added else f"{gone[0]} is gone"
        raise InrError(f"{out} was started on other images ({change} since); use another -o")
    for name, size in planned.items():
        if size >= 0 and now[name] >= 0 and size != now[name]:
            raise InrError(f"{out} was started on other images ({name} changed since); use another -o")


def _refuse_changed_settings(out: Path, saved: Plan, plan: Plan) -> None:
    old, new = saved.settings(), plan.settings()
    if old["pack"] != new["pack"]:
        raise InrError(f"{out} was started with --pack {old['pack']}, not {new['pack']}; "
                       f"rerun without --pack or with --pack {old['pack']}")
    for key, value in old["settings"].items():
        if new["settings"].get(key) != value:
            raise InrError(f"{out} was started with {key} = {value!r}, not {new['settings'].get(key)!r}; "
                           f"rerun with the same settings, or use another -o")


def run_in_process(backend, plan: Plan, out: Path, pending: list[int], on_shard, signals: Signals) -> None:
    for index in pending:
        result = fit_shard(backend, plan, shard_images(plan, index), plan.shards[index], signals)
        write_shard(out, index, result)
        on_shard(index, result)
        hook("shard-written", shards=out / SHARDS)


def assemble(out: Path, plan: Plan) -> int:
    """weights.npy, index.csv and network.json from the finished shards; returns the bytes per image.
    Shard after shard, each network is written at its row (rows sorted by name, whatever the
    shards were), so the memory needed is one shard's, whatever the size of the set."""
    row_of = {entry.name: i for i, entry in enumerate(plan.images)}
    count, width = len(plan.images), plan.spec.parameter_count()
    psnr, loss = np.full(count, np.nan), np.full(count, np.nan)
    header = _npy_header((count, width))
    with atomic_path(out / WEIGHTS, suffix=".npy") as tmp:
        with open(tmp, "wb") as handle:
            handle.write(header)
            handle.truncate(len(header) + count * width * 4)
            for index in range(len(plan.shards)):
                with np.load(shard_path(out, index), allow_pickle=False) as npz:
                    names, psnr_of, loss_of = npz["names"], npz["psnr"], npz["loss"]
                rows = np.array([row_of[name] for name in names.tolist()])
                psnr[rows], loss[rows] = psnr_of, loss_of
                # consecutive rows go out in one copy: a shard of one size is mostly a run of rows
                starts = np.concatenate([[0], np.flatnonzero(np.diff(rows) != 1) + 1, [len(rows)]]).tolist()
                runs = [(start, stop, len(header) + int(rows[start]) * width * 4)
                        for start, stop in zip(starts[:-1], starts[1:])]
                _copy_params(out, index, handle.fileno(), runs, len(rows), width)
            handle.flush()
    labelled = plan.labelled
    with atomic_path(out / INDEX, suffix=".csv") as tmp:
        with open(tmp, "w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(INDEX_COLUMNS + ((LABEL,) if labelled else ()))
            steps = plan.config.training.steps
            for i, entry in enumerate(plan.images):
                writer.writerow((entry.name, f"{psnr[i]:.4f}", f"{loss[i]:.8g}", steps, entry.seed, entry.width,
                                 entry.height) + ((entry.label,) if labelled else ()))
    description = {"format_version": FORMAT_VERSION, "spec": json.loads(plan.spec.to_json()),
                   "config": json.loads(configuration.to_json(plan.config)), "channels": list(plan.images[0].channels),
                   "parameters_per_network": plan.spec.parameter_count(), "dtype": "float32"}
    atomic_write_text(out / DESCRIPTION, json.dumps(description, indent=1) + "\n")
    return plan.spec.parameter_count() * 4


def _copy_params(out: Path, index: int, fd: int, runs: list[tuple[int, int, int]], count: int, width: int) -> None:
    """The rows [start, stop) of the shard's params at byte `at` of `fd`, for each run. np.savez
    stores the array uncompressed: its rows are then copied file to file by the kernel, never
    through this process's memory (a shard is renamed into place whole, and its size is checked).
    Any other layout is read with NumPy."""
    path = shard_path(out, index)
    offset = _stored_params_offset(path, count, width)
    if offset is None:
        params = np.ascontiguousarray(read_shard(out, index)["params"], dtype="<f4")
        for start, stop, at in runs:
            os.pwrite(fd, params[start:stop], at)
        return
    with open(path, "rb") as source:
        for start, stop, at in runs:
            _copy_range(source.fileno(), fd, (stop - start) * width * 4, offset + start * width * 4, at)


def _stored_params_offset(path: Path, count: int, width: int) -> int | None:
    """Where the float32 [count, width] C-ordered params of a shard start in its file, when stored
    uncompressed; None otherwise."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("params.npy")
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(member)
            data_at = member.tell()
        if shape != (count, width) or fortran or dtype != np.dtype("<f4") or \
                info.file_size != data_at + count * width * 4:
            return None
        with open(path, "rb") as handle:  # the member's data follows its local header
            handle.seek(info.header_offset)
            local = handle.read(zipfile.sizeFileHeader)
        name_length, extra_length = struct.unpack("<2H", local[-4:])
        return info.header_offset + zipfile.sizeFileHeader + name_length + extra_length + data_at


def _copy_range(source: int, target: int, count: int, source_at: int, target_at: int) -> None:
    while count:
        try:
            done = os.copy_file_range(source, target, count, source_at, target_at)
        except (AttributeError, OSError):  # not Linux, or two file systems it cannot copy between
            done = os.pwrite(target, os.pread(source, min(count, 1 << 24), source_at), target_at)
        if done <= 0:
            raise InrError(f"shard ended early while assembling {WEIGHTS}")
        count, source_at, target_at = count - done, source_at + done, target_at + done


def _npy_header(shape: tuple[int, int]) -> bytes:
    """The .npy header of a float32 array of `shape`, as np.save writes it (version 1.0)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def fit_set(source: str, out: Path, config: Config, pack: int | None = None, ray: str | None = None,
            workers: int | None = None, gpus_per_worker: float | None = None, skip_unreadable: bool = False,
            quiet: bool = False) -> Plan:
    """`inr fit-many` after its options are read: plan (or resume), fit every pending shard in-process
    or on a Ray cluster, assemble the set in `out`. Progress and notices on stderr unless quiet."""
    from inr_cli.progress import ImageProgress

    notices: list[str] = []
    if ray:
        from inr_cli.sets import cluster

        session = cluster.connect(ray)
        plan, pending = prepare(source, out, config, pack, skip_unreadable, notices,
                                probe=functools.partial(cluster.probe_on_ray, session))
        where = f"Ray ({ray})"
    else:
        from inr_cli.backends import make_backend

        backend = make_backend(config.training.device, config.training.matmul, quiet)
        plan, pending = prepare(source, out, config, pack, skip_unreadable, notices,
                                default_pack_for=functools.partial(default_pack, backend))
        where = backend.name
    for message in notices:
        notice(message)
    total = len(plan.images)
    done = total - sum(len(plan.shards[i]) for i in pending)
    if not quiet:
        info(f"fitting {total} images ({len(plan.shards)} shards of up to {plan.pack}; {done} done) on {where}: "
             f"{plan.spec.model} {plan.spec.layers}x{plan.spec.hidden}, {plan.config.training.steps} steps -> {out}")
    with Signals() as signals, ImageProgress(total, done, quiet) as progress:
        def on_shard(index, result):
            progress.add(len(result["names"]), result["psnr"])

        try:
            if ray:
                cluster.run_on_ray(session, plan, out, pending, on_shard, workers, gpus_per_worker)
            else:
                run_in_process(backend, plan, out, pending, on_shard, signals)
        except Interrupted as exc:
            signals.ignore()
            progress.stop()
            info(f"{exc}: {progress.done} of {total} images are fitted and kept in {out}; "
                 f"run the same command again to fit the rest")
            raise SystemExit(128 + exc.signum) from None
    bytes_per_image = assemble(out, plan)
    if not quiet:
        info(f"done: {total} networks of {plan.spec.parameter_count():,} parameters ({bytes_per_image:,} bytes "
             f"each) in {out / WEIGHTS}; one row per image in {out / INDEX}")
    return plan
