"""Default output paths that never overwrite a file the user did not name."""

from __future__ import annotations

from pathlib import Path

from inr_cli.errors import InrError


def default_output(source: Path, suffix: str, flag: str = "-o", fallback: str | None = None) -> Path:
    """SOURCE with `suffix`; if that exists, SOURCE-`fallback` with it (decode after encode finds the
    original image there); never a file that exists."""
    target = Path(source).with_suffix(suffix)
    if target.exists() and fallback:
        target = Path(source).with_name(f"{Path(source).stem}-{fallback}{suffix}")
    if target.exists():
        raise InrError(f"{target} already exists; pass {flag} to choose the output ({flag} {target} replaces it)")
    return target


def check_parent(path: Path) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise InrError(f"{path}: the folder {parent} does not exist")
