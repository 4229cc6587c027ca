"""Pixel CSV and image files: exact round trips, every mode, every refusal naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from inr_cli.errors import InrError
from inr_cli.formats.images import load_image, save_image
from inr_cli.formats.pixel_csv import read_csv, write_csv
from tests.conftest import make_image


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_roundtrip_is_exact(tmp_path, mode):
    src = make_image(tmp_path / "in.png", mode, size=(17, 11), seed=3)
    pixels = load_image(src)
    write_csv(pixels, tmp_path / "p.csv")
    back = read_csv(tmp_path / "p.csv")
    save_image(back, tmp_path / "out.png")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out.png")), np.asarray(Image.open(src)))
    assert back.channels == {"L": ("l",), "RGB": ("r", "g", "b"), "RGBA": ("r", "g", "b", "a")}[mode]


def test_csv_layout(tmp_path, rgb_png):
    write_csv(load_image(rgb_png), tmp_path / "p.csv")
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "x,y,r,g,b"
    assert lines[1].startswith("0,0,") and lines[2].startswith("1,0,")
    assert len(lines) == 1 + 13 * 9
    x, y = lines[-1].split(",")[:2]
    assert (x, y) == ("12", "8")


def every_number_formatted(image) -> bytes:
    """The pixel CSV by its definition: a header, then each pixel's row, row-major, each value of
    PixelImage.values formatted "%.8g" on its own."""
    values = image.values
    rows = [",".join(("x", "y") + image.channels)]
    for y in range(image.height):
        for x in range(image.width):
            rows.append(",".join([str(x), str(y), *("%.8g" % float(v) for v in values[y, x])]))
    return ("\n".join(rows) + "\n").encode()


@pytest.mark.parametrize("kind", ["8-bit RGB", "16-bit grey", "float RGBA", "wider than a block"])
def test_a_csv_written_in_blocks_is_the_text_of_every_number(tmp_path, kind, monkeypatch, capsysbinary):
    """The CSV is made and written a block of rows at a time (its text is never held whole): to a
    file and to standard output, the bytes of the one-piece text, whichever the blocks' size."""
    from inr_cli.core.pixels import PixelImage
    from inr_cli.formats import pixel_csv

    rng = np.random.default_rng(5)
    shape = {"8-bit RGB": (23, 37, 3), "16-bit grey": (19, 31, 1), "float RGBA": (11, 29, 4),
             "wider than a block": (3, 150, 3)}[kind]
    if kind == "8-bit RGB" or kind == "wider than a block":
        pixels, depth = rng.integers(0, 256, shape, dtype=np.uint8), 8
    elif kind == "16-bit grey":
        pixels, depth = (rng.integers(0, 65536, shape) / 65535).astype(np.float32), 16
    else:
        pixels, depth = rng.random(shape, dtype=np.float32), 16
    pixels.flat[0], pixels.flat[-1] = 0, pixels.dtype.type(255 if depth == 8 else 1)
    image = PixelImage(pixels, {1: ("l",), 3: ("r", "g", "b"), 4: ("r", "g", "b", "a")}[shape[2]], depth)
    expected = every_number_formatted(image)
    assert pixel_csv.csv_text(image).encode() == expected  # one block: the whole image
    monkeypatch.setattr(pixel_csv, "CSV_BLOCK_PIXELS", 100)  # many blocks, and rows of 150 one a block
    assert len(list(pixel_csv.csv_blocks(image))) > 3
    write_csv(image, tmp_path / "blocks.csv")
    assert (tmp_path / "blocks.csv").read_bytes() == expected
    capsysbinary.readouterr()
    write_csv(image, "-")
    assert capsysbinary.readouterr().out == expected


def test_sixteen_bit_grey_roundtrip(tmp_path):
    values = (np.arange(30 * 20, dtype=np.uint16).reshape(20, 30) * 97)
    Image.fromarray(values).save(tmp_path / "g16.png")
    pixels = load_image(tmp_path / "g16.png")
    assert pixels.channels == ("l",) and pixels.bit_depth == 16
    write_csv(pixels, tmp_path / "g.csv")
    save_image(read_csv(tmp_path / "g.csv"), tmp_path / "back.png")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "back.png")), values)


def test_rows_in_any_order_bom_and_crlf(tmp_path):
    text = "\ufeffx,y,l\r\n1,0,0.5\r\n0,1,1\r\n0,0,0\r\n1,1,0.25\r\n"
    (tmp_path / "p.csv").write_bytes(text.encode("utf-8"))
    image = read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(image.values[..., 0], [[0, 0.5], [1, 0.25]])


