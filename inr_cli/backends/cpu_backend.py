"""The CPU engine: the reference's operations (numpy_ops.py) carried out on cache-sized blocks spread
over a thread per core. This is what `inr` runs on without a GPU. It is the reference backend's
sibling: both inherit host memory (host_memory.py), and the operations it does not block (the
optimizer's, the loss, sampling, the encoding) are the reference's functions themselves.

NumPy's elementwise functions use one core, and each makes a full pass over memory with a temporary
for every intermediate. So the operations below run on blocks of rows small enough to stay in
cache, spread over the threads (NumPy releases the GIL inside a ufunc and the BLAS call); a layer's
product and its activation run on one block in turn, with the BLAS held to one thread inside each
worker. The blocks depend on the operation's shape alone, never on the threads, so the threads change
no bit. Elementwise, every element sees the operations of the reference's whole-array expression in
the same order: the same bits. A product over a block of rows may differ from the whole array's in
the last bit (the BLAS may add a dot product's terms in another order for another shape of operand),
so a layer's output is the reference's within rounding.

A training step goes further (training_pass -> BlockedPass): the whole forward and backward pass
runs on blocks, one block per thread at a time, so that a block's activations never leave the
cache: groups of networks (which changes no bit) and, for batches of 2 * STEP_BLOCK_ROWS rows or
more, blocks of STEP_BLOCK_ROWS rows whose gradients are added in order. That changes the order of
the sums over the batch (not the result beyond rounding) and depends on the batch size alone, never
on the number of threads or networks. BENCHMARKS.md has the measurements behind the block sizes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from inr_cli.backends import numpy_ops as ops
from inr_cli.backends.host_memory import HostMemory
from inr_cli.backends.numpy_ops import activate, blas_controller, check_activation, derivative_times
from inr_cli.core.batch_pass import WholeBatchPass, forward_loss_backward
from inr_cli.core.encodings import create_encoding
from inr_cli.core.network import Network, layer_views
from inr_cli.core.workspace import Workspace

# Smaller blocks lose more to the GIL between ufunc calls than they gain from cache.
BLOCK_ELEMENTS = 1 << 18
PARALLEL_MIN_ELEMENTS = 1 << 18  # below this, handing work to threads costs more than it saves
LAYER_BLOCK_ELEMENTS = 1 << 19  # a layer's output rows per block (product, then activation, in cache)
STEP_BLOCK_ROWS = 2048  # rows of a training step's blocks: 1 MiB per activation at width 128
_pools: dict[int, ThreadPoolExecutor] = {}


class _OneThreadBlas:
    """The reference's one_thread_blas, reentrant: the limit is the process's, so only the outermost
    context sets it, and the inner ones (every product of a step in blocks) do not each pay
    threadpoolctl's call."""

    depth = 0
    lock = threading.Lock()
    limit = None

    def __enter__(self):
        with self.lock:
            if _OneThreadBlas.depth == 0:
                _OneThreadBlas.limit = blas_controller().limit(limits=1, user_api="blas")
            _OneThreadBlas.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            _OneThreadBlas.depth -= 1
            if _OneThreadBlas.depth == 0:
                _OneThreadBlas.limit.restore_original_limits()
                _OneThreadBlas.limit = None


_thread_scratch = threading.local()


def _scratch(shape, dtype, use: str = "") -> np.ndarray:
    """An array for the calling thread's temporary values, reused: fresh temporaries per block are
    cold memory at every call. `use` tells apart two temporaries of one call that may share a shape."""
    arrays = _thread_scratch.__dict__.setdefault("arrays", {})
    key = (use, shape, np.dtype(dtype))
    if key not in arrays:
        arrays[key] = np.empty(shape, dtype=dtype)
    return arrays[key]


def _derivative_times(grad, z, a, activation: str, omega0: float) -> None:
    derivative_times(grad, z, a, activation, omega0, _scratch(grad.shape, grad.dtype))


