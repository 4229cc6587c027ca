"""Every backend operation as whole-array NumPy, float32 throughout: the specification of the kernels.

One function per operation, named after its kernel in kernels/ and with the signature backend.py
states (less `self`); the reference backend (numpy_backend.NumpyBackend) is these functions, and the
CPU engine (cpu_backend.CpuBackend) runs the elementwise ones in blocks and the others as they are.
The CUDA backend must agree with them to float32 tolerance, and tests hold them to finite
differences and closed forms. Every operation covers N networks at once: operands are stacks
[N, rows, cols] (a stack of one is shared by all N), and each network's result is the bits it would
get alone.

This file is written to be read: one whole-array expression per operation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from inr_cli.backends.launch import CONSTANTS
from inr_cli.core.coords import pixel_coords
from inr_cli.core.encodings import HASH_PRIME, LEVEL_HASHED, LEVEL_OFFSET, LEVEL_RESOLUTION, LEVEL_SIZE
from inr_cli.core.models import ACTIVATIONS
from inr_cli.core.pixels import as_floats
from inr_cli.core.schedule import step_hyperparameters

FP32_MAX_K = CONSTANTS["FP32_MAX_K"]  # the kernels' (kernels/constants.cuh)


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


def round_to_tf32(x) -> np.ndarray:
    """x as the tensor cores read it with --precision tf32: a float32 copy rounded as the kernels'
    to_tf32 rounds (kernels/tensor_core.cuh), to the top 10 of its 23 mantissa bits, to nearest with
    ties away from zero. Adding half a TF32 unit to the bits carries into the exponent where it must;
    infinities keep their bits; a NaN is quieted (its quiet bit set) before its low bits go, so it
    stays a NaN, never an infinity."""
    bits = np.array(x, dtype=np.float32, order="C").view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    bits += np.where(finite, np.uint32(0x1000), np.uint32(0))
    bits |= np.where(~finite & ((bits & np.uint32(0x007FFFFF)) != 0), np.uint32(0x00400000), np.uint32(0))
    bits &= np.uint32(0xFFFFE000)
    return bits.view(np.float32)


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


# --- the operations (backend.py says what each does) -----------------------------------------------
def fill(out, value: float) -> None:
    out.fill(value)


def tf32_rounds(precision: str, k: int) -> bool:
    """Whether a product over k terms rounds its operands to TF32: under --precision tf32, all but
    those over the coordinates alone (k <= FP32_MAX_K: a first layer on (u, v), the Fourier
    projection), which TF32 would move (kernels/constants.cuh says why)."""
    return precision == "tf32" and k > FP32_MAX_K


def matmul(a, b, out, trans_a: bool = False, trans_b: bool = False, precision: str = "fp32") -> None:
    """precision "tf32": both operands rounded to TF32 first (tf32_rounds), then multiplied and
    summed in FP32, as the tensor cores do with --precision tf32 (the products of TF32 values are
    exact in FP32)."""
    a, b = a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b
    if tf32_rounds(precision, a.shape[2]):
        a, b = round_to_tf32(a), round_to_tf32(b)
    with one_thread_blas():
        np.matmul(a, b, out=out)


def column_reduce(x, out) -> None:
    np.sum(x, axis=1, out=out)


def bias_activation(z, bias, out, activation: str, omega0: float = 1.0) -> None:
    check_activation(activation)
    z += bias[:, None]
    activate(z, out, activation, omega0)


def activation_backward(grad, z, a, activation: str, omega0: float = 1.0) -> None:
    check_activation(activation)
    derivative_times(grad, z, a, activation, omega0, np.empty_like(grad))


def linear_forward(x, weight, bias, z, a, activation: str, omega0: float = 1.0, precision: str = "fp32") -> None:
    check_activation(activation)
    matmul(x, weight, z, trans_b=True, precision=precision)
    bias_activation(z, bias, a, activation, omega0)


def linear_backward_input(grad, weight, z_prev, a_prev, out, activation_prev: str, omega0: float = 1.0,
                          precision: str = "fp32") -> None:
    check_activation(activation_prev)
    matmul(grad, weight, out, precision=precision)
    activation_backward(out, z_prev, a_prev, activation_prev, omega0)


def linear_backward_weights(grad, layer_input, weight_grad, bias_grad, precision: str = "fp32") -> None:
    matmul(grad, layer_input, weight_grad, trans_a=True, precision=precision)
    column_reduce(grad, bias_grad)


def fourier_features(projection, out) -> None:
    m = projection.shape[-1]
    angle = (2.0 * math.pi) * projection  # a Python float keeps the array dtype (NEP 50)
    np.cos(angle, out=out[..., :m])
    np.sin(angle, out=out[..., m:])


class HashGridCorners(NamedTuple):
    """Each level's corners of a batch of points, kept by the forward pass for the backward on the same
    points (Backend.hashgrid_corner_buffers): entries [L, N, 4, batch] int32 and weights [L, N, 4,
    batch] float32, a network's corners of a level one packed [4, batch] block."""

    entries: np.ndarray
    weights: np.ndarray

    @classmethod
    def empty(cls, levels: int, networks: int, batch: int) -> "HashGridCorners":
        shape = (levels, networks, 4, batch)
        return cls(np.empty(shape, np.int32), np.empty(shape, np.float32))

    def level(self, index: int, networks: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Level `index`'s corners of the first `rows` points of `networks` tables of points (N, or 1
        shared), [4, networks, rows] as hashgrid_corners gives them (views)."""
        return tuple(kept[index, :networks, :, :rows].swapaxes(0, 1) for kept in self)


def hashgrid_corners(x, level, entries=None, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Where points x [..., 2] read one level of the hash grid (a row of HashGrid.level_table): the
    entries of their cells' four corners [4, ...] (within the level) and the corners' bilinear weights
    [4, ...], corners in the order (i, j), (i+1, j), (i, j+1), (i+1, j+1). Written into entries and
    weights where given (an integer and a float array of that shape), else into new int64 and x.dtype
    arrays."""
    resolution, size = int(level[LEVEL_RESOLUTION]), int(level[LEVEL_SIZE])
    one = x.dtype.type(1)
    # (u + 1) * N/2: the point on the level's grid of N cells, clamped to it; its cell and the point's
    # place in it (a point on the far edge lies in the last cell).
    position = np.clip((x + one) * x.dtype.type(resolution / 2), 0, resolution)
    cell = np.minimum(np.floor(position), resolution - 1)
    fraction = position - cell
    if weights is None:
        weights = np.empty((4, *x.shape[:-1]), dtype=x.dtype)
    if entries is None:
        entries = np.empty((4, *x.shape[:-1]), dtype=np.int64)
    cell = cell.astype(entries.dtype)
    i, j = cell[..., 0], cell[..., 1]
    fx, fy = fraction[..., 0], fraction[..., 1]
    gx, gy = one - fx, one - fy
    np.multiply(gx, gy, out=weights[0])
    np.multiply(fx, gy, out=weights[1])
    np.multiply(gx, fy, out=weights[2])
    np.multiply(fx, fy, out=weights[3])
    if level[LEVEL_HASHED]:  # (a XOR b * prime) mod size, in uint32 arithmetic as the kernels compute it
        a = i.astype(np.uint32)
        b = j.astype(np.uint32) * np.uint32(HASH_PRIME)
        b_next = b + np.uint32(HASH_PRIME)  # (j + 1) * prime, wrapping as the product does
        for corner, (column, row) in enumerate(((a, b), (a + np.uint32(1), b), (a, b_next),
                                                (a + np.uint32(1), b_next))):
            # "unsafe": uint32 into the entries' integer type, every value being below size
            np.remainder(column ^ row, np.uint32(size), out=entries[corner], casting="unsafe")
    else:  # a + b (N + 1)
        np.multiply(j, resolution + 1, out=entries[0])
        entries[0] += i
        np.add(entries[0], 1, out=entries[1])
        np.add(entries[0], resolution + 1, out=entries[2])
        np.add(entries[2], 1, out=entries[3])
    return entries, weights


