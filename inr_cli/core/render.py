"""Inference: draw the network on any canvas, in chunks of rows so memory stays bounded."""

from __future__ import annotations

import numpy as np

from inr_cli.core.coords import axis_centres, pixel_grid
from inr_cli.core.metrics import StreamingScores
from inr_cli.core.network import Network, NetworkSpec
from inr_cli.core.pixels import PixelImage, as_floats
from inr_cli.core.workspace import Workspace

CHUNK_PIXELS = 1 << 16  # rows of the workspace; ~64 MB of activations at width 256


def render_rows(backend, spec: NetworkSpec, params, width: int, height: int, chunk_pixels: int = CHUNK_PIXELS,
                region: tuple[int, int, int, int] | None = None):
    """Yield (row_start, row_stop, values) with values a host (rows, W, C) float32 array.
    params: one network's, [P] or [1, P], on the host or already on the backend.
    region (left, top, right, bottom): draw only that part of the W x H canvas (rows are then counted
    from its top, and values are (rows, right - left, C))."""
    if isinstance(params, np.ndarray):
        params = backend.constant(params)  # read only: in host memory, not copied
    left, top, right, bottom = region if region is not None else (0, 0, width, height)
    columns = right - left
    network = Network(spec, params.reshape(1, -1))
    rows_per_chunk = max(1, min(bottom - top, chunk_pixels // columns))  # a workspace no larger than the drawing
    ws = Workspace(spec, 1, rows_per_chunk * columns, backend, training=False)
    for row_start in range(top, bottom, rows_per_chunk):
        row_stop = min(bottom, row_start + rows_per_chunk)
        n = (row_stop - row_start) * columns
        x = ws.x[:, :n]
        backend.copy_from_host(x, pixel_grid(width, height, row_start, row_stop, (left, right))[None])
        out = network.forward(backend, ws, x, n)
        # A copy: the workspace is reused by the next chunk.
        values = np.array(backend.to_host(out[0]), copy=True)
        yield row_start - top, row_stop - top, values.reshape(row_stop - row_start, columns, spec.out_features)


SCORED_PIXELS = 1 << 20  # a strip of the canvas scored at a time


def score_drawing(backend, spec: NetworkSpec, params, reference: PixelImage) -> StreamingScores:
    """The network drawn on the reference's canvas and scored against it a strip of rows at a time:
    PSNR and SSIM over every pixel (core/metrics.StreamingScores), neither the drawing nor a float
    copy of the reference ever held whole."""
    width, height = reference.width, reference.height
    scores = StreamingScores(width, height, reference.n_channels)
    strip, top = [], 0
    for _, stop, values in render_rows(backend, spec, params, width, height):
        strip.append(np.clip(values, 0.0, 1.0))
        if (stop - top) * width >= SCORED_PIXELS or stop == height:
            scores.add(np.concatenate(strip) if len(strip) > 1 else strip[0], as_floats(reference.pixels[top:stop]))
            strip, top = [], stop
    return scores


def render_float(backend, spec, flat_params, width: int, height: int, clip: bool = True,
                 on_chunk=None, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """(H, W, C) float32, clipped to [0, 1] unless asked not to: for evaluation and deep renders.
    on_chunk(rows done) is called after each chunk; region as render_rows'."""
    left, top, right, bottom = region if region is not None else (0, 0, width, height)
    image = np.empty((bottom - top, right - left, spec.out_features), dtype=np.float32)
    for start, stop, values in render_rows(backend, spec, flat_params, width, height, region=region):
        if clip:
            np.clip(values, 0.0, 1.0, out=image[start:stop])
        else:
            image[start:stop] = values
        if on_chunk is not None:
            on_chunk(stop)
    return image


def render_uint8(backend, spec, flat_params, width: int, height: int, on_chunk=None,
                 region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """(H, W, C) uint8: a quarter of the float image's memory, for large canvases. region (left, top,
    right, bottom): only that part of the W x H canvas, the pixels the whole canvas has there (within
    one 8-bit level: its chunks have other shapes, see viewer/tiles.py)."""
    return render_at_depth(backend, spec, flat_params, width, height, 8, on_chunk, region)


def render_at_depth(backend, spec, flat_params, width: int, height: int, depth: int, on_chunk=None,
                    region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """What `inr render --depth` writes: (H, W, C) uint8 (8), uint16 (16) or float32 not clipped (32);
    region (left, top, right, bottom): that part of the W x H canvas only. Integers are rounded a
    chunk at a time: no float copy of the canvas."""
    if depth == 32:
        return render_float(backend, spec, flat_params, width, height, clip=False, on_chunk=on_chunk, region=region)
    dtype, top_value = (np.uint8, 255.0) if depth == 8 else (np.uint16, 65535)
    left, top, right, bottom = region if region is not None else (0, 0, width, height)
    image = np.empty((bottom - top, right - left, spec.out_features), dtype=dtype)
    for start, stop, values in render_rows(backend, spec, flat_params, width, height, region=region):
        image[start:stop] = np.round(np.clip(values, 0.0, 1.0) * top_value)
        if on_chunk is not None:
            on_chunk(stop)
    return image


def tile_rows(backend, spec: NetworkSpec, params):
    """draw(w, h, top, bottom): rows top to bottom of the network drawn on a w x h canvas, uint8, the
    pixels `inr render` draws there: what formats/tiled_tiff.write_pyramid draws a level with."""
    params = backend.constant(params) if isinstance(params, np.ndarray) else params
    return lambda w, h, top, bottom: render_uint8(backend, spec, params, w, h, region=(0, top, w, bottom))


def evaluate_points(backend, spec: NetworkSpec, params, coords: np.ndarray, clip: bool = True,
                    chunk_pixels: int = CHUNK_PIXELS) -> np.ndarray:
    """Every network of [N, P] parameters at given points: coords [rows, 2] (one table for all) or
    [N, rows, 2] (a table each), in the coordinate convention; (N, rows, C) float32 on the host,
    clipped to [0, 1] as a render is unless asked not to."""
    if isinstance(params, np.ndarray):
        params = backend.constant(params)  # read only: in host memory, not copied
    n = params.shape[0]
    coords = np.asarray(coords, dtype=np.float32)
    table = coords[None] if coords.ndim == 2 else coords
    total = table.shape[1]
    out = np.empty((n, total, spec.out_features), dtype=np.float32)
    # Chunks of rows whose count does not depend on how many networks are drawn, and as many networks
    # at once as fit in chunk_pixels: each network's products then have the same shapes in any pack,
    # so its values (and a set's scores) are the same bits whichever networks it is drawn with.
    rows_per_chunk = max(1, min(total, chunk_pixels))
    group = max(1, chunk_pixels // rows_per_chunk)
    shapes = None
    for first in range(0, n, group):
        last = min(n, first + group)
        network = Network(spec, params[first:last])
        own = table[first:last] if table.shape[0] > 1 else table
        for start in range(0, total, rows_per_chunk):
            stop = min(total, start + rows_per_chunk)
            rows = stop - start
            if shapes != (last - first, own.shape[0], rows):  # buffers of the chunk's own size: operands contiguous
                shapes = (last - first, own.shape[0], rows)
                ws = Workspace(spec, last - first, rows, backend, training=False)
                x = backend.empty((own.shape[0], rows, spec.in_features), np.float32)
            backend.copy_from_host(x, np.ascontiguousarray(own[:, start:stop]))
            values = backend.to_host(network.forward(backend, ws, x, rows))
            out[first:last, start:stop] = np.clip(values, 0.0, 1.0) if clip else values
    return out


def render_networks(backend, spec: NetworkSpec, params, width: int, height: int,
                    chunk_pixels: int = CHUNK_PIXELS) -> np.ndarray:
    """Every network of [N, P] parameters drawn on one canvas: (N, H, W, C) float32, clipped to [0, 1].
    One forward pass per chunk covers as many of the N as fit in it (for scoring a pack of fitted
    networks at once)."""
    values = evaluate_points(backend, spec, params, pixel_grid(width, height), chunk_pixels=chunk_pixels)
    return values.reshape(len(values), height, width, spec.out_features)


def render_strided(backend, spec: NetworkSpec, params, width: int, height: int, stride: int) -> np.ndarray:
    """(ceil(H / stride), ceil(W / stride), C) float32, clipped: every stride-th pixel of each row and
    column of the W x H canvas, drawn where those pixels lie (a large canvas at a glance, beside the
    image's own pixels there: no full render held)."""
    u, v = axis_centres(width)[::stride], axis_centres(height)[::stride]
    grid = np.empty((len(v), len(u), 2), dtype=np.float32)
    grid[..., 0] = u[None, :]
    grid[..., 1] = v[:, None]
    values = evaluate_points(backend, spec, params.reshape(1, -1), grid.reshape(-1, 2))[0]
    return values.reshape(len(v), len(u), spec.out_features)
