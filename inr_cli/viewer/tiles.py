"""Deep-zoom tiles drawn by the network: the pyramid's geometry, and a renderer that draws the tiles a
page asks for in batches, with a bounded cache.

The pyramid is a stack of canvases in the coordinate convention every part shares: level `base` is
the training image's own size, each level above it twice the one below, up to a canvas of about a
million pixels a side (where float32 coordinates still tell neighbouring pixels apart); the levels
below `base` halve it down to one tile. A tile is a 256 x 256 part of one level's canvas, drawn as
`inr render --width W --height H` draws that canvas there: the same pixels, each within one 8-bit
level, since a tile's products are computed in chunks of other shapes than the render's, and the BLAS
may add a product's terms in another order for another shape (tests/tolerances.py).
"""

from __future__ import annotations

import math
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from inr_cli.core.coords import pixel_grid
from inr_cli.core.network import Network
from inr_cli.core.render import CHUNK_PIXELS
from inr_cli.core.workspace import Workspace
from inr_cli.formats.png import png_bytes

TILE = 256
DEEPEST_SIDE = 1 << 20
MIN_ZOOM_LEVELS = 4  # past the training size, even for a very large image
CACHE_BYTES = 64 << 20
# A round of drawing: the tiles (coarse first) of the newest batch that one chunked forward pass
# covers before the queue is looked at again, so that a view the user moves on to waits at most
# this long for the drawing thread.
ROUND_PIXELS = 4 * CHUNK_PIXELS
GONE_POLL_SECONDS = 0.25  # how often a request waiting for its tiles checks that its page still waits


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


def source_tile(pixels: np.ndarray, pyramid: Pyramid, level: int, x: int, y: int) -> np.ndarray:
    """Tile (x, y) of a level of the training image itself, (H, W, C) uint8: from the training size up,
    each training pixel a square block of 2**(level - base) pixels (nearest neighbour: the pixels the
    network learnt, as pixels); below it, each pixel the mean of the block of 2**(base - level) training
    pixels under it, from those pixels alone (a gigapixel's coarse tiles never copy it whole).
    ValueError outside the pyramid."""
    width, height, (left, top, right, bottom) = pyramid.region(level, x, y)
    if level >= pyramid.base:
        shift = level - pyramid.base
        rows = np.arange(top, bottom) >> shift
        columns = np.arange(left, right) >> shift
        return pixels[rows[:, None], columns[None, :]]
    return block_mean(pixels, 1 << (pyramid.base - level), (left, top, right, bottom))


BLOCK_MEAN_VALUES = 1 << 22  # training values read at a time by block_mean


