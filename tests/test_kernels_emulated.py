"""The CUDA kernels' own source, compiled as C++ and run on the CPU, against the NumPy reference.

This checks indexing, tiling, bounds checks, split-K, two-pass reductions and barrier placement
of every kernel, through the same launch plans the GPU uses (see tests/emulation). It needs g++,
not a GPU; GPU timing and warp-level behaviour are left to tests/test_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.launch import plan_column_reduce, plan_matmul
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.config import Config
from inr_cli.network import NetworkSpec, init_parameters
from inr_cli.pixels import PixelImage
from inr_cli.render import render_float
from inr_cli.trainer import Trainer

cpu = NumpyBackend()

MATMUL_CASES = [  # (m, n, k): one row, width one, ragged edges, every tile choice, split-K
    (1, 1, 1), (1, 5, 3), (3, 1, 9), (37, 65, 70), (130, 129, 17), (200, 3, 33), (3, 140, 40),
    (70, 40, 9), (40, 70, 9), (64, 64, 1100), (5, 70, 1500),
]


@pytest.mark.parametrize("m,n,k", MATMUL_CASES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul(emulated, m, n, k, trans):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    ta, tb = trans[0] == "t", trans[1] == "t"
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    emulated.matmul(a, b, out, ta, tb)
    np.testing.assert_allclose(out, (a.T if ta else a) @ (b.T if tb else b), rtol=1e-4, atol=1e-4)


def test_split_k_and_tiles_are_exercised():
    assert plan_matmul(64, 64, 1100, True, False, sm_count=4).splits > 1
    assert plan_matmul(5, 70, 1500, True, False, sm_count=4).tile.name == "8x256"
    assert plan_matmul(200, 3, 33, False, True, sm_count=4).tile.name == "256x8"
    assert {plan_matmul(m, n, k, False, False, 4).tile.name for m, n, k in MATMUL_CASES} >= {
        "128x128", "128x64", "64x128", "256x8", "8x256"}


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 40), (2000, 1), (1500, 33), (70000, 2)])
def test_column_reduce(emulated, rows, cols):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    out = np.full(cols, np.nan, np.float32)
    emulated.column_reduce(x, out)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)


def test_column_reduce_two_pass_happens():
    assert plan_column_reduce(70000, 2).row_blocks > 1
    assert plan_column_reduce(100, 2).row_blocks == 1


@pytest.mark.parametrize("n", [1, 255, 257, 5000])
def test_fill(emulated, n):
    out = np.zeros(n, np.float32)
    emulated.fill(out, -1.5)
    assert (out == -1.5).all()


@pytest.mark.parametrize("activation", ["linear", "sigmoid", "sine", "relu"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (300, 3), (33, 70)])
def test_activations(emulated, activation, rows, cols):
    rng = np.random.default_rng(rows * cols)
    z = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    z_ref, a_ref, g_ref = z.copy(), np.empty_like(z), grad.copy()
    cpu.bias_activation(z_ref, bias, a_ref, activation, 30.0)
    cpu.activation_backward(g_ref, z_ref, a_ref, activation, 30.0)
    a = np.empty_like(z)
    emulated.bias_activation(z, bias, a, activation, 30.0)
    emulated.activation_backward(grad, z, a, activation, 30.0)
    np.testing.assert_allclose(z, z_ref, rtol=1e-6)
    np.testing.assert_allclose(a, a_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grad, g_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,cols", [(1, 1), (700, 3), (100000, 1)])
def test_mse_loss(emulated, rows, cols):
    rng = np.random.default_rng(rows)
    pred, target = rng.random((rows, cols), dtype=np.float32), rng.random((rows, cols), dtype=np.float32)
    grad_ref, loss_ref = np.empty_like(pred), np.empty(1, np.float32)
    cpu.mse_loss(pred, target, grad_ref, loss_ref)
    grad, loss = np.empty_like(pred), np.empty(1, np.float32)
    emulated.mse_loss(pred, target, grad, loss)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)


def test_schedule_and_optimizers(emulated):
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(1001).astype(np.float32) for _ in range(4)]
    host[3] = np.abs(host[3])
    emu = [a.copy() for a in host]
    counters = [np.array([7], np.int64), np.array([7], np.int64)]
    hypers = [np.zeros(4, np.float32), np.zeros(4, np.float32)]
    for _ in range(3):
        cpu.advance_schedule(counters[0], hypers[0], 1e-3, 1e-5, 20, 0.9, 0.999)
        emulated.advance_schedule(counters[1], hypers[1], 1e-3, 1e-5, 20, 0.9, 0.999)
        cpu.adam_update(*host, hypers[0], 0.9, 0.999, 1e-8)
        emulated.adam_update(*emu, hypers[1], 0.9, 0.999, 1e-8)
    assert counters[1][0] == 10
    np.testing.assert_allclose(hypers[1], hypers[0], rtol=1e-6)
    for e, h in zip(emu, host):
        np.testing.assert_allclose(e, h, rtol=1e-5, atol=1e-6)
    cpu.sgd_update(host[0], host[1], host[2], hypers[0], 0.9)
    emulated.sgd_update(emu[0], emu[1], emu[2], hypers[1], 0.9)
    np.testing.assert_allclose(emu[0], host[0], rtol=1e-5, atol=1e-6)


def test_sample_batch_bit_identical(emulated):
    rng = np.random.default_rng(0)
    coords, targets = rng.random((997, 2), dtype=np.float32), rng.random((997, 4), dtype=np.float32)
    step = np.array([123456789], np.int64)
    out_ref = np.empty((300, 2), np.float32), np.empty((300, 4), np.float32)
    out_emu = np.empty((300, 2), np.float32), np.empty((300, 4), np.float32)
    cpu.sample_batch(coords, targets, *out_ref, 2**40 + 3, step)
    emulated.sample_batch(coords, targets, *out_emu, 2**40 + 3, step)
    assert (out_emu[0] == out_ref[0]).all() and (out_emu[1] == out_ref[1]).all()


@pytest.mark.parametrize("model,batch_size", [("siren", 0), ("sigmoid", 50)])
def test_training_steps_match_reference(emulated, model, batch_size):
    """A few whole training steps through the kernels follow the NumPy backend's loss curve."""
    image = PixelImage(np.random.default_rng(1).random((9, 14, 3), dtype=np.float32), ("r", "g", "b"))
    spec = NetworkSpec(model, 3, 20, 2, 30.0)
    config = Config(model=model, hidden=20, layers=2, lr=1e-3, batch_size=batch_size)
    params = init_parameters(spec, 0)
    losses = {}
    trainers = {}
    for name, backend in (("cpu", cpu), ("emulated", emulated)):
        trainer = Trainer(backend, spec, config, image, params, np.zeros_like(params), np.zeros_like(params), 0, 10)
        losses[name] = []
        for _ in range(4):
            trainer.step()
            losses[name].append(trainer.read_loss())
        trainers[name] = trainer
    np.testing.assert_allclose(losses["emulated"], losses["cpu"], rtol=1e-4)
    assert losses["cpu"][-1] < losses["cpu"][0]
    np.testing.assert_allclose(trainers["emulated"].state()[0], trainers["cpu"].state()[0], rtol=1e-3, atol=1e-5)
    render_ref = render_float(cpu, spec, trainers["cpu"].state()[0], 17, 5)
    render_emu = render_float(emulated, spec, trainers["emulated"].state()[0], 17, 5)
    np.testing.assert_allclose(render_emu, render_ref, atol=1e-4)


