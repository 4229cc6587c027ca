"""A base with modulations as a file (`inr meta-init --modulations D -o base.safetensors`), and the
test of whether a start is one.

The file is a single network's safetensors (export.py: the base network's tensors, its
description, channels), so that it reads as that network too, plus the map `modulation.map`
[L * H, D] and the rates `modulation.rates` [D] (core/modulations.py), and the metadata
"modulations": a JSON object with at least the latent size, the inner steps it was learned for and
how. Read as untrusted, as every safetensors file (exported.py): each tensor checked for its type
and shape from the header before it is read, NaN refused, rates at least 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from inr_cli.core.modulations import MAP, RATES, ModulatedBase
from inr_cli.errors import InrError
from inr_cli.formats.export import size_metadata, write_safetensors
from inr_cli.formats.exported import LATENTS, read_exported, set_rows
from inr_cli.limits import MAX_SIDE

MODULATIONS = "modulations"  # the metadata key that makes a start a base
MOST_INNER_STEPS = 10_000


def write_base(base: ModulatedBase, channels, path: Path, facts: dict, size: tuple[int, int] | None = None) -> None:
    """The base, its map and rates; `facts` (how it was learned) into its "modulations" metadata;
    `size`, the images' width and height, as an export records the size it was trained at (so that
    `inr render BASE` draws the base's own image, z = 0, at that size)."""
    tensors = {MAP: np.ascontiguousarray(base.shift_map, np.float32), RATES: np.ascontiguousarray(base.rates,
                                                                                                   np.float32)}
    facts = {"latent": base.latent, "inner_steps": base.inner_steps, "shifts": "every hidden layer", **facts}
    write_safetensors(base.spec, base.params, channels, path, {MODULATIONS: json.dumps(facts), **size_metadata(size)},
                      tensors=tensors)


def write_latent_set(base: ModulatedBase, channels, latents: np.ndarray, names, index: list[dict],
                     path: Path, facts: dict) -> None:
    """A set of latents in one file (`inr export SET -o set.safetensors`): the base as write_base
    writes it, the latents [N, D] as `latents`, the image names and index.csv's rows in the metadata
    as a set of networks has them (export.write_set_safetensors)."""
    tensors = {MAP: np.ascontiguousarray(base.shift_map, np.float32), RATES: np.ascontiguousarray(base.rates,
                                                                                                   np.float32),
               LATENTS: np.ascontiguousarray(latents, np.float32)}
    facts = {"latent": base.latent, "inner_steps": base.inner_steps, "shifts": "every hidden layer", **facts}
    write_safetensors(base.spec, base.params, channels, path, {MODULATIONS: json.dumps(facts), "names": json.dumps(
        list(names)), "index": json.dumps(index)}, tensors=tensors)


def _header(path) -> tuple[dict, set[str]] | None:
    """(metadata, tensor names) of a readable .safetensors file, else None (its reader says why)."""
    path = Path(path)
    if path.suffix.lower() != ".safetensors" or not path.is_file():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as handle:
            return dict(handle.metadata() or {}), set(handle.keys())
    except Exception:  # noqa: BLE001 - not a readable file: read_base or read_exported says why
        return None


def is_base_file(path) -> bool:
    """Whether `path` is a .safetensors file whose metadata says it is a base with modulations, and
    not a set of latents over one (its header read alone)."""
    header = _header(path)
    return header is not None and MODULATIONS in header[0] and LATENTS not in header[1]


def base_latent(path) -> int | None:
    """The latent size a base file's header says (read_base checks the rest), None for any other file."""
    header = _header(path)
    if header is None or MODULATIONS not in header[0] or LATENTS in header[1]:
        return None
    try:
        latent = json.loads(header[0][MODULATIONS]).get("latent")
    except (ValueError, RecursionError, AttributeError):
        return None
    return latent if _count(latent, MAX_SIDE * MAX_SIDE) else None


def is_latent_set_file(path) -> bool:
    """Whether `path` is a set of latents that write_latent_set wrote (its header read alone)."""
    header = _header(path)
    return header is not None and MODULATIONS in header[0] and LATENTS in header[1]


