"""`inr fit-many`: one network per image of a folder (or a list, or a bucket), fitted in packs
through the core's networks dimension.

The inputs become a plan (fit-many.json): every image with its size, a fingerprint of its file and
its seed, the settings, and the shards (images of one size, fitted together). What the plan needs
to know of each image is learned by a probe that runs where the images are read (on the workers,
with --ray); the driver itself only lists the inputs, plans and records. Whoever fits a shard
writes its networks straight into their rows of weights.npy.part, then the shard's file (names and
scores) atomically into shards/; running the same command again lists the inputs, compares them
with the plan and fits only the shards that are missing, so a killed run loses at most the shards
in flight. When every shard is done, weights.npy.part becomes weights.npy, and index.csv is written
(inr_cli/formats/network_set.py says what the files hold). An output in a bucket, which cannot be
written in place, gets the networks in the shards' files, and the driver streams them into
weights.npy, shard after shard.

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
import operator
import os
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.console import info, notice
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.checkpoint import TrainingState
from inr_cli.config import Config, with_values
from inr_cli.errors import InrError, UsageError
from inr_cli.hooks import hook
from inr_cli.formats.images import PixelImage
from inr_cli.formats.network_set import (DESCRIPTION, FORMAT_VERSION, INDEX, INDEX_COLUMNS, LABEL, PLAN, SHARDS,
                                         WEIGHTS, WEIGHTS_PART, refuse_newer_set)
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.sizing import AUTO, SIZED_KEYS, fit_to_image
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Interrupted, Signals, run_steps
from inr_cli.sets import inputs
from inr_cli.sets.set_folder import SetFolder
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


def shard_name(index: int) -> str:
    return f"{SHARDS}/{index:05d}.npz"


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


def write_shard(folder: SetFolder, index: int, result: dict, rows: list[int]) -> None:
    """A finished shard. In a local folder its networks go straight to their rows of
    weights.npy.part (synced before the shard file says they are there), and the shard file keeps
    their names and scores; a bucket cannot be written in place, so there the shard file keeps the
    networks too and the driver assembles them."""
    if folder.local:
        write_rows(folder.local / WEIGHTS_PART, rows, result["params"])
        result = {key: value for key, value in result.items() if key != "params"}
    with folder.writing(shard_name(index)) as handle:
        np.savez(handle, **result)


def read_shard(folder: SetFolder, index: int) -> dict:
    with np.load(io.BytesIO(folder.read_bytes(shard_name(index))), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def write_rows(path: Path, rows: list[int], params: np.ndarray) -> None:
    """Networks into their rows of the .npy file `path`, each run of consecutive rows in one write."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise InrError(f"cannot write the networks into {path} ({exc.strerror or exc}): the output folder must be "
                       f"on storage every worker shares") from None
    try:
        shape, data_at = _npy_layout(fd)
        if shape[1] != params.shape[1] or max(rows) >= shape[0]:
            raise InrError(f"{path} holds {shape[0]} networks of {shape[1]} parameters, not this set's")
        _write_runs(fd, data_at, rows, params)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_runs(fd: int, data_at: int, rows, params: np.ndarray) -> None:
    rows, params = np.asarray(rows), np.ascontiguousarray(params, dtype="<f4")
    row_bytes = params.shape[1] * 4
    starts = np.concatenate([[0], np.flatnonzero(np.diff(rows) != 1) + 1, [len(rows)]]).tolist()
    for start, stop in zip(starts[:-1], starts[1:]):
        data, at = memoryview(params[start:stop]).cast("B"), data_at + int(rows[start]) * row_bytes
        while data:
            written = os.pwrite(fd, data, at)
            data, at = data[written:], at + written


def _npy_layout(fd: int) -> tuple[tuple[int, ...], int]:
    """The shape of the float32 .npy file open as `fd`, and where its data starts."""
    header = io.BytesIO(os.pread(fd, 4096, 0))
    try:
        version = np.lib.format.read_magic(header)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(header)
    except ValueError as exc:
        raise InrError(f"not a .npy file ({exc})") from None
    if fortran or dtype != np.dtype("<f4") or len(shape) != 2:
        raise InrError(f"a .npy file of {dtype} {shape}, not float32 networks")
    return shape, header.tell()


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


