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


def ssim(image: np.ndarray, reference: np.ndarray) -> float:
    """Mean SSIM over channels for (H, W, C) arrays in [0, 1]; the window shrinks for tiny images."""
    c1, c2 = 0.01**2, 0.03**2
    size = min(11, image.shape[0], image.shape[1])
    size -= 1 - size % 2  # odd
    window = _gaussian_window(size, 1.5 * size / 11)
    scores = []
    for c in range(image.shape[2]):
        x = image[..., c].astype(np.float64)
        y = reference[..., c].astype(np.float64)
        mu_x, mu_y = _filter_valid(x, window), _filter_valid(y, window)
        sxx = _filter_valid(x * x, window) - mu_x**2
        syy = _filter_valid(y * y, window) - mu_y**2
        sxy = _filter_valid(x * y, window) - mu_x * mu_y
        num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
        den = (mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2)
        scores.append(float(np.mean(num / den)))
    return float(np.mean(scores))
