"""The checkpoint: one .npz holding everything needed to resume or render.

Written atomically (temporary file, fsync, rename) and read with allow_pickle=False: a checkpoint
is data, never code. FORMAT_VERSION rises whenever the layout changes.
"""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.core.network import NetworkSpec
from inr_cli.core.state import TrainingState
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.versions import refuse_newer

MAGIC = "inr-checkpoint"
FORMAT_VERSION = 2  # 2: [N, P] parameters, nested configuration, training seconds; 1 still loads
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


def save(checkpoint: Checkpoint, path: Path) -> None:
    state = checkpoint.state
    zeros = np.zeros_like(state.params)
    arrays = {
        "magic": np.array(MAGIC),
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "spec": np.array(checkpoint.spec.to_json()),
        "config": np.array(configuration.to_json(checkpoint.config)),
        "params": np.asarray(state.params, dtype=np.float32),
        "moment1": np.asarray(zeros if state.moment1 is None else state.moment1, dtype=np.float32),
        "moment2": np.asarray(zeros if state.moment2 is None else state.moment2, dtype=np.float32),
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
            np.savez(handle, **arrays)


def resolve(path: Path) -> Path:
    """A run directory or a checkpoint file -> the checkpoint file."""
    path = Path(path)
    if path.is_dir():
        candidate = path / FILENAME
        if not candidate.is_file():
            raise InrError(f"{path}: no {FILENAME} in this directory (is it a run directory?)")
        return candidate
    if not path.exists():
        raise InrError(f"{path}: no such run directory or checkpoint")
    return path


def resolve_exists(path: Path) -> bool:
    """Whether `path` is a checkpoint file or a run directory holding one."""
    path = Path(path)
    return (path / FILENAME).is_file() if path.is_dir() else path.is_file()


def load(path: Path) -> Checkpoint:
    path = resolve(path)
    if not zipfile.is_zipfile(path):  # np.load would otherwise try to unpickle it
        raise InrError(f"{path}: not a readable checkpoint (not an .npz archive, or truncated)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise InrError(f"{path}: holds pickled objects, refused (a checkpoint is data only)") from None
        raise InrError(f"{path}: not a readable checkpoint ({exc})") from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise InrError(f"{path}: not a readable checkpoint, truncated or not an .npz ({exc})") from None
    return _from_arrays(path, arrays)


def _from_arrays(path: Path, arrays: dict) -> Checkpoint:
    def need(name):
        if name not in arrays:
            raise InrError(f"{path}: damaged checkpoint, array '{name}' is missing")
        return arrays[name]

    if str(need("magic")) != MAGIC:
        raise InrError(f"{path}: not an inr checkpoint")
    version = int(need("format_version"))
    refuse_newer(path, version, FORMAT_VERSION)
    if version < 1:
        raise InrError(f"{path}: checkpoint format {version} is not one this inr reads (1 to {FORMAT_VERSION})")
    try:
        spec = NetworkSpec.from_json(str(need("spec")))
        if version == 1:  # the configuration was one flat table
            config = configuration.from_flat_v1(json.loads(str(need("config"))))
        else:
            config = configuration.from_json(str(need("config")))
    except (TypeError, ValueError, json.JSONDecodeError, UsageError) as exc:
        raise InrError(f"{path}: damaged checkpoint, bad network or config description ({exc})") from None
    n_params = spec.parameter_count()
    flats = {}
    for name in ("params", "moment1", "moment2"):
        array = need(name)
        if version == 1 and array.ndim == 1:
            array = array[None]  # format 1 held one network's [P]
        if array.dtype != np.float32 or array.ndim != 2 or array.shape[1] != n_params:
            raise InrError(
                f"{path}: damaged checkpoint, '{name}' has shape {array.shape} {array.dtype}, "
                f"expected (N, {n_params}) float32 for this network"
            )
        flats[name] = array
    networks = flats["params"].shape[0]
    if flats["moment1"].shape != flats["params"].shape or flats["moment2"].shape != flats["params"].shape:
        raise InrError(f"{path}: damaged checkpoint, the moments do not match the {networks} networks' parameters")
    data_shape = tuple(int(v) for v in need("data_shape"))
    if len(data_shape) != 3:
        raise InrError(f"{path}: damaged checkpoint, 'data_shape' is {data_shape}")
    channels = tuple(str(need("channels")).split(","))
    if len(channels) != spec.out_features or data_shape[2] != spec.out_features:
        raise InrError(f"{path}: damaged checkpoint, channels {channels} do not match the network's outputs")
    if version == 1:
        seconds = 0.0  # format 1 kept the training time only in metrics.csv
        loss = np.array([float(arrays.get("last_loss", np.nan))])
    else:
        seconds = float(need("seconds"))
        loss = np.asarray(need("loss"), dtype=np.float64).reshape(-1)
        if loss.shape != (networks,) or not math.isfinite(seconds):
            raise InrError(f"{path}: damaged checkpoint, 'loss' or 'seconds' does not fit {networks} networks")
    state = TrainingState(flats["params"], flats["moment1"], flats["moment2"], int(need("step")), seconds, loss)
    return Checkpoint(
        spec=spec,
        config=config,
        state=state,
        total_steps=int(need("total_steps")),
        data_fingerprint=str(need("data_fingerprint")),
        data_shape=data_shape,
        channels=channels,
    )
