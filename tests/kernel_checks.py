"""One check per kernel operation, against the NumPy reference, for any KernelBackend.

test_kernels_emulated.py runs these on the CPU (the kernel source compiled as C++) over small
awkward shapes; test_gpu.py runs the same checks on the GPU over large ones. Every check runs on a
stack of networks (`networks`), and the operand a layer shares between networks (the coordinates)
is given once where the operation allows it.
"""

from __future__ import annotations

import numpy as np

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.backends.numpy_ops import round_to_tf32, tf32_rounds
from inr_cli.core.schedule import step_hyperparameters

cpu = NumpyBackend()


def reference_for(backend) -> NumpyBackend:
    """The NumPy backend that multiplies as `backend` does (--precision)."""
    return NumpyBackend(getattr(backend, "precision", "fp32"))


def operand(backend, array, k: int):
    """An operand of a product over k terms as `backend` sees it: rounded to TF32 under --precision
    tf32 (but over the coordinates alone: numpy_ops.tf32_rounds)."""
    return round_to_tf32(array) if tf32_rounds(getattr(backend, "precision", "fp32"), k) else array


def close(backend, array, reference, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(backend.to_host(array), reference, rtol=rtol, atol=atol)


def check_matmul(backend, m, n, k, trans, networks=1, shared_b=False):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    ta, tb = trans[0] == "t", trans[1] == "t"
    a = rng.standard_normal((networks, k, m) if ta else (networks, m, k)).astype(np.float32)
    b = rng.standard_normal((1 if shared_b else networks, n, k) if tb else (1 if shared_b else networks, k, n))
    b = b.astype(np.float32)
    out = backend.to_device(np.full((networks, m, n), np.nan, np.float32))
    backend.matmul(backend.to_device(a), backend.to_device(b), out, ta, tb)
    op_a = operand(backend, a.swapaxes(1, 2) if ta else a, k)
    op_b = operand(backend, b.swapaxes(1, 2) if tb else b, k)
    reference = np.matmul(op_a.astype(np.float64), op_b.astype(np.float64))
    close(backend, out, reference, rtol=1e-3, atol=1e-4 * np.sqrt(k))


def check_matmul_into_parameter_views(backend, m, n, k, networks=3, padding=5):
    """A weight gradient lands in a view of [N, P] gradients: a stride between networks that is
    not m * n (and not a multiple of 4), split-K or not."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((networks, k, m)).astype(np.float32)
    b = rng.standard_normal((networks, k, n)).astype(np.float32)
    flat = backend.to_device(np.full((networks, m * n + padding), np.nan, np.float32))
    view = flat[:, padding:].reshape(networks, m, n)
    backend.matmul(backend.to_device(a), backend.to_device(b), view, trans_a=True)
    host = backend.to_host(flat)
    assert np.isnan(host[:, :padding]).all(), "wrote outside the view"
    reference = np.matmul(operand(backend, a.swapaxes(1, 2), k).astype(np.float64),
                          operand(backend, b, k).astype(np.float64))
    np.testing.assert_allclose(host[:, padding:].reshape(networks, m, n), reference, rtol=1e-3,
                               atol=1e-4 * np.sqrt(k))


def check_column_reduce(backend, rows, cols, networks=1):
    x = np.random.default_rng(rows + cols).standard_normal((networks, rows, cols)).astype(np.float32)
    out = backend.to_device(np.full((networks, cols), np.nan, np.float32))
    backend.column_reduce(backend.to_device(x), out)
    close(backend, out, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4 * np.sqrt(rows))


def check_fill(backend, n):
    out = backend.to_device(np.zeros(n, np.float32))
    backend.fill(out, -1.5)
    assert (backend.to_host(out) == np.float32(-1.5)).all()


def check_activations(backend, activation, rows, cols, networks=2):
    rng = np.random.default_rng(rows * cols)
    z = rng.standard_normal((networks, rows, cols)).astype(np.float32)
    bias = rng.standard_normal((networks, cols)).astype(np.float32)
    grad = rng.standard_normal((networks, rows, cols)).astype(np.float32)
    z_ref, a_ref, g_ref = z.copy(), np.empty_like(z), grad.copy()
    cpu.bias_activation(z_ref, bias, a_ref, activation, 30.0)
    cpu.activation_backward(g_ref, z_ref, a_ref, activation, 30.0)
    z_d, a_d, g_d = backend.to_device(z), backend.to_device(np.empty_like(z)), backend.to_device(grad)
    backend.bias_activation(z_d, backend.to_device(bias), a_d, activation, 30.0)
    backend.activation_backward(g_d, z_d, a_d, activation, 30.0)
    close(backend, z_d, z_ref, rtol=1e-6)
    close(backend, a_d, a_ref, atol=1e-4)
    close(backend, g_d, g_ref, rtol=1e-3, atol=1e-3)


def check_mse_loss(backend, rows, cols, networks=2):
    rng = np.random.default_rng(rows)
    pred = rng.random((networks, rows, cols), dtype=np.float32)
    target = rng.random((networks, rows, cols), dtype=np.float32)
    grad_ref, loss_ref = np.empty_like(pred), np.empty(networks, np.float32)
    cpu.mse_loss(pred, target, grad_ref, loss_ref)
    grad, loss = backend.to_device(np.empty_like(pred)), backend.to_device(np.empty(networks, np.float32))
    backend.mse_loss(backend.to_device(pred), backend.to_device(target), grad, loss)
    close(backend, grad, grad_ref, rtol=1e-6, atol=1e-12)
    close(backend, loss, loss_ref, rtol=1e-5)


# The optimizer's settings as the checks below pass them: the defaults (settings.py), and values far
# enough from them that a kernel reading a default in place of any one of them fails the comparison
# (a large lr and eps move the parameters by more than the tolerance).
OPTIMIZER_SETTINGS = [
    dict(lr=1e-3, lr_min=1e-5, warmup=0, beta1=0.9, beta2=0.999, eps=1e-8, momentum=0.9),
    dict(lr=0.05, lr_min=2e-3, warmup=7, beta1=0.5, beta2=0.9, eps=0.1, momentum=0.3),
    dict(lr=0.2, lr_min=0.0, warmup=50, beta1=0.99, beta2=0.5, eps=1e-4, momentum=0.0),  # Adam's steps warm up
]


def check_schedule_and_optimizers(backend, n, total=100):
    """The on-device schedule against schedule.py over the whole budget and past its end, then Adam
    and SGD steps against the NumPy backend, for each of OPTIMIZER_SETTINGS."""
    for settings in OPTIMIZER_SETTINGS:
        _check_schedule_and_optimizers(backend, n, total, **settings)


def _check_schedule_and_optimizers(backend, n, total, lr, lr_min, warmup, beta1, beta2, eps, momentum):
    where = f"lr {lr}, lr_min {lr_min}, warmup {warmup}, beta1 {beta1}, beta2 {beta2}, eps {eps}, momentum {momentum}"
    counter = backend.to_device(np.array([0], np.int64))
    hyper = backend.to_device(np.zeros(3, np.float32))
    for step in range(total + 3):
        backend.advance_schedule(counter, hyper, lr, lr_min, total, warmup, beta1, beta2)
        expected = np.array(step_hyperparameters(step, total, lr, lr_min, warmup, beta1, beta2), np.float32)
        np.testing.assert_allclose(backend.to_host(hyper), expected, rtol=1e-6, err_msg=f"step {step}, {where}")
    assert int(backend.to_host(counter)[0]) == total + 3

    rng = np.random.default_rng(0)
    host = [rng.standard_normal((2, n)).astype(np.float32) for _ in range(4)]
    host[3] = np.abs(host[3])
    dev = [backend.to_device(a) for a in host]
    counter_h, counter_d = np.array([41], np.int64), backend.to_device(np.array([41], np.int64))
    hyper_h, hyper_d = np.zeros(3, np.float32), backend.to_device(np.zeros(3, np.float32))
    for _ in range(3):
        cpu.advance_schedule(counter_h, hyper_h, lr, lr_min, 100, warmup, beta1, beta2)
        backend.advance_schedule(counter_d, hyper_d, lr, lr_min, 100, warmup, beta1, beta2)
        cpu.adam_update(*host, hyper_h, beta1, beta2, eps)
        backend.adam_update(*dev, hyper_d, beta1, beta2, eps)
    assert int(backend.to_host(counter_d)[0]) == 44
    close(backend, hyper_d, hyper_h, rtol=1e-6)
    for name, d, h in zip(("params", "grads", "moment1", "moment2"), dev, host):
        np.testing.assert_allclose(backend.to_host(d), h, rtol=1e-5, atol=1e-6, err_msg=f"Adam's {name}, {where}")
    cpu.sgd_update(host[0], host[1], host[2], hyper_h, momentum)
    backend.sgd_update(dev[0], dev[1], dev[2], hyper_d, momentum)
    for name, d, h in zip(("params", "momentum buffer"), (dev[0], dev[2]), (host[0], host[2])):
        np.testing.assert_allclose(backend.to_host(d), h, rtol=1e-5, atol=1e-6, err_msg=f"SGD's {name}, {where}")


def check_sample_batch(backend, width, height, batch, seeds, step):
    """Both kernels, the 8-bit one and the float one, against the reference, bit for bit."""
    rng = np.random.default_rng(0)
    networks, n_pixels = len(seeds), width * height
    counter, seeds = np.array([step], np.int64), np.array(seeds, np.uint64)
    for targets in (rng.integers(0, 256, (networks, n_pixels, 3)).astype(np.uint8),
                    rng.random((networks, n_pixels, 4), dtype=np.float32)):
        channels = targets.shape[2]
        bx, bt = np.empty((networks, batch, 2), np.float32), np.empty((networks, batch, channels), np.float32)
        cpu.sample_batch(targets, width, bx, bt, seeds, counter)
        bx_d, bt_d = backend.to_device(np.empty_like(bx)), backend.to_device(np.empty_like(bt))
        backend.sample_batch(backend.to_device(targets), width, bx_d, bt_d, backend.to_device(seeds),
                             backend.to_device(counter))
        assert (backend.to_host(bx_d) == bx).all(), f"coordinates, {targets.dtype} pixels"
        assert (backend.to_host(bt_d) == bt).all(), f"colours, {targets.dtype} pixels"


def check_fused_layer(backend, rows, in_f, out_f, activation, networks=2, shared_x=True):
    """linear_forward (matmul + bias + activation epilogue) and linear_backward_input (matmul +
    activation-derivative epilogue) against the NumPy compositions they replace. The weights and
    biases are views of [N, P] parameters, as in training."""
    rng = np.random.default_rng(rows + in_f)
    x = rng.uniform(-1, 1, (1 if shared_x else networks, rows, in_f)).astype(np.float32)
    params = rng.standard_normal((networks, 3 + out_f * in_f + out_f)).astype(np.float32)
    params[:, 3:3 + out_f * in_f] /= np.sqrt(in_f)
    weight = params[:, 3:3 + out_f * in_f].reshape(networks, out_f, in_f)
    bias = params[:, 3 + out_f * in_f:]
    grad_out = rng.standard_normal((networks, rows, out_f)).astype(np.float32)
    z, a = np.empty((networks, rows, out_f), np.float32), np.empty((networks, rows, out_f), np.float32)
    x_prev = rng.uniform(-1, 1, (networks, rows, in_f)).astype(np.float32)
    grad_in = np.empty_like(x_prev)
    reference = reference_for(backend)
    reference.linear_forward(x, weight, bias, z, a, activation, 30.0)
    reference.linear_backward_input(grad_out, weight, x_prev, np.sin(x_prev), grad_in, activation, 30.0)
    params_d = backend.to_device(params)
    weight_d = params_d[:, 3:3 + out_f * in_f].reshape(networks, out_f, in_f)
    bias_d = params_d[:, 3 + out_f * in_f:]
    z_d, a_d, g_d = (backend.to_device(np.empty_like(v)) for v in (z, a, grad_in))
    backend.linear_forward(backend.to_device(x), weight_d, bias_d, z_d, a_d, activation, 30.0)
    backend.linear_backward_input(backend.to_device(grad_out), weight_d, backend.to_device(x_prev),
                                  backend.to_device(np.sin(x_prev)), g_d, activation, 30.0)
    close(backend, z_d, z, rtol=1e-3, atol=1e-3)
    close(backend, a_d, a, rtol=1e-3, atol=3e-2 if activation == "sine" else 1e-3)  # sin(30 z) amplifies z's rounding
    close(backend, g_d, grad_in, rtol=1e-3, atol=1e-2 * np.sqrt(out_f))


def check_fourier_features(backend, rows, m, networks=2):
    projection = np.random.default_rng(rows).normal(0, 10, (networks, rows, m)).astype(np.float32)
    ref = np.empty((networks, rows, 2 * m), np.float32)
    cpu.fourier_features(projection, ref)
    out = backend.to_device(np.full((networks, rows, 2 * m), np.nan, np.float32))
    backend.fourier_features(backend.to_device(projection), out)
    close(backend, out, ref, atol=2e-4)


def hashgrid_levels(levels=4, features=2, log2_size=6, coarsest=2, finest=20):
    """A hash grid's level table with dense levels and hashed ones (2^6 entries: vertices collide)."""
    from inr_cli.core.encodings import HashGrid
    from inr_cli.core.network import NetworkSpec

    spec = NetworkSpec(model="relu", out_features=3, hidden=4, layers=1, omega0=1.0, encoding="hashgrid",
                       fourier_features=0, fourier_sigma=0.0, hash_levels=levels, hash_features=features,
                       hash_log2_size=log2_size, hash_min_resolution=coarsest, hash_max_resolution=finest)
    grid = HashGrid(spec)
    assert not grid.level_table[0, 3] and grid.level_table[-1, 3]
    return grid


def check_hashgrid(backend, rows, networks=2, shared_x=True, features=2, variants=None, **grid):
    """hashgrid_encode and hashgrid_backward against the reference, in each of `variants` of the kernels
    (launch.HASHGRID_VARIANTS; the backend's own by default): tables as views of [N, P] parameters (a
    stride between networks that is not their size, nor a multiple of F: the second network's tables
    are not aligned for a vector access), points on the image's border and on vertices among random
    ones, and a gradient scattered by atomics where the reference adds in order. grid: hashgrid_levels'
    other arguments (by default four small levels whose entries many points share).
    The encoding is the reference's bit for bit (the same products, summed in the same order).
    Tolerance of the gradient: the atomics add in the order they land, the reference in the order of
    the points, both in FP32; at 262144 points on 64 entries (over a hundred thousand terms an entry)
    a random order's error stays within a sixth of it."""
    grid = hashgrid_levels(features=features, **grid)
    levels, count = grid.level_table, grid.parameter_count
    rng = np.random.default_rng(rows)
    x = rng.uniform(-1, 1, (1 if shared_x else networks, rows, 2)).astype(np.float32)
    x[:, : min(rows, 3)] = np.array([[-1, -1], [1, 1], [0, 0.5]], np.float32)[: min(rows, 3)]
    params = rng.uniform(-1, 1, (networks, count + 7)).astype(np.float32)
    width = grid.levels * features
    grad = rng.standard_normal((networks, rows, width)).astype(np.float32)
    out_ref = np.empty((networks, rows, width), np.float32)
    table_grads_ref = np.full((networks, count + 7), np.nan, np.float32)
    cpu.hashgrid_encode(x, params[:, :count], out_ref, levels)
    cpu.hashgrid_backward(x, grad, table_grads_ref[:, :count], levels)
    params_d, x_d, grad_d = backend.to_device(params), backend.to_device(x), backend.to_device(grad)
    chosen = backend.hashgrid_variant
    try:
        for variant in variants or (chosen,):
            backend.hashgrid_variant = variant
            out = backend.to_device(np.full((networks, rows, width), np.nan, np.float32))
            table_grads = backend.to_device(np.full((networks, count + 7), np.nan, np.float32))
            backend.hashgrid_encode(x_d, params_d[:, :count], out, levels)
            backend.hashgrid_backward(x_d, grad_d, table_grads[:, :count], levels)
            np.testing.assert_array_equal(backend.to_host(out), out_ref, err_msg=f"variant {variant}")
            host = backend.to_host(table_grads)
            assert np.isnan(host[:, count:]).all(), f"variant {variant} wrote outside the tables"
            np.testing.assert_allclose(host[:, :count], table_grads_ref[:, :count], rtol=1e-4,
                                       atol=1e-5 * np.sqrt(rows), err_msg=f"variant {variant}")
    finally:
        backend.hashgrid_variant = chosen


def check_tf32_keeps_the_coordinates(backend, width=8192):
    """TF32 keeps 10 mantissa bits: on an 8192-px canvas it would merge a quarter of the columns'
    pixel centres. A product over the coordinates alone (a first layer on (u, v), the Fourier
    projection x Bᵀ, the fused network's first layer) stays FP32 under --precision tf32, in the
    reference and the kernels alike, so every column reaches the network distinct."""
    from inr_cli.backends.launch import plan_fused_network
    from inr_cli.core.coords import axis_centres

    assert backend.precision == "tf32"
    u = axis_centres(width)
    assert np.unique(u).size == width and np.unique(round_to_tf32(u)).size <= 3 * width // 4
    x = np.stack([u, np.full_like(u, 0.25)], axis=1)[None]  # one row of the canvas: [1, width, 2]
    picks_u = np.array([[[1.0, 0.0]]], np.float32)  # a weight (or B) whose product is u itself
    for engine in (reference_for(backend), backend):
        z, projection = (engine.to_device(np.full((1, width, 1), np.nan, np.float32)) for _ in range(2))
        x_d, picks_u_d = engine.to_device(x), engine.to_device(picks_u)
        engine.linear_forward(x_d, picks_u_d, engine.to_device(np.zeros((1, 1), np.float32)), z, z, "linear")
        engine.matmul(x_d, picks_u_d, projection, trans_b=True)
        assert np.array_equal(engine.to_host(z)[0, :, 0], u), f"{engine.name}: the first layer rounds u"
        assert np.array_equal(engine.to_host(projection)[0, :, 0], u), f"{engine.name}: the projection rounds u"

    shapes = [(16, 2), (1, 16)]
    plan = plan_fused_network(shapes, 0, width, "tf32", "two-kernels")
    params = np.zeros((1, sum(o * i + o for o, i in shapes)), np.float32)
    params[0, :2] = picks_u[0, 0]  # the first hidden neuron's z is u
    hz, ha = (backend.to_device(np.full((1, 1, width, 16), np.nan, np.float32)) for _ in range(2))
    oz = backend.to_device(np.full((1, width, 1), np.nan, np.float32))
    backend.network_forward(plan, backend.to_device(x), backend.to_device(params), hz, ha, oz, oz, "linear", "linear",
                            1.0)
    assert plan.forward.endswith("_tf32")
    assert np.array_equal(backend.to_host(hz)[0, 0, :, 0], u), "the fused network's first layer rounds u"

    # One kernel a step keeps no z: two neurons (a last layer over 2 terms stays FP32 too) pass u on to the
    # output, whose target is u itself, so the loss and every gradient are exactly 0 unless a layer rounds u.
    columns = 96  # (2 i + 1) / 96 has more bits than TF32 keeps
    shapes = [(2, 2), (1, 2)]
    plan = plan_fused_network(shapes, 0, columns, "tf32", "one-kernel", backend.sm_count, backend.shared_per_block)
    params = np.zeros((1, 9), np.float32)
    params[0, [0, 6]] = 1.0  # neuron 0 is u, the output is neuron 0
    u = axis_centres(columns)
    x = backend.to_device(np.stack([u, np.full_like(u, 0.25)], axis=1)[None])
    grads, loss = backend.to_device(np.full((1, 9), np.nan, np.float32)), backend.to_device(np.ones(1, np.float32))
    backend.network_train(plan, x, backend.to_device(u[None, :, None]), backend.to_device(params), grads, loss,
                          "linear", "linear", 1.0)
    assert plan.train.endswith("_tf32") and not np.array_equal(round_to_tf32(u), u)
    assert backend.to_host(loss)[0] == 0 and not backend.to_host(grads).any(), "the fused network rounds u"
