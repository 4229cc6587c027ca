from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import typer

from inr_cli import __version__
from inr_cli.backends.gpu_probe import gpu_unavailable_reason
from inr_cli.resources import configs_dir, kernels_dir

NAME = "doctor"
HELP = "Report Python, NumPy, CuPy, CUDA (driver, runtime, nvcc), the GPU and whether our kernels compile."
NEEDS_ARGS = False


def command(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    report = {"inr": __version__, "python": platform.python_version(), "numpy": np.__version__,
              "kernels": str(kernels_dir()), "configs": str(configs_dir()), "nvcc": _nvcc()}
    reason = gpu_unavailable_reason()
    if reason is not None:
        report["gpu"] = None
        report["gpu_unavailable"] = f"{reason} (training runs on the CPU)"
    else:
        report.update(_gpu())
    if as_json:
        typer.echo(json.dumps(report))
        return
    for key in ("inr", "python", "numpy", "cupy", "cuda_driver", "cuda_runtime", "nvcc", "gpu", "gpu_memory_gib",
                "kernel_cache", "kernels", "configs"):
        if key in report and (report[key] is not None or key == "nvcc"):
            typer.echo(f"{key:13s} {report[key] if report[key] is not None else 'not found'}")
    if reason is not None:
        typer.echo(f"{'gpu':13s} unavailable: {report['gpu_unavailable']}")
    for name, status in report.get("kernel_files", {}).items():
        typer.echo(f"{'kernel':13s} {name}: {status}")


def _nvcc() -> str | None:
    path = shutil.which("nvcc")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    release = [line for line in out.splitlines() if "release" in line]
    return f"{path} ({release[-1].strip()})" if release else path


def _version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def _gpu() -> dict:
    import cupy

    from inr_cli.backends.cuda_backend import compile_all_kernels

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    free, total = runtime.memGetInfo()
    try:
        from cupy.cuda import compiler

        cache = compiler.get_cache_dir()
    except Exception:  # an older CuPy: the default place
        cache = str(Path.home() / ".cupy" / "kernel_cache")
    return {"cupy": cupy.__version__, "cuda_driver": _version(runtime.driverGetVersion()),
            "cuda_runtime": _version(runtime.runtimeGetVersion()),
            "gpu": f"{props['name'].decode()} (compute {props['major']}.{props['minor']})",
            "gpu_memory_gib": f"{total / 2**30:.1f} total, {free / 2**30:.1f} free", "kernel_cache": cache,
            "kernel_files": dict(compile_all_kernels())}
