"""What numbers computed apart may be asked to agree to, and why.

The CPU's matrix products go through the BLAS, which picks its kernel for the processor it runs on
(OpenBLAS: Haswell, SkylakeX, Neoverse...) and, within one, may take another path for another shape of
operand (small matrices, the edge of a tile). Each path adds a dot product's terms in its own order,
so the last bit of a product depends on the machine and on the shape it was computed in, never on
chance. Hence:

- bit for bit: two computations of the same shapes in one run on one machine (a resumed run and an
  uninterrupted one, a network fitted in a pack and alone, where each network's products keep their
  shapes);
- within a tolerance: anything computed in other shapes (a tile drawn in a batch of another height
  than the render's), on another machine, or by another library, and every fixture written earlier.
"""

from __future__ import annotations

import numpy as np

# A float32 product's rounding is 6e-8 of its magnitude; a few dozen steps of training carry a last-bit
# difference forward without letting it grow past this share of each array's largest entry.
REPRODUCED_SHARE = 1e-4
# One 8-bit level: a colour a last bit away from a rounding boundary (k + 0.5) / 255 lands on either side.
PIXEL_LEVELS = 1
# Values so close to a boundary are rare: a render off by a level at more than this share of its values
# has another cause (a shifted grid, a wrong chunk) than the order of the sums.
PIXELS_OFF_SHARE = 0.01


def assert_reproduced(new: np.ndarray, old: np.ndarray, what: str = "array") -> None:
    """new is old computed again elsewhere (another machine, BLAS kernel or shape): equal up to
    REPRODUCED_SHARE of old's largest magnitude."""
    new, old = np.asarray(new), np.asarray(old)
    assert new.shape == old.shape, f"{what}: shape {new.shape} against {old.shape}"
    assert np.isfinite(new).all(), f"{what}: not finite"
    scale = float(np.abs(old).max()) if old.size else 0.0
    worst = float(np.abs(new.astype(np.float64) - old).max()) if old.size else 0.0
    allowed = REPRODUCED_SHARE * scale
    assert worst <= allowed, f"{what}: off by {worst:.3g} where {allowed:.3g} is allowed"


def assert_same_pixels(actual: np.ndarray, reference: np.ndarray, what: str = "pixels") -> None:
    """8- or 16-bit pixels drawn by the same network in other shapes than the reference's: each value
    within PIXEL_LEVELS of it, and all but PIXELS_OFF_SHARE of them equal."""
    actual, reference = np.asarray(actual), np.asarray(reference)
    assert actual.shape == reference.shape, f"{what}: shape {actual.shape} against {reference.shape}"
    difference = np.abs(actual.astype(np.int64) - reference.astype(np.int64))
    assert difference.max(initial=0) <= PIXEL_LEVELS, f"{what}: {int(difference.max())} levels off"
    off = int(np.count_nonzero(difference))
    assert off <= PIXELS_OFF_SHARE * difference.size, f"{what}: {off} of {difference.size} values off by a level"
