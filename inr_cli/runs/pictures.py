"""Pictures for judging a run at a glance: reference | render | error (comparison.png), the PSNR
curve (psnr.svg) and the previews as one animation (previews.png, an animated PNG).

Each is drawn within a size of its own (limits.py), whatever the image's: a preview within a
megapixel, a frame of the animation within a quarter of one, the final render and the comparison's
panels within MAX_PICTURE_PIXELS. A large image's pictures are its every k-th pixel each way; the
whole image is `inr render`'s and `inr view`'s to draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from inr_cli.core.pixels import PixelImage
from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.png import png_bytes
from inr_cli.limits import (
    MAX_FRAME_PIXELS,
    shrink_factor,
)

LABEL_MIN_WIDTH = 64  # narrower panels get no caption: it would not fit
MAX_FRAMES = 64  # frames of previews.png: a glance at how the picture formed, not every preview
LABEL_HEIGHT = 14

ERROR_GAIN = 4.0  # an absolute error of 0.25 shows as white


def to_rgb(values: np.ndarray) -> np.ndarray:
    """(H, W, C) in [0, 1] with C = 1, 3 or 4 -> (H, W, 3); alpha is dropped."""
    if values.shape[2] == 1:
        return np.repeat(values, 3, axis=2)
    return values[..., :3]


def error_map(render: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Mean absolute error over channels, amplified, as a heat map from black through red to yellow."""
    error = np.clip(np.abs(render - reference).mean(axis=2) * ERROR_GAIN, 0.0, 1.0)
    heat = np.empty(error.shape + (3,), np.float32)
    heat[..., 0] = np.clip(error * 2.0, 0.0, 1.0)
    heat[..., 1] = np.clip(error * 2.0 - 1.0, 0.0, 1.0)
    heat[..., 2] = 0.0
    return heat


def to_uint8(values: np.ndarray) -> np.ndarray:
    return np.round(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)


def write_picture(pixels: np.ndarray, path: Path, threads: int | None = None) -> None:
    """(H, W, C) uint8 as a PNG, atomically, by inr's own encoder (zlib level 1: several times
    Pillow's speed for a file a quarter larger); `threads` compressing it (default: every core)."""
    data = png_bytes(pixels, threads)
    with atomic_path(Path(path), suffix=".png") as tmp:
        tmp.write_bytes(data)


