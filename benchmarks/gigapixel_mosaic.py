"""A test image of any size up to gigapixels, without the internet: a mosaic of distinct real photos.

The photos come from Debian's wallpaper and background packages (no network beyond the package
mirror; the images are never committed):

    apt-get download lomiri-wallpapers lomiri-wallpapers-16.04 lomiri-wallpapers-20.04 ukui-wallpapers \\
        mate-backgrounds gnome-backgrounds
    for f in *.deb; do dpkg-deb -x "$f" debs; done
    python benchmarks/gigapixel_mosaic.py debs/usr/share/backgrounds --pixels 250e6 -o bench-results/mosaic-250.tif

Every JPEG of at least a megapixel under the folders is a candidate (the packages' PNG and WebP files
are drawings and patterns, not photos); a photo that another already shows (the same picture at
another size: their 16 x 16 thumbnails within a few levels) is left out, so that no tile repeats.
The mosaic is a grid of equal 3:2 tiles, as many as there are photos, each photo's centre cropped to
3:2 and resized to the tile with Lanczos: shrunk when it is larger, enlarged when it runs short (the
script says how many and by how much). Written as an uncompressed 8-bit RGB TIFF through a memory
map, a row of tiles at a time, so that building a gigapixel takes a tile row's memory.

For a GPU machine, which has no package mirror, `--copy-photos DIR` copies the distinct photos
(about 53 MB of JPEGs) into a folder to carry there, and dev/gpu_checks.sh builds the gigapixel from
them on the machine itself; `--min-pixels 0` lets its dry run build a toy one from inr's own sample.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from PIL import Image

MIN_PHOTO_PIXELS = 1_000_000
ASPECT = 1.5  # each tile's width over its height
SAME_PICTURE_LEVELS = 6  # mean absolute difference of two 16 x 16 thumbnails below which they are one picture
TILE_MULTIPLE = 16


def candidates(folders: list[Path]) -> list[Path]:
    found = []
    for folder in folders:
        found += [p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg") and p.is_file()
                  and not p.is_symlink()]
    return sorted(set(found), key=lambda p: (p.name, str(p)))


def thumbnail(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        im.draft("RGB", (64, 64))
        return np.asarray(im.convert("RGB").resize((16, 16), Image.BOX), dtype=np.float32)


def distinct_photos(paths: list[Path], min_pixels: int = MIN_PHOTO_PIXELS) -> tuple[list[Path], list[str]]:
    """The photos of at least min_pixels, each picture once; and what was left out, and why."""
    kept, thumbs, left_out = [], [], []
    for path in paths:
        try:
            with Image.open(path) as im:
                size, mode = im.size, im.mode
        except OSError as exc:
            left_out.append(f"{path.name}: unreadable ({exc})")
            continue
        if size[0] * size[1] < min_pixels or mode not in ("RGB", "L", "CMYK"):
            left_out.append(f"{path.name}: {size[0]}x{size[1]} {mode}")
            continue
        thumb = thumbnail(path)
        twin = next((other for other, t in zip(kept, thumbs) if np.abs(t - thumb).mean() < SAME_PICTURE_LEVELS), None)
        if twin is not None:
            left_out.append(f"{path.name}: the picture of {twin.name}")
            continue
        kept.append(path)
        thumbs.append(thumb)
    return kept, left_out


def layout(count: int, pixels: float) -> tuple[int, int, int, int]:
    """(columns, rows, tile width, tile height): a grid of at most `count` tiles, about 16:9 in all,
    of `pixels` pixels or a little more."""
    columns = max(1, round(math.sqrt(count * (16 / 9) / ASPECT)))
    rows = max(1, count // columns)
    tile_height = math.sqrt(pixels / (columns * rows) / ASPECT)
    tile_height = TILE_MULTIPLE * math.ceil(tile_height / TILE_MULTIPLE)
    tile_width = TILE_MULTIPLE * math.ceil(tile_height * ASPECT / TILE_MULTIPLE)
    return columns, rows, tile_width, tile_height


def fitted(path: Path, width: int, height: int) -> tuple[np.ndarray, float]:
    """The photo's centre, cropped to width:height and resized to it with Lanczos; and the scale."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        scale = max(width / im.width, height / im.height)
        crop_w, crop_h = round(width / scale), round(height / scale)
        left, top = (im.width - crop_w) // 2, (im.height - crop_h) // 2
        tile = im.resize((width, height), Image.LANCZOS, box=(left, top, left + crop_w, top + crop_h))
        return np.asarray(tile), scale


def build(photos: list[Path], pixels: float, out: Path) -> dict:
    import tifffile

    columns, rows, tile_width, tile_height = layout(len(photos), pixels)
    width, height = columns * tile_width, rows * tile_height
    mosaic = tifffile.memmap(out, shape=(height, width, 3), dtype=np.uint8, photometric="rgb")
    scales = []
    for row in range(rows):
        for column in range(columns):
            photo = photos[row * columns + column]
            tile, scale = fitted(photo, tile_width, tile_height)
            mosaic[row * tile_height:(row + 1) * tile_height, column * tile_width:(column + 1) * tile_width] = tile
            scales.append(scale)
        mosaic.flush()
        print(f"row {row + 1}/{rows}", file=sys.stderr, flush=True)
    del mosaic
    enlarged = [s for s in scales if s > 1]
    return {"path": str(out), "width": width, "height": height, "pixels": width * height,
            "tiles": f"{columns} x {rows} of {tile_width} x {tile_height}",
            "photos": [p.name for p in photos[:columns * rows]],
            "enlarged": len(enlarged), "largest_enlargement": round(max(enlarged, default=1.0), 3),
            "shrunk": len(scales) - len(enlarged)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders searched for JPEG photos")
    parser.add_argument("--photos", nargs="*", type=Path, default=[], help="photos named one by one (any format)")
    parser.add_argument("--min-pixels", type=int, default=MIN_PHOTO_PIXELS, help="the smallest photo taken")
    parser.add_argument("--pixels", type=float, default=250e6, help="about how many pixels (default 250e6)")
    parser.add_argument("--copy-photos", type=Path, help="copy the distinct photos into this folder, and stop")
    parser.add_argument("-o", "--out", type=Path, help="the TIFF to write")
    args = parser.parse_args(argv)
    photos, left_out = distinct_photos(candidates(args.folders) + args.photos, args.min_pixels)
    if not photos:
        print("no photos found (see the top of benchmarks/gigapixel_mosaic.py)", file=sys.stderr)
        return 1
    for line in left_out:
        print(f"left out {line}", file=sys.stderr)
    if args.copy_photos:
        import shutil

        args.copy_photos.mkdir(parents=True, exist_ok=True)
        for photo in photos:
            shutil.copy2(photo, args.copy_photos / photo.name)
        print(f"{len(photos)} photos, {sum(p.stat().st_size for p in photos) / 1e6:.1f} MB, in {args.copy_photos}")
        return 0
    if args.out is None:
        parser.error("-o names the TIFF to write")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = build(photos, args.pixels, args.out)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
