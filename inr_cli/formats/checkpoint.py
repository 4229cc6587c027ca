"""The checkpoint: one .npz holding everything needed to resume or render.

Written atomically (temporary file, fsync, rename) and read with allow_pickle=False: a checkpoint
is data, never code. FORMAT_VERSION rises whenever the layout changes.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import beyond_image_limits
from inr_cli.core.state import TrainingState
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import npz
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.input_files import check_regular
from inr_cli.formats.network_description import spec_from_json
from inr_cli.formats.network_set import is_network_set, refuse_set_without_plan
from inr_cli.formats.pixel_csv import CHANNEL_SETS
from inr_cli.formats.versions import refuse_newer
from inr_cli.limits import MAX_TEXT_BYTES

MAGIC = "inr-checkpoint"
# 2: [N, P] parameters, nested configuration, training seconds; 1 still loads. 3: a finished run's
# parameters in float16 and no moments (network.dtype float16); a float32 checkpoint is still written as 2,
# which every inr since 2 reads.
FORMAT_VERSION = 3
STORED_DTYPES = {"float32": np.float32, "float16": np.float16}
FILENAME = "checkpoint.npz"


@dataclass
class Checkpoint:
    spec: NetworkSpec
    config: Config
    state: TrainingState
    total_steps: int
    data_fingerprint: str
    data_shape: tuple[int, int, int]  # height, width, channels
    channels: tuple[str, ...]

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def params(self) -> np.ndarray:
        """The first (for `inr train`, the only) network's [P] parameters."""
        return self.state.params[0]

    @property
    def last_loss(self) -> float:
        return float(self.state.loss[0])


def save(checkpoint: Checkpoint, path: Path, dtype: str = "float32", read=None) -> None:
    """The checkpoint, its parameters stored as dtype: float32 with Adam's moments (what a run resumes
    from, bit for bit), or float16 without them (a finished run's network at half the bytes: its
    parameters are the model; the second moment of a rarely reached table entry would underflow
    float16, and a run extended from it starts its moments afresh).

    The state's arrays may live on a backend's device, `read` its host_reader: they are written a
    chunk at a time (formats/npz.write), never whole on the host; the file is the one np.savez
    would write of the same values."""
    state = checkpoint.state
    stored = STORED_DTYPES[dtype]
    read = read or np.asarray
    moments = {}
    if stored is np.float32:
        moments = {name: npz.Streamed(np.zeros(state.params.shape, dtype=np.float32) if array is None else array,
                                      read, np.float32)
                   for name, array in (("moment1", state.moment1), ("moment2", state.moment2))}
    arrays = {
        "magic": np.array(MAGIC),
        "format_version": np.array(2 if stored is np.float32 else FORMAT_VERSION, dtype=np.int64),
        "spec": np.array(checkpoint.spec.to_json()),
        "config": np.array(configuration.to_json(checkpoint.config)),
        "params": npz.Streamed(state.params, read, stored),
        **moments,
        "step": np.array(state.step, dtype=np.int64),
        "seconds": np.array(state.seconds, dtype=np.float64),
        "loss": np.asarray(state.loss, dtype=np.float64),
        "total_steps": np.array(checkpoint.total_steps, dtype=np.int64),
        "data_fingerprint": np.array(checkpoint.data_fingerprint),
        "data_shape": np.array(checkpoint.data_shape, dtype=np.int64),
        "channels": np.array(",".join(checkpoint.channels)),
    }
    path = Path(path)
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            npz.write(handle, arrays)


def resolve(path: Path) -> Path:
    """A run directory or a checkpoint file -> the checkpoint file."""
    path = Path(path)
    if path.is_dir():
        candidate = path / FILENAME
        if os.path.lexists(candidate):
            check_regular(candidate, expected="a checkpoint")  # a FIFO or a folder by its name, said as such
        elif is_network_set(path):
            raise UsageError(f"{path} is a set of networks (an inr fit-many folder), not a run: draw one of them with "
                             f"inr render {path} --image NAME, or browse them with inr view {path}")
        else:
            refuse_set_without_plan(path)  # a set whose plan is gone is said as such, not as no run
            raise InrError(f"{path}: no {FILENAME} in this directory (is it a run directory?)")
        return candidate
    if not path.exists():
        raise InrError(f"{path}: no such run directory or checkpoint")
    return path