def hashgrid_encode(x, tables, out, levels, corners=None) -> None:
    for index in range(len(levels)):
        hashgrid_encode_level(x, tables, out, levels, index, corners)


def fresh(shape, dtype, use: str = "") -> np.ndarray:
    """A new temporary array (`use`: what it is for, which the CPU engine's reused ones are keyed by)."""
    return np.empty(shape, dtype)


def hashgrid_encode_level(x, tables, out, levels, index: int, corners: HashGridCorners | None = None,
                          temporary=fresh) -> None:
    """hashgrid_encode's columns of level `index` (levels are independent: the CPU engine runs them on
    threads); its corners kept in `corners` where given. temporary(shape, dtype, use) makes its
    temporary arrays (the CPU engine's reuses them from call to call)."""
    n, rows, features = out.shape[0], out.shape[1], out.shape[2] // len(levels)
    offset, size = int(levels[index][LEVEL_OFFSET]), int(levels[index][LEVEL_SIZE])
    per_network = tables.reshape(n, -1, features)  # [N, entries, F] (a view: each network's row is packed)
    kept = () if corners is None else corners.level(index, len(x), rows)
    entries, weights = hashgrid_corners(x, levels[index], *kept)  # [4, N or 1, rows]
    gathered = temporary((4, rows, features), out.dtype, "gathered")
    for i in range(n):
        own = i if len(x) > 1 else 0
        # mode "clip": the entries lie within the level by construction, and "raise" would copy through a buffer
        np.take(per_network[i, offset:offset + size], entries[:, own], axis=0, out=gathered, mode="clip")
        gathered *= weights[:, own, :, None]
        gathered[0] += gathered[1]
        gathered[2] += gathered[3]
        np.add(gathered[0], gathered[2], out=out[i, :, index * features:(index + 1) * features])


