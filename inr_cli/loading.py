"""A trained network read back for drawing or export: from an `inr train` run (its directory or
checkpoint), or one image's network from an `inr fit-many` set."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.core.network import NetworkSpec
from inr_cli.errors import UsageError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.network_set import is_network_set, load_network_set


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
    if is_network_set(run):
        if image is None:
            raise UsageError(f"{run} is a set of networks: name one with --image NAME")
        networks = load_network_set(run)
        row = networks.row(image)
        entry = networks.index[row]
        return OneNetwork(networks.spec, networks.params(row), networks.channels, int(entry["width"]),
                          int(entry["height"]), f"render-{Path(image).stem}")
    if image is not None:
        raise UsageError(f"--image names an image of an inr fit-many folder; {run} is a single run")
    saved = ckpt.load(run, moments=False)
    height, width, _ = saved.data_shape
    return OneNetwork(saved.spec, saved.params, saved.channels, width, height, "render", saved.config.network.dtype)
