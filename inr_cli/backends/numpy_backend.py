"""The reference backend: every operation in plain NumPy, float32 throughout.

Each method is the specification of the kernel with the same name in kernels/; the CUDA backend
must agree with it to float32 tolerance, and tests hold it to finite differences and closed forms.
Every operation covers N networks at once: operands are stacks [N, rows, cols] (a stack of one
is shared by all N), and each network's result is the bits it would get alone.

This file is written to be read: one whole-array expression per operation. The CPU engine that
`inr` runs on (cpu_backend.py) carries out the same operations on cache-sized blocks spread over
threads, built on the functions here.
"""

from __future__ import annotations

import math

import numpy as np

from inr_cli.core.network import ACTIVATIONS
from inr_cli.core.schedule import step_hyperparameters



def batch_indices(seed: int, step: int, batch: int, n: int) -> np.ndarray:
    """Pixel indices of mini-batch `step`: a counter-based hash (splitmix64), so any step's batch is
    a pure function of (seed, step), identical on every backend and after a resume."""
    with np.errstate(over="ignore"):
        counter = np.uint64(step) * np.uint64(batch) + np.arange(1, batch + 1, dtype=np.uint64)
        x = np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15) * counter
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(n)).astype(np.int64)


def check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation}")


def activate(z, out, activation: str, omega0: float) -> None:
    """out = act(z); out may be z."""
    if activation == "linear":
        if out is not z:
            out[...] = z
    elif activation == "sigmoid":
        np.negative(z, out=out)
        with np.errstate(over="ignore"):  # exp(-z) -> inf gives sigmoid 0, as it should
            np.exp(out, out=out)
        out += 1.0
        np.reciprocal(out, out=out)
    elif activation == "sine":
        np.multiply(z, np.float32(omega0), out=out)
        np.sin(out, out=out)
    elif activation == "relu":
        np.maximum(z, 0.0, out=out)


def derivative_times(grad, z, a, activation: str, omega0: float, factor) -> None:
    """grad *= act'(z), given a = act(z); factor: an array of grad's shape for the factor's values."""
    if activation == "sigmoid":
        np.subtract(np.float32(1.0), a, out=factor)
        factor *= a
        grad *= factor
    elif activation == "sine":
        np.multiply(z, np.float32(omega0), out=factor)
        np.cos(factor, out=factor)
        factor *= np.float32(omega0)
        grad *= factor
    elif activation == "relu":
        grad *= z > 0


_blas = {}


def blas_controller():
    """threadpoolctl's view of the BLAS libraries loaded in this process, made once."""
    if "controller" not in _blas:
        from threadpoolctl import ThreadpoolController

        _blas["controller"] = ThreadpoolController()
    return _blas["controller"]


def one_thread_blas():
    """A context in which the BLAS uses one thread. Every product runs in one: a multi-threaded
    OpenBLAS splits long sums (a weight gradient's, over the batch) between its threads, so its bits
    would depend on the machine's core count; with one, a network's bits depend on its inputs alone."""
    return blas_controller().limit(limits=1, user_api="blas")


class HostMemory:
    """Arrays in host memory: the NumPy backends', and the CPU emulation of the kernels' in tests."""

    def empty(self, shape, dtype=np.float32):
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype=dtype)

    def to_device(self, array):
        return np.array(array, copy=True)

    def copy_from_host(self, out, array) -> None:
        out[...] = array

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def synchronize(self) -> None:
        pass

    def memory_budget(self) -> int:
        """Bytes a pack of networks may take: a fixed share of host memory."""
        return 2 << 30


