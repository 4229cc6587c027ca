"""The optional parts of inr: a module of one of its extras imported when asked for, and, where it
is missing, one line naming what to install: the extra's packages read from the installed
package's metadata, so that the command is right however inr was installed (`pip install .` from a
clone has no index entry to ask for 'inr[export]')."""

from __future__ import annotations

import importlib
import re
from importlib import metadata

from inr_cli.errors import InrError

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
    """`pip install 'onnx>=1.14' 'safetensors>=0.4' ... (inr's export extra)` (only the requirement of
    `package` where the extra names it), or the extra itself where inr runs from its source folder
    uninstalled."""
    packages = extra_packages(extra)
    named = [p for p in packages if re.split(r"[\s<>=!~\[;]", p)[0] == package]
    packages = named or packages
    if not packages:
        return f"pip install '.[{extra}]' in inr's folder"
    return "pip install " + " ".join(f"'{p}'" for p in packages) + f" (inr's {extra} extra)"


def require(module: str, what: str, extra: str, also: str = ""):
    """The module, imported; where it is not installed, one line: `{what} needs {module}, which is
    not installed: pip install ...` (then `also`, advice of the caller's)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InrError(f"{what} needs {module}, which is not installed: {install_hint(extra, module)}"
                       + (f"; {also}" if also else "")) from None
