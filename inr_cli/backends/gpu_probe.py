"""Find out, without failing, whether CuPy and a CUDA GPU can be used."""

from __future__ import annotations


def gpu_unavailable_reason() -> str | None:
    """None when a GPU is usable, else a short reason naming what is missing."""
    try:
        import cupy
    except ImportError:
        from inr_cli.extras import install_hint

        return f"CuPy is not installed ({install_hint('gpu')})"
    except Exception as exc:  # a broken CuPy install raises all sorts
        return f"CuPy failed to import ({exc.__class__.__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CUDA is not usable ({exc.__class__.__name__}: {str(exc).splitlines()[0]})"
    if count == 0:
        return "no CUDA device found"
    return None


def cupy_installed() -> bool:
    """Whether CuPy is there at all: without it, the CPU is the user's choice, not a failure."""
    import importlib.util

    return importlib.util.find_spec("cupy") is not None