def side_by_side(render: np.ndarray, reference: np.ndarray, gap: int = 4, psnr: float | None = None) -> PixelImage:
    """reference | render | error map; with panels at least LABEL_MIN_WIDTH wide, a caption under each.
    A large image's panels are drawn from every k-th pixel (shrink_factor)."""
    k = shrink_factor(reference.shape[1], reference.shape[0])
    render, reference = render[::k, ::k], reference[::k, ::k]
    h, w = reference.shape[:2]
    canvas = np.ones((h, 3 * w + 2 * gap, 3), np.float32)
    canvas[:, :w] = to_rgb(reference)
    canvas[:, w + gap: 2 * w + gap] = to_rgb(np.clip(render, 0.0, 1.0))
    canvas[:, 2 * (w + gap):] = error_map(np.clip(render, 0.0, 1.0), reference)
    if w >= LABEL_MIN_WIDTH:
        captions = ("reference", "inr" + (f" {psnr:.1f} dB" if psnr is not None else ""),
                    f"error x{ERROR_GAIN:g}")
        strip = Image.new("RGB", (canvas.shape[1], LABEL_HEIGHT), "white")
        draw = ImageDraw.Draw(strip)
        for i, text in enumerate(captions):
            draw.text((i * (w + gap) + 2, 1), text, fill="black")
        canvas = np.concatenate([canvas, np.asarray(strip, np.float32) / 255.0], axis=0)
    return PixelImage(canvas, ("r", "g", "b"))


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) covering [lo, hi] in about `count` steps,
    as a plotting library picks them."""
    span = max(hi - lo, 1e-9)
    raw = span / max(count, 1)
    power = 10.0 ** np.floor(np.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = np.floor(lo / step) * step
    last = np.ceil(hi / step) * step
    return [float(round(first + i * step, 10)) for i in range(int(round((last - first) / step)) + 1)]


def _tick_label(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:g}"


def psnr_svg(rows: list[dict], width: int = 520, height: int = 300) -> str:
    """PSNR against step from metrics.csv rows, as an SVG line chart (no plotting library): ticks at
    round values on both axes, a light grid, the title in a band of its own above the plot."""
    points = [(r["step"], r["psnr"]) for r in rows if np.isfinite(r["psnr"])]
    if not points:
        return ""
    steps, values = np.array(points, dtype=float).T
    left, right, top, bottom = 52, 16, 34, 40  # the plot's margins: tick labels left and below, title above
    x_ticks = nice_ticks(0.0, max(steps.max(), 1.0), 5)
    y_ticks = nice_ticks(values.min(), values.max() if values.max() > values.min() else values.min() + 1, 5)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    sx = lambda s: left + (s - x0) / (x1 - x0) * (width - left - right)  # noqa: E731
    sy = lambda v: top + (y1 - v) / (y1 - y0) * (height - top - bottom)  # noqa: E731
    line = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in zip(steps, values))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text class="title" x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="13">PSNR of the '
             f'training image (last {values[-1]:.2f} dB)</text>']
    for t in x_ticks:
        x = sx(t)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                     f'stroke="#e4e4e4"/>')
        parts.append(f'<line x1="{x:.1f}" y1="{height - bottom}" x2="{x:.1f}" y2="{height - bottom + 4}" '
                     f'stroke="black"/>')
        parts.append(f'<text class="xtick" x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f'{_tick_label(t)}</text>')
    for t in y_ticks:
        y = sy(t)
        parts.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                     f'stroke="#e4e4e4"/>')
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="black"/>')
        parts.append(f'<text class="ytick" x="{left - 7}" y="{y + 4:.1f}" text-anchor="end">{_tick_label(t)}</text>')
    parts += [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
              f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
              f'<polyline class="curve" points="{line}" fill="none" stroke="#c0392b" stroke-width="1.5"/>',
              f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" text-anchor="middle">step</text>',
              f'<text x="14" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
              f'transform="rotate(-90 14 {(top + height - bottom) / 2:.0f})">PSNR (dB)</text>', "</svg>"]
    return "\n".join(parts) + "\n"


def write_psnr_svg(rows: list[dict], path: Path) -> None:
    text = psnr_svg(rows)
    if text:
        atomic_write_text(path, text)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType: a scalable font
    except (TypeError, OSError, ImportError):
        return ImageFont.load_default()


FINAL_LABEL = "final render"


def preview_label(path: Path) -> str:
    """'step 1200' for previews/step-001200.png; the final render for anything else (render.png)."""
    stem = Path(path).stem
    if stem.startswith("step-") and stem[5:].isdigit():
        return f"step {int(stem[5:])}"
    return FINAL_LABEL


def labelled_frame(image: Image.Image, text: str, width: int, height: int) -> Image.Image:
    """The frame on a white canvas of width x height, its label in a strip under it."""
    font = _font(max(11, width // 24))
    strip = max(14, int(font.size * 1.4) if hasattr(font, "size") else 14)
    canvas = Image.new("RGB", (width, height + strip), "white")
    canvas.paste(image, ((width - image.width) // 2, 0))
    ImageDraw.Draw(canvas).text((3, height + (strip - getattr(font, "size", 10)) // 2 - 1), text, fill="black",
                                font=font)
    return canvas


def frame(image: Image.Image) -> Image.Image:
    """An RGB frame of the animation: the picture, shrunk within MAX_FRAME_PIXELS."""
    k = shrink_factor(image.width, image.height, MAX_FRAME_PIXELS)
    return (image.reduce(k) if k > 1 else image).convert("RGB")


def write_previews_animation(previews: list[Path], final: np.ndarray, path: Path, frame_ms: int = 400) -> None:
    """The numbered previews and the final render (uint8 pixels) as one animated PNG (any browser
    plays it), each frame labelled with its step, the last held longer: at most MAX_FRAMES of them,
    evenly chosen, each shrunk within MAX_FRAME_PIXELS."""
    if not previews:
        return
    frames_in_all = len(previews) + 1
    chosen = sorted({round(i * (frames_in_all - 1) / (MAX_FRAMES - 1)) for i in range(MAX_FRAMES)})
    previews = [previews[i] for i in chosen if i < len(previews)]
    images = []
    for preview in previews:
        with Image.open(preview) as im:
            images.append(frame(im))
    images.append(frame(Image.fromarray(final[..., 0] if final.shape[2] == 1 else final)))
    # The frames of a large image's earlier previews (or of an older inr) may differ in size: the smallest.
    smallest = min((im.size for im in images), key=lambda size: size[0] * size[1])
    images = [im if im.size == smallest else im.resize(smallest, Image.LANCZOS) for im in images]
    labels = [preview_label(p) for p in previews] + [FINAL_LABEL]
    font = _font(11)
    text_width = max(int(ImageDraw.Draw(images[0]).textlength(label, font=font)) for label in labels) + 6
    width = max(max(im.width for im in images), text_width)
    height = max(im.height for im in images)
    frames = [labelled_frame(im, label, width, height) for im, label in zip(images, labels)]
    durations = [frame_ms] * (len(frames) - 1) + [frame_ms * 4]
    with atomic_path(path, suffix=".png") as tmp:
        frames[0].save(tmp, format="PNG", save_all=True, append_images=frames[1:], duration=durations, loop=0,
                       compress_level=1)
