"""The pixel CSV: an image as a table of (x, y, channel values in [0, 1]), read and written.

CSV layout (see design notes): a header `x,y,<channels>` then one row per pixel, where x is the
column 0..W-1, y the row 0..H-1, and channels are `l`, `r,g,b` or `r,g,b,a`.
"""

from __future__ import annotations

import functools
import io
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from inr_cli.core.pixels import MAX_IMAGE_PIXELS, PixelImage, as_floats, check_image
from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.input_files import check_regular, check_standard_input, read_stream

CHANNEL_SETS = {("l",): "grey", ("r", "g", "b"): "RGB", ("r", "g", "b", "a"): "RGBA"}
KNOWN_CHANNELS = {"l", "r", "g", "b", "a"}


STDIO = "-"  # the Unix way: standard output for write_csv, standard input for read_csv
# A header line, a byte-order mark and spaces included (`x,y,r,g,b,a` is 11 bytes).
HEADER_BYTES = 1024
# The longest row encode writes: two coordinates of 5 digits (a side is at most 65535 pixels), four
# values of 13 characters ("%.8g" of 1/65535 is 1.5259022e-05), their commas and a line end (two
# bytes from Windows).
MAX_ROW_BYTES = 2 * 6 + 4 * 14 + 1
# The most bytes read from standard input, which never says its size: the pixel CSV of the largest
# image inr reads, every row as long as encode writes one.
MAX_CSV_BYTES = HEADER_BYTES + MAX_IMAGE_PIXELS * MAX_ROW_BYTES
# Pixels formatted and written at a time: the text of a whole image would be far larger than the
# image (tens of bytes a pixel as bytes, hundreds as Python strings), so it is never held whole.
CSV_BLOCK_PIXELS = 1 << 16
# Bytes of a CSV parsed at a time where its lines are parsed one by one (as Python strings a block
# takes several times its bytes), and sampled from its start for its rows.
CSV_BLOCK_BYTES = 1 << 20


def write_csv(image: PixelImage, path: Path) -> None:
    """The CSV of an image in a file, written a block of rows at a time in place of a temporary file
    (the file appears only when whole), or on standard output as it is made when path is "-"."""
    if str(path) == STDIO:
        try:
            sys.stdout.flush()  # what was written as text goes first
            for block in csv_blocks(image):
                sys.stdout.buffer.write(block)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            raise InrError("standard output was closed before the CSV was written") from None
        return
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as handle:
        for block in csv_blocks(image):
            handle.write(block)


def csv_text(image: PixelImage) -> str:
    """The CSV of an image as one string (for a small image: write_csv writes any)."""
    return b"".join(csv_blocks(image)).decode("ascii")


