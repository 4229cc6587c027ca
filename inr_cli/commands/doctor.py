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
from inr_cli.console import error, info
from inr_cli.resources import configs_dir, kernels_dir

NAME = "doctor"
HELP = ("Report Python, NumPy, CuPy, CUDA (driver, runtime, nvcc), the GPU and whether our kernels compile "
        "(without a GPU: with --compile).")
NEEDS_ARGS = False


def command(as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
            compile_kernels: bool = typer.Option(False, "--compile", help="Without a usable GPU: compile the "
                                                 "kernels with nvcc all the same, to check them (half a minute "
                                                 "or more).")) -> None:
    report = {"inr": __version__, "python": platform.python_version(), "numpy": np.__version__,
              "kernels": str(kernels_dir()), "configs": str(configs_dir()), "nvcc": _nvcc()}
    reason = gpu_unavailable_reason()
    if reason is not None:
        report["gpu"] = None
        report["gpu_unavailable"] = f"{reason} (training runs on the CPU)"
        if compile_kernels:
            report.update(_nvcc_check(reason))
        else:  # no GPU here can run them, and nvcc takes half a minute or more on them
            report["kernel_check"] = ("skipped: no usable GPU to run the kernels; inr doctor --compile checks that "
                                      "they compile, with nvcc")
    else:
        report.update(_gpu())
        report["kernel_check"] = "compiled with CuPy (NVRTC) for this GPU"
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print(report, reason)
    # Scripts ask doctor whether this machine can run our kernels: one that does not compile is a no.
    failed = [name for name, status in report.get("kernel_files", {}).items() if status != "ok"]
    if failed:
        error(f"kernels that do not compile: {', '.join(failed)} (in {report['kernels']})")
        raise typer.Exit(1)
    if report["kernel_check"].startswith("failed"):
        error(report["kernel_check"])
        raise typer.Exit(1)


def _print(report: dict, reason: str | None) -> None:
    for key in ("inr", "python", "numpy", "cupy", "cuda_driver", "cuda_runtime", "nvcc", "gpu", "gpu_memory_gib",
                "kernel_cache", "kernels", "configs"):
        if key in report and (report[key] is not None or key == "nvcc"):
            typer.echo(f"{key:13s} {report[key] if report[key] is not None else 'not found'}")
    if reason is not None:
        typer.echo(f"{'gpu':13s} unavailable: {report['gpu_unavailable']}")
    typer.echo(f"{'kernel check':13s} {report['kernel_check']}")
    for name, status in report.get("kernel_files", {}).items():
        typer.echo(f"{'kernel':13s} {name}: {status}")


NVCC_ARCH = "sm_80"  # the floor of the GPUs we target (tests/test_kernels_compile.py)


def _nvcc_check(reason: str) -> dict:
    """Without a usable GPU, the kernels are still compiled to PTX by nvcc when it is on PATH: each
    file ok or FAILED with the compiler's first error line; else the check is skipped, saying why."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return {"kernel_check": f"skipped: no usable GPU ({reason}) and nvcc is not on PATH"}
    import os
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    sources = sorted(kernels_dir().glob("*.cu"))
    if not sources:
        return {"kernel_check": f"failed: no kernel files (*.cu) in {kernels_dir()}"}
    info(f"compiling {len(sources)} kernel files with nvcc -ptx (half a minute or more)")

    def compile_one(path: Path, folder: str) -> str:
        try:
            result = _compile_ptx(nvcc, path, Path(folder))
        except (OSError, subprocess.SubprocessError) as exc:
            return f"FAILED: {exc}"
        if result.returncode == 0:
            return "ok"
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line] or lines or [f"exit code {result.returncode}"]
        return f"FAILED: {errors[0].strip()}"

    with tempfile.TemporaryDirectory(prefix="inr-doctor-") as folder:
        with ThreadPoolExecutor(max(1, min(len(sources), os.cpu_count() or 1))) as pool:
            statuses = list(pool.map(lambda p: compile_one(p, folder), sources))
    return {"kernel_check": f"compiled to PTX with nvcc -arch={NVCC_ARCH} (no usable GPU)",
            "kernel_files": {p.name: s for p, s in zip(sources, statuses)}}


def _compile_ptx(nvcc: str, path: Path, folder: Path) -> subprocess.CompletedProcess:
    """nvcc -ptx of one kernel file for NVCC_ARCH, into folder."""
    return subprocess.run([nvcc, "-ptx", f"-arch={NVCC_ARCH}", "-std=c++17", "-I", str(path.parent),
                           "-o", str(folder / f"{path.stem}.ptx"), str(path)], capture_output=True, text=True,
                          timeout=600)


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
