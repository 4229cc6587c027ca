"""Image quality: PSNR and SSIM (Wang et al. 2004, 11x11 Gaussian window, sigma 1.5)."""

from __future__ import annotations

import math

import numpy as np


def psnr_from_mse(mse: float) -> float:
    """PSNR in dB for values in [0, 1]; infinite for a perfect match."""
    if mse <= 0:
        return float("inf")
    if not math.isfinite(mse):
        return float("nan")
    return -10.0 * math.log10(mse)


PSNR_BLOCK_ELEMENTS = 1 << 22  # float64 differences a block: a large photo's would take gigabytes at once


def psnr(image: np.ndarray, reference: np.ndarray) -> float:
    """In blocks of rows (an image of up to PSNR_BLOCK_ELEMENTS values is one block, summed as np.mean sums)."""
    rows = max(1, PSNR_BLOCK_ELEMENTS // max(1, image[0].size))
    total = 0.0
    for start in range(0, len(image), rows):
        diff = image[start:start + rows].astype(np.float64) - reference[start:start + rows].astype(np.float64)
        total += float(np.sum(diff * diff))
    return psnr_from_mse(total / image.size)


def _gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2
    w = np.exp(-(x**2) / (2 * sigma**2))
    return w / w.sum()


def _filter_valid(image: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Separable 'valid' correlation of a 2-D array with a 1-D window on both axes."""
    k = len(window)
    rows = sum(window[i] * image[i : image.shape[0] - k + 1 + i, :] for i in range(k))
    return sum(window[i] * rows[:, i : rows.shape[1] - k + 1 + i] for i in range(k))


def ssim_window(width: int, height: int) -> np.ndarray:
    """The Gaussian window of an image's SSIM: 11 wide, shrunk (odd) for an image smaller than that."""
    size = min(11, height, width)
    size -= 1 - size % 2  # odd
    return _gaussian_window(size, 1.5 * size / 11)


def _ssim_map(x: np.ndarray, y: np.ndarray, window: np.ndarray) -> np.ndarray:
    """SSIM at each place the window fits wholly within two 2-D float64 arrays."""
    c1, c2 = 0.01**2, 0.03**2
    mu_x, mu_y = _filter_valid(x, window), _filter_valid(y, window)
    sxx = _filter_valid(x * x, window) - mu_x**2
    syy = _filter_valid(y * y, window) - mu_y**2
    sxy = _filter_valid(x * y, window) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2)
    return num / den


def ssim(image: np.ndarray, reference: np.ndarray) -> float:
    """Mean SSIM over channels for (H, W, C) arrays in [0, 1]; the window shrinks for tiny images."""
    window = ssim_window(image.shape[1], image.shape[0])
    scores = [float(np.mean(_ssim_map(image[..., c].astype(np.float64), reference[..., c].astype(np.float64), window)))
              for c in range(image.shape[2])]
    return float(np.mean(scores))


class StreamingScores:
    """PSNR and SSIM of an image against its reference, fed a strip of rows at a time from the top:
    every pixel counted, neither image held whole. SSIM's window reaches across strips: the last rows
    of each strip wait for the next, so the map is the whole image's, row for row. Fed in one strip,
    the figures are psnr()'s and ssim()'s to the bit; in many, to the rounding of the sums."""

    def __init__(self, width: int, height: int, channels: int):
        self.window = ssim_window(width, height)
        self.channels, self.pixels = channels, width * height
        self.squared = 0.0
        self.ssim_sums, self.ssim_places = np.zeros(channels), 0
        self.waiting: tuple[np.ndarray, np.ndarray] | None = None  # the last rows, for the window

    def add(self, image: np.ndarray, reference: np.ndarray) -> None:
        """The next rows: (rows, W, C) arrays in [0, 1] of the image and its reference."""
        diff = image.astype(np.float64) - reference.astype(np.float64)
        self.squared += float(np.sum(diff * diff))
        if self.waiting is not None:
            image, reference = np.concatenate([self.waiting[0], image]), np.concatenate([self.waiting[1], reference])
        k = len(self.window)
        if len(image) >= k:
            for c in range(self.channels):
                ssim_map = _ssim_map(image[..., c].astype(np.float64), reference[..., c].astype(np.float64),
                                     self.window)
                self.ssim_sums[c] += float(np.sum(ssim_map))
            self.ssim_places += (len(image) - k + 1) * (image.shape[1] - k + 1)
        kept = max(0, len(image) - k + 1)  # the rows the window still needs
        self.waiting = (image[kept:], reference[kept:]) if k > 1 else None

    def psnr(self) -> float:
        return psnr_from_mse(self.squared / (self.pixels * self.channels))

    def ssim(self) -> float:
        return float(np.mean(self.ssim_sums / self.ssim_places))