def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count for the process: backends come and go, threads stay."""
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="inr-cpu")
    return _pools[threads]


class CpuBackend(HostMemory):
    name = "cpu"

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads or os.cpu_count() or 1)

    def _in_blocks(self, function, shape, block_elements: int = BLOCK_ELEMENTS, products: bool = False) -> None:
        """function(networks, row_start, row_stop) over cache-sized blocks of an [N, rows, cols]
        operation (networks: a slice of the stack), the blocks shared out between the threads in
        contiguous runs: several whole networks per block where one network's rows fit, else blocks
        of one network's rows: fewer, larger calls, each of which takes the GIL back. The blocks
        depend on the shape alone; products: the function calls the BLAS."""
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
        with _OneThreadBlas() if products else contextlib.nullcontext():
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
    def training_pass(self, spec, params, grads, networks: int, batch: int):
        if create_encoding(spec).trainable:
            # Blocks of rows would each need a gradient of the whole table.
            return WholeBatchPass(self, spec, params, grads, networks, batch)
        widest = max(max(out_f, in_f) for out_f, in_f in spec.layer_shapes())
        groups, row_blocks = self.step_blocks(networks, batch, widest)
        if len(groups) == 1 and len(row_blocks) == 1:
            return WholeBatchPass(self, spec, params, grads, networks, batch)
        return BlockedPass(self, spec, params, grads, groups, row_blocks)

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
        single = type(self)(threads=1)
        self._run(lambda i: function(i, single), [(i,) for i in range(count)], PARALLEL_MIN_ELEMENTS, products=True)

    # --- the reference's operations as they are: small, or one pass over memory -------------------
    fill = staticmethod(ops.fill)
    fourier_features = staticmethod(ops.fourier_features)
    mse_loss = staticmethod(ops.mse_loss)
    sample_batch = staticmethod(ops.sample_batch)
    advance_schedule = staticmethod(ops.advance_schedule)

    # --- the optimizer's update, in blocks of the flat parameters ----------------------------------
    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        """The reference's update on blocks of the flat [N, P] arrays: its temporaries a block's, not
        three copies of a large table's; elementwise, so the same bits."""
        self._flat_blocks(lambda p, g, a, b: ops.adam_update(p, g, a, b, hyper, beta1, beta2, eps), params, grads, m, v)

    def sgd_update(self, params, grads, momentum_buf, hyper, momentum) -> None:
        self._flat_blocks(lambda p, g, b: ops.sgd_update(p, g, b, hyper, momentum), params, grads, momentum_buf)

    def _flat_blocks(self, function, *arrays) -> None:
        """function(*blocks) over BLOCK_ELEMENTS-long blocks of the arrays' flat views, over the threads."""
        flats = [array.reshape(-1) for array in arrays]
        size = flats[0].size
        self._run(lambda start: function(*(flat[start:start + BLOCK_ELEMENTS] for flat in flats)),
                  [(start,) for start in range(0, size, BLOCK_ELEMENTS)], size)

    # --- the reference's operations, in blocks ---------------------------------------------------
    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        with _OneThreadBlas():
            np.matmul(a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b, out=out)

    def column_reduce(self, x, out) -> None:
        """One thread: a slice of columns per thread ran slower (short strided rows), and the sum is
        memory-bound anyway. einsum adds the rows in the order np.sum does (the same bits: test),
        faster; with one column np.sum switches to a pairwise sum, and einsum to another."""
        if x.shape[2] >= 2:
            np.einsum("nrc->nc", x, out=out)
        else:
            np.sum(x, axis=1, out=out)

    def linear_backward_weights(self, grad, layer_input, weight_grad, bias_grad) -> None:
        """As the reference composes it, from this engine's matmul and column_reduce."""
        self.matmul(grad, layer_input, weight_grad, trans_a=True)
        self.column_reduce(grad, bias_grad)

    def hashgrid_corner_buffers(self, levels: int, networks: int, batch: int) -> ops.HashGridCorners:
        """The forward's corners kept for the backward: finding them again took as long as the scatter."""
        return ops.HashGridCorners.empty(levels, networks, batch)

    def hashgrid_encode(self, x, tables, out, levels, corners=None) -> None:
        """The reference's levels, one per task, over the threads (each writes its own columns and
        corners)."""
        self._run(lambda index: ops.hashgrid_encode_level(x, tables, out, levels, index, corners, _scratch),
                  [(index,) for index in range(len(levels))], out.size)

    def hashgrid_backward(self, x, grad, table_grads, levels, corners=None) -> None:
        """The reference's levels, one per task, over the threads (each writes its own entries, in the
        order of the points: the same bits on any number of threads)."""
        self._run(lambda index: ops.hashgrid_backward_level(x, grad, table_grads, levels, index, corners, _scratch),
                  [(index,) for index in range(len(levels))], grad.size)

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        check_activation(activation)
        in_place = out is z

        def block(nets, r0, r1):
            zb = z[nets, r0:r1]
            zb += bias[nets, None]
            activate(zb, zb if in_place else out[nets, r0:r1], activation, omega0)

        self._in_blocks(block, z.shape)

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        check_activation(activation)
        if activation == "linear":
            return
        self._in_blocks(lambda nets, r0, r1: _derivative_times(grad[nets, r0:r1], z[nets, r0:r1], a[nets, r0:r1],
                                                               activation, omega0), grad.shape)

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        check_activation(activation)
        in_place, shared = a is z, x.shape[0] == 1

        def block(nets, r0, r1):
            zb = z[nets, r0:r1]
            np.matmul(x[:, r0:r1] if shared else x[nets, r0:r1], weight[nets].swapaxes(1, 2), out=zb)
            zb += bias[nets, None]
            activate(zb, zb if in_place else a[nets, r0:r1], activation, omega0)

        self._in_blocks(block, z.shape, LAYER_BLOCK_ELEMENTS, products=True)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        check_activation(activation_prev)

        def block(nets, r0, r1):
            ob = out[nets, r0:r1]
            np.matmul(grad[nets, r0:r1], weight[nets], out=ob)
            if activation_prev != "linear":
                _derivative_times(ob, z_prev[nets, r0:r1], a_prev[nets, r0:r1], activation_prev, omega0)

        self._in_blocks(block, out.shape, LAYER_BLOCK_ELEMENTS, products=True)


