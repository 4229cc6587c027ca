"""The reference backend: every operation in plain NumPy, float32 throughout.

Each method is the specification of the kernel with the same name in kernels/; the CUDA backend
must agree with it to float32 tolerance, and tests hold it to finite differences and closed forms.
Every operation covers N networks at once: operands are stacks [N, rows, cols] (a stack of one
is shared by all N), and each network's result is the bits it would get alone.

Speed on the CPU: NumPy's elementwise functions use one core, and each makes a full pass over
memory with a temporary for every intermediate. So the operations below run on blocks of rows small
enough to stay in cache, spread over a thread per core (NumPy releases the GIL inside a ufunc and
the BLAS call); a layer's product and its activation run on one block in turn, with the BLAS held to
one thread inside each worker. Every element sees the same operations in the same order as in one
whole-array expression, so blocks and threads change no bit.

A training step goes further (step_blocks, run_blocks): the trainer runs the whole forward and
backward pass on blocks, one block per thread at a time, so that a block's activations never leave
the cache: groups of networks (which changes no bit) and, for batches of 2 * STEP_BLOCK_ROWS rows or
more, blocks of STEP_BLOCK_ROWS rows whose gradients are added in order. That changes the order of
the sums over the batch (not the result beyond rounding) and depends on the batch size alone, never
on the number of threads or networks.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

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


ACTIVATIONS = ("linear", "sigmoid", "sine", "relu")


def _activate(z, out, activation: str, omega0: float) -> None:
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


def _derivative_times(grad, z, a, activation: str, omega0: float) -> None:
    """grad *= act'(z), given a = act(z). The factor goes through a kept scratch array of the
    thread's: three fresh temporaries per block cost 7% of the sine's derivative (measured)."""
    if activation == "sigmoid":
        factor = _scratch(grad.shape, grad.dtype)
        np.subtract(np.float32(1.0), a, out=factor)
        factor *= a
        grad *= factor
    elif activation == "sine":
        factor = _scratch(grad.shape, grad.dtype)
        np.multiply(z, np.float32(omega0), out=factor)
        np.cos(factor, out=factor)
        factor *= np.float32(omega0)
        grad *= factor
    elif activation == "relu":
        grad *= z > 0


_thread_scratch = threading.local()


def _scratch(shape, dtype) -> np.ndarray:
    """An array for the calling thread's temporary values, reused."""
    arrays = _thread_scratch.__dict__.setdefault("arrays", {})
    key = (shape, np.dtype(dtype))
    if key not in arrays:
        arrays[key] = np.empty(shape, dtype=dtype)
    return arrays[key]


class HostMemory:
    """Arrays in host memory: the NumPy backend's, and the CPU emulation of the kernels' in tests."""

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


# Measured on a 2-core Xeon (SIREN layer of 16384 x 128): blocks of 2^12-2^14 elements lose more to
# the GIL between ufunc calls than they gain from cache; 2^18 (1 MiB) ran 1.8x faster on 2 threads
# than one whole-array pass.
BLOCK_ELEMENTS = 1 << 18
PARALLEL_MIN_ELEMENTS = 1 << 18  # below this, handing work to threads costs more than it saves
LAYER_BLOCK_ELEMENTS = 1 << 19  # a layer's output rows per block (product, then activation, in cache)
STEP_BLOCK_ROWS = 2048  # rows of a training step's blocks: 1 MiB per activation at width 128
_pools: dict[int, ThreadPoolExecutor] = {}
_blas = {}


def one_thread_blas():
    """A context in which the BLAS uses one thread. Every product of this backend runs in one: a
    multi-threaded OpenBLAS splits long sums (a weight gradient's, over the batch) between its
    threads, so its bits would depend on the machine's core count; our own threads work on blocks
    instead, and a network's bits depend on nothing but its inputs. The limit is the process's, so
    only the outermost context sets it: the inner ones (every product of a step in blocks) would
    each pay threadpoolctl's 7 us for nothing (a 64-wide step on 2 threads: 60.3 -> 53.6 ms)."""
    return _OneThreadBlas()


