"""The NumPy backend's operations against plain NumPy and closed forms, on stacks of networks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inr_cli.backends.numpy_backend import NumpyBackend, batch_indices
from inr_cli.core.coords import pixel_grid
from inr_cli.core.schedule import learning_rate
from tests.tolerances import assert_reproduced

cpu = NumpyBackend()


def test_matmul_all_transposes_per_network(rng):
    a = rng.standard_normal((2, 5, 7)).astype(np.float32)
    b = rng.standard_normal((2, 7, 3)).astype(np.float32)
    out = np.empty((2, 5, 3), np.float32)
    cpu.matmul(a, b, out)
    for i in range(2):
        np.testing.assert_allclose(out[i], a[i] @ b[i], rtol=1e-5)
    out_t = np.empty((2, 5, 3), np.float32)
    cpu.matmul(a, np.ascontiguousarray(b.swapaxes(1, 2)), out_t, trans_b=True)
    np.testing.assert_allclose(out_t, out, rtol=1e-5)
    g = rng.standard_normal((2, 5, 3)).astype(np.float32)
    out_tn = np.empty((2, 7, 3), np.float32)
    cpu.matmul(a, g, out_tn, trans_a=True)
    for i in range(2):
        np.testing.assert_allclose(out_tn[i], a[i].T @ g[i], rtol=1e-5)
    shared = np.empty((2, 5, 3), np.float32)
    cpu.matmul(a[:1], b, shared)  # one matrix shared by both networks
    np.testing.assert_allclose(shared[1], a[0] @ b[1], rtol=1e-5)


def test_fill_and_column_reduce(rng):
    out = np.empty(11, np.float32)
    cpu.fill(out, 2.5)
    assert (out == 2.5).all()
    x = rng.standard_normal((2, 9, 4)).astype(np.float32)
    sums = np.empty((2, 4), np.float32)
    cpu.column_reduce(x, sums)
    for n in range(2):
        np.testing.assert_allclose(sums[n], [sum(x[n, i, j] for i in range(9)) for j in range(4)], rtol=1e-5)


@pytest.mark.parametrize("rows,cols", [(2048, 64), (4097, 3), (7, 2), (300, 256)])
def test_column_reduce_adds_rows_in_order(rng, rows, cols):
    """The bits of every bias gradient (and of format-1 checkpoints reproduced today) rest on the
    order of the column sums: row after row, as np.sum did when they were written."""
    full = rng.standard_normal((3, rows + 5, cols)).astype(np.float32)
    x = full[:, :rows]  # a workspace's first rows: a view, as in a step
    sums = np.empty((3, cols), np.float32)
    cpu.column_reduce(x, sums)
    in_order = x[:, 0].copy()
    for r in range(1, rows):
        in_order += x[:, r]
    assert np.array_equal(sums, in_order)


@pytest.mark.parametrize("activation,forward,derivative", [
    ("sigmoid", lambda z: 1 / (1 + np.exp(-z)), lambda z: np.exp(-z) / (1 + np.exp(-z)) ** 2),
    ("sine", lambda z: np.sin(30 * z), lambda z: 30 * np.cos(30 * z)),
    ("relu", lambda z: np.maximum(z, 0), lambda z: (z > 0).astype(float)),
    ("linear", lambda z: z, lambda z: np.ones_like(z)),
])
def test_activation_closed_forms(rng, activation, forward, derivative):
    z = rng.standard_normal((2, 6, 4)).astype(np.float32)
    bias = rng.standard_normal((2, 4)).astype(np.float32)
    z_work, a = z.copy(), np.empty_like(z)
    cpu.bias_activation(z_work, bias, a, activation, 30.0)
    np.testing.assert_allclose(z_work, z + bias[:, None], rtol=1e-6)
    np.testing.assert_allclose(a, forward((z + bias[:, None]).astype(np.float64)), rtol=1e-4, atol=1e-5)
    grad = rng.standard_normal((2, 6, 4)).astype(np.float32)
    expected = grad * derivative((z + bias[:, None]).astype(np.float64))
    cpu.activation_backward(grad, z_work, a, activation, 30.0)
    np.testing.assert_allclose(grad, expected, rtol=1e-3, atol=1e-4)


def test_mse_loss_closed_form_per_network(rng):
    pred, target = rng.random((2, 10, 3), dtype=np.float32), rng.random((2, 10, 3), dtype=np.float32)
    grad, loss = np.empty_like(pred), np.empty(2, np.float32)
    cpu.mse_loss(pred, target, grad, loss)
    for n in range(2):
        assert loss[n] == pytest.approx(float(np.mean((pred[n] - target[n]) ** 2)), rel=1e-6)
    np.testing.assert_allclose(grad, 2 * (pred - target) / 30, rtol=1e-6)


def test_cosine_schedule_endpoints():
    assert learning_rate(0, 100, 1e-3, 1e-5, 0) == pytest.approx(1e-3)
    assert learning_rate(50, 100, 1e-3, 1e-5, 0) == pytest.approx((1e-3 + 1e-5) / 2)
    assert learning_rate(100, 100, 1e-3, 1e-5, 0) == pytest.approx(1e-5)


def test_warmup_rises_linearly_then_follows_a_cosine_over_the_rest():
    rates = [learning_rate(step, 110, 1e-3, 1e-5, 10) for step in range(111)]
    assert rates[:10] == pytest.approx([1e-4 * (i + 1) for i in range(10)])  # lr/10, 2 lr/10, ... lr
    assert rates[10] == pytest.approx(1e-3)  # the cosine starts at its peak after the warm-up
    assert rates[60] == pytest.approx((1e-3 + 1e-5) / 2)  # half way through the remaining 100
    assert rates[110] == pytest.approx(1e-5)
    no_warmup = [learning_rate(step, 100, 1e-3, 1e-5, 0) for step in range(101)]
    assert rates[10:] == pytest.approx(no_warmup)  # the 100-step cosine, shifted by the warm-up


def test_adam_matches_textbook_formula(rng):
    p, g = rng.standard_normal(50).astype(np.float32), rng.standard_normal(50).astype(np.float32)
    m, v = np.zeros(50, np.float32), np.zeros(50, np.float32)
    counter, hyper = np.array([0], np.int64), np.zeros(3, np.float32)
    p_ref = p.astype(np.float64).copy()
    m_ref = np.zeros(50)
    v_ref = np.zeros(50)
    for t in range(1, 4):
        cpu.advance_schedule(counter, hyper, 1e-2, 1e-4, 10, 0, 0.9, 0.999)
        cpu.adam_update(p, g, m, v, hyper, 0.9, 0.999, 1e-8)
        lr = learning_rate(t - 1, 10, 1e-2, 1e-4, 0)
        m_ref = 0.9 * m_ref + 0.1 * g
        v_ref = 0.999 * v_ref + 0.001 * g.astype(np.float64) ** 2
        p_ref -= lr * (m_ref / (1 - 0.9**t)) / (np.sqrt(v_ref / (1 - 0.999**t)) + 1e-8)
    assert counter[0] == 3
    np.testing.assert_allclose(p, p_ref, rtol=1e-5, atol=1e-6)


def test_sgd_momentum(rng):
    p, g = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    buf, hyper = np.zeros(5, np.float32), np.array([0.1, 0, 0], np.float32)
    start = p.copy()
    cpu.sgd_update(p, g, buf, hyper, 0.9)
    cpu.sgd_update(p, g, buf, hyper, 0.9)
    np.testing.assert_allclose(p, start - 0.1 * g - 0.1 * (1.9 * g), rtol=1e-5)


def test_batch_indices_deterministic_and_in_range():
    a = batch_indices(7, 3, 1000, 977)
    assert (a == batch_indices(7, 3, 1000, 977)).all()
    assert a.min() >= 0 and a.max() < 977
    assert not (a == batch_indices(7, 4, 1000, 977)).all()
    # roughly uniform: every pixel of a small image is hit
    assert len(np.unique(batch_indices(0, 0, 5000, 50))) == 50


@pytest.mark.parametrize("stored", ["float32", "uint8"])
def test_sample_batch_gathers_rows_per_network_seed(rng, stored):
    """Each network's pixels, their coordinates as pixel_grid gives them and their colours as the
    image's floats (an 8-bit image's v / 255), whether the pixels are kept as floats or as bytes."""
    width, height = 5, 4
    coords = pixel_grid(width, height)
    levels = rng.integers(0, 256, (2, 20, 3)).astype(np.uint8)
    values = (levels.astype(np.float32) / 255.0).astype(np.float32)
    targets = levels if stored == "uint8" else values
    bx, bt = np.empty((2, 8, 2), np.float32), np.empty((2, 8, 3), np.float32)
    cpu.sample_batch(targets, width, bx, bt, np.array([1, 9], np.uint64), np.array([5], np.int64))
    for n, seed in enumerate((1, 9)):
        idx = batch_indices(seed, 5, 8, 20)
        assert (bx[n] == coords[idx]).all() and (bt[n] == values[n, idx]).all()
    assert not (bx[0] == bx[1]).all()
    assert math.isfinite(float(bx.sum()))


@pytest.mark.parametrize("activation", ["sine", "sigmoid", "relu", "linear"])
def test_threaded_blocks_change_no_bit(activation):
    """The CPU engine splits big arrays into blocks over threads: the same bits as the reference's
    whole-array expressions, on one thread or several."""
    from inr_cli.backends import cpu_backend

    rng = np.random.default_rng(5)
    shape = (2, 5000, 130)  # past the threading threshold, and not a whole number of blocks
    z = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal((2, 130)).astype(np.float32)
    grad = rng.standard_normal(shape).astype(np.float32)
    assert z.size >= cpu_backend.PARALLEL_MIN_ELEMENTS and z.size % cpu_backend.BLOCK_ELEMENTS
    results = []
    for backend in (NumpyBackend(), cpu_backend.CpuBackend(1), cpu_backend.CpuBackend(2), cpu_backend.CpuBackend(3)):
        z_t, a_t, g_t = z.copy(), np.empty_like(z), grad.copy()
        backend.bias_activation(z_t, bias, a_t, activation, 30.0)
        backend.activation_backward(g_t, z_t, a_t, activation, 30.0)
        results.append((z_t, a_t, g_t))
    whole_z = z + bias[:, None, :]
    whole_a = {"sine": np.sin(whole_z * np.float32(30.0)), "sigmoid": 1.0 / (1.0 + np.exp(-whole_z)),
               "relu": np.maximum(whole_z, 0.0), "linear": whole_z}[activation]
    for z_t, a_t, g_t in results:
        assert np.array_equal(z_t, whole_z)
        np.testing.assert_array_equal(a_t, results[0][1])
        np.testing.assert_array_equal(g_t, results[0][2])
    if activation == "sine":
        assert np.array_equal(results[0][1], whole_a)
        assert np.array_equal(results[1][2], grad * (np.float32(30.0) * np.cos(np.float32(30.0) * whole_z)))


def test_hashgrid_interpolates_a_plane_exactly_and_hashes_as_the_paper_does():
    """On a dense level whose vertices hold a plane a + b x + c y, the encoding is that plane at every
    point (bilinear interpolation reproduces it); a hashed level's corner (i, j) reads entry
    (i XOR j * 2654435761) mod T; and points beyond the image read its border."""
    from inr_cli.core.encodings import HASH_PRIME
    from tests.kernel_checks import hashgrid_levels

    grid = hashgrid_levels(levels=2, features=1, log2_size=6, coarsest=4, finest=12)
    (dense_n, _, dense_size, dense_hashed), (fine_n, fine_offset, fine_size, fine_hashed) = grid.level_table
    assert (dense_size, dense_hashed, fine_size, fine_hashed) == (25, 0, 64, 1)
    j, i = np.divmod(np.arange(25), 5)
    tables = np.zeros((1, grid.parameter_count))
    tables[0, :25] = 0.5 + 2.0 * i / dense_n - 3.0 * j / dense_n  # vertex (i, j) sits at x = i / N
    x = np.random.default_rng(0).uniform(-1, 1, (1, 50, 2))
    out = np.empty((1, 50, 2))
    NumpyBackend().hashgrid_encode(x, tables, out, grid.level_table)
    p = (x[0] + 1) / 2
    np.testing.assert_allclose(out[0, :, 0], 0.5 + 2.0 * p[:, 0] - 3.0 * p[:, 1], atol=1e-12)
    assert (out[0, :, 1] == 0).all()

    corner = np.array([[[(2 * 5 + 0.0) / fine_n - 1, (2 * 7 + 0.0) / fine_n - 1]]])  # vertex (5, 7) exactly
    entry = (5 ^ (7 * HASH_PRIME)) % 64
    tables[0, fine_offset + entry] = 9.0
    NumpyBackend().hashgrid_encode(corner, tables, out[:, :1], grid.level_table)
    assert out[0, 0, 1] == 9.0
    beyond = np.array([[[3.0, -5.0]]])
    on_border = np.array([[[1.0, -1.0]]])
    out2 = np.empty((1, 1, 2))
    NumpyBackend().hashgrid_encode(beyond, tables, out[:, :1], grid.level_table)
    NumpyBackend().hashgrid_encode(on_border, tables, out2, grid.level_table)
    assert (out[:, :1] == out2).all()


def test_hashgrid_backward_is_the_adjoint_of_the_encoding(rng):
    """The encoding is linear in the tables, so its backward pass is its transpose: for any tables T and
    output gradient G, <encode(T), G> = <T, backward(G)>, over several networks with points of their own."""
    from tests.kernel_checks import hashgrid_levels

    grid = hashgrid_levels(features=3)
    tables = rng.standard_normal((2, grid.parameter_count))
    x = rng.uniform(-1, 1, (2, 40, 2))
    g = rng.standard_normal((2, 40, grid.features))
    out, table_grads = np.empty((2, 40, grid.features)), np.empty_like(tables)
    NumpyBackend().hashgrid_encode(x, tables, out, grid.level_table)
    NumpyBackend().hashgrid_backward(x, g, table_grads, grid.level_table)
    np.testing.assert_allclose((out * g).sum(axis=(1, 2)), (tables * table_grads).sum(axis=1), rtol=1e-10)


@pytest.mark.numerics
def test_the_cpu_engine_scatters_the_hash_grid_from_the_corners_it_kept(rng):
    """The CPU engine's hash grid runs the reference's levels on its threads; its forward keeps each
    level's corners (hashgrid_corner_buffers: int32 entries and float32 weights for the batch) and its
    backward scatters from them, not from the points (moved after the forward here: the gradient is
    still the forward points'). On one, two or three threads, with and without kept corners, the
    reference's very bits: each level is one thread's, added in the order of the points."""
    from inr_cli.backends.cpu_backend import PARALLEL_MIN_ELEMENTS, CpuBackend
    from tests.kernel_checks import hashgrid_levels

    grid = hashgrid_levels(levels=8, features=2, log2_size=10, coarsest=4, finest=200)
    networks, rows = 2, 20000
    x = rng.uniform(-1, 1, (networks, rows, 2)).astype(np.float32)
    x[:, 0] = (1.0, -1.0)  # on the border
    tables = rng.uniform(-1, 1, (networks, grid.parameter_count + 3)).astype(np.float32)[:, 3:]  # views of [N, P]
    grad = rng.standard_normal((networks, rows, grid.features)).astype(np.float32)
    assert grad.size >= PARALLEL_MIN_ELEMENTS, "past the threading threshold"
    out, table_grads = np.empty_like(grad), np.empty_like(tables)
    NumpyBackend().hashgrid_encode(x, tables, out, grid.level_table)
    NumpyBackend().hashgrid_backward(x, grad, table_grads, grid.level_table)
    moved = rng.uniform(-1, 1, x.shape).astype(np.float32)
    for threads in (1, 2, 3):
        engine = CpuBackend(threads)
        corners = engine.hashgrid_corner_buffers(grid.levels, networks, rows)
        for kept in (corners, None):
            out_t, grads_t = np.full_like(out, np.nan), np.full_like(table_grads, np.nan)
            engine.hashgrid_encode(x, tables, out_t, grid.level_table, kept)
            engine.hashgrid_backward(x if kept is None else moved, grad, grads_t, grid.level_table, kept)
            assert np.array_equal(out_t, out) and np.array_equal(grads_t, table_grads), (threads, kept is None)
    assert corners.entries.dtype == np.int32 and corners.weights.dtype == np.float32
    # Float32 sums of thousands of shares an entry, against float64: to a share of the largest.
    assert_reproduced(table_grads, _scattered_in_float64(x, grad, grid), "the scatter in float32")


@pytest.mark.numerics
def test_the_cpu_engine_keeps_the_hash_grids_temporaries_apart(rng):
    """Four points and four features a level: the backward's two temporaries ([rows, F] and [4, rows])
    have one shape there, and the engine reuses its temporaries by shape and use: the reference's bits."""
    from inr_cli.backends.cpu_backend import CpuBackend
    from tests.kernel_checks import hashgrid_levels

    grid = hashgrid_levels(levels=2, features=4)
    x = rng.uniform(-1, 1, (1, 4, 2)).astype(np.float32)
    grad = rng.standard_normal((1, 4, grid.features)).astype(np.float32)
    expected, table_grads = (np.empty((1, grid.parameter_count), np.float32) for _ in range(2))
    NumpyBackend().hashgrid_backward(x, grad, expected, grid.level_table)
    CpuBackend(1).hashgrid_backward(x, grad, table_grads, grid.level_table)
    assert np.abs(expected).max() > 0 and np.array_equal(table_grads, expected)


def _scattered_in_float64(x, grad, grid):
    """The tables' gradient summed in float64, an independent scatter (one point at a time)."""
    from inr_cli.backends.numpy_ops import hashgrid_corners

    features = grid.level_features
    expected = np.zeros((len(x), grid.entries, features))
    for level, row in enumerate(grid.level_table):
        entries, weights = hashgrid_corners(x, row)
        for n in range(len(x)):
            shares = weights[:, n, :, None] * grad[n, None, :, level * features:(level + 1) * features]
            np.add.at(expected[n], (entries[:, n] + row[1]).ravel(), shares.reshape(-1, features).astype(np.float64))
    return expected.reshape(len(x), -1)


def test_the_cpu_engines_update_in_blocks_is_the_references_bit_for_bit(rng):
    """The CPU engine updates a large table a block at a time (temporaries a block's, not three of the
    table's): every element gets the reference's whole-array expression, on any number of threads."""
    import tracemalloc

    from inr_cli.backends import cpu_backend, numpy_ops

    size = 8 * cpu_backend.BLOCK_ELEMENTS + 7
    arrays = [rng.standard_normal((1, size)).astype(np.float32) for _ in range(4)]
    arrays[3] = np.abs(arrays[3])  # Adam's v
    hyper = np.array([1e-2, 0.5, 0.3], np.float32)
    reference = [a.copy() for a in arrays]
    numpy_ops.adam_update(*reference, hyper, 0.9, 0.99, 1e-8)
    numpy_ops.sgd_update(*reference[:3], hyper, 0.9)
    engine = cpu_backend.CpuBackend(threads=2)
    tracemalloc.start()
    try:
        engine.adam_update(*arrays, hyper, 0.9, 0.99, 1e-8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    engine.sgd_update(*arrays[:3], hyper, 0.9)
    assert peak < arrays[0].nbytes  # the whole-array expression's temporaries are three tables
    for a, b in zip(arrays, reference):
        assert np.array_equal(a, b)
