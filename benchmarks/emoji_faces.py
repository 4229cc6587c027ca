"""Images of one kind with a shared structure: the yellow face emoji of the Noto Color Emoji font.

Tancik et al. 2021 learned their image starts on aligned faces; drawn shapes at random places share
little but their background, so a learned start has little to learn from them. The faces of an emoji
font are aligned (one disc, eyes and mouth in about the same places) and differ in their details, and
they install from a registry: Debian's `fonts-noto-color-emoji` (or any path given with --font).

    PYTHONPATH=. python benchmarks/emoji_faces.py /tmp/faces --size 32
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
# Noto's colour bitmaps are drawn at this one size
BITMAP_SIZE = 109
# the yellow faces: smileys and emotion, without hands, people, animals or objects
FACES = [*range(0x1F600, 0x1F638), *range(0x1F641, 0x1F645), *range(0x1F910, 0x1F918), *range(0x1F920, 0x1F926),
         *range(0x1F927, 0x1F930), 0x1F970, *range(0x1F971, 0x1F977), 0x1F97A, 0x1F9D0]


def face(codepoint: int, size: int, font: ImageFont.FreeTypeFont) -> Image.Image:
    """One face emoji on white, its bitmap cropped to the glyph's box and resized (Lanczos) to size x size."""
    canvas = Image.new("RGBA", (BITMAP_SIZE + 40, BITMAP_SIZE + 40), (255, 255, 255, 0))
    ImageDraw.Draw(canvas).text((20, 20), chr(codepoint), font=font, embedded_color=True)
    box = canvas.getbbox()
    if box is None:
        raise ValueError(f"the font draws nothing for U+{codepoint:X}")
    glyph = canvas.crop(box)
    square = Image.new("RGBA", (max(glyph.size),) * 2, (255, 255, 255, 0))
    square.paste(glyph, ((square.width - glyph.width) // 2, (square.height - glyph.height) // 2))
    white = Image.new("RGB", square.size, (255, 255, 255))
    white.paste(square, mask=square.getchannel("A"))
    return white.resize((size, size), Image.LANCZOS)


def write_faces(train: Path, test: Path, size: int, test_count: int, seed: int, font_path: Path = FONT) -> None:
    """Every face, shuffled by the seed: `test_count` of them into test/face/, the rest into train/face/."""
    if not font_path.exists():
        raise SystemExit(f"{font_path}: no such font (apt-get install fonts-noto-color-emoji, or --font PATH)")
    font = ImageFont.truetype(str(font_path), BITMAP_SIZE)
    order = np.random.default_rng(seed).permutation(len(FACES))
    for rank, index in enumerate(order):
        folder = (test if rank < test_count else train) / "face"
        folder.mkdir(parents=True, exist_ok=True)
        face(FACES[index], size, font).save(folder / f"u{FACES[index]:x}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--test", type=int, default=20, help="faces held out (FOLDER/test), the rest in FOLDER/train")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--font", type=Path, default=FONT)
    args = parser.parse_args()
    write_faces(args.folder / "train", args.folder / "test", args.size, args.test, args.seed, args.font)
    print(f"{len(FACES)} faces -> {args.folder}")


if __name__ == "__main__":
    main()
