"""The images a study's trials fit: one image, or a seeded sample of a folder's (fitted as one pack).

One image is loaded as `inr train IMAGE` loads it and fitted with the run's seed, so that `inr train
--config best.toml` gives the very network the study measured. A folder (or a list file, or a URL)
is listed as `inr fit-many` lists it; a sample of it is drawn in an order the seed decides, of one
size and channels (one pack shares one table of coordinates): the kind of the first images drawn
that most of them have. Each image's seed comes from the seed and its name, as in fit-many.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.config import Config
from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.data import SAMPLE, load_training_data
from inr_cli.sets import inputs
from inr_cli.sets.plan import image_seed


@dataclass
class Sample:
    source: str
    names: list[str]
    seeds: list[int]
    images: list[PixelImage]
    folder: bool  # a sample of a folder (fit-many's seeds), or one image (inr train's)
    of: int = 1  # images in the folder

    @property
    def width(self) -> int:
        return self.images[0].width

    @property
    def height(self) -> int:
        return self.images[0].height

    @property
    def channels(self) -> int:
        return self.images[0].n_channels

    def describe(self) -> str:
        first = self.images[0]
        kind = f"{first.width}x{first.height} {','.join(first.channels)}"
        if not self.folder:
            return f"{self.source or 'the built-in sample'} ({kind})"
        return f"{len(self.names)} of the {self.of} images of {self.source} ({kind})"


def is_folder(source: str) -> bool:
    return inputs.is_url(source) or Path(source).is_dir() or Path(source).suffix.lower() in inputs.LIST_SUFFIXES


def load_sample(source: str, config: Config, count: int, notices: list[str]) -> Sample:
    """The images of a study on `source` (count: how many of a folder's)."""
    if count <= 0:
        raise UsageError(f"--sample must be a positive number of images, got {count}")
    if not is_folder(source):
        image = load_training_data(source, config.data.size, config.data.gray, notices)
        name = Path(source).name if source not in ("", SAMPLE) else SAMPLE
        return Sample(source, [name], [config.training.seed], [image], folder=False)
    listed = inputs.list_inputs(source)
    if not listed:
        raise InrError(f"{source}: no images to tune on")
    order = np.random.default_rng(config.training.seed).permutation(len(listed))
    drawn: list[tuple[inputs.Listed, tuple]] = []  # (image, its width, height and channels), in the seed's order
    kind = None
    for index in order:
        item = listed[int(index)]
        found = inputs.probe([(item.name, item.location)], config)[0]
        if found[0] == "error":
            notices.append(f"left out of the sample: {found[1]}")
            continue
        drawn.append((item, tuple(found[:3])))
        if kind is None and len(drawn) == count:  # the kind that most of the first draws have
            kind = Counter(k for _, k in drawn).most_common(1)[0][0]
        if kind is not None and sum(k == kind for _, k in drawn) >= count:
            break
    if not drawn:
        raise InrError(f"{source}: none of its images can be read")
    if kind is None:  # fewer readable images than asked for
        kind = Counter(k for _, k in drawn).most_common(1)[0][0]
    chosen = sorted((item for item, k in drawn if k == kind), key=lambda item: item.name)
    others = sum(k != kind for _, k in drawn)
    if others:
        notices.append(f"the sample keeps to one size and channels ({kind[0]}x{kind[1]} {kind[2]}): {others} of the "
                       f"images drawn were of another and are left out (--size N makes sizes alike)")
    images = [inputs.load(item.location, item.name, config)[0] for item in chosen]
    names = [item.name for item in chosen]
    return Sample(source, names, [image_seed(config.training.seed, name) for name in names], images, folder=True,
                  of=len(listed))