class _OneThreadBlas:
    depth = 0
    lock = threading.Lock()
    limit = None

    def __enter__(self):
        with self.lock:
            if _OneThreadBlas.depth == 0:
                if "controller" not in _blas:
                    from threadpoolctl import ThreadpoolController

                    _blas["controller"] = ThreadpoolController()
                _OneThreadBlas.limit = _blas["controller"].limit(limits=1, user_api="blas")
            _OneThreadBlas.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            _OneThreadBlas.depth -= 1
            if _OneThreadBlas.depth == 0:
                _OneThreadBlas.limit.restore_original_limits()
                _OneThreadBlas.limit = None


def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count for the process: backends come and go, threads stay."""
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="inr-cpu")
    return _pools[threads]


class NumpyBackend(HostMemory):
    name = "cpu"

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads or os.cpu_count() or 1)

    def _in_blocks(self, function, shape, block_elements: int = BLOCK_ELEMENTS, products: bool = False) -> None:
        """function(networks, row_start, row_stop) over cache-sized blocks of an [N, rows, cols]
        operation (networks: a slice of the stack), the blocks shared out between the threads in
        contiguous runs: several whole networks per block where one network's rows fit, else blocks
        of one network's rows: fewer, larger calls, each of which takes the GIL back (a 64-wide step
        of 16 networks on 2 threads: 53.1 -> 51.3 ms). The blocks depend on the shape alone;
        products: the function calls the BLAS."""
        networks, rows, cols = shape
        step = max(1, block_elements // max(cols, 1))
        if rows <= step:
            per_block = max(1, step // max(rows, 1))
            blocks = [(slice(n, min(networks, n + per_block)), 0, rows) for n in range(0, networks, per_block)]
        else:
            blocks = [(slice(n, n + 1), r, min(rows, r + step)) for n in range(networks) for r in range(0, rows, step)]
        self._run(function, blocks, networks * rows * cols, products)

    def _run(self, function, blocks: list, elements: int, products: bool = False) -> None:
        """products: the function calls the BLAS, which then runs on one thread (see one_thread_blas)."""
        with one_thread_blas() if products else contextlib.nullcontext():
            if self.threads == 1 or elements < PARALLEL_MIN_ELEMENTS or len(blocks) == 1:
                for block in blocks:
                    function(*block)
                return
            errors = np.geterr()  # a worker thread starts from NumPy's defaults, not the caller's

            def run(share):
                with np.errstate(**errors):
                    for block in share:
                        function(*block)

            shares = [blocks[start:stop] for start, stop in self._shares(len(blocks))]
            for future in [_pool(self.threads).submit(run, share) for share in shares if share]:
                future.result()

    def _shares(self, count: int) -> list[tuple[int, int]]:
        """Contiguous runs of `count` blocks, one per thread: [start, stop) of each."""
        return [(i * count // self.threads, (i + 1) * count // self.threads) for i in range(self.threads)]

    # --- a training step in blocks ---------------------------------------------------------------
    def step_blocks(self, networks: int, rows: int, width: int) -> tuple[list, list]:
        """The groups of networks and the blocks of rows a training step runs on (see the top): rows
        split by the batch size alone; networks grouped so that a block's widest activation is about
        STEP_BLOCK_ROWS x 128 floats (the grouping changes no bit)."""
        if rows < 2 * STEP_BLOCK_ROWS:
            row_blocks = [(0, rows)]
        else:
            row_blocks = [(r, min(rows, r + STEP_BLOCK_ROWS)) for r in range(0, rows, STEP_BLOCK_ROWS)]
        block_rows = row_blocks[0][1] - row_blocks[0][0]
        per_group = max(1, (STEP_BLOCK_ROWS * 128) // max(1, block_rows * width))
        groups = [(n, min(networks, n + per_group)) for n in range(0, networks, per_group)]
        return groups, row_blocks

    def block_slots(self, count: int) -> list[int]:
        """The thread (0 .. threads - 1) that run_blocks gives each of `count` blocks: blocks of one
        slot never run at once, so they can share one workspace, which then stays in the core's
        cache from block to block (a workspace per block is cold memory at every step)."""
        return [slot for slot, (start, stop) in enumerate(self._shares(count)) for _ in range(start, stop)]

    def run_blocks(self, function, count: int) -> None:
        """function(i, backend) for i < count, spread over the threads as block_slots says; each call
        gets a one-thread backend (its operations must not hand work to the same threads) and a
        one-thread BLAS."""
        single = NumpyBackend(threads=1)
        self._run(lambda i: function(i, single), [(i,) for i in range(count)], PARALLEL_MIN_ELEMENTS, products=True)

    # --- operations (one per kernel) -------------------------------------------------------------
    def fill(self, out, value: float) -> None:
        out.fill(value)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        """out[i] = op(a[i]) @ op(b[i]) for every network i, op transposing when asked; row-major float32."""
        with one_thread_blas():
            np.matmul(a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b, out=out)

    def column_reduce(self, x, out) -> None:
        """out[i, j] = sum over rows of x[i, :, j], row after row. One thread: a slice of columns per
        thread ran 3x slower (short strided rows), and the sum is memory-bound anyway. einsum adds
        the rows in the order np.sum does (the same bits: test), 3x faster on [2048, 64] (35 us
        against 112); with one column np.sum switches to a pairwise sum, and einsum to another."""
        if x.shape[2] >= 2:
            np.einsum("nrc->nc", x, out=out)
        else:
            np.sum(x, axis=1, out=out)

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        """z += bias (in place, per network and column); out = act(z). out may be z itself."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation}")

        in_place = out is z

        def block(nets, r0, r1):
            zb = z[nets, r0:r1]
            zb += bias[nets, None]
            _activate(zb, zb if in_place else out[nets, r0:r1], activation, omega0)

        self._in_blocks(block, z.shape)

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        """grad <- grad * act'(z), in place; a = act(z) from the forward pass."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation}")
        if activation == "linear":
            return
        self._in_blocks(lambda nets, r0, r1: _derivative_times(grad[nets, r0:r1], z[nets, r0:r1], a[nets, r0:r1],
                                                               activation, omega0), grad.shape)

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        """One layer: z = x @ weight.T + bias, a = act(z) (a may be z); x may be one table [1, rows, in]
        shared by every network. Here and in the kernels the bias and the activation follow the
        product while its output is still at hand (in cache here, in registers on the GPU)."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation}")
        in_place, shared = a is z, x.shape[0] == 1

        def block(nets, r0, r1):
            zb = z[nets, r0:r1]
            np.matmul(x[:, r0:r1] if shared else x[nets, r0:r1], weight[nets].swapaxes(1, 2), out=zb)
            zb += bias[nets, None]
            _activate(zb, zb if in_place else a[nets, r0:r1], activation, omega0)

        self._in_blocks(block, z.shape, LAYER_BLOCK_ELEMENTS, products=True)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        """The previous layer's dL/dz: out = (grad @ weight) * act_prev'(z_prev), block by block."""
        if activation_prev not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation_prev}")

        def block(nets, r0, r1):
            ob = out[nets, r0:r1]
            np.matmul(grad[nets, r0:r1], weight[nets], out=ob)
            if activation_prev != "linear":
                _derivative_times(ob, z_prev[nets, r0:r1], a_prev[nets, r0:r1], activation_prev, omega0)

        self._in_blocks(block, out.shape, LAYER_BLOCK_ELEMENTS, products=True)

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

    def compile_step(self, step):
        """The CUDA backend captures the step as a graph; on the CPU there is nothing to gain."""
        return step