def block_mean(pixels: np.ndarray, shrink: int, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """(H, W, C) uint8 pixels shrunk by a whole factor, each pixel the rounded mean of its shrink x
    shrink block (fewer at the right and bottom edges: ceil(W / shrink) x ceil(H / shrink) in all),
    or only the part (left, top, right, bottom) of that, read a band of rows at a time."""
    height, width, channels = pixels.shape
    left, top, right, bottom = region or (0, 0, -(-width // shrink), -(-height // shrink))
    if shrink == 1:
        return pixels[top:bottom, left:right]
    x0, x1 = left * shrink, min(width, right * shrink)
    starts = np.arange(x0, x1, shrink) - x0
    across = np.minimum(shrink, x1 - x0 - starts)
    out = np.empty((bottom - top, right - left, channels), dtype=np.uint8)
    band = max(1, BLOCK_MEAN_VALUES // ((x1 - x0) * channels * shrink))  # output rows a band
    for row in range(top, bottom, band):
        stop = min(bottom, row + band)
        y0, y1 = row * shrink, min(height, stop * shrink)
        columns = np.add.reduceat(pixels[y0:y1, x0:x1], starts, axis=1, dtype=np.uint32)
        down = np.arange(0, y1 - y0, shrink)
        sums = np.add.reduceat(columns, down, axis=0)
        counts = np.minimum(shrink, y1 - y0 - down)[:, None, None] * across[None, :, None]
        out[row - top:stop - top] = (sums + counts // 2) // counts
    return out


class PngCache:
    """Least recently used bytes (or arrays), bounded by their total size; safe across request threads."""

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

    def put(self, key, data) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = data
            self.size += _size(data)
            while self.size > self.max_bytes and self.items:
                _, old = self.items.popitem(last=False)
                self.size -= _size(old)


def _size(data) -> int:
    return data.nbytes if hasattr(data, "nbytes") else len(data)


@dataclass(frozen=True)
class TileJob:
    """A part of one canvas to draw, and the key its PNG is cached under."""

    key: tuple
    width: int  # the canvas
    height: int
    region: tuple[int, int, int, int]  # (left, top, right, bottom) on the canvas
    level: int = 0  # a batch's coarser levels are drawn first

    @property
    def shape(self) -> tuple[int, int]:
        left, top, right, bottom = self.region
        return bottom - top, right - left


def draw_tiles(backend, spec, params, jobs: list[TileJob],
               chunk_pixels: int = CHUNK_PIXELS) -> Iterator[tuple[int, np.ndarray]]:
    """Every job's pixels, (H, W, C) uint8 as `inr render` draws them, from one forward pass in chunks
    over all their pixels together: yields (position in jobs, pixels) as each job's last pixel is drawn.
    Each pixel's value depends on its coordinates alone (up to the order in which the BLAS adds a
    product's terms, which may follow the chunk's shape), so packing the parts of several canvases into
    one chunk changes nothing beyond the last bit of the network's values."""
    coords = np.concatenate([pixel_grid(job.width, job.height, job.region[1], job.region[3],
                                        (job.region[0], job.region[2])) for job in jobs])
    ends = np.cumsum([rows * columns for rows, columns in (job.shape for job in jobs)])
    total = int(ends[-1])
    if isinstance(params, np.ndarray):
        params = backend.to_device(params)
    network = Network(spec, params.reshape(1, -1))
    rows_per_chunk = min(chunk_pixels, total)
    ws = Workspace(spec, 1, rows_per_chunk, backend, training=False)
    values = np.empty((total, spec.out_features), dtype=np.uint8)
    finished = 0
    for start in range(0, total, rows_per_chunk):
        n = min(rows_per_chunk, total - start)
        x = ws.x[:, :n]
        backend.copy_from_host(x, coords[start:start + n][None])
        out = network.forward(backend, ws, x, n)
        values[start:start + n] = np.round(np.clip(backend.to_host(out[0]), 0.0, 1.0) * 255.0)
        while finished < len(jobs) and ends[finished] <= start + n:
            rows, columns = jobs[finished].shape
            first = int(ends[finished]) - rows * columns
            yield finished, values[first:int(ends[finished])].reshape(rows, columns, spec.out_features)
            finished += 1


class ClientGone(Exception):
    """The page that asked for a batch stopped waiting for it."""


@dataclass(eq=False)
class _Batch:
    spec: object
    params: np.ndarray
    todo: list  # (position, TileJob), coarse levels first; taken by the drawing thread
    results: queue.Queue = field(default_factory=queue.Queue)
    cancelled: bool = False

    def take(self, round_pixels: int) -> list:
        """The next tiles to draw, up to round_pixels of them (at least one tile)."""
        taken, pixels = [], 0
        while self.todo:
            rows, columns = self.todo[0][1].shape
            if taken and pixels + rows * columns > round_pixels:
                break
            taken.append(self.todo.pop(0))
            pixels += rows * columns
        return taken


class TileRenderer:
    """Draws tiles and thumbnails as PNG bytes on one thread (the backend already uses every core, or
    the GPU; one thread also bounds the memory to one chunk's workspace), cached by key.

    A request brings a batch: every tile a page wants at once. The newest batch is drawn first, its
    coarse levels first, in rounds of one chunked forward pass over several tiles: the view a user
    has just moved to is drawn before the views passed on the way, and a batch whose page stopped
    waiting is dropped between rounds."""

    def __init__(self, backend, cache: PngCache | None = None, round_pixels: int = ROUND_PIXELS):
        self.backend = backend
        self.cache = cache or PngCache()
        self.round_pixels = round_pixels
        self.pending: list[_Batch] = []  # oldest first
        self.condition = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._work, name="inr-view-tiles", daemon=True)
        self.thread.start()

    def pngs(self, spec, params, jobs: list[TileJob],
             gone: Callable[[], bool] | None = None) -> Iterator[tuple[int, bytes]]:
        """(position in jobs, PNG bytes) for every job, the cached ones first, the others as they are
        drawn. gone() says that the asker stopped waiting (ClientGone is raised and the batch dropped).
        Closing the iterator early drops what is left of the batch."""
        cached, todo = [], []
        for position, job in enumerate(jobs):
            data = self.cache.get(job.key)
            if data is None:
                todo.append((position, job))
            else:
                cached.append((position, data))
        batch = None
        if todo:
            batch = _Batch(spec, params, sorted(todo, key=lambda item: item[1].level))
            with self.condition:
                self.pending.append(batch)
                self.condition.notify()
        try:
            yield from cached
            for _ in todo:
                yield self._next_result(batch, gone)
        finally:
            if batch is not None:
                batch.cancelled = True  # nothing left to draw if it is complete; else what is left is dropped

    def png(self, key, spec, params: np.ndarray, width: int, height: int,
            region: tuple[int, int, int, int] | None = None, level: int = 0) -> bytes:
        """The network drawn on a width x height canvas (only `region` of it, if given), cached by key."""
        job = TileJob(key, width, height, region or (0, 0, width, height), level)
        for _, data in self.pngs(spec, params, [job]):
            return data

    def close(self) -> None:
        with self.condition:
            self.closed = True
            self.condition.notify_all()

    @staticmethod
    def _next_result(batch: _Batch, gone) -> tuple[int, bytes]:
        while True:
            try:
                item = batch.results.get(timeout=GONE_POLL_SECONDS)
            except queue.Empty:
                if gone is not None and gone():
                    raise ClientGone() from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def _work(self) -> None:
        while True:
            with self.condition:
                while True:
                    if self.closed:
                        return
                    self.pending = [batch for batch in self.pending if batch.todo and not batch.cancelled]
                    if self.pending:
                        break
                    self.condition.wait()
                batch = self.pending[-1]
                drawing = batch.take(self.round_pixels)
            try:
                self._draw(batch, drawing)
            except Exception as exc:  # noqa: BLE001 - the request that asked gets it, the thread goes on
                batch.cancelled = True
                batch.results.put(exc)

    def _draw(self, batch: _Batch, drawing: list) -> None:
        """One round: the tiles not cached meanwhile (drawn for another batch), each key drawn once."""
        to_draw: dict = {}  # key -> (job, its positions in the batch)
        for position, job in drawing:
            data = self.cache.get(job.key)
            if data is None:
                to_draw.setdefault(job.key, (job, []))[1].append(position)
            else:
                batch.results.put((position, data))
        if not to_draw:
            return
        entries = list(to_draw.values())
        for index, pixels in draw_tiles(self.backend, batch.spec, batch.params, [job for job, _ in entries]):
            job, positions = entries[index]
            data = png_bytes(pixels, threads=1)
            self.cache.put(job.key, data)
            for position in positions:
                batch.results.put((position, data))
