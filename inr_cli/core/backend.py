"""What a backend is: the memory and the operations that the network's passes and the trainer need.

Every engine inherits Backend and implements all of it, or cannot be instantiated:
numpy_backend.NumpyBackend (the reference, each operation one whole-array expression of
numpy_ops.py), cpu_backend.CpuBackend (the CPU engine: the same operations on cache-sized blocks
over threads), kernel_backend.KernelBackend (our kernels: cuda_backend.CudaBackend on a GPU, and the
test suite's emulation on the CPU). Each operation's signature and meaning are stated here once;
tests/test_backend_interface.py holds every engine to them.

Operands are stacks [N, rows, cols], one per network (a stack of one is shared by all N), and each
network's result is the bits it would get alone. The kernel with an operation's name in kernels/
implements it on the GPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np


class Backend(ABC):
    name: ClassVar[str]  # what --device and the messages call it
    in_host_memory: ClassVar[bool] = False  # its arrays are the host's (a copy of one costs host memory)

    # --- memory: arrays on the backend's device --------------------------------------------------
    @abstractmethod
    def empty(self, shape, dtype=np.float32):
        """An uninitialised array of the shape."""

    @abstractmethod
    def zeros(self, shape, dtype=np.float32):
        """An array of zeros of the shape."""

    @abstractmethod
    def to_device(self, array):
        """A copy of a host array on the device."""

    def constant(self, array):
        """A host array the backend's operations only read (the training pixels): on a device, a copy
        there; in host memory, the array itself, so that a large image is not held twice."""
        return self.to_device(array)

    @abstractmethod
    def copy_from_host(self, out, array) -> None:
        """out[...] = array, a host array, in the order of the backend's other operations."""

    @abstractmethod
    def to_host(self, array):
        """The array as a host NumPy array; waits for the operations before it."""

    @abstractmethod
    def copy(self, out, array) -> None:
        """out[...] = array, both on the device, in the order of the backend's other operations (a
        checkpoint's snapshot of the step, taken without the host)."""

    @abstractmethod
    def host_reader(self):
        """A function array -> host NumPy array for another thread (the background writer): it gives
        each device array handed to it once every operation launched before this call has finished,
        without joining the order of the operations launched after it (the loop's next steps, a CUDA
        graph captured meanwhile). For arrays that those later operations do not write."""

    @abstractmethod
    def broadcast(self, array, networks: int):
        """A read-only view of a stack of one [1, ...] as `networks` of it [networks, ...], its stride
        between networks 0: one base network's weights seen by the operations as every network's."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until every operation launched so far has finished."""

    @abstractmethod
    def memory_budget(self) -> int:
        """Bytes that one pack of networks in training may take."""

    # --- a training step -------------------------------------------------------------------------
    @abstractmethod
    def training_pass(self, spec, params, grads, networks: int, batch: int):
        """A callable (x, t, loss): forward, loss and backward of `networks` networks over a batch,
        writing each network's gradients into grads and its loss into loss (core/batch_pass.py)."""

    def compile_step(self, step):
        """The step as this backend runs it fastest (the GPU: a captured CUDA graph); elsewhere the
        step itself, there being nothing to gain."""
        return step

    # --- operations (one per kernel) -------------------------------------------------------------
    @abstractmethod
    def fill(self, out, value: float) -> None:
        """out[...] = value."""

    @abstractmethod
    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        """out[i] = op(a[i]) @ op(b[i]) for every network i, op transposing when asked; row-major float32."""

    @abstractmethod
    def column_reduce(self, x, out) -> None:
        """out[i, j] = sum over rows of x[i, :, j]."""

    @abstractmethod
    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        """z += bias (in place, per network and column); out = act(z). out may be z itself.
        activation: one of network.ACTIVATIONS; omega0 scales a sine's argument."""

    @abstractmethod
    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        """grad <- grad * act'(z), in place; a = act(z) from the forward pass."""

    @abstractmethod
    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        """One layer: z = x @ weight.T + bias, a = act(z) (a may be z); x may be one table [1, rows, in]
        shared by every network. The bias and the activation follow the product while its output is
        still at hand (in registers on the GPU)."""

    @abstractmethod
    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        """The previous layer's dL/dz: out = (grad @ weight) * act_prev'(z_prev)."""

    @abstractmethod
    def linear_backward_weights(self, grad, layer_input, weight_grad, bias_grad) -> None:
        """A layer's parameter gradients: weight_grad = gradᵀ @ layer_input, bias_grad = the column sums
        of grad, per network; layer_input may be one table [1, rows, in] shared by every network."""

    @abstractmethod
    def fourier_features(self, projection, out) -> None:
        """out = [cos(2 pi p), sin(2 pi p)] for projection p [N, rows, m]; out is [N, rows, 2m]."""

    def hashgrid_corner_buffers(self, levels: int, networks: int, batch: int):
        """Where hashgrid_encode keeps the corners it found (each level's entries and interpolation
        weights) for hashgrid_backward on the same points: made once with a training workspace of
        `networks` x `batch` points and handed to both as `corners`; or None (here): the backward
        finds them again (on the GPU, cheaper than storing and reading them)."""
        return None

    @abstractmethod
    def hashgrid_encode(self, x, tables, out, levels, corners=None) -> None:
        """The hash grid's encoding (encodings.HashGrid) of points x [N or 1, rows, 2]: out [N, rows, L * F]
        from network i's tables [N, entries * F]; levels: HashGrid.level_table [L, 4], a host int64 array.
        corners: what hashgrid_corner_buffers made, to keep the corners in, or None."""

    @abstractmethod
    def hashgrid_backward(self, x, grad, table_grads, levels, corners=None) -> None:
        """table_grads [N, entries * F] = the gradient of the tables, from grad [N, rows, L * F] =
        dL/d(hashgrid_encode's out) on the same points: each point's gradient scattered onto its
        cells' corners with their interpolation weights, summed over the points (overwrites).
        corners: what hashgrid_encode kept there for these points, or None."""

    @abstractmethod
    def mse_loss(self, pred, target, grad, loss, count: int | None = None) -> None:
        """Per network i: grad[i] = d(mean squared error)/d(pred[i]); loss[i] = its mean squared error.
        count: the elements per network the mean is over, when pred is one block of a larger batch
        (loss[i] is then that block's share of the mean)."""

    @abstractmethod
    def sample_batch(self, targets, width: int, batch_coords, batch_targets, seeds, step_counter) -> None:
        """Network i's mini-batch: the pixels numpy_ops.batch_indices(seeds[i], step) of an image
        `width` pixels wide, step being step_counter[0] (an int64 array of one, on the device).
        batch_coords [N, batch, 2] gets their coordinates (coords.pixel_coords) and batch_targets
        [N, batch, C] float32 their colours from targets [N, n, C], uint8 (read as v / 255) or float32."""

    @abstractmethod
    def advance_schedule(self, step_counter, hyper, lr_max, lr_min, total, warmup, beta1, beta2) -> None:
        """hyper = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)] for update t = step + 1, lr on the
        warm-up and cosine of core/schedule.py; then step += 1. Both live on the device, so a step's launches
        never change."""

    @abstractmethod
    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        """Adam as PyTorch writes it: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), elementwise over
        [N, P], the learning rate and bias corrections read from hyper."""

    @abstractmethod
    def sgd_update(self, params, grads, momentum_buf, hyper, momentum) -> None:
        """SGD with momentum as PyTorch writes it: buf = mu * buf + g; p -= lr * buf, lr = hyper[0]."""
