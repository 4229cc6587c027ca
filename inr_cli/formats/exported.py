"""A .safetensors file that `inr export` (or `inr meta-init`) wrote, read back: one network (tensors
layers.I.weight [out, in]) or a set (the same stacked over the networks, [N, out, in]), its network
description, channels and, for a set, the image names and every index.csv column."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inr_cli.core.network import NetworkSpec, frequency_view, layer_views
from inr_cli.errors import InrError
from inr_cli.extras import require
from inr_cli.formats.export import encoding_tensor

INDEX_METADATA = "index"  # a set's index.csv rows, as JSON [{column: text}]


@dataclass
class Exported:
    spec: NetworkSpec
    channels: tuple[str, ...]
    params: np.ndarray  # [N, P] float32 (N = 1 for one network)
    stacked: bool  # a set: the tensors carry the networks dimension
    names: list[str] = field(default_factory=list)
    index: list[dict] = field(default_factory=list)  # a set's index.csv rows (text cells)
    metadata: dict = field(default_factory=dict)


def read_exported(path: Path) -> Exported:
    require("safetensors", "reading safetensors files", "export")
    from safetensors import safe_open
    from safetensors.numpy import load_file

    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = dict(handle.metadata() or {})
        tensors = load_file(str(path))
    except (OSError, ValueError, RuntimeError, Exception) as exc:  # safetensors raises its own SafetensorError
        raise InrError(f"{path}: not a readable safetensors file ({exc})") from None
    try:
        spec = NetworkSpec.from_json(metadata["spec"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InrError(f"{path}: no network description in its metadata ({exc}); not written by inr export") from None
    stacked = tensors["layers.0.weight"].ndim == 3 if "layers.0.weight" in tensors else False
    networks = tensors["layers.0.weight"].shape[0] if stacked else 1
    params = np.zeros((networks, spec.parameter_count()), dtype=np.float32)
    try:
        for i, (weight, bias) in enumerate(layer_views(spec, params)):
            weight[...] = tensors[f"layers.{i}.weight"].reshape(weight.shape)
            bias[...] = tensors[f"layers.{i}.bias"].reshape(bias.shape)
        encoding = frequency_view(spec, params)
        if encoding is not None:
            encoding[...] = tensors[encoding_tensor(spec)].reshape(encoding.shape)
    except (KeyError, ValueError) as exc:
        raise InrError(f"{path}: its tensors do not match its network description ({exc})") from None
    channels = tuple(c for c in metadata.get("channels", "").split(",") if c)
    names = json.loads(metadata["names"]) if "names" in metadata else []
    index = json.loads(metadata[INDEX_METADATA]) if INDEX_METADATA in metadata else [{"name": n} for n in names]
    return Exported(spec, channels, params, stacked, names, index, metadata)
