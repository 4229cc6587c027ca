"""index.csv of a set of networks (inr fit-many's folder, or an exported set): its columns, and
each row written and read back checked.

A name or label that a spreadsheet would run as a formula (one beginning with = + - @, a tab or a
carriage return) is written behind an apostrophe, as spreadsheets expect, and so is one that begins
with an apostrophe before such a character or another apostrophe; inr's reader takes the apostrophe
off (index_cell writes a cell, index_text reads it), so every name reads back exactly.
"""

from __future__ import annotations

from pathlib import Path

from inr_cli.core.pixels import check_image
from inr_cli.errors import InrError, NoSuchName

INDEX_COLUMNS = ("name", "psnr", "loss", "steps", "seed", "width", "height")
LABEL = "label"  # the last column when the images came in class folders (the first folder level)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE = "'"


def index_cell(text: str) -> str:
    """A name or label as index.csv holds it (index_text reads it back)."""
    escaped = text[:1] in FORMULA_STARTS or (text[:1] == ESCAPE and text[1:2] in FORMULA_STARTS + (ESCAPE,))
    return ESCAPE + text if escaped else text


def index_text(cell: str) -> str:
    """The name or label that index_cell wrote as `cell`."""
    return cell[1:] if cell[:1] == ESCAPE and cell[1:2] in FORMULA_STARTS + (ESCAPE,) else cell


def index_row(path: Path, line: int, header: list[str], cells: list[str]) -> dict:
    if len(cells) != len(header):
        raise InrError(f"{path}, line {line}: {len(cells)} values, expected {len(header)} ({','.join(header)})")
    row = dict(zip(header, cells))
    for column in ("psnr", "loss"):  # NaN where it could not be measured; never negative
        try:
            value = float(row[column])
        except ValueError:
            value = -1.0
        if value < 0:
            raise InrError(f"{path}, line {line}: {column} '{row[column][:40]}' is not a number of at least 0")
    for column, low in (("steps", 0), ("seed", 0), ("width", 1), ("height", 1)):
        text = row[column]
        if not (text.isascii() and text.isdigit() and len(text) <= 20 and int(text) >= low):
            raise InrError(f"{path}, line {line}: {column} '{text[:40]}' is not a whole number of at least {low}")
    check_image(int(row["width"]), int(row["height"]), f"{path}, line {line}")
    for column in ("name", LABEL):
        if column in row:
            row[column] = index_text(row[column])
            if "\0" in row[column]:
                raise InrError(f"{path}, line {line}: the {column} holds a NUL character")
    if not row["name"]:
        raise InrError(f"{path}, line {line}: no name")
    return row


def row_named(index: list[dict], name: str) -> int:
    """The row of the image `name` in a set's index rows; one that is not there is NoSuchName, with
    the name it may have meant."""
    for row, entry in enumerate(index):
        if entry["name"] == name:
            return row
    close = [r["name"] for r in index if r["name"].split(".")[0] == name.split(".")[0]]
    hint = f"; did you mean {close[0]}?" if close else f" ({len(index)} images, e.g. {index[0]['name']})"
    raise NoSuchName(f"no image named '{name}' in this set{hint}")
