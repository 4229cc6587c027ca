"""The operations of backend.py, carried out by launching the kernels in kernels/ (numpy_ops.py is
their reference).

A subclass supplies memory (`empty`, `to_device`, ...) and `launch(name, grid, block, args)`: the
CUDA backend launches through CuPy; the test-suite's emulation runs the same kernel source,
compiled as C++, on the CPU. Scratch buffers (split-K partials, reduction partials) are allocated
the first time a shape needs them and reused after, so a training step allocates nothing once it
has run once.

Every operation covers N networks in one launch (a grid dimension per network). Operands are
stacks [N, rows, cols] whose 2-D slices are row-major; the stride between networks is read from the
array and passed to the kernel (0 for one matrix shared by every network). Each operation checks
dtype, shapes and layout before it launches: a wrong argument is an error here, not a wrong answer
or a crash on the device. Replaying a captured CUDA graph skips Python, checks included.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from inr_cli.backends.launch import (
    ACTIVATION_CODES,
    FUSED_VARIANTS,
    LOSS_MAX_BLOCKS,
    LOSS_THREADS,
    SHARED_PER_BLOCK,
    FusedPlan,
    elementwise_grid,
    network_groups,
    plan_column_reduce,
    plan_hashgrid,
    plan_matmul,
)
from inr_cli.core.backend import Backend
from inr_cli.core.batch_pass import WholeBatchPass
from inr_cli.core.encodings import HASH_PRIME, LEVEL_OFFSET, LEVEL_SIZE
from inr_cli.settings import PRECISIONS

i32, i64, u64, f32, f64 = np.int32, np.int64, np.uint64, np.float32, np.float64
FLOAT_SIZE = 4
NULL = np.uint64(0)  # a pointer argument a kernel is told to go without


class LaunchError(ValueError):
    """An operation was called with arguments its kernel cannot take."""


def stack_stride(what: str, array, shape: tuple) -> int:
    """Check that `array` is a float32 stack of the given shape (None: any) whose 2-D slices are
    row-major; return its stride between networks in elements (0 when it holds one matrix)."""
    if array.dtype != np.float32:
        raise LaunchError(f"{what}: dtype {array.dtype}, expected float32")
    if array.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, array.shape)):
        raise LaunchError(f"{what}: shape {tuple(array.shape)}, expected {shape}")
    strides = array.strides
    expected = FLOAT_SIZE
    for axis in range(len(shape) - 1, 0, -1):  # every axis but the networks' must be packed
        if array.shape[axis] > 1 and strides[axis] != expected:
            raise LaunchError(f"{what}: rows are not contiguous (strides {strides})")
        expected *= array.shape[axis]
    if array.shape[0] == 1:
        return 0
    if strides[0] % FLOAT_SIZE or strides[0] < 0:
        raise LaunchError(f"{what}: stride between networks {strides[0]} bytes is not a whole float")
    return strides[0] // FLOAT_SIZE


def contiguous(what: str, array, shape: tuple | None = None, dtype=np.float32) -> None:
    if array.dtype != dtype:
        raise LaunchError(f"{what}: dtype {array.dtype}, expected {np.dtype(dtype).name}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise LaunchError(f"{what}: shape {tuple(array.shape)}, expected {tuple(shape)}")
    if not array.flags.c_contiguous:
        raise LaunchError(f"{what}: not contiguous")


def networks_of(what: str, *arrays) -> int:
    """The number of networks N of a call: every operand holds N, or 1 to share it."""
    counts = {a.shape[0] for a in arrays} - {1}
    if len(counts) > 1:
        raise LaunchError(f"{what}: operands hold different numbers of networks {sorted(counts)}")
    return counts.pop() if counts else 1


def group(array, first: int, stop: int):
    """Networks [first, stop) of a stack; a shared operand (one network) stays whole."""
    return array if array.shape[0] == 1 else array[first:stop]


class KernelBackend(Backend):
    sm_count = 1
    hashgrid_variant = "rows"  # the hash grid's kernels (launch.HASHGRID_VARIANTS); the others are timed beside it
    shared_per_block = SHARED_PER_BLOCK  # the most dynamic shared memory a block may take, in bytes
    # The fused kernels' design (launch.FUSED_VARIANTS): "two-kernels", the engine's; "one-kernel" where
    # its shared memory fits (else the two kernels), timed beside it.
    fused_variant = FUSED_VARIANTS[0]

    def __init__(self, precision: str = "fp32", fused: bool = True):
        """precision: the layer products' (training.precision): "fp32", or "tf32" on tensor cores.
        fused: a narrow network's training pass in the fused kernels (training.fused_network)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision '{precision}' is not one of: {', '.join(PRECISIONS)}")
        self.precision = precision
        self.fused = fused
        self._scratch: dict[str, object] = {}
        self._level_tables: dict[bytes, object] = {}

    # --- what a subclass adds to the memory of backend.Backend -----------------------------------
    @abstractmethod
    def launch(self, name: str, grid, block, args, shared: int = 0) -> None:
        """Run kernel `name` on a grid of blocks (both (x, y, z)) with these arguments, each block with
        `shared` bytes of dynamic shared memory."""

    def scratch(self, key: str, n: int):
        """A reusable flat float32 buffer of at least n elements (grown, never shrunk)."""
        buffer = self._scratch.get(key)
        if buffer is None or buffer.size < n:
            buffer = self.empty((n,))
            self._scratch[key] = buffer
        return buffer[:n]

    # --- operations ----------------------------------------------------------------------------
    def fill(self, out, value: float) -> None:
        contiguous("fill out", out)
        grid, block = elementwise_grid(out.size)
        self.launch("fill", grid, block, (out, f32(value), i64(out.size)))

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        n_net, m, n = out.shape
        k = a.shape[1] if trans_a else a.shape[2]
        stride_c = stack_stride("matmul out", out, (None, m, n))
        stride_a = stack_stride("matmul a", a, (None, k, m) if trans_a else (None, m, k))
        stride_b = stack_stride("matmul b", b, (None, n, k) if trans_b else (None, k, n))
        if networks_of("matmul", a, b, out) != n_net:
            raise LaunchError(f"matmul: out holds {n_net} networks, an operand more")
        plan = plan_matmul(m, n, k, trans_a, trans_b, self.sm_count, precision=self.precision)
        if plan.splits > 1:
            partial = self.scratch("matmul_split_k", n_net * plan.splits * m * n).reshape(n_net, plan.splits, m * n)
        for first, stop in network_groups(n_net, plan.splits):
            grid = (plan.grid[0], plan.grid[1], (stop - first) * plan.splits)
            if plan.splits == 1:
                target, stride_target = out[first:stop], stride_c
            else:
                target, stride_target = partial[first:stop], plan.splits * m * n
            self.launch(plan.kernel, grid, plan.block,
                        (group(a, first, stop), group(b, first, stop), target, i32(m), i32(n), i32(k),
                         i32(plan.k_per_split), i32(plan.splits), i64(stride_a), i64(stride_b), i64(stride_target)))
        if plan.splits > 1:
            self.column_reduce(partial, out)

    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        n_net, n, k = weight.shape
        m = x.shape[1]
        stride_w = stack_stride("linear_forward weight", weight, (None, n, k))
        stride_x = stack_stride("linear_forward x", x, (None, m, k))
        stride_bias = stack_stride("linear_forward bias", bias, (n_net, n))
        stride_z = stack_stride("linear_forward z", z, (n_net, m, n))
        if stack_stride("linear_forward a", a, (n_net, m, n)) != stride_z:
            raise LaunchError("linear_forward: z and a must share one layout")
        networks_of("linear_forward", x, weight)
        plan = plan_matmul(m, n, k, False, True, self.sm_count, fused="linear_forward", precision=self.precision)
        for first, stop in network_groups(n_net):
            self.launch(plan.kernel, (plan.grid[0], plan.grid[1], stop - first), plan.block,
                        (group(x, first, stop), weight[first:stop], bias[first:stop], z[first:stop], a[first:stop],
                         i32(m), i32(n), i32(k), i32(ACTIVATION_CODES[activation]), f32(omega0),
                         i64(stride_x), i64(stride_w), i64(stride_bias), i64(stride_z)))

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        n_net, k, n = weight.shape  # weight (out, in): this product's K is the layer's out
        m = grad.shape[1]
        stride_w = stack_stride("linear_backward_input weight", weight, (None, k, n))
        stride_dz = stack_stride("linear_backward_input grad", grad, (n_net, m, k))
        stride_prev = stack_stride("linear_backward_input out", out, (n_net, m, n))
        for what, array in (("z_prev", z_prev), ("a_prev", a_prev)):
            if stack_stride(f"linear_backward_input {what}", array, (n_net, m, n)) != stride_prev:
                raise LaunchError(f"linear_backward_input: {what} and out must share one layout")
        plan = plan_matmul(m, n, k, False, False, self.sm_count, fused="linear_backward_input",
                           precision=self.precision)
        for first, stop in network_groups(n_net):
            self.launch(plan.kernel, (plan.grid[0], plan.grid[1], stop - first), plan.block,
                        (grad[first:stop], weight[first:stop], z_prev[first:stop], a_prev[first:stop], out[first:stop],
                         i32(m), i32(n), i32(k), i32(ACTIVATION_CODES[activation_prev]), f32(omega0),
                         i64(stride_dz), i64(stride_w), i64(stride_prev)))

    def linear_backward_weights(self, grad, layer_input, weight_grad, bias_grad) -> None:
        """weight_grad = gradᵀ @ layer_input (split-K over the batch), bias_grad = column sums of grad."""
        self.matmul(grad, layer_input, weight_grad, trans_a=True)
        self.column_reduce(grad, bias_grad)

    def column_reduce(self, x, out) -> None:
        """out[i, j] = sum over rows of x[i, :, j], for every network i. The columns may be given in
        any packed shape: x [N, rows, ...], out [N, ...] with as many elements after the first axis."""
        n_net, rows = x.shape[:2]
        cols = int(np.prod(x.shape[2:]))
        stride_x = stack_stride("column_reduce x", x, (None, rows, *x.shape[2:]))
        stride_out = stack_stride("column_reduce out", out, (n_net, *out.shape[1:]))
        if int(np.prod(out.shape[1:])) != cols:
            raise LaunchError(f"column_reduce: out {tuple(out.shape)} does not hold the {cols} columns of x")
        plan = plan_column_reduce(rows, cols)
        if plan.row_blocks == 1:
            self._column_reduce_pass(plan, x, out, rows, cols, stride_x, stride_out)
            return
        partial = self.scratch("column_reduce", n_net * plan.row_blocks * cols).reshape(n_net, plan.row_blocks, cols)
        self._column_reduce_pass(plan, x, partial, rows, cols, stride_x, plan.row_blocks * cols)
        second = plan_column_reduce(plan.row_blocks, cols)
        assert second.row_blocks == 1
        self._column_reduce_pass(second, partial, out, plan.row_blocks, cols, plan.row_blocks * cols, stride_out)

    def _column_reduce_pass(self, plan, x, out, rows, cols, stride_x, stride_out) -> None:
        for first, stop in network_groups(out.shape[0]):
            self.launch("column_reduce", (plan.grid[0], plan.grid[1], stop - first), plan.block,
                        (x[first:stop], out[first:stop], i32(rows), i32(cols), i32(plan.rows_per_block),
                         i64(stride_x), i64(stride_out)))

    def bias_activation(self, z, bias, out, activation: str, omega0: float = 1.0) -> None:
        n_net, rows, cols = z.shape
        contiguous("bias_activation z", z)
        contiguous("bias_activation out", out, z.shape)
        stride_bias = stack_stride("bias_activation bias", bias, (n_net, cols))
        grid, block = elementwise_grid(z.size)
        self.launch("bias_activation", grid, block, (z, bias, out, i64(n_net), i64(rows), i32(cols), i64(stride_bias),
                                                     i32(ACTIVATION_CODES[activation]), f32(omega0)))

    def activation_backward(self, grad, z, a, activation: str, omega0: float = 1.0) -> None:
        contiguous("activation_backward grad", grad)
        contiguous("activation_backward z", z, grad.shape)
        contiguous("activation_backward a", a, grad.shape)
        if activation == "linear":
            return
        grid, block = elementwise_grid(grad.size)
        self.launch("activation_backward", grid, block,
                    (grad, z, a, i64(grad.size), i32(ACTIVATION_CODES[activation]), f32(omega0)))

    def fourier_features(self, projection, out) -> None:
        n_net, rows, m = projection.shape
        contiguous("fourier_features projection", projection)
        contiguous("fourier_features out", out, (n_net, rows, 2 * m))
        grid, block = elementwise_grid(projection.size)
        self.launch("fourier_features", grid, block, (projection, out, i64(n_net * rows), i32(m)))

    def _hashgrid_launch(self, kind: str, x, tables, values, levels) -> None:
        """The hash grid's encode (values: out) or backward (values: grad; tables: their gradient) for
        every network, in the kernels of self.hashgrid_variant (launch.plan_hashgrid)."""
        n_net, rows, width = values.shape
        n_levels = len(levels)
        features = width // n_levels
        what = f"hashgrid_{kind}"
        stride_values = stack_stride(f"{what} {'out' if kind == 'encode' else 'grad'}", values,
                                     (None, rows, n_levels * features))
        stride_x = stack_stride(f"{what} x", x, (None, rows, 2))
        entries = int(levels[-1][LEVEL_OFFSET] + levels[-1][LEVEL_SIZE])
        stride_tables = stack_stride(f"{what} tables", tables, (n_net, entries * features))
        networks_of(what, x, values)
        plan = plan_hashgrid(rows, n_levels, features, entries * features, self.hashgrid_variant)
        name = plan.encode if kind == "encode" else plan.backward
        counts = (i64(rows), i32(n_levels), i32(features)) if plan.takes_features else (i32(rows), i32(n_levels))
        device_levels = self._level_table(levels)
        for first, stop in network_groups(n_net):
            self.launch(name, (*plan.grid[:2], stop - first), plan.block,
                        (group(x, first, stop), tables[first:stop], values[first:stop], device_levels, *counts,
                         i64(stride_x), i64(stride_tables), i64(stride_values), u64(HASH_PRIME)))

    def _level_table(self, levels):
        """HashGrid.level_table on the device, uploaded once per grid (before a step is captured: the
        first step runs eagerly)."""
        levels = np.ascontiguousarray(levels, dtype=np.int64)
        key = levels.tobytes()
        if key not in self._level_tables:
            self._level_tables[key] = self.to_device(levels)
        return self._level_tables[key]

    # hashgrid_corner_buffers is none here: the backward kernel finds the corners again, fewer bytes
    # moved than keeping them, so `corners` is always None.
    def hashgrid_encode(self, x, tables, out, levels, corners=None) -> None:
        self._hashgrid_launch("encode", x, tables, out, levels)

    def hashgrid_backward(self, x, grad, table_grads, levels, corners=None) -> None:
        n_net, count = table_grads.shape
        stride_tables = stack_stride("hashgrid_backward table_grads", table_grads, (n_net, count))
        grid, block = elementwise_grid(count)
        for first, stop in network_groups(n_net):
            self.launch("hashgrid_zero", (grid[0], stop - first, 1), block,
                        (table_grads[first:stop], i64(count), i64(stride_tables)))
        self._hashgrid_launch("backward", x, table_grads, grad, levels)

    def mse_loss(self, pred, target, grad, loss, count: int | None = None) -> None:
        n_net = pred.shape[0]
        contiguous("mse_loss pred", pred)
        contiguous("mse_loss target", target, pred.shape)
        contiguous("mse_loss grad", grad, pred.shape)
        contiguous("mse_loss loss", loss, (n_net,))
        per_network = pred.size // n_net
        grid, block = elementwise_grid(per_network, LOSS_MAX_BLOCKS, LOSS_THREADS)
        partial = self.scratch("mse_loss", n_net * grid[0]).reshape(n_net, grid[0])
        for first, stop in network_groups(n_net):
            self.launch("mse_loss", (grid[0], stop - first, 1), block,
                        (pred[first:stop], target[first:stop], grad[first:stop], partial[first:stop],
                         i64(per_network), f32(1.0 / (count or per_network))))
        self.column_reduce(partial.reshape(n_net, grid[0], 1), loss.reshape(n_net, 1))  # views: both packed

    def sample_batch(self, targets, width, batch_coords, batch_targets, seeds, step_counter) -> None:
        n_net, n_pixels, out_features = targets.shape
        batch = batch_coords.shape[1]
        if targets.dtype not in (np.uint8, np.float32):
            raise LaunchError(f"sample_batch targets: uint8 or float32 pixels, got {targets.dtype}")
        contiguous("sample_batch targets", targets, dtype=targets.dtype)
        contiguous("sample_batch batch_coords", batch_coords, (n_net, batch, 2))
        contiguous("sample_batch batch_targets", batch_targets, (n_net, batch, out_features))
        contiguous("sample_batch seeds", seeds, (n_net,), np.uint64)
        contiguous("sample_batch step", step_counter, (1,), np.int64)
        if n_pixels % width:
            raise LaunchError(f"sample_batch: {n_pixels} pixels are no whole rows of {width}")
        kernel = "sample_batch_u8" if targets.dtype == np.uint8 else "sample_batch_f32"
        grid, block = elementwise_grid(batch)
        for first, stop in network_groups(n_net):
            self.launch(kernel, (grid[0], stop - first, 1), block,
                        (targets[first:stop], batch_coords[first:stop], batch_targets[first:stop], i64(n_pixels),
                         i64(width), i32(batch), i32(out_features), seeds[first:stop], step_counter))

    def advance_schedule(self, step_counter, hyper, lr_max, lr_min, total, warmup, beta1, beta2) -> None:
        contiguous("advance_schedule step", step_counter, (1,), np.int64)
        contiguous("advance_schedule hyper", hyper, (3,))
        self.launch("advance_schedule", (1, 1, 1), (1, 1, 1),
                    (step_counter, hyper, f64(lr_max), f64(lr_min), i64(total), i64(warmup), f64(beta1),
                     f64(beta2)))

    def adam_update(self, params, grads, m, v, hyper, beta1, beta2, eps) -> None:
        for what, array in (("params", params), ("grads", grads), ("m", m), ("v", v)):
            contiguous(f"adam_update {what}", array, params.shape)
        contiguous("adam_update hyper", hyper, (3,))
        grid, block = elementwise_grid(params.size)
        self.launch("adam_update", grid, block,
                    (params, grads, m, v, i64(params.size), hyper, f32(beta1), f32(beta2), f32(eps)))

    def sgd_update(self, params, grads, momentum_buf, hyper, momentum) -> None:
        for what, array in (("params", params), ("grads", grads), ("momentum", momentum_buf)):
            contiguous(f"sgd_update {what}", array, params.shape)
        contiguous("sgd_update hyper", hyper, (3,))
        grid, block = elementwise_grid(params.size)
        self.launch("sgd_update", grid, block, (params, grads, momentum_buf, i64(params.size), hyper, f32(momentum)))

    def network_forward(self, plan: FusedPlan, x, params, hz, ha, oz, oa, hidden_activation: str,
                        output_activation: str, omega0: float) -> None:
        """The stack of `plan` (launch.plan_fused_network) forward over x [N or 1, rows, in0]: each
        hidden layer's z and a into hz, ha [N, layers - 1, rows, hidden] (None without hidden layers
        in the stack), the output layer's into oz, oa [N, rows, out] (oa may be oz)."""
        n_net, rows = oz.shape[:2]
        stride_x = stack_stride("network_forward x", x, (None, rows, plan.in0))
        stride_params = stack_stride("network_forward params", params, (n_net, None))
        stride_h = self._hidden_stride("network_forward", plan, hz, ha, n_net, rows)
        stride_o = stack_stride("network_forward oz", oz, (n_net, rows, plan.out))
        if stack_stride("network_forward oa", oa, (n_net, rows, plan.out)) != stride_o:
            raise LaunchError("network_forward: oz and oa must share one layout")
        networks_of("network_forward", x, params)
        for first, stop in network_groups(n_net):
            self.launch(plan.forward, (plan.chunks, stop - first, 1), plan.block,
                        (group(x, first, stop), i64(stride_x), params[first:stop], i64(stride_params),
                         i64(plan.offset), i32(plan.layers), i32(plan.in0), i32(plan.hidden), i32(plan.out),
                         i32(ACTIVATION_CODES[hidden_activation]), i32(ACTIVATION_CODES[output_activation]),
                         f32(omega0), *self._hidden_pair(hz, ha, oz, first, stop), i64(stride_h), oz[first:stop],
                         oa[first:stop], i64(stride_o), i32(rows)))

    def network_backward(self, plan: FusedPlan, x, params, hz, ha, oz, oa, grad_out, grads, hidden_activation: str,
                         output_activation: str, omega0: float, input_grad=None, z_in=None,
                         input_activation: str = "linear") -> None:
        """The stack's backward pass from grad_out = dL/d(output) [N, rows, out], given the forward
        pass's x, hz, ha, oz, oa: the stack's weight and bias gradients into grads [N, P] (at
        plan.offset), and with input_grad [N, rows, in0], the gradient at the stack's input, through
        input_activation's derivative at (z_in, x) when the stack starts after a layer."""
        n_net, rows = oz.shape[:2]
        stride_x = stack_stride("network_backward x", x, (None, rows, plan.in0))
        stride_params = stack_stride("network_backward params", params, (n_net, None))
        stride_h = self._hidden_stride("network_backward", plan, hz, ha, n_net, rows)
        stride_o = stack_stride("network_backward oz", oz, (n_net, rows, plan.out))
        for what, array in (("oa", oa), ("grad_out", grad_out)):
            if stack_stride(f"network_backward {what}", array, (n_net, rows, plan.out)) != stride_o:
                raise LaunchError(f"network_backward: oz and {what} must share one layout")
        stride_grads = stack_stride("network_backward grads", grads, (n_net, params.shape[1]))
        self._input_layouts("network_backward", stride_x, n_net, rows, plan.in0, input_grad=input_grad, z_in=z_in)
        networks_of("network_backward", x, params)
        target = grads[:, plan.offset:plan.offset + plan.parameters]
        slots, stride_slots = self._gradient_slots(plan, n_net, target, stride_grads)
        for first, stop in network_groups(n_net):
            self.launch(plan.backward, (plan.groups, stop - first, 1), plan.block,
                        (group(x, first, stop), i64(stride_x), NULL if z_in is None else z_in[first:stop],
                         i32(ACTIVATION_CODES[input_activation]), params[first:stop], i64(stride_params),
                         i64(plan.offset), i32(plan.layers), i32(plan.in0), i32(plan.hidden), i32(plan.out),
                         i32(ACTIVATION_CODES[hidden_activation]), i32(ACTIVATION_CODES[output_activation]),
                         f32(omega0), *self._hidden_pair(hz, ha, oz, first, stop), i64(stride_h), oz[first:stop],
                         oa[first:stop], i64(stride_o), grad_out[first:stop], slots[first:stop], i64(stride_slots),
                         NULL if input_grad is None else input_grad[first:stop], i32(rows)))
        if plan.groups > 1:
            self.column_reduce(slots, target)

    def network_train(self, plan: FusedPlan, x, targets, params, grads, loss, hidden_activation: str,
                      output_activation: str, omega0: float, input_grad=None, z_in=None,
                      input_activation: str = "linear") -> None:
        """The stack of a one-kernel `plan` forward over x [N or 1, rows, in0], its mean squared error
        against targets [N, rows, out] into loss [N], and back: its weight and bias gradients into
        grads [N, P] (at plan.offset), and with input_grad [N, rows, in0] the gradient at the stack's
        input, through input_activation's derivative at (z_in, x) when the stack starts after a layer."""
        n_net, rows = targets.shape[:2]
        stride_x = stack_stride("network_train x", x, (None, rows, plan.in0))
        stride_t = stack_stride("network_train targets", targets, (n_net, rows, plan.out))
        stride_params = stack_stride("network_train params", params, (n_net, None))
        stride_grads = stack_stride("network_train grads", grads, (n_net, params.shape[1]))
        contiguous("network_train loss", loss, (n_net,))
        self._input_layouts("network_train", stride_x, n_net, rows, plan.in0, input_grad=input_grad, z_in=z_in)
        networks_of("network_train", x, params)
        target = grads[:, plan.offset:plan.offset + plan.parameters]
        slots, stride_slots = self._gradient_slots(plan, n_net, target, stride_grads)
        losses = (self.scratch("fused_losses", n_net * plan.groups).reshape(n_net, plan.groups) if plan.groups > 1
                  else loss.reshape(n_net, 1))  # one slot a network: its loss itself
        for first, stop in network_groups(n_net):
            self.launch(plan.train, (plan.groups, stop - first, 1), plan.block,
                        (group(x, first, stop), i64(stride_x), targets[first:stop], i64(stride_t), params[first:stop],
                         i64(stride_params), i64(plan.offset), i32(plan.layers), i32(plan.in0), i32(plan.hidden),
                         i32(plan.out), i32(plan.width), i32(ACTIVATION_CODES[hidden_activation]),
                         i32(ACTIVATION_CODES[output_activation]), f32(omega0), f32(1.0 / (rows * plan.out)),
                         i32(plan.rows_per_chunk), slots[first:stop], i64(stride_slots), losses[first:stop],
                         i64(losses.shape[1]), NULL if z_in is None else z_in[first:stop],
                         i32(ACTIVATION_CODES[input_activation]),
                         NULL if input_grad is None else input_grad[first:stop], i32(rows)), shared=plan.shared)
        if plan.groups > 1:
            self.column_reduce(slots, target)
            self.column_reduce(losses.reshape(n_net, plan.groups, 1), loss.reshape(n_net, 1))

    def _gradient_slots(self, plan: FusedPlan, n_net: int, target, stride_grads: int):
        """(slots, their stride): where a fused backward writes each network's gradients. One slot a
        network is its gradients themselves (target); with plan.groups blocks a network, a scratch
        slot each, which column_reduce sums into target after."""
        if plan.groups == 1:
            return target, stride_grads
        partial = self.scratch("fused_partial", n_net * plan.groups * plan.parameters)
        return partial.reshape(n_net, plan.groups, plan.parameters), plan.groups * plan.parameters

    @staticmethod
    def _input_layouts(kernel: str, stride_x: int, n_net: int, rows: int, in0: int, **arrays) -> None:
        """The arrays given (input_grad, z_in) laid out as x is, one per network."""
        for what, array in arrays.items():
            if array is not None and stack_stride(f"{kernel} {what}", array, (n_net, rows, in0)) != stride_x:
                raise LaunchError(f"{kernel}: x and {what} must share one layout, one per network")

    @staticmethod
    def _hidden_stride(what: str, plan: FusedPlan, hz, ha, n_net: int, rows: int) -> int:
        if plan.layers == 1:
            return 0
        stride_h = stack_stride(f"{what} hz", hz, (n_net, plan.layers - 1, rows, plan.hidden))
        if stack_stride(f"{what} ha", ha, (n_net, plan.layers - 1, rows, plan.hidden)) != stride_h:
            raise LaunchError(f"{what}: hz and ha must share one layout")
        return stride_h

    @staticmethod
    def _hidden_pair(hz, ha, oz, first: int, stop: int) -> tuple:
        """hz and ha of networks [first, stop); a stack without hidden layers never reads them."""
        return (oz[first:stop], oz[first:stop]) if hz is None else (hz[first:stop], ha[first:stop])

    def training_pass(self, spec, params, grads, networks: int, batch: int):
        """One pass over every network and the whole batch: the kernels spread it over the device,
        the fused kernels where the network is narrow enough (fused_pass.py), else a kernel per layer."""
        from inr_cli.backends.fused_pass import FusedPass, fused_plan

        plan = fused_plan(spec, batch, self) if self.fused else None
        if plan is not None:
            return FusedPass(self, spec, params, grads, networks, batch, plan)
        return WholeBatchPass(self, spec, params, grads, networks, batch)
