"""A canvas too large for one picture file: a tiled pyramidal TIFF (BigTIFF), written strip by strip.

Level 0 is the canvas in 256 x 256 tiles; each level after it is half the one before (rounded up),
down to one tile, stored as its SubIFDs, as whole-slide and gigapixel viewers expect (tifffile's
`series[0].levels`, libvips, QuPath, OpenSlide's generic TIFF). Every level is the network drawn on
a canvas of that size, as `inr view` draws its levels, never a shrunk copy of level 0: a level is
written from a strip of 256 rows drawn at a time, so memory stays one strip whatever the canvas.
Tiles are deflated (zlib level 1, with the horizontal predictor): lossless, the pixels `inr render`
draws there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_path

TILE = 256
PHOTOMETRIC = {1: "minisblack", 3: "rgb", 4: "rgb"}


def pyramid_levels(width: int, height: int) -> list[tuple[int, int]]:
    """(width, height) of every level: the canvas, then halved (rounded up) until it fits one tile."""
    levels = [(width, height)]
    while max(levels[-1]) > TILE:
        w, h = levels[-1]
        levels.append((-(-w // 2), -(-h // 2)))
    return levels


def _tiles(draw: Callable[[int, int, int, int], np.ndarray], width: int, height: int,
           on_strip: Callable[[int], None] | None) -> Iterator[np.ndarray]:
    """The tiles of a width x height canvas in TIFF order (rows of tiles, left to right), from strips
    of TILE rows drawn by draw(width, height, top, bottom) -> (rows, width, C) uint8."""
    for top in range(0, height, TILE):
        strip = draw(width, height, top, min(height, top + TILE))
        for left in range(0, width, TILE):
            yield np.ascontiguousarray(strip[:, left:left + TILE])
        if on_strip is not None:
            on_strip(min(height, top + TILE))


def write_pyramid(path: Path, width: int, height: int, channels: int,
                  draw: Callable[[int, int, int, int], np.ndarray],
                  on_strip: Callable[[int, int], None] | None = None) -> None:
    """The pyramid of a width x height canvas of `channels` 8-bit channels (1, 3 or 4), written
    atomically. draw(w, h, top, bottom) gives rows [top, bottom) of the w x h canvas;
    on_strip(level, rows done) is called after each strip."""
    import tifffile

    levels = pyramid_levels(width, height)
    options = dict(dtype=np.uint8, tile=(TILE, TILE), photometric=PHOTOMETRIC[channels],
                   extrasamples=("unassalpha",) if channels == 4 else None, compression="zlib",
                   compressionargs={"level": 1}, predictor=True)
    with atomic_path(path, suffix=Path(path).suffix) as tmp:
        try:
            with tifffile.TiffWriter(tmp, bigtiff=True) as tiff:
                for number, (w, h) in enumerate(levels):
                    progress = None if on_strip is None else (lambda rows, n=number: on_strip(n, rows))
                    shape = (h, w) if channels == 1 else (h, w, channels)
                    tiles = _tiles(draw, w, h, progress)
                    if channels == 1:
                        tiles = (tile[..., 0] for tile in tiles)
                    if number == 0:
                        tiff.write(tiles, shape=shape, subifds=len(levels) - 1, **options)
                    else:
                        tiff.write(tiles, shape=shape, subfiletype=1, **options)
        except OSError as exc:
            raise InrError(f"{path}: cannot write this image ({exc.strerror or exc})") from None
