"""What to install for an optional part of inr: the packages of one of its extras, read from the
installed package's metadata, so that the command a message gives is right however inr was
installed (`pip install .` from a clone has no index entry to ask for 'inr[export]')."""

from __future__ import annotations

import re
from importlib import metadata

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_packages(extra: str) -> list[str]:
    """The requirements of `extra` ('safetensors>=0.4', ...), [] where inr's metadata is not installed."""
    try:
        requirements = metadata.requires("inr") or []
    except metadata.PackageNotFoundError:
        return []
    packages = []
    for requirement in requirements:
        package, _, marker = requirement.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found and found.group(1) == extra:
            packages.append(package.strip())
    return packages


def install_hint(extra: str, package: str | None = None) -> str:
    """`pip install 'onnx>=1.14' 'safetensors>=0.4' (inr's export extra)` (only the requirement of
    `package` where one is named), or the extra itself where inr runs from its source folder
    uninstalled."""
    packages = [p for p in extra_packages(extra) if package is None or re.split(r"[\s<>=!~\[;]", p)[0] == package]
    if not packages:
        return f"pip install '.[{extra}]' in inr's folder"
    return "pip install " + " ".join(f"'{p}'" for p in packages) + f" (inr's {extra} extra)"
