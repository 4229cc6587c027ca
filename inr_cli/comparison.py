"""The side-by-side picture: reference | render | error map, for judging a run at a glance."""

from __future__ import annotations

import numpy as np

from inr_cli.images import PixelImage

ERROR_GAIN = 4.0  # an absolute error of 0.25 shows as white


def to_rgb(values: np.ndarray) -> np.ndarray:
    """(H, W, C) in [0, 1] with C = 1, 3 or 4 -> (H, W, 3); alpha is dropped."""
    if values.shape[2] == 1:
        return np.repeat(values, 3, axis=2)
    return values[..., :3]


def error_map(render: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Mean absolute error over channels, amplified, as a heat map from black through red to yellow."""
    error = np.clip(np.abs(render - reference).mean(axis=2) * ERROR_GAIN, 0.0, 1.0)
    heat = np.empty(error.shape + (3,), np.float32)
    heat[..., 0] = np.clip(error * 2.0, 0.0, 1.0)
    heat[..., 1] = np.clip(error * 2.0 - 1.0, 0.0, 1.0)
    heat[..., 2] = 0.0
    return heat


def side_by_side(render: np.ndarray, reference: np.ndarray, gap: int = 4) -> PixelImage:
    h, w = reference.shape[:2]
    canvas = np.ones((h, 3 * w + 2 * gap, 3), np.float32)
    canvas[:, :w] = to_rgb(reference)
    canvas[:, w + gap: 2 * w + gap] = to_rgb(np.clip(render, 0.0, 1.0))
    canvas[:, 2 * (w + gap):] = error_map(np.clip(render, 0.0, 1.0), reference)
    return PixelImage(canvas, ("r", "g", "b"))