@pytest.mark.parametrize("body,message", [
    ("", "empty"),
    ("x,y,r,g,b\n", "header only"),
    ("x,y,r,g\n0,0,1,1\n", "not one of"),
    ("x,y,q\n0,0,1\n", "unknown column 'q'"),
    ("x,y,l,r,g,b\n0,0,1,1,1,1\n", "grey 'l' and colour"),
    ("a,b,l\n0,0,1\n", "must start with 'x,y'"),
    ("x,y,l\n0,0,1\n1,0\n", "line 3: 2 values, expected 3"),
    ("x,y,l\n0,0,abc\n", "line 2: 'abc' is not a number"),
    ("x,y,l\n0,0,nan\n", "line 2: the value in column 'l' is NaN"),
    ("x,y,l\n0,0,inf\n", "line 2: the value in column 'l' is infinite or beyond the range of a float"),
    ("x,y,r,g,b\n0,0,0,1e400,0\n", "line 2: the value in column 'g' is infinite or beyond"),
    ("x,y,l\n-inf,0,1\n", "line 2: the value in column 'x' is infinite"),
    ("x,y,l\n0,0,1.5\n", "line 2: value 1.5 in column 'l' is outside [0, 1]"),
    ("x,y,l\n0,0,-0.1\n", "outside [0, 1]"),
    ("x,y,l\n-1,0,1\n", "line 2: x=-1 is not a non-negative integer"),
    ("x,y,l\n0,0.5,1\n", "y=0.5 is not a non-negative integer"),
    ("x,y,l\n0,0,1\n1,0,1\n0,0,1\n", "line 4: duplicate pixel x=0, y=0"),
    ("x,y,l\n0,0,1\n1,1,1\n", "missing"),
])
def test_bad_csv_is_refused_with_the_line(tmp_path, body, message):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(InrError) as info:
        read_csv(path)
    assert message in str(info.value)
    assert "bad.csv" in str(info.value)


def test_image_modes_convert(tmp_path):
    palette = Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8)).convert("P")
    palette.save(tmp_path / "p.png")
    assert load_image(tmp_path / "p.png").channels == ("r", "g", "b")
    Image.new("LA", (4, 4), (100, 50)).save(tmp_path / "la.png")
    assert load_image(tmp_path / "la.png").channels == ("r", "g", "b", "a")
    Image.new("CMYK", (4, 4), (0, 255, 0, 0)).save(tmp_path / "c.jpg")
    assert load_image(tmp_path / "c.jpg").channels == ("r", "g", "b")
    assert load_image(tmp_path / "la.png", gray=True).channels == ("l",)


