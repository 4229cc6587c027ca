"""GPU tests: every kernel against the NumPy reference on awkward shapes, then whole runs.

Marked `gpu`: skipped with the reason when CuPy or a GPU is missing (see conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.config import Config
from inr_cli.network import NetworkSpec, init_parameters
from inr_cli.pixels import PixelImage
from inr_cli.render import render_float
from inr_cli.trainer import Trainer

pytestmark = pytest.mark.gpu

MATMUL_SHAPES = [  # (m, n, k): 1 row, width 1, not multiples of any tile, a big batch
    (1, 1, 1), (1, 256, 256), (256, 1, 3), (37, 65, 70), (130, 129, 17), (300, 3, 256), (3, 256, 300),
    (262144, 256, 256), (256, 256, 262144), (3, 256, 262144), (1 << 20, 3, 64), (40000, 64, 2),
]


@pytest.fixture(scope="module")
def gpu():
    from inr_cli.backends.cuda_backend import CudaBackend

    return CudaBackend()


@pytest.fixture(scope="module")
def cpu():
    return NumpyBackend()


def close(gpu, device_array, reference, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(gpu.to_host(device_array), reference, rtol=rtol, atol=atol)


@pytest.mark.parametrize("m,n,k", MATMUL_SHAPES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_matches_numpy(gpu, m, n, k, trans):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    ta, tb = trans[0] == "t", trans[1] == "t"
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    out = gpu.empty((m, n))
    gpu.matmul(gpu.to_device(a), gpu.to_device(b), out, ta, tb)
    reference = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    close(gpu, out, reference, rtol=1e-3, atol=1e-3 * np.sqrt(k))


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 256), (1 << 20, 1), (1 << 20, 3), (262144, 256), (513, 33), (7, 1000)])
def test_column_reduce(gpu, rows, cols):
    x = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
    out = gpu.empty((cols,))
    gpu.column_reduce(gpu.to_device(x), out)
    close(gpu, out, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3 * np.sqrt(rows))


@pytest.mark.parametrize("n", [1, 255, 257, 1 << 20])
def test_fill(gpu, n):
    out = gpu.empty((n,))
    gpu.fill(out, 0.25)
    assert (gpu.to_host(out) == np.float32(0.25)).all()


@pytest.mark.parametrize("activation", ["linear", "sigmoid", "sine", "relu"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (1000, 3), (4097, 256)])
def test_activations(gpu, cpu, activation, rows, cols):
    rng = np.random.default_rng(rows)
    z = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    z_ref, a_ref, g_ref = z.copy(), np.empty_like(z), grad.copy()
    cpu.bias_activation(z_ref, bias, a_ref, activation, 30.0)
    cpu.activation_backward(g_ref, z_ref, a_ref, activation, 30.0)
    z_d, a_d, g_d = gpu.to_device(z), gpu.empty(z.shape), gpu.to_device(grad)
    gpu.bias_activation(z_d, gpu.to_device(bias), a_d, activation, 30.0)
    gpu.activation_backward(g_d, z_d, a_d, activation, 30.0)
    close(gpu, z_d, z_ref)
    close(gpu, a_d, a_ref, atol=1e-4)
    close(gpu, g_d, g_ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1000, 3), (1 << 20, 3)])
def test_mse_loss(gpu, cpu, rows, cols):
    rng = np.random.default_rng(rows)
    pred, target = rng.random((rows, cols), dtype=np.float32), rng.random((rows, cols), dtype=np.float32)
    grad_ref, loss_ref = np.empty_like(pred), np.empty(1, np.float32)
    cpu.mse_loss(pred, target, grad_ref, loss_ref)
    grad_d, loss_d = gpu.empty(pred.shape), gpu.empty((1,))
    gpu.mse_loss(gpu.to_device(pred), gpu.to_device(target), grad_d, loss_d)
    close(gpu, grad_d, grad_ref, atol=1e-9)
    close(gpu, loss_d, loss_ref, rtol=1e-5)


def test_optimizer_and_schedule(gpu, cpu):
    rng = np.random.default_rng(0)
    n = 100003
    host = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    host[3] = np.abs(host[3])
    dev = [gpu.to_device(a) for a in host]
    counter_h, counter_d = np.array([41], np.int64), gpu.to_device(np.array([41], np.int64))
    hyper_h, hyper_d = np.zeros(4, np.float32), gpu.zeros((4,))
    for _ in range(3):
        cpu.advance_schedule(counter_h, hyper_h, 1e-3, 1e-5, 100, 0.9, 0.999)
        gpu.advance_schedule(counter_d, hyper_d, 1e-3, 1e-5, 100, 0.9, 0.999)
        cpu.adam_update(*host, hyper_h, 0.9, 0.999, 1e-8)
        gpu.adam_update(*dev, hyper_d, 0.9, 0.999, 1e-8)
    assert int(gpu.to_host(counter_d)[0]) == 44
    close(gpu, hyper_d, hyper_h, rtol=1e-6)
    for d, h in zip(dev, host):
        close(gpu, d, h, rtol=1e-5, atol=1e-6)
    cpu.sgd_update(host[0], host[1], host[2], hyper_h, 0.9)
    gpu.sgd_update(dev[0], dev[1], dev[2], hyper_d, 0.9)
    close(gpu, dev[0], host[0], rtol=1e-5, atol=1e-6)


def test_sample_batch_identical_to_cpu(gpu, cpu):
    rng = np.random.default_rng(0)
    coords = rng.random((9973, 2), dtype=np.float32)
    targets = rng.random((9973, 3), dtype=np.float32)
    step = np.array([17], np.int64)
    bx, bt = np.empty((4096, 2), np.float32), np.empty((4096, 3), np.float32)
    cpu.sample_batch(coords, targets, bx, bt, 5, step)
    bx_d, bt_d = gpu.empty((4096, 2)), gpu.empty((4096, 3))
    gpu.sample_batch(gpu.to_device(coords), gpu.to_device(targets), bx_d, bt_d, 5, gpu.to_device(step))
    assert (gpu.to_host(bx_d) == bx).all() and (gpu.to_host(bt_d) == bt).all()


def _train(backend, model, batch_size, steps=100, cuda_graph=True):
    image = PixelImage(np.random.default_rng(3).random((48, 64, 3), dtype=np.float32), ("r", "g", "b"))
    config = Config(model=model, hidden=64, layers=3, lr=1e-4 if model == "siren" else 1e-3,
                    batch_size=batch_size, cuda_graph=cuda_graph)
    spec = NetworkSpec(model, 3, 64, 3, 30.0)
    params = init_parameters(spec, 0)
    trainer = Trainer(backend, spec, config, image, params, np.zeros_like(params), np.zeros_like(params), 0, steps)
    losses = []
    for _ in range(steps):
        trainer.step()
        losses.append(trainer.read_loss())
    return np.array(losses), trainer


@pytest.mark.parametrize("model,batch_size", [("siren", 0), ("sigmoid", 0), ("siren", 1000)])
def test_training_run_matches_cpu(gpu, cpu, model, batch_size):
    cpu_losses, cpu_trainer = _train(cpu, model, batch_size)
    gpu_losses, gpu_trainer = _train(gpu, model, batch_size)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=2e-3)
    spec = cpu_trainer.spec
    cpu_render = render_float(cpu, spec, cpu_trainer.state()[0], 100, 75)
    gpu_render = render_float(gpu, spec, gpu_trainer.flat_params, 100, 75)
    np.testing.assert_allclose(gpu_render, cpu_render, atol=2e-3)


def test_cuda_graph_equals_eager(gpu):
    graph_losses, graph_trainer = _train(gpu, "siren", 0, steps=20, cuda_graph=True)
    eager_losses, _ = _train(gpu, "siren", 0, steps=20, cuda_graph=False)
    assert graph_trainer._run_step.graph is not None, f"capture failed: {graph_trainer._run_step.failed}"
    np.testing.assert_array_equal(graph_losses, eager_losses)


def test_cublas_path_agrees(gpu):
    from inr_cli.backends.cuda_backend import CudaBackend

    ours, _ = _train(gpu, "siren", 0, steps=20)
    cublas, _ = _train(CudaBackend(matmul="cublas"), "siren", 0, steps=20)
    np.testing.assert_allclose(cublas, ours, rtol=2e-3)


@pytest.mark.parametrize("rows,in_f,out_f", [(1, 2, 256), (262144, 2, 256), (262144, 256, 256), (262144, 256, 3), (999, 64, 1)])
@pytest.mark.parametrize("activation", ["sine", "sigmoid", "linear"])
def test_fused_layer_kernels(gpu, cpu, rows, in_f, out_f, activation):
    rng = np.random.default_rng(rows + in_f)
    x = rng.uniform(-1, 1, (rows, in_f)).astype(np.float32)
    weight = (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)
    bias = rng.standard_normal(out_f).astype(np.float32)
    grad_out = rng.standard_normal((rows, out_f)).astype(np.float32)
    z, a, grad_in = np.empty((rows, out_f), np.float32), np.empty((rows, out_f), np.float32), np.empty_like(x)
    cpu.linear_forward(x, weight, bias, z, a, activation, 30.0)
    cpu.linear_backward_input(grad_out, weight, x, np.sin(x), grad_in, activation, 30.0)
    z_d, a_d, g_d = gpu.empty(z.shape), gpu.empty(a.shape), gpu.empty(x.shape)
    gpu.linear_forward(gpu.to_device(x), gpu.to_device(weight), gpu.to_device(bias), z_d, a_d, activation, 30.0)
    gpu.linear_backward_input(gpu.to_device(grad_out), gpu.to_device(weight), gpu.to_device(x),
                              gpu.to_device(np.sin(x)), g_d, activation, 30.0)
    close(gpu, z_d, z, rtol=1e-3, atol=1e-3)
    close(gpu, a_d, a, rtol=1e-3, atol=3e-2 if activation == "sine" else 1e-3)  # sin(30 z) amplifies z's rounding
    close(gpu, g_d, grad_in, rtol=1e-3, atol=1e-2 * np.sqrt(out_f))


@pytest.mark.parametrize("rows,m", [(1, 1), (262144, 256), (999, 7)])
def test_fourier_features(gpu, cpu, rows, m):
    projection = np.random.default_rng(rows).normal(0, 10, (rows, m)).astype(np.float32)
    ref = np.empty((rows, 2 * m), np.float32)
    cpu.fourier_features(projection, ref)
    out = gpu.empty((rows, 2 * m))
    gpu.fourier_features(gpu.to_device(projection), out)
    close(gpu, out, ref, atol=2e-4)
