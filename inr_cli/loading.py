"""A trained network read back for drawing or export: from an `inr train` run (its directory or
checkpoint), one image's network from an `inr fit-many` set, or from a .safetensors file `inr export`
wrote (one network, or a set's with the image named)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.network_set import (
    PLAN,
    NetworkSet,
    is_network_set,
    load_network_set,
    refuse_set_without_plan,
)

if TYPE_CHECKING:
    from inr_cli.formats.exported import Exported

RUN_CONFIG = "config.toml"  # the first file inr train writes in a run


@dataclass
class OneNetwork:
    """The network a command draws or exports: from a run, or from a set with --image."""

    spec: NetworkSpec
    params: np.ndarray  # [P]
    channels: tuple[str, ...]
    width: int  # the size it was trained at
    height: int
    label: str  # "render", or the image's stem: a default file name
    dtype: str = "float32"  # what its parameters are stored in (a run's network.dtype)


def one_network(run: Path, image: str | None) -> OneNetwork:
    """The network at `run`: a run directory or checkpoint, one image's of a set (a folder, or a set's
    .safetensors export) named by `image`, or the network of an `inr export` .safetensors file."""
    if is_exported_file(run):
        return _exported_network(run, image)
    if is_network_set(run):
        return _set_member(load_network_set(run), run, image)
    require_input(run)
    if image is not None:
        raise UsageError(f"--image names an image of an inr fit-many folder; {run} is a single run")
    saved = ckpt.load(run, moments=False)
    height, width, _ = saved.data_shape
    return OneNetwork(saved.spec, saved.params, saved.channels, width, height, "render", saved.config.network.dtype)


def require_input(path: Path) -> None:
    """A missing RUN|SET said as such, and so a set whose fit-many.json is gone, and a folder that
    holds neither (empty, or the user's own files): otherwise each reads as a single run (not a set),
    and --image or a set's -o would be refused for that instead."""
    path = Path(path)
    if not path.exists():
        raise InrError(f"{path}: no such run or set")
    if not (path / ckpt.FILENAME).exists():
        refuse_set_without_plan(path)
    if path.is_dir() and not any(os.path.lexists(path / name) for name in (ckpt.FILENAME, RUN_CONFIG, PLAN)):
        # a run inr train started holds its config.toml before its first checkpoint: the checkpoint's
        # reader says that one
        raise InrError(f"{path}: neither a run nor a set (no {ckpt.FILENAME}, no {PLAN} in this folder): give "
                       f"the folder of an inr train run or of an inr fit-many set")


def is_exported_file(path: Path) -> bool:
    """Whether `path` names a .safetensors file (`inr export`'s): read as a network or a set."""
    return Path(path).suffix.lower() == ".safetensors" and not Path(path).is_dir()


def _set_member(networks: NetworkSet, where: Path, image: str | None) -> OneNetwork:
    if image is None:
        raise UsageError(f"{where} is a set of networks: name one with --image NAME")
    row = networks.row(image)
    return _member(networks.spec, networks.params(row), networks.channels, networks.index[row], image)


def _member(spec: NetworkSpec, params: np.ndarray, channels, entry: dict, image: str,
            dtype: str = "float32") -> OneNetwork:
    """One image's network of a set, at the size its index row gives (1x1 in an older export that
    holds the names alone, as the API reads it)."""
    return OneNetwork(spec, params, channels, int(entry.get("width", 1)), int(entry.get("height", 1)),
                      f"render-{Path(image).stem}", dtype)


def exported_contents(path: Path) -> tuple[NetworkSet | None, Exported | None]:
    """An `inr export` .safetensors file read whole and checked: (the set it holds, None), or (None,
    the one network it holds)."""
    from inr_cli.formats.exported import read_exported
    from inr_cli.formats.modulated import is_latent_set_file, read_latent_set

    if is_latent_set_file(path):
        base, channels, latents, index = read_latent_set(path)
        return NetworkSet(base.spec, channels, index, latents, base), None
    exported = read_exported(path)
    if exported.stacked:
        return NetworkSet(exported.spec, exported.channels, exported.index, exported.params), None
    return None, exported


def _exported_network(path: Path, image: str | None) -> OneNetwork:
    from inr_cli.formats.exported import read_exported
    from inr_cli.formats.modulated import is_latent_set_file

    if image is not None and not is_latent_set_file(path):  # one image of a set: its network alone is read
        exported = read_exported(path, member=image)
        if not exported.stacked:
            raise UsageError(f"--image names an image of a set; {path} holds one network")
        return _member(exported.spec, exported.params[0], exported.channels, exported.index[exported.member], image,
                       exported.dtype)
    networks, exported = exported_contents(path)
    if networks is not None:
        return _set_member(networks, path, image)
    return OneNetwork(exported.spec, exported.params[0], exported.channels, exported.width, exported.height,
                      "render", exported.dtype)
