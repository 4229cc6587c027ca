"""The PSNR of a whole image read from a fixed random subset of its pixels.

Drawing every pixel of a gigapixel image to score it takes as long as many training steps; the mean
squared error over a million pixels drawn at random without replacement is within a few hundredths
of a dB of the whole image's (its standard error is the spread of the pixels' squared errors over
the square root of their count; BENCHMARKS.md has it measured on a 250-megapixel mosaic). The subset
is fixed by its seed, so that successive readings of one run differ by the network alone. An image
of no more pixels than the subset is scored on all of them: the exact PSNR.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inr_cli.core.coords import pixel_coords
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.pixels import PixelImage, as_floats
from inr_cli.core.render import evaluate_points

SUBSET_PIXELS = 1 << 20
SUBSET_SEED = 0


@dataclass
class PixelSubset:
    index: np.ndarray  # row-major positions of the pixels, ascending
    coords: np.ndarray  # (count, 2) float32, as coords.pixel_grid gives those pixels
    targets: np.ndarray  # (count, C) float32, the image's values there
    pixels: int  # the image's pixel count

    @classmethod
    def of(cls, image: PixelImage, count: int | None = None, seed: int = SUBSET_SEED) -> PixelSubset:
        """`count` pixels (SUBSET_PIXELS by default) of the image drawn at random without replacement
        (all of them for an image of no more), gathered once: the image itself is not read again."""
        count = SUBSET_PIXELS if count is None else count
        pixels = image.width * image.height
        if count >= pixels:
            index = np.arange(pixels, dtype=np.int64)
        else:
            index = np.sort(np.random.default_rng(seed).choice(pixels, size=count, replace=False))
        targets = as_floats(np.take(image.table(), index, axis=0))
        return cls(index, pixel_coords(index, image.width, image.height), targets, pixels)

    @property
    def whole(self) -> bool:
        """Whether the subset is every pixel (its PSNR is then the image's, exactly)."""
        return len(self.index) == self.pixels

    def mse(self, backend, spec, params) -> float:
        """The mean squared error of one network's drawing ([P] or [1, P] parameters, clipped to
        [0, 1] as a render is) at the subset's pixels."""
        drawn = evaluate_points(backend, spec, params.reshape(1, -1), self.coords)[0]
        diff = drawn.astype(np.float64) - self.targets
        return float(np.mean(diff * diff))

    def psnr(self, backend, spec, params) -> float:
        return psnr_from_mse(self.mse(backend, spec, params))

    def describe(self) -> str:
        """How the PSNR was read, for the messages: nothing for a whole image."""
        if self.whole:
            return ""
        return f"on {len(self.index):,} of its {self.pixels:,} pixels, drawn at random"
