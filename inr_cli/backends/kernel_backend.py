"""The operations of NumpyBackend, carried out by launching the kernels in kernels/.

A subclass supplies memory (`empty`, `to_device`, ...) and `launch(name, grid, block, args)`: the
CUDA backend launches through CuPy; the test-suite's emulation runs the same kernel source,
compiled as C++, on the CPU. Scratch buffers (split-K partials, reduction partials) are allocated
the first time a shape needs them and reused after, so a training step allocates nothing once it
has run once.
"""

from __future__ import annotations

import numpy as np

from inr_cli.backends.launch import (
    ACTIVATION_CODES,
    LOSS_MAX_BLOCKS,
    elementwise_grid,
    plan_column_reduce,
    plan_matmul,
)

i32, i64, f32, f64 = np.int32, np.int64, np.float32, np.float64


class KernelBackend:
    sm_count = 1

    def __init__(self):
        self._scratch: dict[str, object] = {}

    # --- subclass interface ----------------------------------------------------------------------
    def launch(self, name: str, grid, block, args) -> None:
        raise NotImplementedError

    def empty(self, shape, dtype=np.float32):
        raise NotImplementedError

    def scratch(self, key: str, n: int):
        """A reusable flat float32 buffer of at least n elements (grown, never shrunk)."""
        buffer = self._scratch.get(key)
        if buffer is None or buffer.size < n:
            buffer = self.empty((n,))
            self._scratch[key] = buffer
        return buffer[:n]

    # --- operations ----------------------------------------------------------------------------
    def fill(self, out, value: float) -> None:
        grid, block = elementwise_grid(out.size)
        self.launch("fill", grid, block, (out, f32(value), i64(out.size)))

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        m, n = out.shape
        k = a.shape[0] if trans_a else a.shape[1]
        plan = plan_matmul(m, n, k, trans_a, trans_b, self.sm_count)
        if plan.splits == 1:
            self.launch(plan.kernel, plan.grid, plan.block, (a, b, out, i32(m), i32(n), i32(k), i32(plan.k_per_split)))
            return
        partial = self.scratch("matmul_split_k", plan.splits * m * n)
        self.launch(plan.kernel, plan.grid, plan.block, (a, b, partial, i32(m), i32(n), i32(k), i32(plan.k_per_split)))
        self.column_reduce(partial.reshape(plan.splits, m * n), out.reshape(m * n))

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        m, n, k = x.shape[0], weight.shape[0], x.shape[1]
        plan = plan_matmul(m, n, k, False, True, self.sm_count, fused="linear_forward")
        self.launch(plan.kernel, plan.grid, plan.block, (x, weight, bias, z, a, i32(m), i32(n), i32(k),
                                                         i32(ACTIVATION_CODES[activation]), f32(omega0)))

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        m, n, k = grad.shape[0], weight.shape[1], grad.shape[1]
        plan = plan_matmul(m, n, k, False, False, self.sm_count, fused="linear_backward_input")
        self.launch(plan.kernel, plan.grid, plan.block, (grad, weight, z_prev, a_prev, out, i32(m), i32(n), i32(k),
                                                         i32(ACTIVATION_CODES[activation_prev]), f32(omega0)))

    def column_reduce(self, x, out) -> None:
        rows, cols = x.shape
        plan = plan_column_reduce(rows, cols)
        if plan.row_blocks == 1:
            self.launch("column_reduce", plan.grid, plan.block, (x, out, i32(rows), i32(cols), i32(plan.rows_per_block)))
            return
        partial = self.scratch("column_reduce", plan.row_blocks * cols)
        self.launch("column_reduce", plan.grid, plan.block, (x, partial, i32(rows), i32(cols), i32(plan.rows_per_block)))
        second = plan_column_reduce(plan.row_blocks, cols)
        assert second.row_blocks == 1
        self.launch("column_reduce", second.grid, second.block,
                    (partial, out, i32(plan.row_blocks), i32(cols), i32(second.rows_per_block)))

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        rows, cols = z.shape
        grid, block = elementwise_grid(z.size)
        self.launch("bias_activation", grid, block,
                    (z, bias, out, i64(rows), i32(cols), i32(ACTIVATION_CODES[activation]), f32(omega0)))

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        if activation == "linear":
            return
        grid, block = elementwise_grid(grad.size)
        self.launch("activation_backward", grid, block,
                    (grad, z, a, i64(grad.size), i32(ACTIVATION_CODES[activation]), f32(omega0)))

    def fourier_features(self, projection, out) -> None:
        rows, m = projection.shape
        grid, block = elementwise_grid(projection.size)
        self.launch("fourier_features", grid, block, (projection, out, i64(rows), i32(m)))

    def mse_loss(self, pred, target, grad, loss) -> None:
        n = pred.size
        grid, block = elementwise_grid(n, LOSS_MAX_BLOCKS)
        partial = self.scratch("mse_loss", grid[0])
        self.launch("mse_loss", grid, block, (pred, target, grad, partial, i64(n), f32(1.0 / n)))
        self.column_reduce(partial.reshape(grid[0], 1), loss)

    def sample_batch(self, coords, targets, batch_coords, batch_targets, seed: int, step_counter) -> None:
        batch = batch_coords.shape[0]
        grid, block = elementwise_grid(batch)
        self.launch("sample_batch", grid, block,
                    (coords, targets, batch_coords, batch_targets, i64(coords.shape[0]), i32(batch),
                     i32(coords.shape[1]), i32(targets.shape[1]), np.uint64(seed), step_counter))

    def advance_schedule(self, step_counter, hyper, lr_max, lr_min, total, beta1, beta2) -> None:
        self.launch("advance_schedule", (1, 1, 1), (1, 1, 1),
                    (step_counter, hyper, f64(lr_max), f64(lr_min), i64(total), f64(beta1), f64(beta2)))

    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        grid, block = elementwise_grid(params.size)
        self.launch("adam_update", grid, block,
                    (params, grads, m, v, i64(params.size), hyper, f32(beta1), f32(beta2), f32(eps)))

    def sgd_update(self, params, grads, momentum_buf, hyper, momentum) -> None:
        grid, block = elementwise_grid(params.size)
        self.launch("sgd_update", grid, block, (params, grads, momentum_buf, i64(params.size), hyper, f32(momentum)))

    def compile_step(self, step):
        return step
