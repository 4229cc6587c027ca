"""Every limit inr holds what it reads, draws and writes to, in one place: a file or a setting can
ask for anything, and nothing is allocated from what one merely declares before it is checked here.

Each limit lies far beyond what inr itself writes or a user asks for, and below what a machine can
hold; what is sized from an input is checked against it first, so that a small file or a large
number is one line, never a long allocation or an out-of-memory kill.
"""

from __future__ import annotations

import math

# Pixels of an image inr reads, resizes to, writes or draws, whatever its format: a gigapixel photo
# with room to spare (an image is held at one byte a value, 6 GB of 8-bit RGB at this limit; a
# canvas this large is drawn in tiles, core/render.py). Pillow's own bomb guard is a warning up to 2x
# its limit and an error beyond; inr makes both an error at this one.
MAX_IMAGE_PIXELS = 1 << 31
MAX_SIDE = 65535  # pixels a side of a canvas or a resize: PNG and Pillow both handle this
# A picture made for looking at (the frames of a run's previews.png, the panels of comparison.png
# and of a study's best.png): drawn within these, whatever the image's size or shape.
MAX_PICTURE_PIXELS = 1 << 22
MAX_PICTURE_SIDE = 4096
# A run's previews, drawn while it trains, and the frames of its previews.png: smaller still, so
# that drawing and writing them costs the training little.
MAX_PREVIEW_PIXELS = 1 << 20
MAX_FRAME_PIXELS = 1 << 18

# Bytes of what a file declares before its contents are read.
# Deflate shrinks the zeros of a zip bomb about a thousandfold and float parameters hardly at all: an
# .npz archive whose members declare more than this many times the bytes it holds is refused.
MAX_COMPRESSION_RATIO = 20
RATIO_EXEMPT_BYTES = 1 << 20  # declared sizes below this are too small to matter, whatever the ratio
MAX_HEADER_BYTES = 100_000_000  # a safetensors header (tensor names, shapes, metadata): safetensors' own
MAX_TEXT_BYTES = 1 << 20  # a network's description or configuration, in any file (a few kB)
MAX_METADATA_BYTES = 1 << 28  # a set's index as a safetensors export carries it (one row per network)
MAX_LINE_BYTES = 1 << 24  # one line of a study's journal (a trial's record: kilobytes)
MAX_LIST_BYTES = 1 << 30  # a list of images or of labels, a study's journal, a set's plan

# A network that inr reads: far beyond any it fits (a few hundred neurons, a few layers), and small
# enough that what is sized from it stays a number of bytes a machine could hold.
MAX_WIDTH = 1 << 16  # neurons per hidden layer, Fourier features
MAX_LAYERS = 1 << 10
MAX_PARAMETERS = 1 << 31  # per network: 8 GiB of float32
MAX_CHANNELS = 4  # r, g, b, a
# The hash grid's: levels, features per level, a level's resolution, and its table (2^24 entries a
# level: 16 such levels of 2 features are already 2 GiB per network).
MAX_LEVELS, MAX_LEVEL_FEATURES, MAX_RESOLUTION = 64, 64, 1 << 20
MAX_LOG2_TABLE_SIZE = 24
MAX_SEED = (1 << 64) - 1  # a seed is an unsigned 64-bit number, as the kernels draw from it
MAX_COUNT = (1 << 63) - 1  # any other whole-number setting (steps, a batch's pixels): a checkpoint and a
# set's plan store it as a signed 64-bit number

# Seconds a connection or a read of a URL may wait (INR_NETWORK_TIMEOUT sets another).
NETWORK_TIMEOUT = 60.0


# ---- the size a picture for looking at is drawn at (runs/pictures.py draws them) ----------------

def shrink_factor(width: int, height: int, max_pixels: int | None = None) -> int:
    """The whole factor a picture for looking at is shrunk by, so that it keeps within max_pixels
    (default MAX_PICTURE_PIXELS) and MAX_PICTURE_SIDE whatever the image's size or shape: 1 for every
    ordinary image."""
    max_pixels = MAX_PICTURE_PIXELS if max_pixels is None else max_pixels
    k = max(1, math.ceil(max(width, height) / MAX_PICTURE_SIDE), math.ceil(math.sqrt(width * height / max_pixels)))
    while -(-width // k) * -(-height // k) > max_pixels:  # the rounding up of each side may carry it over
        k += 1
    return k


def preview_factor(width: int, height: int) -> int:
    """Previews, drawn while the run trains, show every k-th pixel: within MAX_PREVIEW_PIXELS."""
    return shrink_factor(width, height, MAX_PREVIEW_PIXELS)


def picture_size(width: int, height: int, k: int | None = None) -> tuple[int, int]:
    """The size of a width x height image's every k-th pixel each way (default: shrink_factor's k, the
    size a picture of it is drawn at)."""
    k = shrink_factor(width, height) if k is None else k
    return -(-width // k), -(-height // k)
