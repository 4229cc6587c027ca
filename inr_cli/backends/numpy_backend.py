"""The reference backend: every operation in plain NumPy, float32 throughout.

Each method is the specification of the kernel with the same name in kernels/; the CUDA backend
must agree with it to float32 tolerance, and tests hold it to finite differences and closed forms.
"""

from __future__ import annotations

import math

import numpy as np

ACTIVATIONS = ("linear", "sigmoid", "sine", "relu")


def cosine_lr(step: int, total: int, lr_max: float, lr_min: float) -> float:
    """Learning rate for the update with 0-based index `step` of `total`: lr_max at 0, lr_min at the end."""
    progress = min(step, total) / max(total, 1)
    return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + math.cos(math.pi * progress))


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


class HostMemory:
    """Arrays in host memory: the NumPy backend's, and the CPU emulation of the kernels' in tests."""

    xp = np

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


class NumpyBackend(HostMemory):
    name = "cpu"

    # --- operations (one per kernel) -------------------------------------------------------------
    def fill(self, out, value: float) -> None:
        out.fill(value)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        """out = op(a) @ op(b), op transposing when asked; row-major float32."""
        np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)

    def column_reduce(self, x, out) -> None:
        """out[j] = sum over rows of x[:, j]."""
        np.sum(x, axis=0, out=out)

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        """z += bias (in place, per column); out = act(z). out may be z itself."""
        z += bias
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
        else:
            raise ValueError(f"unknown activation {activation}")

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        """grad <- grad * act'(z), in place; a = act(z) from the forward pass."""
        if activation == "linear":
            return
        if activation == "sigmoid":
            grad *= a * (1.0 - a)
        elif activation == "sine":
            grad *= np.float32(omega0) * np.cos(np.float32(omega0) * z)
        elif activation == "relu":
            grad *= z > 0
        else:
            raise ValueError(f"unknown activation {activation}")

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        """One layer: z = x @ weight.T + bias, a = act(z) (a may be z). The kernels fuse the bias
        and activation into the matmul's epilogue."""
        self.matmul(x, weight, z, trans_b=True)
        self.bias_activation(z, bias, a, activation, omega0)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        """The previous layer's dL/dz: out = (grad @ weight) * act_prev'(z_prev), fused on the GPU."""
        self.matmul(grad, weight, out)
        self.activation_backward(out, z_prev, a_prev, activation_prev, omega0)

    def fourier_features(self, projection, out) -> None:
        """out = [cos(2 pi p), sin(2 pi p)] for projection p (rows, m); out is (rows, 2m)."""
        m = projection.shape[1]
        angle = (2.0 * math.pi) * projection  # a Python float keeps the array dtype (NEP 50)
        np.cos(angle, out=out[:, :m])
        np.sin(angle, out=out[:, m:])

    def mse_loss(self, pred, target, grad, loss) -> None:
        """grad = d(mean squared error)/d(pred); loss[0] = the mean squared error."""
        scale = np.float32(1.0 / pred.size)
        np.subtract(pred, target, out=grad)
        loss[0] = np.sum(grad * grad) * scale
        grad *= np.float32(2.0) * scale

    def sample_batch(self, coords, targets, batch_coords, batch_targets, seed: int, step_counter) -> None:
        idx = batch_indices(seed, int(step_counter[0]), batch_coords.shape[0], coords.shape[0])
        np.take(coords, idx, axis=0, out=batch_coords)
        np.take(targets, idx, axis=0, out=batch_targets)

    def advance_schedule(self, step_counter, hyper, lr_max, lr_min, total, beta1, beta2) -> None:
        """hyper = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)] for update t = step + 1; then step += 1."""
        step = int(step_counter[0])
        lr = cosine_lr(step, total, lr_max, lr_min)
        t = step + 1
        hyper[0] = lr
        hyper[1] = lr / (1.0 - beta1**t)
        hyper[2] = math.sqrt(1.0 - beta2**t)
        step_counter[0] = t

    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        """Adam as PyTorch writes it: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)."""
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

    def compile_step(self, step):
        """The CUDA backend captures the step as a graph; on the CPU there is nothing to gain."""
        return step
