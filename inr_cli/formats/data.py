"""Training data from a pixel CSV, an image file, a NumPy array file, or the built-in sample, and its
fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError
from inr_cli.formats.images import load_image, pixels_from_array, resize
from inr_cli.formats.input_files import check_regular
from inr_cli.formats.pixel_csv import read_csv
from inr_cli.resources import sample_image

SAMPLE = "sample"


def load_training_data(source: str, size: int = 0, gray: bool = False, notices: list | None = None,
                       enlarge: bool = True) -> PixelImage:
    """source: a .csv path, a .npy array, an image path, or "" / "sample" for the built-in sample image.
    size: the longer side to resize to (0: as is); with enlarge False, only an image larger than that
    is resized (a set's --size)."""
    if source in ("", SAMPLE):
        return load_image(sample_image(), size=size or None, gray=gray, notices=notices, enlarge=enlarge)
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".npy"):
        image = read_csv(path) if suffix == ".csv" else read_npy(path)
        if gray and image.channels != ("l",):
            rgb = image.values[..., :3]
            grey = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
            image = PixelImage(grey[..., None].astype(np.float32), ("l",), image.bit_depth)
        return resize(image, size) if size and (enlarge or size < max(image.width, image.height)) else image
    return load_image(path, size=size or None, gray=gray, notices=notices, enlarge=enlarge)


def read_npy(path: Path) -> PixelImage:
    """An image saved with numpy.save: (H, W) or (H, W, C) of uint8, uint16 or floats in [0, 1]."""
    check_regular(path, expected="an array file")  # a FIFO would block np.load for ever
    try:  # mapped, not read: its shape and type are checked before its pixels are loaded
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "it ends too soon"
        raise InrError(f"{path}: not a NumPy array file ({reason})") from None
    if not isinstance(array, np.ndarray):  # numpy.load opens an .npz archive whatever its name
        array.close()
        raise InrError(f"{path}: an archive of arrays (.npz); save one image with numpy.save")
    return pixels_from_array(array, str(path))


def fingerprint(image: PixelImage) -> str:
    """sha256 of the shape, channel names and values: a resumed run must see the same data."""
    digest = hashlib.sha256()
    digest.update(repr((image.values.shape, image.channels)).encode())
    digest.update(np.ascontiguousarray(image.values, dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]