def read_latent_set(path) -> tuple[ModulatedBase, tuple[str, ...], np.ndarray, list[dict]]:
    """(the base, its channels, the latents [N, D] float32, index.csv's rows) of write_latent_set's
    file, each checked."""
    path = Path(path)
    base, channels, facts = read_base(path)
    header = _header(path)
    with _opened(path) as handle:
        piece = handle.get_slice(LATENTS)
        shape = tuple(piece.get_shape())
        if len(shape) != 2 or shape[1] != base.latent or shape[0] < 1 or piece.get_dtype() != "F32":
            raise InrError(f"{path}: its '{LATENTS}' is {piece.get_dtype()} {list(shape)}, expected F32 [N, "
                           f"{base.latent}]")
        latents = np.array(handle.get_tensor(LATENTS), dtype=np.float32)
    if not np.isfinite(latents).all():
        raise InrError(f"{path}: its latents hold NaN or infinite values")
    _, index = set_rows(path, header[0], shape[0])
    return base, channels, latents, index


def read_base(path) -> tuple[ModulatedBase, tuple[str, ...], dict]:
    """(the base, the channels it draws, its "modulations" facts) of a file write_base (or
    write_latent_set) wrote."""
    path = Path(path)
    exported = read_exported(path)
    if exported.stacked:
        raise InrError(f"{path}: a set of {len(exported.params)} networks, not a base")
    try:
        facts = json.loads(exported.metadata.get(MODULATIONS, ""))
    except (ValueError, RecursionError):
        facts = None
    if not isinstance(facts, dict) or MODULATIONS not in exported.metadata:
        raise InrError(f"{path}: no '{MODULATIONS}' in its metadata: not a base with modulations (inr meta-init "
                       f"--modulations writes one)")
    latent, steps = facts.get("latent"), facts.get("inner_steps")
    if not (_count(latent, MAX_SIDE * MAX_SIDE) and _count(steps, MOST_INNER_STEPS)):
        raise InrError(f"{path}: its modulations' latent size {latent!r} or inner steps {steps!r} are not whole "
                       f"numbers of at least 1")
    spec = exported.spec
    if spec.model != "siren" or spec.encoding != "none":
        raise InrError(f"{path}: a base with modulations of a {spec.model} network with the {spec.encoding} encoding; "
                       f"it is a SIREN without one")
    shifts = spec.layers * spec.hidden
    arrays = _tensors(path, {MAP: (shifts, latent), RATES: (latent,)})
    if not np.isfinite(arrays[MAP]).all() or not np.isfinite(arrays[RATES]).all() or (arrays[RATES] < 0).any():
        raise InrError(f"{path}: its modulation map or rates hold NaN, infinite or negative rates")
    return (ModulatedBase(spec, exported.params[0], arrays[MAP], arrays[RATES], int(steps)), exported.channels,
            facts)


def _count(value, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


class _opened:
    """safetensors' handle on a file, any error of its own one line naming the file."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        from safetensors import safe_open

        try:
            self.context = safe_open(str(self.path), framework="numpy")
            return self.context.__enter__()
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError, and OS errors
            raise InrError(f"{self.path}: not a readable safetensors file ({str(exc)[:120]})") from None

    def __exit__(self, kind, exc, traceback):
        self.context.__exit__(kind, exc, traceback)
        if exc is not None and not isinstance(exc, InrError):
            raise InrError(f"{self.path}: not a readable safetensors file ({str(exc)[:120]})") from None
        return False


def _tensors(path: Path, wanted: dict[str, tuple]) -> dict[str, np.ndarray]:
    """The named float32 tensors of these shapes, each checked from the header before it is read."""
    found = {}
    with _opened(path) as handle:
        names = set(handle.keys())
        for name, shape in wanted.items():
            if name not in names:
                raise InrError(f"{path}: no '{name}' tensor: not a whole base with modulations")
            piece = handle.get_slice(name)
            if tuple(piece.get_shape()) != shape or piece.get_dtype() != "F32":
                raise InrError(f"{path}: its '{name}' is {piece.get_dtype()} {list(piece.get_shape())}, expected "
                               f"F32 {list(shape)}")
            found[name] = np.array(handle.get_tensor(name), dtype=np.float32)
    return found