def hashgrid_backward(x, grad, table_grads, levels, corners=None) -> None:
    for index in range(len(levels)):
        hashgrid_backward_level(x, grad, table_grads, levels, index, corners)


def hashgrid_backward_level(x, grad, table_grads, levels, index: int, corners: HashGridCorners | None = None,
                            temporary=fresh) -> None:
    """hashgrid_backward's part of level `index`: its entries of table_grads, from the corners kept in
    `corners` where given (else found again). temporary: as hashgrid_encode_level's."""
    n, rows, features = grad.shape[0], grad.shape[1], grad.shape[2] // len(levels)
    offset, size = int(levels[index][LEVEL_OFFSET]), int(levels[index][LEVEL_SIZE])
    level_grads = table_grads.reshape(n, -1, features)[:, offset:offset + size]  # [N, size, F]
    entries, weights = hashgrid_corners(x, levels[index]) if corners is None else corners.level(index, len(x), rows)
    level_grad = temporary((rows, features), grad.dtype, "level_grad")
    shares = temporary((4, rows), table_grads.dtype, "shares")  # as level_grad's shape where rows = features = 4
    level_grads[...] = 0
    for i in range(n):
        own = i if len(x) > 1 else 0
        corner_entries = entries[:, own].reshape(-1)  # a view where the corners were kept
        np.copyto(level_grad, grad[i, :, index * features:(index + 1) * features])  # packed: read once
        for f in range(features):
            # Each corner's share w * g added into its entry in the order of the points, in the table's
            # precision, as the kernels' atomicAdd does in the order the points come: a scatter whose
            # repeated entries add up (fancy-index assignment would keep only the last).
            np.multiply(weights[:, own], level_grad[:, f], out=shares)
            np.add.at(level_grads[i, :, f], corner_entries, shares.reshape(-1))


def mse_loss(pred, target, grad, loss, count: int | None = None) -> None:
    n = pred.shape[0]
    scale = np.float32(1.0 / (count or pred.size // n))
    np.subtract(pred, target, out=grad)
    loss[:] = np.sum((grad * grad).reshape(n, -1), axis=1) * scale
    grad *= np.float32(2.0) * scale


def sample_batch(targets, width, batch_coords, batch_targets, seeds, step_counter) -> None:
    step, batch, n_pixels = int(step_counter[0]), batch_coords.shape[1], targets.shape[1]
    for i, seed in enumerate(seeds):
        idx = batch_indices(int(seed), step, batch, n_pixels)
        batch_coords[i] = pixel_coords(idx, width, n_pixels // width)
        batch_targets[i] = as_floats(np.take(targets[i], idx, axis=0))


def advance_schedule(step_counter, hyper, lr_max, lr_min, total, warmup, beta1, beta2) -> None:
    step = int(step_counter[0])
    hyper[:] = step_hyperparameters(step, total, lr_max, lr_min, warmup, beta1, beta2)
    step_counter[0] = step + 1


def adam_update(params, grads, m, v, hyper, beta1, beta2, eps) -> None:
    m *= np.float32(beta1)
    m += np.float32(1.0 - beta1) * grads
    v *= np.float32(beta2)
    v += np.float32(1.0 - beta2) * grads * grads
    denom = np.sqrt(v) / hyper[2] + np.float32(eps)
    params -= hyper[1] * m / denom


def sgd_update(params, grads, momentum_buf, hyper, momentum) -> None:
    momentum_buf *= np.float32(momentum)
    momentum_buf += grads
    params -= hyper[0] * momentum_buf
