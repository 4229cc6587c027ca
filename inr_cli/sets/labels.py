"""Labels for a set from a CSV file (`fit-many --labels labels.csv`: name,label per row, the names as
index.csv writes them; a header row `name,label` is skipped): they replace the class folders' labels."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from inr_cli.errors import InrError
from inr_cli.formats import input_files
from inr_cli.limits import MAX_LIST_BYTES


def read_labels(path: Path) -> dict[str, str]:
    data = input_files.read_local(str(path), MAX_LIST_BYTES, "a list of labels")
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InrError(f"{path}: not a CSV of name,label rows ({exc})") from None
    labels: dict[str, str] = {}
    for number, row in enumerate(rows, 1):
        if not row or (number == 1 and [cell.strip().lower() for cell in row] == ["name", "label"]):
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise InrError(f"{path}, line {number}: expected name,label, got {','.join(row)!r}")
        name, label = row[0].strip(), row[1].strip()
        if "\0" in name + label:  # index.csv could not hold it
            raise InrError(f"{path}, line {number}: a NUL character in a name or label")
        if name in labels and labels[name] != label:
            raise InrError(f"{path}, line {number}: {name} is labelled twice")
        labels[name] = label
    return labels


def relabelled(listed: list, labels: dict[str, str], path: Path) -> list:
    """The listed inputs with the CSV's labels; an input the CSV does not label is refused."""
    missing = [item.name for item in listed if item.name not in labels]
    if missing:
        raise InrError(f"{path} has no label for {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1
                                                                 else "") + "; label every image of the input")
    return [item._replace(label=labels[item.name]) for item in listed]
