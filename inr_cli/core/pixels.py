"""The image in memory (PixelImage), the size limit every image meets, and the one way a longer
side is fitted; formats/images.py reads and writes it as files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from inr_cli.errors import InrError, UsageError
from inr_cli.limits import MAX_IMAGE_PIXELS, MAX_SIDE

# Pixels converted to floats at a time where a whole image is read through (its mean, its
# fingerprint): a bounded float copy, whatever the image's size.
BLOCK_PIXELS = 1 << 24
LEVELS = (np.arange(256, dtype=np.float32) / np.float32(255.0)).astype(np.float64)  # each 8-bit value's float


@dataclass
class PixelImage:
    """An H x W x C image and the names of its channels. `pixels` holds it as read: uint8 for an
    8-bit image (a quarter of the floats' memory: a gigapixel photo is 3 GB, not 12), else float32
    in [0, 1]. `values` is always float32 in [0, 1], v / 255 for an 8-bit pixel v."""

    pixels: np.ndarray
    channels: tuple[str, ...]
    bit_depth: int = 8  # 8 or 16: how decode quantises when writing an image file
    _level_counts: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def n_channels(self) -> int:
        return self.pixels.shape[2]

    @property
    def values(self) -> np.ndarray:
        """H x W x C float32 in [0, 1]: the array itself when stored as floats, else a new float copy
        (four times the 8-bit bytes: code that may meet a large image reads `pixels` or `blocks`)."""
        return as_floats(self.pixels)

    def table(self) -> np.ndarray:
        """(H*W, C) in the storage type, row-major in the order of coords.pixel_grid (a view)."""
        return self.pixels.reshape(-1, self.n_channels)

    def targets(self) -> np.ndarray:
        """Row-major (H*W, C) float32 table in the order of coords.pixel_grid."""
        return np.ascontiguousarray(as_floats(self.table()))

    def blocks(self, block_pixels: int = BLOCK_PIXELS) -> Iterator[np.ndarray]:
        """The (H*W, C) float32 table in consecutive blocks of at most block_pixels rows."""
        table = self.table()
        for start in range(0, len(table), block_pixels):
            yield as_floats(table[start:start + block_pixels])

    def mean_colour(self) -> np.ndarray:
        """The mean of each channel, in float64."""
        if self.pixels.dtype == np.uint8:
            counts = self.level_counts()
            return counts @ LEVELS / counts.sum(axis=1)
        total = np.zeros(self.n_channels, dtype=np.float64)
        for block in self.blocks():
            total += block.sum(axis=0, dtype=np.float64)
        return total / (self.width * self.height)

    def colour_variance(self) -> np.ndarray:
        """The variance of each channel about its mean, in float64."""
        mean = self.mean_colour()
        if self.pixels.dtype == np.uint8:
            counts = self.level_counts()
            return np.sum(counts * (LEVELS[None, :] - mean[:, None]) ** 2, axis=1) / counts.sum(axis=1)
        total = np.zeros(self.n_channels, dtype=np.float64)
        for block in self.blocks():
            deviation = block - mean
            total += np.einsum("ij,ij->j", deviation, deviation)
        return total / (self.width * self.height)

    def level_counts(self) -> np.ndarray:
        """(C, 256) how many pixels of an 8-bit image hold each value in each channel, counted once:
        its mean and variance from 256 numbers a channel (a gigapixel's in seconds, not minutes of
        floats)."""
        if self._level_counts is None:
            counts = np.zeros((self.n_channels, 256), dtype=np.int64)
            table = self.table()
            for start in range(0, len(table), BLOCK_PIXELS):
                block = table[start:start + BLOCK_PIXELS]
                for c in range(self.n_channels):
                    counts[c] += np.bincount(block[:, c], minlength=256)
            self._level_counts = counts
        return self._level_counts


def as_floats(array: np.ndarray) -> np.ndarray:
    """Pixels as float32 in [0, 1]: uint8 v as float32(v) / 255 (the bits an image decoded to floats
    always had); float32 as they are."""
    if array.dtype == np.uint8:
        return np.divide(array, np.float32(255.0), dtype=np.float32)
    return np.asarray(array, dtype=np.float32)


def beyond_image_limits(width: int, height: int) -> str | None:
    """What puts a width x height image beyond what inr reads, draws or writes (limits.py: pixels
    a side and in all), in words; None within. Every reader holds what a file declares to it before
    decoding a pixel, and every canvas and resize is held to it."""
    if width > MAX_SIDE or height > MAX_SIDE:
        return f"{width}x{height}, which exceeds the limit of {MAX_SIDE} pixels a side"
    if width * height > MAX_IMAGE_PIXELS:
        return f"{width}x{height} ({width * height} pixels), which exceeds the limit of {MAX_IMAGE_PIXELS} pixels"
    return None


def check_image(width: int, height: int, where: str) -> None:
    """A file's image refused in one line naming it where it is beyond inr's limits."""
    fault = beyond_image_limits(width, height)
    if fault:
        raise InrError(f"{where}: the image is {fault}")


def within_limits(width: int, height: int, what: str = "an image") -> tuple[int, int]:
    """(width, height), refused in one line beyond inr's limits (limits.py) before anything is
    allocated for it; `what` names it in the refusal."""
    fault = beyond_image_limits(width, height)
    if fault:
        raise UsageError(f"{what} of {fault}")
    return width, height


def fit_longer_side(width: int, height: int, size: int) -> tuple[int, int]:
    """Width and height with the longer side `size` and the aspect ratio kept, within inr's limits."""
    if width >= height:
        return within_limits(size, max(1, round(height * size / width)), f"size {size} makes an image")
    return within_limits(max(1, round(width * size / height)), size, f"size {size} makes an image")