class BlockedPass:
    """A training step's forward, loss and backward on blocks (a group of networks, a block of rows),
    one block per thread at a time; then each network's gradients and loss added over its row
    blocks in order."""

    def __init__(self, backend: CpuBackend, spec, params, grads, groups: list, row_blocks: list):
        self.backend, self.spec, self.groups, self.row_blocks = backend, spec, groups, row_blocks
        self.grads = grads
        self.batch = row_blocks[-1][1]
        self.blocks = [(g, r) for r in range(len(row_blocks)) for g in range(len(groups))]
        # One workspace per thread and block shape, not per block: a thread's blocks then reuse
        # memory that is still in its core's cache.
        shared, self.workspaces = {}, []
        for (g, r), slot in zip(self.blocks, backend.block_slots(len(self.blocks)), strict=True):
            key = (slot, groups[g][1] - groups[g][0], row_blocks[r][1] - row_blocks[r][0])
            if key not in shared:
                shared[key] = Workspace(spec, key[1], key[2], backend, training=True)
            self.workspaces.append(shared[key])
        self.networks = [Network(spec, params[start:stop]) for start, stop in groups]
        self.block_grads = backend.empty((len(row_blocks), *params.shape))
        backend.fill(self.block_grads, 0.0)  # the frozen frequencies' part is never written
        self.block_losses = backend.empty((len(row_blocks), params.shape[0]))

    def __call__(self, x, t, loss) -> None:
        count = self.batch * self.spec.out_features  # the loss is the mean over the whole batch
        shared = x.shape[0] == 1

        def block(i, backend):
            g, r = self.blocks[i]
            (n0, n1), (start, stop) = self.groups[g], self.row_blocks[r]
            xb = x[:, start:stop] if shared else x[n0:n1, start:stop]
            forward_loss_backward(backend, self.networks[g], self.workspaces[i], xb, t[n0:n1, start:stop],
                                  stop - start, layer_views(self.spec, self.block_grads[r, n0:n1]),
                                  self.block_losses[r, n0:n1], count)

        self.backend.run_blocks(block, len(self.blocks))
        blocks = len(self.row_blocks)
        self.backend.column_reduce(self.block_grads.reshape(blocks, -1)[None], self.grads.reshape(1, -1))
        self.backend.column_reduce(self.block_losses[None], loss[None])