@pytest.mark.parametrize("rows,in_f,out_f", [(1, 2, 5), (300, 2, 70), (150, 70, 3), (129, 33, 65)])
@pytest.mark.parametrize("activation", ["sine", "sigmoid", "linear"])
def test_fused_layer_kernels(emulated, rows, in_f, out_f, activation):
    """linear_forward (matmul + bias + activation epilogue) and linear_backward_input (matmul +
    activation-derivative epilogue) against the NumPy compositions they replace."""
    rng = np.random.default_rng(rows + in_f)
    x = rng.uniform(-1, 1, (rows, in_f)).astype(np.float32)
    weight = (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)
    bias = rng.standard_normal(out_f).astype(np.float32)
    results = {}
    for name, backend in (("cpu", cpu), ("emulated", emulated)):
        z, a = np.empty((rows, out_f), np.float32), np.empty((rows, out_f), np.float32)
        backend.linear_forward(x, weight, bias, z, a, activation, 30.0)
        grad_out = np.cos(np.arange(rows * out_f, dtype=np.float32)).reshape(rows, out_f)
        grad_in = np.empty((rows, in_f), np.float32)
        backend.linear_backward_input(grad_out, weight, x, np.sin(x), grad_in, activation, 30.0)
        results[name] = (z, a, grad_in)
    for got, want in zip(results["emulated"], results["cpu"]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("rows,m", [(1, 1), (70, 5), (33, 256)])
def test_fourier_features(emulated, rows, m):
    projection = np.random.default_rng(rows).normal(0, 10, (rows, m)).astype(np.float32)
    ref, out = np.empty((rows, 2 * m), np.float32), np.full((rows, 2 * m), np.nan, np.float32)
    cpu.fourier_features(projection, ref)
    emulated.fourier_features(projection, out)
    np.testing.assert_allclose(out, ref, atol=2e-4)


def test_fourier_network_steps_match_reference(emulated):
    image = PixelImage(np.random.default_rng(2).random((8, 11, 3), dtype=np.float32), ("r", "g", "b"))
    spec = NetworkSpec("relu", 3, 16, 2, encoding="fourier", fourier_features=8, fourier_sigma=3.0)
    config = Config(model="relu", hidden=16, layers=2, lr=1e-3, encoding="fourier", fourier_features=8,
                    fourier_sigma=3.0)
    params = init_parameters(spec, 0)
    losses = {}
    for name, backend in (("cpu", cpu), ("emulated", emulated)):
        trainer = Trainer(backend, spec, config, image, params, np.zeros_like(params), np.zeros_like(params), 0, 10)
        losses[name] = []
        for _ in range(3):
            trainer.step()
            losses[name].append(trainer.read_loss())
        assert (trainer.state()[0][: spec.encoding_size()] == params[: spec.encoding_size()]).all()
    np.testing.assert_allclose(losses["emulated"], losses["cpu"], rtol=1e-4)