def csv_blocks(image: PixelImage) -> Iterator[bytes]:
    """The CSV of an image as ASCII: its header, then its rows, a block of whole image rows (about
    CSV_BLOCK_PIXELS pixels, one row at least) at a time. Each distinct value is formatted once
    ("%.8g" keeps round(v * 65535) exact, so 8- and 16-bit images round-trip); each row's pieces are
    laid side by side in fixed-width byte columns padded with NUL, which no text holds, and the
    padding dropped: the text of formatting every number, several times faster."""
    height, width, channels = image.pixels.shape
    yield (",".join(("x", "y") + image.channels) + "\n").encode("ascii")
    xs = _padded([f"{x}," for x in range(width)])
    rows = max(1, CSV_BLOCK_PIXELS // width)
    table = image.table()
    for top in range(0, height, rows):
        bottom = min(height, top + rows)
        block = table[top * width:bottom * width]
        if block.dtype == np.uint8:
            codes, text = block, _level_text()
        else:
            codes, values = _value_codes(as_floats(block))  # the float32 values, whatever the storage
            text = _padded(["%.8g" % float(v) for v in values])
        count = len(block)
        pieces = [np.tile(xs, (bottom - top, 1)), np.repeat(_padded([f"{y}," for y in range(top, bottom)]), width, 0)]
        for k in range(channels):
            pieces.append(text[codes[:, k]])
            pieces.append(np.broadcast_to(np.uint8(ord("\n" if k == channels - 1 else ",")), (count, 1)))
        laid = np.concatenate(pieces, axis=1).reshape(-1)
        yield laid[laid != 0].tobytes()


def _padded(strings: list[str]) -> np.ndarray:
    """(len(strings), longest) uint8: each string's ASCII bytes, NUL after."""
    array = np.array([text.encode("ascii") for text in strings])
    return array.view(np.uint8).reshape(len(strings), array.itemsize)


@functools.cache
def _level_text() -> np.ndarray:
    """The text of each 8-bit level's value as PixelImage.values gives it, _padded."""
    return _padded(["%.8g" % float(v) for v in as_floats(np.arange(256, dtype=np.uint8))])


def _value_codes(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) with values[codes] == flat. Floats that are all 8-bit levels take a direct
    path (256 of them); anything else sorts its distinct values."""
    levels = np.rint(flat * 255.0).clip(0, 255).astype(np.intp)
    values = np.zeros(256, flat.dtype)
    values[levels] = flat
    if np.array_equal(values[levels], flat):
        return levels, values
    values, codes = np.unique(flat, return_inverse=True)
    return codes.reshape(flat.shape), values


def read_csv(path: Path) -> PixelImage:
    """A pixel CSV from a file, or from standard input when path is "-"."""
    path = Path(path)
    stdin = str(path) == STDIO
    name = "standard input" if stdin else str(path)  # as given: the folder tells runs/a/x.csv from runs/b/x.csv
    if stdin:
        data = _standard_input(name)
    else:
        check_regular(path, expected="a pixel CSV")  # a FIFO or a device could block or never end
        size = path.stat().st_size
        if size > MAX_CSV_BYTES:
            raise InrError(f"{name}: {size:,} bytes, more than the pixel CSV of the largest image inr reads "
                           f"({MAX_CSV_BYTES:,})")
        with open(path, "rb") as handle:
            _check_reading_memory(name, size, handle.read(CSV_BLOCK_BYTES))
        data = path.read_bytes()
    end = data.find(b"\n")
    header = _header_line(name, data if end < 0 else data[:end])  # (split() would copy the whole file)
    if not data or data.isspace():
        raise InrError(f"{name}: the file is empty (expected a header 'x,y,r,g,b' and pixel rows)")
    channels = _parse_header(name, header)
    if stdin:  # its bytes are read already: what parsing them takes is checked now
        _check_reading_memory(name, len(data), data[:CSV_BLOCK_BYTES])
    fast = _parse_fast(data, path, 2 + len(channels))
    if fast is not None:
        return _table_to_image(name, fast, np.arange(2, fast.shape[0] + 2), channels)
    table, line_numbers = _parse_blocks(name, data, end if end >= 0 else len(data), 2 + len(channels))
    return _table_to_image(name, table, line_numbers, channels)


def _check_reading_memory(name: str, size: int, start: bytes) -> None:
    """Refuse in one line a CSV of `size` bytes whose reading would not fit the memory free, judged
    by its `start` (its rows a byte, its columns), before it is parsed (core/memory.py's
    csv_reading_estimate)."""
    from inr_cli.core import memory

    first = start.split(b"\n", 1)[0]
    columns = min(max(first.count(b",") + 1, 3), 6)  # x, y and one to four channels
    rows = round(size * start.count(b"\n") / max(len(start), 1))
    memory.check([memory.csv_reading_estimate(size, rows, columns, CSV_BLOCK_BYTES)], None, f"reading {name}",
                 "close other programs or use a machine with more memory")


def _parse_blocks(name: str, data: bytes, header_end: int, n_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The table of a file the fast parser refused, and each row's line, parsed a block of lines at a
    time (the text of a whole file as Python strings is many times its bytes): blank lines are
    skipped, the first bad line named."""
    tables, numbers = [], []
    line, start = 1, header_end + 1  # the header is line 1, already read
    while start < len(data):
        stop = len(data)
        if start + CSV_BLOCK_BYTES < len(data):  # to the last line end in the block, or past a longer line
            stop = data.rfind(b"\n", start, start + CSV_BLOCK_BYTES) + 1 or \
                data.find(b"\n", start + CSV_BLOCK_BYTES) + 1 or len(data)
        try:  # a block ends at a line end, which no UTF-8 character spans
            lines = data[start:stop].decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise InrError(f"{name}: not a text file (expected a pixel CSV)") from None
        body = [(line + i + 1, text) for i, text in enumerate(lines) if text.strip()]
        if body:
            tables.append(_parse_rows(name, body, n_columns))
            numbers.append(np.array([number for number, _ in body]))
        line, start = line + len(lines), stop
    if not tables:
        raise InrError(f"{name}: header only, no pixel rows")
    return np.concatenate(tables), np.concatenate(numbers)


def _standard_input(name: str) -> bytes:
    """Standard input's bytes: not a device (check_standard_input); its header checked as soon as its
    first line is read, so that an endless stream of anything else (`yes`, zeros through a pipe) is
    refused at once; at most MAX_CSV_BYTES in all."""
    check_standard_input("a pixel CSV")
    stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else io.BytesIO(sys.stdin.read().encode())
    head = stream.readline(HEADER_BYTES + 1)
    if len(head) > HEADER_BYTES:
        raise InrError(f"{name} line 1: longer than {HEADER_BYTES} bytes, not a header (expected a header "
                       f"'x,y,r,g,b' and pixel rows)")
    if head.strip():  # a blank start is judged on the whole, as a file's is
        _parse_header(name, _header_line(name, head.rstrip(b"\n")))
    return read_stream(stream, MAX_CSV_BYTES, name, "the pixel CSV of the largest image inr reads", start=head)


def _header_line(name: str, first_line: bytes) -> str:
    try:
        return first_line.decode("utf-8-sig").rstrip("\r")
    except UnicodeDecodeError:
        raise InrError(f"{name}: not a text file (expected a pixel CSV)") from None


def _parse_fast(data: bytes, path: Path, n_columns: int) -> np.ndarray | None:
    """The table of a well-formed file (n_columns numbers on every line after the header, no blank
    line) through NumPy's C reader, or None: then the line-by-line parser finds the problem and names
    its line. Row k of the table is line k + 2 only when no line was skipped, hence the count."""
    lines = data.count(b"\n") + (not data.endswith(b"\n")) - 1
    if lines < 1:
        return None
    source = io.BytesIO(data) if str(path) == STDIO else path  # a path streams: less memory, faster
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty body warns; it is refused below
            table = np.loadtxt(source, delimiter=",", skiprows=1, comments=None, ndmin=2, encoding="utf-8-sig")
    except (ValueError, UnicodeDecodeError):
        return None
    if table.shape != (lines, n_columns):
        return None
    return table


def _parse_header(name: str, header: str) -> tuple[str, ...]:
    columns = [c.strip().lower() for c in header.split(",")]
    if columns[:2] != ["x", "y"]:
        raise InrError(f"{name} line 1: header must start with 'x,y', found '{header.strip()}'")
    channels = tuple(columns[2:])
    if channels in CHANNEL_SETS:
        return channels
    unknown = [c for c in channels if c not in KNOWN_CHANNELS]
    if unknown:
        raise InrError(f"{name} line 1: unknown column '{unknown[0]}' (channels are l, or r,g,b, or r,g,b,a)")
    if "l" in channels and set(channels) & {"r", "g", "b"}:
        raise InrError(f"{name} line 1: header names grey 'l' and colour channels at once; use one or the other")
    if not channels:
        raise InrError(f"{name} line 1: no channel columns after x,y (expected l, or r,g,b, or r,g,b,a)")
    raise InrError(f"{name} line 1: channels '{','.join(channels)}' are not one of l | r,g,b | r,g,b,a")


def _parse_rows(name: str, body: list[tuple[int, str]], n_columns: int) -> np.ndarray:
    try:
        table = np.loadtxt([line for _, line in body], delimiter=",", dtype=np.float64, ndmin=2)
        if table.shape[1] == n_columns:
            return table
    except ValueError:
        pass
    # The fast parser failed: walk the rows to name the first bad one.
    for number, line in body:
        cells = line.split(",")
        if len(cells) != n_columns:
            raise InrError(f"{name} line {number}: {len(cells)} values, expected {n_columns}")
        for cell in cells:
            try:
                float(cell)
            except ValueError:
                raise InrError(f"{name} line {number}: '{cell.strip()}' is not a number") from None
    raise InrError(f"{name}: could not parse the table")


def _table_to_image(name: str, table: np.ndarray, line_numbers: np.ndarray, channels) -> PixelImage:
    coords, values = table[:, :2], table[:, 2:]
    with np.errstate(invalid="ignore"):
        whole = coords.astype(np.int64)  # NaN and inf become negative: refused below
    # One quick pass for the common case; NaN fails min/max comparisons too.
    if not (whole.min() >= 0 and (whole == coords).all() and values.min() >= 0 and values.max() <= 1):
        _refuse_first_bad_row(name, table, line_numbers, channels)
    xs, ys = whole[:, 0], whole[:, 1]
    width, height = int(xs.max()) + 1, int(ys.max()) + 1
    check_image(width, height, f"{name} (its coordinates)")
    flat = ys * width + xs
    if flat.size == width * height and (flat == np.arange(flat.size)).all():  # row-major, as encode writes it
        grid = values.astype(np.float32).reshape(height, width, len(channels))
        return PixelImage(grid, tuple(channels), bit_depth=_bit_depth(grid))
    order = np.argsort(flat, kind="stable")
    sorted_flat = flat[order]
    repeated = np.nonzero(sorted_flat[1:] == sorted_flat[:-1])[0]
    if repeated.size:
        row = order[repeated[0] + 1]
        raise InrError(f"{name} line {line_numbers[row]}: duplicate pixel x={xs[row]}, y={ys[row]}")
    if flat.size != width * height:
        present = np.zeros(width * height, dtype=bool)
        present[flat] = True
        missing = int(np.argmin(present))
        raise InrError(
            f"{name}: pixel x={missing % width}, y={missing // width} is missing "
            f"({width * height - flat.size} of {width}x{height} absent)"
        )
    grid = np.empty((width * height, len(channels)), dtype=np.float32)
    grid[flat] = values
    grid = grid.reshape(height, width, len(channels))
    return PixelImage(grid, tuple(channels), bit_depth=_bit_depth(grid))


def _refuse_first_bad_row(name: str, table: np.ndarray, line_numbers: np.ndarray, channels) -> None:
    """The first row that breaks a rule, named with its line: a value that is not finite, a coordinate
    that is not a non-negative integer, a channel value outside [0, 1]."""
    finite = np.isfinite(table)
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        column = ("x", "y", *channels)[col]
        # The text is gone by now; a number past float range (1e400) reads as inf, so both are named.
        what = "NaN" if np.isnan(table[row, col]) else "infinite or beyond the range of a float"
        raise InrError(f"{name} line {line_numbers[row]}: the value in column '{column}' is {what}")
    coords, values = table[:, :2], table[:, 2:]
    bad = (coords < 0) | (coords != np.floor(coords))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        axis = "xy"[col]
        raise InrError(f"{name} line {line_numbers[row]}: {axis}={table[row, col]:g} is not a non-negative integer")
    huge = coords >= MAX_IMAGE_PIXELS
    if huge.any():
        row, col = np.argwhere(huge)[0]
        axis = "xy"[col]
        raise InrError(f"{name} line {line_numbers[row]}: {axis}={table[row, col]:g} is beyond the limit of "
                       f"2^28 pixels")
    outside = (values < 0) | (values > 1)
    if outside.any():
        row, col = np.argwhere(outside)[0]
        raise InrError(
            f"{name} line {line_numbers[row]}: value {values[row, col]:g} in column "
            f"'{channels[col]}' is outside [0, 1]"
        )
    raise InrError(f"{name}: could not read the table")


def _bit_depth(grid: np.ndarray) -> int:
    """8 when every value is a multiple of 1/255 to the CSV's precision, else 16. In units of 1/255,
    a 16-bit level that is not an 8-bit one lies at least 255/65535 = 0.0039 from the nearest 8-bit
    level; %.8g text and float32 put an 8-bit value within 1e-4 of its level."""
    scaled = grid * np.float32(255)
    np.subtract(scaled, np.rint(scaled), out=scaled)
    return 8 if np.abs(scaled, out=scaled).max(initial=0) <= 1e-3 else 16
