"""Choosing the canvas of a render: keep the training image's aspect unless told otherwise."""

from __future__ import annotations

from inr_cli.core.pixels import fit_longer_side, within_limits
from inr_cli.errors import UsageError


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
    return within_limits(w, h, "canvas")
