"""Experiment: what keeps a network ahead of Lanczos as the factor grows? Variants of the presets'
training and of the hash grid's lookup, scored between the pixels at 2x, 4x and 8x as
benchmarks/upscaling.py scores them (one training, every factor), with the training image's PSNR.

    PYTHONPATH=. python dev/upscaling_variants.py IMAGE SIZE PRESET [KEY=VALUE ...] [jitter=W] [smoothstep=1]
        [square_cells=1] [centred=1] [marks=100,300,1000] [scales=2,4,8]

IMAGE is any name benchmarks/upscaling.py knows (kodim03, text, glyphs, doodle, coffee ...); KEY=VALUE
sets the preset's settings as `--set` does (omega0=20, lr=1e-2, steps=500, hash_max_res=64). One JSON
line per mark (by default the last step). The variants, none of them in inr (BENCHMARKS.md, "Drawing
larger: 2x, 4x and 8x", says what each measured):

    jitter=W        each step every training coordinate moves by a uniform draw within W pixels (W = 1:
                    anywhere in its pixel), against the pixel's value: positions between the pixels
    smoothstep=1    the hash grid's corner weights through 3t^2 - 2t^3 of the place in the cell
                    (instant-ngp's "Smoothstep" interpolation): a C1 encoding
    square_cells=1  the hash grid's cells square in pixels: the shorter axis's coordinate scaled by the
                    shorter side over the longer, so a level's cells span as many pixels each way
    centred=1       the finest level's vertices on the pixel centres: position (u + 1) N/2 - 1/2 on
                    every level, clamped to [0, N - 1]
    twists=1        also print, per dense level of a hash grid, the mean size of its cells' twist
                    (t00 - t10 - t01 + t11) / 4, the part of a bilinear cell that is zero at its centre and
                    its edges' midpoints, over the spread of the cells' centre values

The hash-grid variants replace numpy_ops.hashgrid_corners (which the CPU engine runs too): CPU only.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inr_cli.backends.numpy_ops as ops  # noqa: E402
from benchmarks.common import configure, job_backend, make_trainer  # noqa: E402
from benchmarks.upscaling import image_at, parse_settings, upscale_scores  # noqa: E402
from inr_cli.core.encodings import HASH_PRIME, LEVEL_HASHED, LEVEL_RESOLUTION, LEVEL_SIZE  # noqa: E402
from inr_cli.core.metrics import psnr  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402


def centred_corners(x, level, entries=None, weights=None):
    """numpy_ops.hashgrid_corners with every level's vertices moved half a cell: on the finest level of
    an image N px across, onto its pixel centres."""
    resolution, size = int(level[LEVEL_RESOLUTION]), int(level[LEVEL_SIZE])
    one = x.dtype.type(1)
    position = np.clip((x + one) * x.dtype.type(resolution / 2) - x.dtype.type(0.5), 0, resolution - 1)
    cell = np.minimum(np.floor(position), max(resolution - 2, 0))
    fraction = position - cell
    weights = np.empty((4, *x.shape[:-1]), dtype=x.dtype) if weights is None else weights
    entries = np.empty((4, *x.shape[:-1]), dtype=np.int64) if entries is None else entries
    cell = cell.astype(entries.dtype)
    i, j = cell[..., 0], cell[..., 1]
    fx, fy = fraction[..., 0], fraction[..., 1]
    weights[0], weights[1], weights[2], weights[3] = (one - fx) * (one - fy), fx * (one - fy), (one - fx) * fy, fx * fy
    if level[LEVEL_HASHED]:
        a, b = i.astype(np.uint32), j.astype(np.uint32) * np.uint32(HASH_PRIME)
        b_next = b + np.uint32(HASH_PRIME)
        for corner, (column, row) in enumerate(((a, b), (a + np.uint32(1), b), (a, b_next),
                                                (a + np.uint32(1), b_next))):
            np.remainder(column ^ row, np.uint32(size), out=entries[corner], casting="unsafe")
    else:
        entries[0] = j * (resolution + 1) + i
        entries[1], entries[2], entries[3] = entries[0] + 1, entries[0] + resolution + 1, entries[0] + resolution + 2
    return entries, weights


def with_lookup(smoothstep: bool, scale: tuple[float, float] | None):
    """Wrap numpy_ops.hashgrid_corners: the coordinates scaled per axis first (square cells), and/or
    the weights recomputed from the smoothstep of the place in the cell."""
    plain = ops.hashgrid_corners

    def corners(x, level, entries=None, weights=None):
        if scale is not None:
            x = x * np.array(scale, dtype=x.dtype)
        entries, weights = plain(x, level, entries, weights)
        if smoothstep:
            resolution, one = int(level[LEVEL_RESOLUTION]), x.dtype.type(1)
            position = np.clip((x + one) * x.dtype.type(resolution / 2), 0, resolution)
            t = position - np.minimum(np.floor(position), resolution - 1)
            s = t * t * (3 - 2 * t)
            sx, sy = s[..., 0], s[..., 1]
            weights[0], weights[1] = (one - sx) * (one - sy), sx * (one - sy)
            weights[2], weights[3] = (one - sx) * sy, sx * sy
        return entries, weights

    ops.hashgrid_corners = corners


def twists(spec, params) -> list[tuple[int, float]]:
    """(cells across, mean |twist| / std of the cell-centre values) for each dense level of one network's
    hash grid: a bilinear cell's twist is what its corners hold that no point at the cell's centre sees."""
    from inr_cli.core.encodings import create_encoding

    grid, table, out = create_encoding(spec), np.asarray(params).reshape(-1), []
    for resolution, offset, size, hashed in grid.levels_rows():
        if hashed:
            continue
        t = table[offset * grid.level_features:(offset + size) * grid.level_features]
        t = t.reshape(resolution + 1, resolution + 1, grid.level_features)  # [j, i, F]
        twist = (t[:-1, :-1] - t[:-1, 1:] - t[1:, :-1] + t[1:, 1:]) / 4
        centre = (t[:-1, :-1] + t[:-1, 1:] + t[1:, :-1] + t[1:, 1:]) / 4
        out.append((resolution, round(float(np.abs(twist).mean() / centre.std()), 3)))
    return out


def main() -> None:
    name, size, preset, *pairs = sys.argv[1:]
    size = int(size)
    options = dict(pair.split("=", 1) for pair in pairs)
    jitter = float(options.pop("jitter", 0))
    smoothstep = options.pop("smoothstep", "0") == "1"
    square_cells = options.pop("square_cells", "0") == "1"
    centred = options.pop("centred", "0") == "1"
    show_twists = options.pop("twists", "0") == "1"
    scales = [int(s) for s in options.pop("scales", "2,4,8").split(",")]
    marks = [int(s) for s in options.pop("marks", "0").split(",")]
    settings = parse_settings([f"{key}={value}" for key, value in options.items()])
    small = image_at(name, size)
    larges = {scale: image_at(name, size * scale) for scale in scales}
    if centred:
        ops.hashgrid_corners = centred_corners
    if smoothstep or square_cells:
        longer = max(small.width, small.height)
        with_lookup(smoothstep, (small.width / longer, small.height / longer) if square_cells else None)
    config = configure(preset, max(small.width, small.height), preview_every=0, **settings)
    marks = [mark or config.training.steps for mark in marks]
    backend = job_backend("cpu", 2)
    trainer = make_trainer(backend, config, [small])
    rng = np.random.default_rng(0)
    centres = np.array(trainer.coords)
    half_pixel = np.array([1.0 / small.width, 1.0 / small.height], np.float32)  # in (u, v): a pixel is 2 / W wide
    start = time.perf_counter()
    for step in range(1, max(marks) + 1):
        if jitter:  # the full batch's coordinates, moved within the pixel (Trainer._step reads trainer.coords)
            trainer.coords[...] = centres + (rng.uniform(-1, 1, centres.shape) * half_pixel * jitter).astype(np.float32)
        trainer.step()
        if step not in marks:
            continue
        trainer.coords[...] = centres
        params = trainer.params[:1]
        fit = psnr(render_float(backend, trainer.spec, params, small.width, small.height), small.values)
        result = {"image": name, "size": size, "preset": preset, "settings": settings, "jitter": jitter,
                  "smoothstep": smoothstep, "square_cells": square_cells, "centred": centred, "step": step,
                  "fit_psnr": round(fit, 2), "seconds": round(time.perf_counter() - start)}
        for scale, large in larges.items():
            rendered = render_float(backend, trainer.spec, params, large.width, large.height)
            result[f"{scale}x"] = {key: [value["psnr"], value["ssim"]]
                                   for key, value in upscale_scores(rendered, small, large).items()}
        if show_twists:
            result["twists"] = twists(trainer.spec, np.array(params)[0])
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
