"""The reference backend: every operation one whole-array NumPy expression, float32 throughout.

Its operations are the functions of numpy_ops.py, which specify the kernels of the same names; the
CPU engine (cpu_backend.py) is its sibling, not its subclass, so that the engine's blocked
operations are held to these, not to themselves.
"""

from __future__ import annotations

from inr_cli.backends import numpy_ops as ops
from inr_cli.backends.host_memory import HostMemory
from inr_cli.backends.numpy_ops import batch_indices  # noqa: F401 (where the tests and kernels look for it)
from inr_cli.core.batch_pass import WholeBatchPass


class NumpyBackend(HostMemory):
    name = "numpy"

    def __init__(self, precision: str = "fp32"):
        """precision "tf32": every product as --precision tf32 runs it on the GPU (numpy_ops.matmul)."""
        self.precision = precision

    def training_pass(self, spec, params, grads, networks: int, batch: int):
        return WholeBatchPass(self, spec, params, grads, networks, batch)

    # The operations, one function each (a staticmethod is the function itself, called on an instance);
    # the products with the backend's precision.
    fill = staticmethod(ops.fill)
    column_reduce = staticmethod(ops.column_reduce)
    bias_activation = staticmethod(ops.bias_activation)
    activation_backward = staticmethod(ops.activation_backward)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        ops.matmul(a, b, out, trans_a, trans_b, self.precision)

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        ops.linear_forward(x, weight, bias, z, a, activation, omega0, self.precision)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        ops.linear_backward_input(grad, weight, z_prev, a_prev, out, activation_prev, omega0, self.precision)

    def linear_backward_weights(self, grad, layer_input, weight_grad, bias_grad) -> None:
        ops.linear_backward_weights(grad, layer_input, weight_grad, bias_grad, self.precision)
    fourier_features = staticmethod(ops.fourier_features)
    hashgrid_encode = staticmethod(ops.hashgrid_encode)
    hashgrid_backward = staticmethod(ops.hashgrid_backward)
    mse_loss = staticmethod(ops.mse_loss)
    sample_batch = staticmethod(ops.sample_batch)
    advance_schedule = staticmethod(ops.advance_schedule)
    adam_update = staticmethod(ops.adam_update)
    sgd_update = staticmethod(ops.sgd_update)
