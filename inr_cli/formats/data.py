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
        if "pickle" in reason:  # NumPy's own advice, to load it unsafely, is not for a file of pixels
            reason = "no array header: NumPy would read it as pickled Python objects, which inr never loads"
        raise InrError(f"{path}: not a NumPy array file ({reason})") from None
    if not isinstance(array, np.ndarray):  # numpy.load opens an .npz archive whatever its name
        array.close()
        raise InrError(f"{path}: an archive of arrays (.npz); save one image with numpy.save")
    return pixels_from_array(array, str(path))


def fingerprint(image: PixelImage) -> str:
    """sha256 of the shape, channel names and pixels: a resumed run must see the same data. An 8-bit
    image's bytes are hashed as they are kept (a gigapixel in seconds), any other's float32 values."""
    if image.pixels.dtype != np.uint8:
        return float_fingerprint(image)
    digest = hashlib.sha256()
    digest.update(repr((image.pixels.shape, image.channels, "uint8")).encode())
    digest.update(memoryview(np.ascontiguousarray(image.pixels)).cast("B"))
    return digest.hexdigest()[:16]


def float_fingerprint(image: PixelImage) -> str:
    """sha256 of the shape, channel names and float32 values (read in blocks): every image's
    fingerprint before 8-bit images were kept as bytes, so runs and studies of then still match."""
    digest = hashlib.sha256()
    digest.update(repr((image.pixels.shape, image.channels)).encode())
    for block in image.blocks():
        digest.update(memoryview(block).cast("B"))
    return digest.hexdigest()[:16]


def same_data(image: PixelImage, recorded: str) -> bool:
    """Whether `recorded` (a checkpoint's or a study's fingerprint) is this image's, as inr gives it now
    or gave it before 8-bit images were kept as bytes."""
    return fingerprint(image) == recorded or (image.pixels.dtype == np.uint8 and float_fingerprint(image) == recorded)
