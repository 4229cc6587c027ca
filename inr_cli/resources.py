"""Locate files that ship with the package: kernels, presets and the sample image.

In a wheel, kernels/ and configs/ are copied into the package; in a source checkout (or an
editable install) they stay at the top of the repository.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped_dir(name: str) -> Path:
    inside = PACKAGE_DIR / name
    if inside.is_dir():
        return inside
    return PACKAGE_DIR.parent / name


def kernels_dir() -> Path:
    return _shipped_dir("kernels")


def configs_dir() -> Path:
    return _shipped_dir("configs")


def sample_image() -> Path:
    return PACKAGE_DIR / "data" / "sample.png"
