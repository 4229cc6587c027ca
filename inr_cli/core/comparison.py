"""Pictures for judging a run at a glance: reference | render | error (comparison.png), the PSNR
curve (psnr.svg) and the previews as one animation (previews.png, an animated PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.images import PixelImage

LABEL_MIN_WIDTH = 64  # narrower panels get no caption: it would not fit
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


def side_by_side(render: np.ndarray, reference: np.ndarray, gap: int = 4, psnr: float | None = None) -> PixelImage:
    """reference | render | error map; with panels at least LABEL_MIN_WIDTH wide, a caption under each."""
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


def psnr_svg(rows: list[dict], width: int = 480, height: int = 240) -> str:
    """PSNR against step from metrics.csv rows, as a small SVG line chart (no plotting library)."""
    points = [(r["step"], r["psnr"]) for r in rows if np.isfinite(r["psnr"])]
    if not points:
        return ""
    steps, values = np.array(points, dtype=float).T
    left, bottom, pad = 48, 28, 8
    x0, x1 = 0.0, max(steps.max(), 1.0)
    y0, y1 = np.floor(values.min()), np.ceil(values.max()) + 1e-9
    sx = lambda s: left + (s - x0) / (x1 - x0) * (width - left - pad)  # noqa: E731
    sy = lambda v: pad + (y1 - v) / (y1 - y0) * (height - bottom - pad)  # noqa: E731
    line = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in zip(steps, values))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<polyline points="{line}" fill="none" stroke="#c0392b" stroke-width="1.5"/>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - pad}" y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
             f'<text x="{left}" y="{height - 8}">step 0</text>',
             f'<text x="{width - pad}" y="{height - 8}" text-anchor="end">{int(x1)}</text>',
             f'<text x="{left - 4}" y="{sy(y1) + 10:.0f}" text-anchor="end">{y1:.0f} dB</text>',
             f'<text x="{left - 4}" y="{sy(y0):.0f}" text-anchor="end">{y0:.0f} dB</text>',
             f'<text x="{(left + width) / 2:.0f}" y="{pad + 12}" text-anchor="middle">PSNR of the training image '
             f'(last {values[-1]:.2f} dB)</text>', "</svg>"]
    return "\n".join(parts) + "\n"


def write_psnr_svg(rows: list[dict], path: Path) -> None:
    text = psnr_svg(rows)
    if text:
        atomic_write_text(path, text)


def write_previews_animation(previews: list[Path], path: Path, frame_ms: int = 400) -> None:
    """The numbered previews as one animated PNG (any browser plays it), the last frame held longer."""
    if len(previews) < 2:
        return
    frames = [Image.open(p).convert("RGB") for p in previews]
    durations = [frame_ms] * (len(frames) - 1) + [frame_ms * 4]
    with atomic_path(path, suffix=".png") as tmp:
        frames[0].save(tmp, format="PNG", save_all=True, append_images=frames[1:], duration=durations, loop=0)
