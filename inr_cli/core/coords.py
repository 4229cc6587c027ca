"""The coordinate convention every part shares.

Pixel centres map to [-1, 1] on each axis: u = (x + 0.5) / W * 2 - 1. Any canvas samples the
centres of its own grid in the same square, so every size shows the same picture.
"""

import numpy as np


def axis_centres(n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.float64) + 0.5) / n * 2.0 - 1.0).astype(np.float32)


def pixel_coords(index: np.ndarray, width: int, height: int) -> np.ndarray:
    """(len(index), 2) float32 (u, v) of the pixels at row-major positions `index` of a W x H canvas:
    the very coordinates pixel_grid gives them (the same float64 arithmetic, rounded once)."""
    index = np.asarray(index, dtype=np.int64)
    coords = np.empty((len(index), 2), dtype=np.float32)
    coords[:, 0] = ((index % width).astype(np.float64) + 0.5) / width * 2.0 - 1.0
    coords[:, 1] = ((index // width).astype(np.float64) + 0.5) / height * 2.0 - 1.0
    return coords


def pixel_grid(width: int, height: int, row_start: int = 0, row_stop: int | None = None,
               columns: tuple[int, int] | None = None) -> np.ndarray:
    """(rows * cols, 2) float32 table of (u, v) for image rows [row_start, row_stop) and the columns
    [left, right) of a W x H canvas (all of them by default), row-major. A part of a canvas gets the
    very coordinates the whole canvas gives those pixels."""
    row_stop = height if row_stop is None else row_stop
    u = axis_centres(width)
    if columns is not None:
        u = u[columns[0]:columns[1]]
    v = axis_centres(height)[row_start:row_stop]
    grid = np.empty((len(v), len(u), 2), dtype=np.float32)
    grid[..., 0] = u[None, :]
    grid[..., 1] = v[:, None]
    return grid.reshape(-1, 2)
