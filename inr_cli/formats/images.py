"""The image (core/pixels.py) in files: decoding every common mode, resizing, writing PNGs."""

from __future__ import annotations

import io
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from inr_cli.core.pixels import MAX_IMAGE_PIXELS, PixelImage, check_image, fit_longer_side
from inr_cli.errors import InrError, UsageError
from inr_cli.extras import install_hint
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.input_files import check_regular

ORIENTATION = 0x0112  # the EXIF tag
ARRAY_CHANNELS = {1: ("l",), 2: ("l", "a"), 3: ("r", "g", "b"), 4: ("r", "g", "b", "a")}


def pixels_from_array(array, where: str) -> PixelImage:
    """An image given as an array: (H, W) or (H, W, C), C from 1 to 4 (grey, grey+alpha, RGB,
    RGBA), of uint8 (0-255), uint16 (0-65535) or floats in [0, 1]. `where` names it in errors."""
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[2] not in ARRAY_CHANNELS:
        raise InrError(f"{where}: an image array is (height, width) or (height, width, channels) with 1 to 4 "
                       f"channels, got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InrError(f"{where}: the image array is empty (shape {array.shape})")
    check_image(array.shape[1], array.shape[0], where)
    kind, width = array.dtype.kind, array.dtype.itemsize  # whatever the byte order ('>u2' from FITS, say)
    if (kind, width) == ("u", 1):
        values, bit_depth = np.array(array, dtype=np.uint8), 8  # kept as bytes (a copy: the array may be a file's map)
    elif (kind, width) == ("u", 2):
        values, bit_depth = array.astype(np.float32) / 65535.0, 16
    elif kind == "f":  # checked in its own type: a float64 beyond float32's range would overflow in the cast
        if not np.isfinite(array).all():
            raise InrError(f"{where}: the image array holds NaN or infinite values")
        low, high = float(array.min()), float(array.max())
        if low < 0 or high > 1:
            raise InrError(f"{where}: float pixel values must be in [0, 1], these run from {low:g} to {high:g}")
        values, bit_depth = array.astype(np.float32), 16
    else:
        raise InrError(f"{where}: pixels of type {array.dtype} are not read; give uint8 (0-255), uint16 "
                       f"(0-65535) or floats in [0, 1]")
    channels = ARRAY_CHANNELS[array.shape[2]]
    if channels == ("l", "a"):  # grey with alpha: as RGBA, as a grey+alpha image file is read
        values = np.concatenate([np.repeat(values[..., :1], 3, axis=2), values[..., 1:]], axis=2)
        channels = ARRAY_CHANNELS[4]
    return PixelImage(np.ascontiguousarray(values), channels, bit_depth)


@contextmanager
def within_pixel_limit(where: str):
    """Pillow's bomb guard at inr's own limit, for what runs inside: Pillow warns above its
    MAX_IMAGE_PIXELS and refuses above twice it, from the header, before it decodes; here its limit
    is inr's and the warning an error, so that an image inr accepts is never refused by Pillow, and
    a larger one is one line (no warning on stderr)."""
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InrError(f"{where}: declared image size is too large (limit {MAX_IMAGE_PIXELS} pixels)") from None


def load_image(path: Path, size: int | None = None, gray: bool = False, notices: list | None = None,
               enlarge: bool = True) -> PixelImage:
    """Decode an image file; `size` resizes so the longer side is that many pixels (Lanczos); with
    enlarge False, only an image larger than that."""
    path = Path(path)
    if size is not None and not enlarge:
        pixels = load_image(path, None, gray, notices)
        return resize(pixels, size) if size < max(pixels.width, pixels.height) else pixels
    _check_file(path)
    if not gray and _is_png16_colour(path):
        pixels = _read_png16(path)
        return resize(pixels, size) if size is not None else pixels
    with _opened(path) as im:
        if getattr(im, "n_frames", 1) > 1 and notices is not None:
            notices.append(f"{path.name} has {im.n_frames} frames; using the first")
        pixels = _read_large(path, im, gray)
        if pixels is None:
            im.seek(0)
            im.load()
            if im.getexif().get(ORIENTATION, 1) != 1:  # else exif_transpose copies the image all the same
                im = ImageOps.exif_transpose(im)
            pixels = pixels_from_pil(im, gray)
    if size is not None:
        if size > max(pixels.width, pixels.height) and notices is not None:
            notices.append(f"{path.name} is {pixels.width}x{pixels.height}: --size {size} enlarges it (Lanczos)")
        pixels = resize(pixels, size)
    return pixels


def declared_layout(path: Path, gray: bool = False) -> tuple[int, int, int, int]:
    """(width, height, channels, bytes a value) of the pixels load_image keeps of an image file, from
    its header alone: what reading it will hold, known before a pixel is decoded."""
    path = Path(path)
    _check_file(path)
    with _opened(path) as im:
        width, height, mode, info = im.width, im.height, im.mode, dict(im.info)
    if not gray and _is_png16_colour(path):  # kept as floats, grey and alpha as RGBA
        from inr_cli.formats.png import png_depth

        return width, height, 3 if png_depth(path)[1] == 2 else 4, 4
    sample = decoded_sample(mode, info, gray)
    if sample is None:  # the most any image is kept as: RGBA floats
        return width, height, 4, 4
    return width, height, sample.n_channels, sample.pixels.itemsize


def decoded_sample(mode: str, info: dict, gray: bool) -> PixelImage | None:
    """A one-pixel image of Pillow's `mode` through the very conversion of the decoder
    (pixels_from_pil): the channels and the type a file of that mode decodes to, known from its
    header; None for a mode Pillow reads but cannot make."""
    try:
        sample = Image.new(mode, (1, 1))
    except ValueError:
        return None
    sample.info.update({key: info[key] for key in ("transparency",) if key in info})
    return pixels_from_pil(sample, gray)


def _check_file(path: Path) -> None:
    check_regular(path, expected="an image file")
    if path.stat().st_size == 0:
        raise InrError(f"{path}: the file is empty")


@contextmanager
def _opened(path: Path):
    """The image file opened by Pillow, its size checked against inr's limits from its header (before
    a pixel is decoded); what Pillow cannot read in it is one line."""
    try:
        with within_pixel_limit(str(path)), Image.open(path) as im:
            check_image(im.width, im.height, str(path))
            yield im
    except UnidentifiedImageError:
        raise InrError(f"{path}: not an image file Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InrError(f"{path}: broken or truncated image ({exc})") from None


# From this many pixels up, an 8-bit TIFF is decoded by tifffile, and a JPEG or PNG by imagecodecs where
# it is installed, straight into the array inr keeps: Pillow holds 4 bytes a pixel of its own while it
# decodes (RGB padded to RGBX), which for a gigapixel is 4 GB beside the 3 GB kept.
LARGE_DECODE_PIXELS = 1 << 26
DIRECT_MODES = {"L": ("l",), "RGB": ("r", "g", "b"), "RGBA": ("r", "g", "b", "a")}


def _read_large(path: Path, im: Image.Image, gray: bool) -> PixelImage | None:
    """A large 8-bit grey, RGB or RGBA image decoded without Pillow's copy, or None where Pillow is to
    decode it (a small image, another mode, a rotation to apply, no decoder for its format)."""
    if im.width * im.height < LARGE_DECODE_PIXELS or im.mode not in DIRECT_MODES or gray and im.mode != "L":
        return None
    if im.getexif().get(ORIENTATION, 1) != 1:
        return None
    array = None
    if im.format == "TIFF":
        import tifffile

        with tifffile.TiffFile(path) as tif:
            page = tif.pages[0]
            if page.dtype == np.uint8 and page.shape[:2] == (im.height, im.width):
                array = page.asarray()
    elif im.format in ("JPEG", "PNG"):
        try:
            import imagecodecs
        except ImportError:
            return None
        decode = imagecodecs.jpeg8_decode if im.format == "JPEG" else imagecodecs.png_decode
        array = decode(path.read_bytes())
    if array is None or array.dtype != np.uint8 or array.shape[:2] != (im.height, im.width):
        return None
    array = array.reshape(im.height, im.width, -1)
    if array.shape[2] != len(DIRECT_MODES[im.mode]):
        return None
    return PixelImage(array, DIRECT_MODES[im.mode], bit_depth=8)


def read_header(data: bytes, where: str) -> tuple[int, int, str, dict, int]:
    """Width, height, mode, info and EXIF orientation of the image in `data`, from its header alone
    (no pixel decoded), within inr's pixel limit."""
    if not data:
        raise InrError(f"{where}: the file is empty")
    try:
        with within_pixel_limit(where), Image.open(io.BytesIO(data)) as im:
            width, height, mode, info = im.width, im.height, im.mode, dict(im.info)
            orientation = im.getexif().get(ORIENTATION, 1)
    except UnidentifiedImageError:
        raise InrError(f"{where}: not an image file Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InrError(f"{where}: broken or truncated image ({exc})") from None
    check_image(width, height, where)  # also where a reader does not check the size itself
    return width, height, mode, info, orientation


def _is_png16_colour(path: Path) -> bool:
    from inr_cli.formats.png import png_depth

    header = png_depth(path)
    return header is not None and header[0] == 16 and header[1] in (2, 4, 6)


def _read_png16(path: Path) -> PixelImage:
    """16-bit colour (and grey+alpha) PNGs keep their 16 bits: Pillow would cut them to 8."""
    from inr_cli.formats.png import read_png16

    try:
        array = read_png16(path, MAX_IMAGE_PIXELS)
    except ImportError:
        raise InrError(f"{path}: a 16-bit colour PNG; reading it needs imagecodecs ({install_hint('png16')}) "
                       "or pypng") from None
    except Exception as exc:  # imagecodecs' and pypng's own error types
        raise InrError(f"{path}: broken or truncated 16-bit PNG ({exc})") from None
    return pixels_from_array(array, str(path))


def pixels_from_pil(im: Image.Image, gray: bool) -> PixelImage:
    """A decoded Pillow image in any mode as the pixels inr trains on (grey, RGB or RGBA)."""
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        array = np.asarray(im, dtype=np.float64)
        scale = 65535.0 if mode.startswith("I;16") or array.max() > 255 else 255.0
        return PixelImage((np.clip(array / scale, 0, 1)[..., None]).astype(np.float32), ("l",), bit_depth=16)
    if mode == "F":
        array = np.clip(np.asarray(im, dtype=np.float32), 0, 1)
        return PixelImage(array[..., None], ("l",), bit_depth=16)
    if gray:
        target = "L"
    elif mode in ("L", "1"):
        target = "L"
    elif mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in im.info):
        target = "RGBA"
    else:  # RGB, P, CMYK, YCbCr, LAB, HSV, ...
        target = "RGB"
    converted = im if im.mode == target else im.convert(target)
    array = np.array(converted, dtype=np.uint8)  # kept as bytes: PixelImage.values gives v / 255
    if array.ndim == 2:
        array = array[..., None]
    return PixelImage(array, DIRECT_MODES[target], bit_depth=8)


def resize(image: PixelImage, size: int) -> PixelImage:
    """Lanczos resize so the longer side is `size`, aspect kept; 8-bit images stay 8-bit."""
    if size <= 0:
        raise InrError(f"size must be a positive number of pixels, got {size}")
    width, height = fit_longer_side(image.width, image.height, size)
    if (width, height) == (image.width, image.height):
        return image
    values = resample(image.values, width, height, Image.LANCZOS)
    if image.bit_depth == 8:  # stay an 8-bit image so decode(encode(x)) stays exact
        return PixelImage(np.round(values * 255).astype(np.uint8), image.channels, 8)
    return PixelImage(values.astype(np.float32), image.channels, image.bit_depth)


def resample(values: np.ndarray, width: int, height: int, method=Image.LANCZOS) -> np.ndarray:
    """(H, W, C) float values resampled channel by channel to (height, width, C), clipped to [0, 1]."""
    channels = [
        np.asarray(Image.fromarray(np.ascontiguousarray(values[..., c], dtype=np.float32))
                   .resize((width, height), method))
        for c in range(values.shape[2])
    ]
    return np.clip(np.stack(channels, axis=-1), 0, 1).astype(np.float32)


def to_pil(image: PixelImage) -> Image.Image:
    if image.pixels.dtype == np.uint8:
        return _pil_from_uint8(image.pixels)
    values = np.clip(image.values, 0, 1)
    if image.channels == ("l",) and image.bit_depth == 16:
        return Image.fromarray(np.round(values[..., 0] * 65535).astype(np.uint16))
    return _pil_from_uint8(np.round(values * 255).astype(np.uint8))


def _pil_from_uint8(array: np.ndarray) -> Image.Image:
    """(H, W, C) uint8 with C = 1, 3 or 4 -> L, RGB or RGBA."""
    if array.shape[2] == 1:
        return Image.fromarray(np.ascontiguousarray(array[..., 0]))
    return Image.fromarray(array)


def save_image(image: PixelImage, path: Path) -> None:
    """An image file; a 16-bit image written as PNG (inr_cli/formats/png.py) or TIFF keeps its 16
    bits, in any other format it is written with 8, said in a note."""
    path = Path(path)
    fmt = image_format(path)
    if image.bit_depth == 16 and fmt in ("PNG", "TIFF"):
        levels = np.round(np.clip(image.values, 0, 1) * 65535).astype(np.uint16)
        (save_uint16 if fmt == "PNG" else save_tiff)(levels, path)
        return
    if image.bit_depth == 16:
        from inr_cli.console import notice  # Rich only where something is said

        notice(f"{path}: {fmt} holds 8 bits a channel, so the image's 16 are written as 8 (.png or .tif keep 16)")
        _save_pil(_pil_from_uint8(np.round(np.clip(image.values, 0, 1) * 255).astype(np.uint8)), path)
        return
    _save_pil(to_pil(image), path)


def save_tiff(array: np.ndarray, path: Path) -> None:
    """(H, W, C) uint16 or float32 as a TIFF, through tifffile (Pillow writes neither in colour)."""
    try:
        import tifffile
    except ImportError:
        raise InrError(f"{path}: 16-bit and float TIFFs need tifffile: pip install tifffile") from None
    path = Path(path)
    photometric = "minisblack" if array.shape[2] == 1 else "rgb"
    with atomic_path(path, suffix=path.suffix) as tmp:  # a failed write: one line from atomic_path
        tifffile.imwrite(tmp, array[..., 0] if array.shape[2] == 1 else array, photometric=photometric,
                         extrasamples=("unassalpha",) if array.shape[2] == 4 else None)


def save_uint16(array: np.ndarray, path: Path) -> None:
    """An (H, W, C) uint16 array as a 16-bit PNG."""
    from inr_cli.formats.png import write_png

    path = Path(path)
    if image_format(path) != "PNG":
        raise InrError(f"{path}: 16-bit images are written as PNG (use .png)")
    with atomic_path(path, suffix=path.suffix) as tmp:
        write_png(array, tmp)


# Above this many pixels a PNG is written by inr_cli/formats/png.py, on every core: 8192x8192 in 1.4 s
# against Pillow's 9.1 s (benchmarks/png_writer.py). Small images keep Pillow's smaller files.
FAST_PNG_PIXELS = 1 << 22


def save_uint8(array: np.ndarray, path: Path) -> None:
    """Write an (H, W, C) uint8 array without a float copy: large renders stay a quarter the size."""
    path = Path(path)
    if image_format(path) == "PNG" and array.shape[0] * array.shape[1] > FAST_PNG_PIXELS:
        from inr_cli.formats.png import write_png

        with atomic_path(path, suffix=path.suffix) as tmp:
            write_png(array, tmp)
        return
    _save_pil(_pil_from_uint8(array), path)


# The extensions an image is written to, and Pillow's format for each (Pillow registers more, but
# some of those it cannot write, or not from RGB / RGBA pixels).
WRITE_EXTENSIONS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF",
                    ".bmp": "BMP", ".gif": "GIF", ".webp": "WEBP"}


def writable_extensions() -> list[str]:
    Image.init()
    return [ext for ext, fmt in WRITE_EXTENSIONS.items() if fmt in Image.SAVE]


def is_image_name(path: Path | str) -> bool:
    """Whether a file name's extension is that of an image inr writes (decode's input, encode's -o:
    a CSV under such a name is a file no image reader opens)."""
    return Path(path).suffix.lower() in writable_extensions()


def image_format(path: Path) -> str:
    """Pillow's format for the file name's extension, or one line (a usage error) listing those that
    work: checked before a render, not after it."""
    suffix = Path(path).suffix.lower()
    if suffix not in writable_extensions():
        raise UsageError(f"{path}: unknown image extension '{Path(path).suffix}' "
                         f"(use {', '.join(writable_extensions())})")
    return WRITE_EXTENSIONS[suffix]


def _save_pil(pil: Image.Image, path: Path) -> None:
    fmt = image_format(path)
    if fmt == "JPEG" and pil.mode == "RGBA":
        pil = pil.convert("RGB")
    with atomic_path(path, suffix=path.suffix) as tmp:
        try:
            pil.save(tmp, format=fmt)
        except ValueError as exc:  # Pillow's for pixels the format cannot hold (an OSError: atomic_path's line)
            raise InrError(f"{path}: cannot write this image as {fmt} ({exc})") from None
