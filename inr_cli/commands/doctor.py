from __future__ import annotations

import typer

from inr_cli.backends.gpu_probe import gpu_unavailable_reason
from inr_cli.resources import configs_dir, kernels_dir

NAME = "doctor"
HELP = "Report CuPy, CUDA, the GPU and whether our kernels compile."
NEEDS_ARGS = False


def command() -> None:
    typer.echo(f"kernels   {kernels_dir()}")
    typer.echo(f"configs   {configs_dir()}")
    reason = gpu_unavailable_reason()
    if reason is not None:
        typer.echo(f"gpu       unavailable: {reason} (training runs on the CPU)")
        return
    import cupy

    from inr_cli.backends.cuda_backend import compile_all_kernels

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    typer.echo(f"cupy      {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    typer.echo(f"gpu       {props['name'].decode()} ({props['totalGlobalMem'] / 2**30:.1f} GiB, "
               f"compute {props['major']}.{props['minor']})")
    for name, status in compile_all_kernels():
        typer.echo(f"kernel    {name}: {status}")
