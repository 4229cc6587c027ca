"""Deep-zoom tiles drawn by the network: the pyramid's geometry, and a renderer with a bounded cache.

The pyramid is a stack of canvases in the coordinate convention every part shares: level `base` is
the training image's own size, each level above it twice the one below, up to a canvas of about a
million pixels a side (where float32 coordinates still tell neighbouring pixels apart); the levels
below `base` halve it down to one tile. A tile is a 256 x 256 part of one level's canvas, drawn with
the very pixels `inr render --width W --height H` gives that canvas there.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from inr_cli.core.render import render_uint8
from inr_cli.formats.png import png_bytes

TILE = 256
DEEPEST_SIDE = 1 << 20
MIN_ZOOM_LEVELS = 4  # past the training size, even for a very large image
CACHE_BYTES = 64 << 20


@dataclass(frozen=True)
class Pyramid:
    width: int  # the training image's size: the canvas of level `base`
    height: int
    base: int
    max_level: int

    @classmethod
    def for_image(cls, width: int, height: int) -> "Pyramid":
        longer = max(width, height)
        base = max(0, math.ceil(math.log2(longer / TILE)))
        above = max(MIN_ZOOM_LEVELS, math.ceil(math.log2(DEEPEST_SIDE / longer)))
        return cls(width, height, base, base + above)

    def canvas(self, level: int) -> tuple[int, int]:
        """The (width, height) of a level's canvas; rounded up below the training size."""
        if level >= self.base:
            return self.width << (level - self.base), self.height << (level - self.base)
        shrink = 1 << (self.base - level)
        return -(-self.width // shrink), -(-self.height // shrink)

    def tiles(self, level: int) -> tuple[int, int]:
        width, height = self.canvas(level)
        return -(-width // TILE), -(-height // TILE)

    def region(self, level: int, x: int, y: int) -> tuple[int, int, tuple[int, int, int, int]]:
        """(canvas width, canvas height, (left, top, right, bottom)) of tile (x, y) of a level;
        ValueError for a tile outside the pyramid."""
        if not 0 <= level <= self.max_level:
            raise ValueError(f"level {level} is outside 0..{self.max_level}")
        columns, rows = self.tiles(level)
        if not (0 <= x < columns and 0 <= y < rows):
            raise ValueError(f"tile ({x}, {y}) is outside level {level}'s {columns} x {rows} tiles")
        width, height = self.canvas(level)
        return width, height, (x * TILE, y * TILE, min(width, (x + 1) * TILE), min(height, (y + 1) * TILE))

    def to_json(self) -> dict:
        """What the page's tile source needs: the deepest level's size, in OpenSeadragon's terms."""
        width, height = self.canvas(self.max_level)
        return {"width": width, "height": height, "tileSize": TILE, "maxLevel": self.max_level, "base": self.base}


class PngCache:
    """Least recently used PNG bytes, bounded by their total size; safe across request threads."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = max_bytes
        self.items: OrderedDict = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            data = self.items.get(key)
            if data is not None:
                self.items.move_to_end(key)
            return data

    def put(self, key, data: bytes) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = data
            self.size += len(data)
            while self.size > self.max_bytes and self.items:
                _, old = self.items.popitem(last=False)
                self.size -= len(old)


class TileRenderer:
    """Draws tiles and thumbnails as PNG bytes, one at a time (the backend already uses every core,
    or the GPU, for one; one at a time also bounds the memory to one tile's workspace)."""

    def __init__(self, backend, cache: PngCache | None = None):
        self.backend = backend
        self.cache = cache or PngCache()
        self.lock = threading.Lock()

    def png(self, key, spec, params: np.ndarray, width: int, height: int,
            region: tuple[int, int, int, int] | None = None) -> bytes:
        """The network drawn on a width x height canvas (only `region` of it, if given), cached by key."""
        data = self.cache.get(key)
        if data is None:
            with self.lock:
                data = self.cache.get(key)  # drawn by another request while this one waited
                if data is None:
                    pixels = render_uint8(self.backend, spec, params, width, height, region=region)
                    data = png_bytes(pixels, threads=1)
                    self.cache.put(key, data)
        return data
