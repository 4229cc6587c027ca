"""Training data from a pixel CSV, an image file, or the built-in sample, and its fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from inr_cli.formats.images import load_image, resize
from inr_cli.formats.images import PixelImage
from inr_cli.formats.pixel_csv import read_csv
from inr_cli.resources import sample_image

SAMPLE = "sample"


def load_training_data(source: str, size: int = 0, gray: bool = False, notices: list | None = None) -> PixelImage:
    """source: a .csv path, an image path, or "" / "sample" for the built-in sample image."""
    if source in ("", SAMPLE):
        return load_image(sample_image(), size=size or None, gray=gray, notices=notices)
    path = Path(source)
    if path.suffix.lower() == ".csv":
        image = read_csv(path)
        if gray and image.channels != ("l",):
            rgb = image.values[..., :3]
            grey = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
            image = PixelImage(grey[..., None].astype(np.float32), ("l",), image.bit_depth)
        return resize(image, size) if size else image
    return load_image(path, size=size or None, gray=gray, notices=notices)


def fingerprint(image: PixelImage) -> str:
    """sha256 of the shape, channel names and values: a resumed run must see the same data."""
    digest = hashlib.sha256()
    digest.update(repr((image.values.shape, image.channels)).encode())
    digest.update(np.ascontiguousarray(image.values, dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]
