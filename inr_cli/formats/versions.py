"""A file written by a newer inr (its format_version above what this one reads) is refused with one
line that says so, before its unknown contents would read as damage."""

from __future__ import annotations

from inr_cli.errors import InrError


def refuse_newer(where: object, version: int, readable: int) -> None:
    """InrError when `version`, a file's format, is above `readable`, the newest this inr reads."""
    if version > readable:
        raise InrError(f"{where}: written by a newer inr (format {version}); this inr reads up to format "
                       f"{readable}: upgrade inr")
