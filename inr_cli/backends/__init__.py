"""Backends: the small set of array operations the network needs (backend.py says which).

The NumPy backend is the reference, the CPU engine runs it fast on the cores, and the CUDA backend
runs the same operations as our own kernels. `make_backend` picks one from the user's --device.
"""

from __future__ import annotations

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.config import DEVICES
from inr_cli.core.backend import Backend
from inr_cli.errors import InrError, UsageError

__all__ = ["Backend", "get_backend", "kernel_options", "make_backend"]


def get_backend(device: str = "auto", matmul: str = "kernel", notices: list | None = None, *,
                precision: str = "fp32", fused: bool = True) -> Backend:
    """The backend for --device: the GPU's when asked for or when `auto` finds a usable one, else
    the CPU engine. Why a GPU could not be used goes into `notices` (when one seemed meant to be
    used: CuPy installed but not working); with --device gpu it is an error. matmul, precision and
    fused say how the GPU runs a training (training.matmul, training.precision,
    training.fused_network); the CPU runs FP32 layer by layer."""
    if device not in DEVICES:
        raise InrError(f"unknown device '{device}' (choose auto, cpu or gpu)")
    if device == "cpu":
        return _on_the_cpu(precision)
    from inr_cli.backends.gpu_probe import cupy_installed, gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is None:
        from inr_cli.backends.cuda_backend import CudaBackend

        return CudaBackend(matmul=matmul, precision=precision, fused=fused)
    if device == "gpu":
        require_gpu(reason)
    if notices is not None and cupy_installed():
        notices.append(f"no usable GPU ({reason}); using the CPU")
    return _on_the_cpu(precision)


def require_gpu(reason: str | None = None) -> None:
    """--device gpu: refused at once where no GPU can be used, naming what is missing (a command
    asks before it says what it will do); `reason`: gpu_unavailable_reason's, where already probed."""
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason

    reason = reason or gpu_unavailable_reason()
    if reason is not None:
        raise InrError(f"--device gpu: {reason}")


def _on_the_cpu(precision: str) -> Backend:
    """The CPU engine, which multiplies in FP32: a training asked to run in TF32 there would record
    a precision it never used (and a resume in FP32 would then be refused), so it is refused."""
    if precision != "fp32":
        raise UsageError(f"--precision {precision} (training.precision) runs on a GPU's tensor cores; this training "
                         f"runs on the CPU, in FP32: leave it out, or train on a GPU")
    return CpuBackend()


def kernel_options(training) -> dict:
    """How a configuration's training section asks the GPU to run its kernels (get_backend's keywords
    after the device)."""
    return {"matmul": training.matmul, "precision": training.precision, "fused": training.fused_network}


def make_backend(device: str = "auto", matmul: str = "kernel", quiet: bool = False, **options) -> Backend:
    """get_backend, its notices said on stderr (none when quiet)."""
    from inr_cli.console import notice

    notices: list[str] = []
    backend = get_backend(device, matmul, notices, **options)
    for message in notices if not quiet else ():
        notice(message)
    return backend