class NumpyBackend(HostMemory):
    name = "numpy"

    def training_pass(self, spec, params, grads, networks: int, batch: int):
        from inr_cli.core.batch_pass import WholeBatchPass

        return WholeBatchPass(self, spec, params, grads, networks, batch)

    def compile_step(self, step):
        """The CUDA backend captures the step as a graph; on the CPU there is nothing to gain."""
        return step

    # --- operations (one per kernel) -------------------------------------------------------------
    def fill(self, out, value: float) -> None:
        out.fill(value)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        """out[i] = op(a[i]) @ op(b[i]) for every network i, op transposing when asked; row-major float32."""
        with one_thread_blas():
            np.matmul(a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b, out=out)

    def column_reduce(self, x, out) -> None:
        """out[i, j] = sum over rows of x[i, :, j]."""
        np.sum(x, axis=1, out=out)

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        """z += bias (in place, per network and column); out = act(z). out may be z itself."""
        check_activation(activation)
        z += bias[:, None]
        activate(z, out, activation, omega0)

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        """grad <- grad * act'(z), in place; a = act(z) from the forward pass."""
        check_activation(activation)
        derivative_times(grad, z, a, activation, omega0, np.empty_like(grad))

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        """One layer: z = x @ weight.T + bias, a = act(z) (a may be z); x may be one table [1, rows, in]
        shared by every network. Here and in the kernels the bias and the activation follow the
        product while its output is still at hand (in registers on the GPU)."""
        check_activation(activation)
        with one_thread_blas():
            np.matmul(x, weight.swapaxes(1, 2), out=z)
        self.bias_activation(z, bias, a, activation, omega0)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        """The previous layer's dL/dz: out = (grad @ weight) * act_prev'(z_prev)."""
        check_activation(activation_prev)
        self.matmul(grad, weight, out)
        self.activation_backward(out, z_prev, a_prev, activation_prev, omega0)

    def linear_backward_weights(self, grad, layer_input, weight_grad, bias_grad) -> None:
        """A layer's parameter gradients: weight_grad = gradᵀ @ layer_input, bias_grad = the column sums
        of grad, per network; layer_input may be one table [1, rows, in] shared by every network."""
        self.matmul(grad, layer_input, weight_grad, trans_a=True)
        self.column_reduce(grad, bias_grad)

    def fourier_features(self, projection, out) -> None:
        """out = [cos(2 pi p), sin(2 pi p)] for projection p [N, rows, m]; out is [N, rows, 2m]."""
        m = projection.shape[-1]
        angle = (2.0 * math.pi) * projection  # a Python float keeps the array dtype (NEP 50)
        np.cos(angle, out=out[..., :m])
        np.sin(angle, out=out[..., m:])

    def mse_loss(self, pred, target, grad, loss, count: int | None = None) -> None:
        """Per network i: grad[i] = d(mean squared error)/d(pred[i]); loss[i] = its mean squared error.
        count: the elements per network the mean is over, when pred is one block of a larger batch
        (loss[i] is then that block's share of the mean)."""
        n = pred.shape[0]
        scale = np.float32(1.0 / (count or pred.size // n))
        np.subtract(pred, target, out=grad)
        loss[:] = np.sum((grad * grad).reshape(n, -1), axis=1) * scale
        grad *= np.float32(2.0) * scale

    def sample_batch(self, coords, targets, batch_coords, batch_targets, seeds, step_counter) -> None:
        """Network i's mini-batch: the pixels batch_indices(seeds[i], step) of coords [1, n, in] and targets[i]."""
        step, batch, n_pixels = int(step_counter[0]), batch_coords.shape[1], coords.shape[1]
        for i, seed in enumerate(seeds):
            idx = batch_indices(int(seed), step, batch, n_pixels)
            np.take(coords[0], idx, axis=0, out=batch_coords[i])
            np.take(targets[i], idx, axis=0, out=batch_targets[i])

    def advance_schedule(self, step_counter, hyper, lr_max, lr_min, total, beta1, beta2) -> None:
        """hyper = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)] for update t = step + 1; then step += 1."""
        step = int(step_counter[0])
        hyper[:] = step_hyperparameters(step, total, lr_max, lr_min, beta1, beta2)
        step_counter[0] = step + 1

    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        """Adam as PyTorch writes it: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), elementwise over [N, P]."""
        m *= np.float32(beta1)
        m += np.float32(1.0 - beta1) * grads
        v *= np.float32(beta2)
        v += np.float32(1.0 - beta2) * grads * grads
        denom = np.sqrt(v) / hyper[2] + np.float32(eps)
        params -= hyper[1] * m / denom

    def sgd_update(self, params, grads, momentum_buf, hyper, momentum) -> None:
        """SGD with momentum as PyTorch writes it: buf = mu * buf + g; p -= lr * buf."""
        momentum_buf *= np.float32(momentum)
        momentum_buf += grads
        params -= hyper[0] * momentum_buf
