"""Backends: the small set of array operations the network needs.

The NumPy backend is the reference; the CUDA backend runs the same operations as our own kernels.
`get_backend` picks one from the user's --device choice.
"""

from __future__ import annotations

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.config import DEVICES
from inr_cli.errors import InrError


def get_backend(device: str = "auto", matmul: str = "kernel", notices: list | None = None):
    if device not in DEVICES:
        raise InrError(f"unknown device '{device}' (choose auto, cpu or gpu)")
    if device == "cpu":
        return NumpyBackend()
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is None:
        from inr_cli.backends.cuda_backend import CudaBackend

        return CudaBackend(matmul=matmul)
    if device == "gpu":
        raise InrError(f"--device gpu: {reason}")
    if notices is not None:
        notices.append(f"no usable GPU ({reason}); using the CPU")
    return NumpyBackend()