def test_exif_rotation_is_respected(tmp_path):
    im = Image.new("RGB", (8, 4), (200, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    im.save(tmp_path / "r.jpg", exif=exif)
    pixels = load_image(tmp_path / "r.jpg")
    assert (pixels.width, pixels.height) == (4, 8)


def test_animated_gif_first_frame_with_notice(tmp_path):
    frames = [Image.new("L", (5, 5), v) for v in (10, 200)]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    notices = []
    pixels = load_image(tmp_path / "a.gif", notices=notices)
    assert notices and "first" in notices[0]
    assert abs(float(pixels.values.mean()) - 10 / 255) < 0.02


def test_resize_keeps_aspect(coffee):
    pixels = load_image(coffee, size=120)
    assert (pixels.width, pixels.height) == (120, 80)


@pytest.mark.parametrize("content,message", [
    (b"", "empty"),
    (b"hello, I am text", "not an image"),
])
def test_broken_images_refused(tmp_path, content, message):
    (tmp_path / "x.png").write_bytes(content)
    with pytest.raises(InrError, match=message):
        load_image(tmp_path / "x.png")


def test_truncated_png_and_jpeg_refused(tmp_path, coffee):
    data = coffee.read_bytes()
    (tmp_path / "t.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(InrError, match="truncated"):
        load_image(tmp_path / "t.png")
    Image.open(coffee).convert("RGB").save(tmp_path / "full.jpg")
    jpeg = (tmp_path / "full.jpg").read_bytes()
    (tmp_path / "t.jpg").write_bytes(jpeg[: len(jpeg) // 3])
    with pytest.raises(InrError, match="truncated"):
        load_image(tmp_path / "t.jpg")


def test_decompression_bomb_refused(tmp_path):
    # A valid PNG header declaring 100000 x 100000 pixels, with almost no data behind it.
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 100000, 100000, 8, 0, 0, 0, 0)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 10))
           + chunk(b"IEND", b""))
    (tmp_path / "bomb.png").write_bytes(png)
    with pytest.raises(InrError, match="too large"):
        load_image(tmp_path / "bomb.png")


def test_missing_and_directory(tmp_path):
    with pytest.raises(InrError, match="no such file"):
        load_image(tmp_path / "nope.png")
    with pytest.raises(InrError, match="directory"):
        load_image(tmp_path)


def test_fast_and_careful_csv_parsers_agree(tmp_path):
    """A well-formed CSV is parsed in one C pass; anything else line by line. Same image either way,
    and a file whose lines carry one value too many and one too few is still refused, by line."""
    import numpy as np

    from inr_cli.core.pixels import PixelImage
    from inr_cli.formats.pixel_csv import csv_text

    rng = np.random.default_rng(3)
    image = PixelImage((rng.integers(0, 65536, (7, 9, 3)) / 65535).astype(np.float32), ("r", "g", "b"), 16)
    text = csv_text(image)
    (tmp_path / "fast.csv").write_text(text)
    header, *rows = text.splitlines()
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    (tmp_path / "careful.csv").write_text("\r\n".join([header, "", *shuffled]) + "\r\n")
    fast, careful = read_csv(tmp_path / "fast.csv"), read_csv(tmp_path / "careful.csv")
    assert np.array_equal(fast.values, careful.values) and fast.bit_depth == careful.bit_depth == 16
    assert np.array_equal(fast.values, np.round(image.values * 65535) / 65535) or np.allclose(
        fast.values, image.values, atol=1e-7)
    bad = rows[:]
    bad[2] = bad[2] + ",0.5"
    bad[3] = bad[3].rsplit(",", 1)[0]
    (tmp_path / "bad.csv").write_text("\n".join([header, *bad]) + "\n")
    with pytest.raises(InrError, match="line 4: 6 values, expected 5"):
        read_csv(tmp_path / "bad.csv")


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_parallel_png_writer_reads_back_exactly(tmp_path, channels):
    """Large renders are written by inr's own PNG writer (slices deflated in parallel, one zlib
    stream): Pillow reads back the very pixels, in every channel layout, on any slice count."""
    import numpy as np
    from PIL import Image

    from inr_cli.formats.png import write_png

    rng = np.random.default_rng(channels)
    smooth = np.cumsum(rng.integers(0, 3, (61, 47, channels)), axis=1).astype(np.uint8)
    for threads in (1, 3, 8):
        write_png(smooth, tmp_path / "x.png", threads=threads)
        back = np.asarray(Image.open(tmp_path / "x.png"))
        assert np.array_equal(back.reshape(smooth.shape), smooth), threads


def test_large_renders_use_the_parallel_writer(tmp_path, monkeypatch):
    import numpy as np
    from PIL import Image

    from inr_cli.formats import images

    monkeypatch.setattr(images, "FAST_PNG_PIXELS", 100)
    calls = []
    import inr_cli.formats.png as png

    real = png.write_png
    monkeypatch.setattr(png, "write_png", lambda *a, **k: (calls.append(1), real(*a, **k)))
    pixels = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    images.save_uint8(pixels, tmp_path / "big.png")
    assert calls and np.array_equal(np.asarray(Image.open(tmp_path / "big.png")), pixels)


def test_16_bit_colour_is_kept_from_file_to_csv_to_file_and_rendered(tmp_path):
    """A 16-bit RGB PNG keeps its 16 bits through encode and decode (Pillow alone would cut them to 8),
    and inr render --depth 16 writes 16-bit PNGs."""
    import numpy as np
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from inr_cli.formats.png import read_png16, write_png

    rng = np.random.default_rng(16)
    pixels = rng.integers(0, 65536, (9, 11, 3), dtype=np.uint16)
    write_png(pixels, tmp_path / "deep.png")
    image = load_image(tmp_path / "deep.png")
    assert image.bit_depth == 16 and image.channels == ("r", "g", "b")
    assert np.array_equal(np.round(image.values * 65535).astype(np.uint16), pixels)
    runner = CliRunner()
    assert runner.invoke(app, ["encode", str(tmp_path / "deep.png")]).exit_code == 0
    result = runner.invoke(app, ["decode", str(tmp_path / "deep.csv"), "-o", str(tmp_path / "back.png")])
    assert result.exit_code == 0, result.output
    assert np.array_equal(read_png16(tmp_path / "back.png", 1 << 20), pixels)
    result = runner.invoke(app, ["train", str(tmp_path / "deep.png"), "--steps", "2", "--hidden", "8", "--layers", "1",
                                 "--device", "cpu", "-q", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["render", str(tmp_path / "run"), "--size", "22", "--depth", "16", "--device", "cpu",
                                 "-q", "-o", str(tmp_path / "r16.png")])
    assert result.exit_code == 0, result.output
    drawn = read_png16(tmp_path / "r16.png", 1 << 20)
    assert drawn.shape == (18, 22, 3) and drawn.dtype == np.uint16 and len(np.unique(drawn)) > 256
    result = runner.invoke(app, ["render", str(tmp_path / "run"), "--depth", "16", "-o", str(tmp_path / "r.jpg")])
    assert result.exit_code == 2 and "16-bit renders are written as PNG or TIFF" in result.output
    import tifffile

    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.core.render import render_float
    from inr_cli.formats import checkpoint as ckpt

    saved = ckpt.load(tmp_path / "run")
    for depth, dtype in (("16", np.uint16), ("32", np.float32)):
        result = runner.invoke(app, ["render", str(tmp_path / "run"), "--size", "22", "--depth", depth, "--device",
                                     "cpu", "-q", "-o", str(tmp_path / f"r{depth}.tif")])
        assert result.exit_code == 0, result.output
        tiff = tifffile.imread(tmp_path / f"r{depth}.tif")
        assert tiff.shape == (18, 22, 3) and tiff.dtype == dtype
    raw = render_float(CpuBackend(), saved.spec, saved.params, 22, 18, clip=False)
    assert np.array_equal(tifffile.imread(tmp_path / "r32.tif"), raw)  # float: the network's own values
    result = runner.invoke(app, ["render", str(tmp_path / "run"), "--depth", "32", "-o", str(tmp_path / "r.png")])
    assert result.exit_code == 2 and "float renders are written as TIFF" in result.output


def test_bad_value_after_blank_line_names_its_own_line(tmp_path):
    """NumPy's reader skips blank lines, so its row k is not line k + 2 there: the line named must
    still be the file's own (a BOM and CRLF endings change nothing)."""
    rows = ["x,y,l", "0,0,0.5", "", "1,0,1.5", "0,1,0", "1,1,0"]
    (tmp_path / "gap.csv").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode() + b"\r\n")
    with pytest.raises(InrError, match=r"gap.csv line 4: value 1.5 in column 'l' is outside \[0, 1\]"):
        read_csv(tmp_path / "gap.csv")
    del rows[2]
    (tmp_path / "ok.csv").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode())
    with pytest.raises(InrError, match=r"ok.csv line 3: value 1.5"):
        read_csv(tmp_path / "ok.csv")


