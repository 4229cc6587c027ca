"""The image in memory (PixelImage), the size limit every image meets, and the one way a longer
side is fitted; formats/images.py reads and writes it as files."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inr_cli.errors import UsageError
from inr_cli.limits import MAX_IMAGE_PIXELS, MAX_SIDE


@dataclass
class PixelImage:
    """H x W x C float32 values in [0, 1] and the names of the channels."""

    values: np.ndarray
    channels: tuple[str, ...]
    bit_depth: int = 8  # 8 or 16: how decode quantises when writing an image file

    @property
    def height(self) -> int:
        return self.values.shape[0]

    @property
    def width(self) -> int:
        return self.values.shape[1]

    @property
    def n_channels(self) -> int:
        return self.values.shape[2]

    def targets(self) -> np.ndarray:
        """Row-major (H*W, C) float32 table in the order of coords.pixel_grid."""
        return np.ascontiguousarray(self.values.reshape(-1, self.n_channels), dtype=np.float32)


def within_limits(width: int, height: int, what: str = "image") -> tuple[int, int]:
    """(width, height), refused in one line beyond inr's limits (limits.py) before anything is
    allocated for it."""
    if width > MAX_SIDE or height > MAX_SIDE:
        raise UsageError(f"a {width}x{height} {what} exceeds the limit of {MAX_SIDE} pixels a side")
    if width * height > MAX_IMAGE_PIXELS:
        raise UsageError(f"a {width}x{height} {what} ({width * height} pixels) exceeds the limit of {MAX_IMAGE_PIXELS} "
                         f"pixels")
    return width, height


def fit_longer_side(width: int, height: int, size: int) -> tuple[int, int]:
    """Width and height with the longer side `size` and the aspect ratio kept, within inr's limits."""
    if width >= height:
        return within_limits(size, max(1, round(height * size / width)))
    return within_limits(max(1, round(width * size / height)), size)