def resolve_exists(path: Path) -> bool:
    """Whether `path` is a checkpoint file or a run directory holding one."""
    path = Path(path)
    return (path / FILENAME).is_file() if path.is_dir() else path.is_file()


def training_data_kind(path: Path) -> str:
    """What `inr train` would take this file for, by its name ("" for none): a command that reads a
    trained network says so when it is given the data instead."""
    from PIL import Image

    suffix = path.suffix.lower()
    if suffix in (".csv", ".npy"):
        return "a pixel CSV" if suffix == ".csv" else "an array"
    return "an image" if suffix in Image.registered_extensions() else ""


@dataclass
class StoredArray:
    """[N, P] values left in the checkpoint file until they are put where they are used (a resumed
    run's trainer): read a chunk at a time, as float32 whatever the file stores, so that the host
    never holds them whole. The file stays open meanwhile: a checkpoint written since is not mixed in."""

    stored: npz.Stored
    shape: tuple[int, int]

    def chunks(self):
        """(first element, float32 values) of consecutive chunks of the flat values."""
        for first, values in self.stored.chunks():
            yield first, values.astype(np.float32, copy=False)

    def copy_to(self, backend, out) -> None:
        """out[...] = the values, out a backend's [N, P] float32 array."""
        flat = out.reshape(-1)
        for first, values in self.chunks():
            backend.copy_from_host(flat[first:first + len(values)], values)


def load(path: Path, moments: bool = True, deferred: bool = False) -> Checkpoint:
    """The checkpoint at path (a run directory or the file). moments=False: the parameters alone
    (drawing, exporting: Adam's moments are twice the parameters' bytes, never read); deferred: the
    parameters and moments as StoredArray, read when the trainer takes them (a resume)."""
    path = resolve(path)
    if not path.is_file():  # a FIFO or a device would block or never end
        raise InrError(f"{path}: not a regular file, so not a checkpoint")
    if not zipfile.is_zipfile(path):  # np.load would otherwise try to unpickle it
        kind = training_data_kind(path)
        if kind:
            raise UsageError(f"{path} is {kind}, not a trained network: train one on it first (`inr train {path}`), "
                             f"then give its run (runs/{path.stem})")
        if path.suffix.lower() in (".safetensors", ".onnx", ".hdf5", ".h5"):
            readers = ("; inr info, inr render, inr export and inr_cli.load read the .safetensors itself"
                       if path.suffix.lower() == ".safetensors" else "")
            raise UsageError(f"{path} is an exported network (inr export), not a run: give the run it was exported "
                             f"from (its directory or {FILENAME}){readers}")
        raise InrError(f"{path}: not a readable checkpoint (not an .npz archive, or truncated)")
    try:
        archive = npz.Archive(path, str(path), "checkpoint")
        try:
            return _from_arrays(path, _CheckedArrays(path, archive), moments, deferred)
        finally:
            if not deferred:
                archive.close()  # a deferred one is closed with its last StoredArray
    except OSError as exc:
        raise InrError(f"{path}: not a readable checkpoint ({exc.strerror or exc})") from None


# Each array of a checkpoint: the kinds of its dtype (NumPy's dtype.kind letters) and the numbers
# of dimensions it may have, checked from its header before it is read.
ARRAY_KINDS = {
    "magic": ("U", (0,)), "format_version": ("iu", (0,)), "spec": ("U", (0,)), "config": ("U", (0,)),
    "params": ("f", (1, 2)), "moment1": ("f", (1, 2)), "moment2": ("f", (1, 2)), "step": ("iu", (0,)),
    "seconds": ("fiu", (0,)), "loss": ("fiu", (0, 1)), "total_steps": ("iu", (0,)),
    "data_fingerprint": ("U", (0,)), "data_shape": ("iu", (1,)), "channels": ("U", (0,)), "last_loss": ("fiu", (0,)),
}
KIND_WORDS = {"U": "text", "iu": "an integer", "f": "floats", "fiu": "a number"}