@pytest.mark.parametrize("channels", [2, 3, 4])
def test_16_bit_colour_png_pixels_read_exactly(tmp_path, channels, monkeypatch):
    """A 16-bit PNG written by another encoder (imagecodecs' libpng) reads back as the very samples
    written, through `inr encode` and through the pypng fallback when imagecodecs is absent."""
    import sys

    import numpy as np
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from inr_cli.formats.png import read_png16

    imagecodecs = pytest.importorskip("imagecodecs")
    pixels = np.random.default_rng(channels).integers(0, 65536, (7, 10, channels), dtype=np.uint16)
    pixels[0, 0] = 0
    pixels[-1, -1] = 65535
    (tmp_path / "deep.png").write_bytes(imagecodecs.png_encode(pixels))
    result = CliRunner().invoke(app, ["encode", str(tmp_path / "deep.png"), "-o", "-"])
    assert result.exit_code == 0, result.output
    table = np.loadtxt(result.stdout.splitlines()[1:], delimiter=",")
    grid = np.zeros((7, 10, table.shape[1] - 2))
    grid[table[:, 1].astype(int), table[:, 0].astype(int)] = table[:, 2:]
    expected = pixels if channels != 2 else np.concatenate([np.repeat(pixels[..., :1], 3, axis=2), pixels[..., 1:]], 2)
    assert np.array_equal(np.round(grid * 65535).astype(np.uint16), expected)
    fast = read_png16(tmp_path / "deep.png", 1 << 20)
    monkeypatch.setitem(sys.modules, "imagecodecs", None)  # the fallback: pypng
    slow = read_png16(tmp_path / "deep.png", 1 << 20)
    assert np.array_equal(fast, pixels) and np.array_equal(slow, pixels)


@pytest.mark.parametrize("channels", [("l",), ("r", "g", "b")])
def test_a_16_bit_image_keeps_its_bits_where_the_format_holds_them(tmp_path, channels, capsys):
    """PNG and TIFF keep 16 bits, grey and colour; a format of 8 bits a channel gets 8, said in a
    note, not refused for a mode Pillow cannot write."""
    import tifffile

    from inr_cli.core.pixels import PixelImage

    rng = np.random.default_rng(4)
    levels = rng.integers(0, 65536, (5, 7, len(channels))).astype(np.uint16)
    image = PixelImage((levels / 65535).astype(np.float32), channels, 16)
    save_image(image, tmp_path / "kept.tif")
    assert np.array_equal(tifffile.imread(tmp_path / "kept.tif").reshape(levels.shape), levels)
    save_image(image, tmp_path / "kept.png")
    assert np.array_equal(load_image(tmp_path / "kept.png").values, image.values)
    for name in ("eight.jpg", "eight.bmp"):
        save_image(image, tmp_path / name)
        assert "holds 8 bits a channel, so the image's 16 are written as 8" in capsys.readouterr().err
        with Image.open(tmp_path / name) as written:
            assert np.asarray(written).dtype == np.uint8 and written.size == (7, 5)
