"""Choosing the canvas of a render: keep the training image's aspect unless told otherwise."""

from __future__ import annotations

import numpy as np

from inr_cli.core.pixels import fit_longer_side, within_limits
from inr_cli.errors import UsageError

# A canvas of more pixels is never drawn as one array: `inr render` writes it in tiles unless -o names
# a file, net.render() draws a region of it or writes the tiles, `inr eval` scores it a strip at a
# time. One PNG of a gigapixel would be gigabytes that most viewers cannot open.
WHOLE_CANVAS_PIXELS = 1 << 26


def canvas_size(train_width: int, train_height: int, size: int | None, width: int | None,
                height: int | None) -> tuple[int, int]:
    if size is not None and (width is not None or height is not None):
        raise UsageError("give either --size or --width/--height, not both")
    for name, value in (("--size", size), ("--width", width), ("--height", height)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be a positive number of pixels, got {value}")
    if size is not None:
        w, h = fit_longer_side(train_width, train_height, size)
    elif width is not None and height is not None:
        w, h = width, height
    elif width is not None:
        w, h = width, max(1, round(width * train_height / train_width))
    elif height is not None:
        w, h = max(1, round(height * train_width / train_height)), height
    else:
        w, h = train_width, train_height
    return within_limits(w, h, "a canvas")


def check_region(region: tuple, width: int, height: int, name: str = "--region") -> tuple[int, int, int, int]:
    """(left, top, right, bottom) if it is a part of the width x height canvas, else one line."""
    if len(region) != 4 or not all(isinstance(v, (int, np.integer)) for v in region):
        raise UsageError(f"{name} is (left, top, right, bottom) in pixels of the canvas, got {region}")
    left, top, right, bottom = (int(v) for v in region)
    if not (0 <= left < right <= width and 0 <= top < bottom <= height):
        raise UsageError(f"{name} {','.join(map(str, region))} is not a part of the {width}x{height} canvas (it needs "
                         f"left < right <= {width} and top < bottom <= {height})")
    return left, top, right, bottom
