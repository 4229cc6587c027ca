"""The checkpoint: one .npz holding everything needed to resume or render.

Written atomically (temporary file, fsync, rename) and read with allow_pickle=False: a checkpoint
is data, never code. FORMAT_VERSION rises whenever the layout changes.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from inr_cli.atomic import atomic_path
from inr_cli.config import Config
from inr_cli.errors import InrError
from inr_cli.network import MODELS, NetworkSpec

MAGIC = "inr-checkpoint"
FORMAT_VERSION = 1
FILENAME = "checkpoint.npz"


@dataclass
class Checkpoint:
    spec: NetworkSpec
    config: Config
    params: np.ndarray  # flat float32
    moment1: np.ndarray  # Adam m, or the SGD momentum buffer
    moment2: np.ndarray  # Adam v (zeros for SGD)
    step: int  # updates done
    total_steps: int
    data_fingerprint: str
    data_shape: tuple[int, int, int]  # height, width, channels
    channels: tuple[str, ...]
    last_loss: float = float("nan")


def save(checkpoint: Checkpoint, path: Path) -> None:
    arrays = {
        "magic": np.array(MAGIC),
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "spec": np.array(checkpoint.spec.to_json()),
        "config": np.array(json.dumps(asdict(checkpoint.config), sort_keys=True)),
        "params": np.asarray(checkpoint.params, dtype=np.float32),
        "moment1": np.asarray(checkpoint.moment1, dtype=np.float32),
        "moment2": np.asarray(checkpoint.moment2, dtype=np.float32),
        "step": np.array(checkpoint.step, dtype=np.int64),
        "total_steps": np.array(checkpoint.total_steps, dtype=np.int64),
        # Mini-batches come from a counter-based hash of (seed, step): that pair is the RNG state.
        "rng_state": np.array([checkpoint.config.seed, checkpoint.step], dtype=np.int64),
        "data_fingerprint": np.array(checkpoint.data_fingerprint),
        "data_shape": np.array(checkpoint.data_shape, dtype=np.int64),
        "channels": np.array(",".join(checkpoint.channels)),
        "last_loss": np.array(checkpoint.last_loss, dtype=np.float64),
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
    if version > FORMAT_VERSION:
        raise InrError(
            f"{path}: checkpoint format {version} is newer than this inr understands ({FORMAT_VERSION}); upgrade inr"
        )
    try:
        spec = NetworkSpec.from_json(str(need("spec")))
        if spec.model not in MODELS:
            raise ValueError(f"unknown model {spec.model}")
        config_values = json.loads(str(need("config")))
        known = {f.name for f in fields(Config)}
        config = Config(**{k: v for k, v in config_values.items() if k in known})
    except (TypeError, ValueError, json.JSONDecodeError) as exc:
        raise InrError(f"{path}: damaged checkpoint, bad network or config description ({exc})") from None
    n_params = spec.parameter_count()
    flats = {}
    for name in ("params", "moment1", "moment2"):
        array = need(name)
        if array.dtype != np.float32 or array.shape != (n_params,):
            raise InrError(
                f"{path}: damaged checkpoint, '{name}' has shape {array.shape} {array.dtype}, "
                f"expected ({n_params},) float32 for this network"
            )
        flats[name] = array
    data_shape = tuple(int(v) for v in need("data_shape"))
    if len(data_shape) != 3:
        raise InrError(f"{path}: damaged checkpoint, 'data_shape' is {data_shape}")
    channels = tuple(str(need("channels")).split(","))
    if len(channels) != spec.out_features or data_shape[2] != spec.out_features:
        raise InrError(f"{path}: damaged checkpoint, channels {channels} do not match the network's outputs")
    return Checkpoint(
        spec=spec,
        config=config,
        params=flats["params"],
        moment1=flats["moment1"],
        moment2=flats["moment2"],
        step=int(need("step")),
        total_steps=int(need("total_steps")),
        data_fingerprint=str(need("data_fingerprint")),
        data_shape=data_shape,
        channels=channels,
        last_loss=float(arrays.get("last_loss", np.nan)),
    )
