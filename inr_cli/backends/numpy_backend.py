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

    def training_pass(self, spec, params, grads, networks: int, batch: int):
        return WholeBatchPass(self, spec, params, grads, networks, batch)

    # The operations, one function each (a staticmethod is the function itself, called on an instance).
    fill = staticmethod(ops.fill)
    matmul = staticmethod(ops.matmul)
    column_reduce = staticmethod(ops.column_reduce)
    bias_activation = staticmethod(ops.bias_activation)
    activation_backward = staticmethod(ops.activation_backward)
    linear_forward = staticmethod(ops.linear_forward)
    linear_backward_input = staticmethod(ops.linear_backward_input)
    linear_backward_weights = staticmethod(ops.linear_backward_weights)
    fourier_features = staticmethod(ops.fourier_features)
    hashgrid_encode = staticmethod(ops.hashgrid_encode)
    hashgrid_backward = staticmethod(ops.hashgrid_backward)
    mse_loss = staticmethod(ops.mse_loss)
    sample_batch = staticmethod(ops.sample_batch)
    advance_schedule = staticmethod(ops.advance_schedule)
    adam_update = staticmethod(ops.adam_update)
    sgd_update = staticmethod(ops.sgd_update)