def prepare(source: str, folder: SetFolder, config: Config, pack: int | None, skip_unreadable: bool,
            notices: list, probe=probe_in_process, default_pack_for=None) -> tuple[Plan, list[int]]:
    """The plan (new, or the one in the output checked against this command) and the shards still
    to fit. `probe(listed, config)` learns each image's size and fingerprint (in-process, or on the
    workers); `default_pack_for(spec, config, width, height)` is the shard size when --pack is not
    given."""
    listed = inputs.list_inputs(source)
    if folder.exists(PLAN):
        try:
            saved = Plan.from_json(folder.read_bytes(PLAN).decode(), folder.join(PLAN))
        except (ValueError, KeyError, TypeError, UsageError) as exc:
            raise InrError(f"{folder.join(PLAN)}: not a plan this inr can read ({exc})") from None
        _refuse_changed_inputs(folder, saved, listed)
        # A setting left to the size is the one this data set already got (an older inr may have
        # chosen it differently); one given by hand is checked against it below.
        config = with_values(config, {key: saved.config.get(key) for key in SIZED_KEYS if config.get(key) == AUTO})
        wanted = Plan(saved.folder, config, saved.spec, [], [], pack or saved.pack)
        _refuse_changed_settings(folder, saved, wanted)
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
        folder.make_folder(SHARDS)
        folder.write_bytes(PLAN, plan.to_json().encode())
    for name, why in plan.skipped:
        notices.append(f"skipped {name}: {why}")
    files = folder.files(SHARDS)
    for leftover in files:
        if leftover.startswith(".") and leftover.endswith(".tmp"):  # a write killed before its rename
            folder.remove(f"{SHARDS}/{leftover}")
    done = set(files)
    pending = [i for i in range(len(plan.shards)) if shard_name(i).rpartition("/")[2] not in done]
    if folder.local:
        pending = _rows_file_ready(folder.local, plan, pending, notices)
    return plan, pending


def _rows_file_ready(out: Path, plan: Plan, pending: list[int], notices: list) -> list[int]:
    """weights.npy.part, where the workers write each network at its row, made ready for them; the
    shards to fit (finished shards whose networks were in a rows file now gone are fitted again)."""
    part, finished = out / WEIGHTS_PART, out / WEIGHTS
    shape = (len(plan.images), plan.spec.parameter_count())
    if part.is_file():
        with open(part, "rb") as handle:
            try:
                if _npy_layout(handle.fileno())[0] == shape:
                    return pending
            except InrError:  # not a rows file of ours: made again below
                pass
    elif finished.is_file():
        if pending:  # a finished set missing shards (removed to fit them again): its rows stay
            os.replace(finished, part)
        return pending
    with atomic_path(part, suffix=".npy") as tmp:
        _new_rows_file(tmp, shape)
    waiting = set(pending)
    lost = [i for i in range(len(plan.shards)) if i not in waiting and "params.npy" not in _shard_members(out, i)]
    for index in lost:
        (out / shard_name(index)).unlink()
    if lost:
        notices.append(f"{len(lost)} finished shards had their networks in a {WEIGHTS_PART} that is gone; "
                       f"they are fitted again")
    return sorted(waiting.union(lost))


def _shard_members(out: Path, index: int) -> list[str]:
    with zipfile.ZipFile(out / shard_name(index)) as archive:
        return archive.namelist()


def _refuse_changed_inputs(out: SetFolder, saved: Plan, listed: list[inputs.Listed]) -> None:
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


def _refuse_changed_settings(out: SetFolder, saved: Plan, plan: Plan) -> None:
    old, new = saved.settings(), plan.settings()
    if old["pack"] != new["pack"]:
        raise InrError(f"{out} was started with --pack {old['pack']}, not {new['pack']}; "
                       f"rerun without --pack or with --pack {old['pack']}")
    for key, value in old["settings"].items():
        if new["settings"].get(key) != value:
            raise InrError(f"{out} was started with {key} = {value!r}, not {new['settings'].get(key)!r}; "
                           f"rerun with the same settings, or use another -o")


def run_in_process(backend, plan: Plan, folder: SetFolder, pending: list[int], on_shard, signals: Signals) -> None:
    for index in pending:
        names = plan.shards[index]
        result = fit_shard(backend, plan, shard_images(plan, index), names, signals)
        write_shard(folder, index, result, [plan.row_of[name] for name in names])
        on_shard(index, result)
        hook("shard-written", shards=folder.join(SHARDS))