class _CheckedArrays(Mapping):
    """A checkpoint's arrays by name, each read only once its header matches ARRAY_KINDS."""

    def __init__(self, path: Path, archive: npz.Archive):
        self.path, self.archive = path, archive

    def header(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        return self.archive.headers[name]

    def __contains__(self, name) -> bool:  # from the directory: Mapping's own would read the array
        return name in self.archive.headers

    def stored(self, name: str) -> npz.Stored:
        self.check(name)
        return self.archive.stored(name)

    def __getitem__(self, name: str) -> np.ndarray:
        self.check(name)
        return self.archive[name]

    def check(self, name: str) -> None:
        """The array's header against ARRAY_KINDS."""
        shape, dtype = self.archive.headers[name]
        kinds, dimensions = ARRAY_KINDS.get(name, (None, None))
        if kinds is not None and (dtype.kind not in kinds or len(shape) not in dimensions
                                  or (dtype.kind == "U" and dtype.itemsize > MAX_TEXT_BYTES)):
            kind = "text" if dtype.kind == "U" else dtype.name
            held = f"a {shape} array of {kind}" if shape else kind if dtype.kind == "U" else f"one {kind}"
            wanted = KIND_WORDS[kinds] + (" (one value)" if dimensions == (0,) else "")
            raise InrError(f"{self.path}: damaged checkpoint, '{name}' is {held}, expected {wanted}")

    def __iter__(self):
        return iter(self.archive)

    def __len__(self) -> int:
        return len(self.archive)


def _from_arrays(path: Path, arrays: _CheckedArrays, moments: bool = True, deferred: bool = False) -> Checkpoint:
    def need(name):
        if name not in arrays:
            raise InrError(f"{path}: damaged checkpoint, array '{name}' is missing")
        return arrays[name]

    if "magic" not in arrays and "start" in arrays and "settings" in arrays:  # not damaged: another command's
        raise UsageError(_meta_init_checkpoint(path))
    if str(need("magic")) != MAGIC:
        raise InrError(f"{path}: not an inr checkpoint")
    version = int(need("format_version"))
    refuse_newer(path, version, FORMAT_VERSION)
    if version < 1:
        raise InrError(f"{path}: checkpoint format {version} is not one this inr reads (1 to {FORMAT_VERSION})")
    try:
        spec = spec_from_json(str(need("spec")))
        config_text = str(need("config"))
        if version == 1:  # the configuration was one flat table
            config = configuration.from_flat_v1(_json_object(config_text))
        else:
            _json_object(config_text)
            config = configuration.from_json(config_text)
        _check_config(config)
    except (TypeError, ValueError, RecursionError, UsageError) as exc:
        raise InrError(f"{path}: damaged checkpoint, bad network or config description ({exc})") from None
    n_params = spec.parameter_count()
    shapes = {}
    # Format 3 may hold the parameters in float16, and then no moments (save).
    half = version >= 3 and "params" in arrays and arrays.header("params")[1] == np.float16
    for name in ("params",) if half else ("params", "moment1", "moment2"):  # sized from their headers first
        shape, dtype = arrays.header(name) if name in arrays else need(name)
        if version == 1 and len(shape) == 1:
            shape = (1, *shape)  # format 1 held one network's [P]
        if dtype != (np.float16 if half else np.float32) or len(shape) != 2 or shape[1] != n_params:
            raise InrError(
                f"{path}: damaged checkpoint, '{name}' has shape {shape} {dtype}, "
                f"expected (N, {n_params}) {'float16' if half else 'float32'} for this network"
            )
        shapes[name] = shape
    if not half and (shapes["moment1"] != shapes["params"] or shapes["moment2"] != shapes["params"]):
        raise InrError(f"{path}: damaged checkpoint, the moments do not match the {shapes['params'][0]} networks' "
                       f"parameters")
    # Loaded as float32 whatever they were stored in: training and drawing run in float32.
    wanted = [name for name in shapes if moments or name == "params"]
    if deferred:
        flats = {name: StoredArray(arrays.stored(name), shapes[name]) for name in wanted}
        finite = all(np.isfinite(values).all() for _, values in flats["params"].chunks())
    else:
        flats = {name: need(name).reshape(shapes[name]).astype(np.float32, copy=False) for name in wanted}
        finite = all(np.isfinite(row).all() for row in flats["params"])
    if not finite:  # nothing could be drawn from it, nor resumed
        raise InrError(f"{path}: the network's parameters hold NaN or infinite values (a damaged file, or a run "
                       f"that blew up); there is nothing to draw or resume")
    networks = shapes["params"][0]
    data_shape = tuple(int(v) for v in need("data_shape"))
    if len(data_shape) != 3 or min(data_shape) < 1 or beyond_image_limits(data_shape[1], data_shape[0]):
        raise InrError(f"{path}: damaged checkpoint, 'data_shape' is {data_shape[:4]}, not (height, width, "
                       f"channels) of an image")
    channels = tuple(str(need("channels")).split(","))
    if len(channels) != spec.out_features or data_shape[2] != spec.out_features:
        raise InrError(f"{path}: damaged checkpoint, channels {channels} do not match the network's outputs")
    if channels not in CHANNEL_SETS:
        raise InrError(f"{path}: damaged checkpoint, channels {','.join(channels)[:40]} are not l, r,g,b or r,g,b,a")
    if version == 1:
        seconds = 0.0  # format 1 kept the training time only in metrics.csv
        loss = np.array([float(arrays.get("last_loss", np.nan))])
    else:
        seconds = float(need("seconds"))
        loss = np.asarray(need("loss"), dtype=np.float64).reshape(-1)
        if loss.shape != (networks,):
            raise InrError(f"{path}: damaged checkpoint, 'loss' holds {loss.size} values for {networks} "
                           f"network{'s' if networks != 1 else ''}")
        if not math.isfinite(seconds) or seconds < 0:
            raise InrError(f"{path}: damaged checkpoint, 'seconds' (the training time) is {seconds}")
    step, total_steps = int(need("step")), int(need("total_steps"))
    if step < 0 or total_steps < 0 or step > total_steps > 0:  # a run never steps past its total
        raise InrError(f"{path}: damaged checkpoint, step {step} of {total_steps}")
    state = TrainingState(flats["params"], flats.get("moment1"), flats.get("moment2"), step, seconds, loss)
    return Checkpoint(
        spec=spec,
        config=config,
        state=state,
        total_steps=total_steps,
        data_fingerprint=str(need("data_fingerprint")),
        data_shape=data_shape,
        channels=channels,
    )


def _meta_init_checkpoint(path: Path) -> str:
    """What the checkpoint inr meta-init keeps beside its start or base (OUT.meta.npz, sets/meta.py)
    is, and what to give instead: the file it learns."""
    start = path.name.removesuffix(".meta.npz")
    given = path.with_name(start) if start != path.name else "the .safetensors file it writes (its -o)"
    return (f"{path} is an inr meta-init checkpoint (what it resumes its learning from), not a run: give the start "
            f"or base it learns, {given}")


def _json_object(text: str) -> dict:
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError(f"a JSON {type(document).__name__}, not an object")
    return document


def _check_config(config: Config) -> None:
    """Every key of the configuration of its type and within its bounds, as inr wrote it."""
    for key, kind in configuration.KEY_TYPES.items():
        configuration.coerce_value(f"config {key}", kind, config.get(key))
    configuration.validate(config)
