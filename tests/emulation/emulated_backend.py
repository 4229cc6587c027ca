"""Run the kernels of kernels/ on the CPU: compile them as C++ with cuda_emulation.h and call
them through ctypes, behind the same KernelBackend the CUDA backend uses.

Each kernel file is preprocessed with the emulation header, its `extern "C"` kernels (macro
instantiations included) are found in the expanded text, and a launcher `emu_<name>(grid, block,
args...)` is generated for each. The shared library is cached by the hash of all sources.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from inr_cli.backends.host_memory import HostMemory
from inr_cli.backends.kernel_backend import KernelBackend
from inr_cli.resources import kernels_dir

HERE = Path(__file__).resolve().parent
HEADER = HERE / "cuda_emulation.h"
SIGNATURE = re.compile(r'extern\s+"C"\s+void\s+(\w+)\s*\(([^)]*)\)', re.S)
CTYPES = {
    "int": ctypes.c_int,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}


def compiler() -> str | None:
    return shutil.which("g++")


def _parse_params(text: str) -> list[tuple[str, str]]:
    """[(ctype key or 'pointer', name)] from a C parameter list."""
    params = []
    for part in " ".join(text.split()).split(","):
        part = part.strip()
        name = re.findall(r"\w+", part)[-1]
        type_text = part[: part.rfind(name)].replace("__restrict", "").replace("const", "").strip()
        params.append(("pointer" if "*" in type_text else " ".join(type_text.split()), name))
    return params


def _kernels(sources: list[Path], flags: list[str]) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """{kernel name: (its parameter list as written, [(type, name)])}."""
    found = {}
    for path in sources:
        expanded = subprocess.run(
            ["g++", "-x", "c++", "-std=c++20", "-E", "-P", *flags, "-include", str(HEADER), str(path)],
            check=True, capture_output=True, text=True,
        ).stdout
        # Only the kernel file's own text: skip what the header and system headers expanded to.
        for name, params in SIGNATURE.findall(expanded):
            found[name] = (" ".join(params.split()), _parse_params(params))
    return found


def build_library(sources: list[Path] | None = None, defines: dict | None = None, cache_dir: Path | None = None):
    """(ctypes library, {kernel: signature}) for kernel files (those of kernels/ by default), with
    -D defines, cached by the hash of everything that goes into it."""
    sources = sorted(kernels_dir().glob("*.cu")) if sources is None else [Path(p) for p in sources]
    # Kernel files elsewhere (dev/, tests/) include the shared headers of kernels/ by name.
    flags = [f"-D{name}={value}" for name, value in (defines or {}).items()] + [f"-I{kernels_dir()}"]
    digest = hashlib.sha256(HEADER.read_bytes() + Path(__file__).read_bytes() + " ".join(flags).encode())
    headers = sorted({h for path in sources for h in path.parent.glob("*.cuh")})  # what the sources #include
    for path in [*sources, *headers]:
        digest.update(str(path).encode() + path.read_bytes())
    cache_dir = Path(cache_dir or tempfile.gettempdir()) / "inr-emulation"
    cache_dir.mkdir(parents=True, exist_ok=True)
    library = cache_dir / f"kernels-{digest.hexdigest()[:16]}.so"
    kernels = _kernels(sources, flags)
    if not library.exists():
        lines = [f'#include "{HEADER}"'] + [f'#include "{path}"' for path in sources]
        lines.append('extern "C" void emu_set_dynamic_shared(unsigned long long bytes) '
                     '{ emu::dynamic_shared_bytes = bytes; }')
        for name, (decl, params) in kernels.items():
            call = ", ".join(n for _, n in params)
            lines.append(
                f'extern "C" const char* emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, '
                f"unsigned bz, {decl}) {{ return emu::result(emu::launch(dim3(gx, gy, gz), dim3(bx, by, bz), "
                f"[&] {{ {name}({call}); }})); }}"
            )
        # pytest-xdist workers may build it at once: each its own source and library, renamed into place
        source = cache_dir / f"{library.stem}.{os.getpid()}.cpp"
        source.write_text("\n".join(lines) + "\n")
        tmp = library.with_suffix(f".{os.getpid()}.tmp.so")
        subprocess.run(["g++", "-std=c++20", "-O1", "-fno-strict-aliasing", "-shared", "-fPIC", "-pthread", "-w",
                        *flags, "-o", str(tmp), str(source)], check=True, capture_output=True, text=True)
        tmp.replace(library)
    return ctypes.CDLL(str(library)), kernels


class EmulationError(RuntimeError):
    """A launch the emulation stopped: its threads can never pass a barrier, or a warp collective
    was used as the hardware does not allow (the message says which threads and where)."""


class EmulatedModule:
    """Kernel files compiled for the CPU, their kernels launched by name: the emulation's RawModule."""

    def __init__(self, sources: list[Path] | None = None, defines: dict | None = None):
        self.library, self.kernels = build_library(sources, defines)
        for name, (_, params) in self.kernels.items():
            function = getattr(self.library, f"emu_{name}")
            function.argtypes = [ctypes.c_uint] * 6 + [
                ctypes.c_void_p if t == "pointer" else CTYPES[t] for t, _ in params
            ]
            function.restype = ctypes.c_char_p
        self.library.emu_set_dynamic_shared.argtypes = [ctypes.c_ulonglong]

    def launch(self, name: str, grid, block, args, shared: int = 0) -> None:
        """shared: the bytes of dynamic shared memory each block gets (`extern __shared__`)."""
        converted = []
        for arg in args:
            if isinstance(arg, np.ndarray):  # a view's first element: the caller checked its layout
                converted.append(ctypes.c_void_p(arg.ctypes.data))
            else:
                converted.append(arg.item() if isinstance(arg, np.generic) else arg)
        self.library.emu_set_dynamic_shared(shared)
        error = getattr(self.library, f"emu_{name}")(*grid, *block, *converted)
        if error:
            raise EmulationError(f"{name}: {error.decode()}")


class EmulatedBackend(HostMemory, KernelBackend):
    """KernelBackend over NumPy arrays whose kernels run as C++ on the CPU."""

    name = "emulated"

    def __init__(self, sm_count: int = 4, defines: dict | None = None, precision: str = "fp32", fused: bool = True):
        super().__init__(precision, fused)
        self.sm_count = sm_count  # small, so that split-K and two-pass reductions happen on small shapes
        self.module = EmulatedModule(defines=defines)
        self.launched: list[str] = []

    def launch(self, name: str, grid, block, args, shared: int = 0) -> None:
        self.launched.append(name)
        self.module.launch(name, grid, block, args, shared)