def assemble(folder: SetFolder, plan: Plan) -> int:
    """weights.npy, index.csv and network.json from the finished shards; returns the bytes per image.
    In a local folder the networks are in their rows already (weights.npy.part, renamed when whole);
    those a shard file holds (in a bucket, or from an older inr) are written at their rows, shard
    after shard, so the memory needed is one shard's whatever the size of the set."""
    count, width = len(plan.images), plan.spec.parameter_count()
    psnr, loss = np.full(count, np.nan), np.full(count, np.nan)
    with _rows_file(folder, (count, width)) as fd:
        data_at = _npy_layout(fd)[1]
        for index in range(len(plan.shards)):
            shard = read_shard(folder, index)
            rows = np.array([plan.row_of[name] for name in shard["names"].tolist()])
            psnr[rows], loss[rows] = shard["psnr"], shard["loss"]
            if "params" in shard:
                _write_runs(fd, data_at, rows, shard["params"])
    labelled = plan.labelled
    with folder.writing(INDEX) as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(INDEX_COLUMNS + ((LABEL,) if labelled else ()))
        steps = plan.config.training.steps
        for i, entry in enumerate(plan.images):
            writer.writerow((entry.name, f"{psnr[i]:.4f}", f"{loss[i]:.8g}", steps, entry.seed, entry.width,
                             entry.height) + ((entry.label,) if labelled else ()))
        text.flush()
        text.detach()
    description = {"format_version": FORMAT_VERSION, "spec": json.loads(plan.spec.to_json()),
                   "config": json.loads(configuration.to_json(plan.config)), "channels": list(plan.images[0].channels),
                   "parameters_per_network": plan.spec.parameter_count(), "dtype": "float32"}
    folder.write_bytes(DESCRIPTION, (json.dumps(description, indent=1) + "\n").encode())
    return plan.spec.parameter_count() * 4


@contextmanager
def _rows_file(folder: SetFolder, shape: tuple[int, int]):
    """An open descriptor on the set's rows; weights.npy appears, whole, when the block ends."""
    if folder.local:
        part, finished = folder.local / WEIGHTS_PART, folder.local / WEIGHTS
        rows = part if part.is_file() else finished  # a finished set run again: its rows are in place
        fd = os.open(rows, os.O_RDWR)
        try:
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
        if rows == part:
            os.replace(part, finished)
        return
    with tempfile.TemporaryDirectory(prefix="inr-set-") as scratch:  # a bucket: built here, then uploaded
        local = Path(scratch) / WEIGHTS
        _new_rows_file(local, shape)
        fd = os.open(local, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)
        folder.upload(local, WEIGHTS)


def _new_rows_file(path: Path, shape: tuple[int, int]) -> None:
    """A float32 .npy file of `shape` as np.save writes it (version 1.0), its rows not yet written:
    a sparse file, the rows take room as they are written."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": shape})
        handle.truncate(handle.tell() + shape[0] * shape[1] * 4)


def fit_set(source: str, out: str | Path, config: Config, pack: int | None = None, ray: str | None = None,
            workers: int | None = None, gpus_per_worker: float | None = None, skip_unreadable: bool = False,
            quiet: bool = False) -> Plan:
    """`inr fit-many` after its options are read: plan (or resume), fit every pending shard in-process
    or on a Ray cluster, assemble the set in `out`. Progress and notices on stderr unless quiet."""
    from inr_cli.progress import ImageProgress

    notices: list[str] = []
    folder = SetFolder(out)
    if ray:
        from inr_cli.sets import cluster

        session = cluster.connect(ray)
        plan, pending = prepare(source, folder, config, pack, skip_unreadable, notices,
                                probe=functools.partial(cluster.probe_on_ray, session))
        where = f"Ray ({ray})"
    else:
        from inr_cli.backends import make_backend

        backend = make_backend(config.training.device, config.training.matmul, quiet)
        plan, pending = prepare(source, folder, config, pack, skip_unreadable, notices,
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
            if not ray:
                run_in_process(backend, plan, folder, pending, on_shard, signals)
            elif pending:  # a finished set run again starts no worker
                cluster.run_on_ray(session, plan, folder, pending, on_shard, workers, gpus_per_worker)
        except Interrupted as exc:
            signals.ignore()
            progress.stop()
            info(f"{exc}: {progress.done} of {total} images are fitted and kept in {out}; "
                 f"run the same command again to fit the rest")
            raise SystemExit(128 + exc.signum) from None
    bytes_per_image = assemble(folder, plan)
    if not quiet:
        info(f"done: {total} networks of {plan.spec.parameter_count():,} parameters ({bytes_per_image:,} bytes "
             f"each) in {folder.join(WEIGHTS)}; one row per image in {folder.join(INDEX)}")
    return plan
