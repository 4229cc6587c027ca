"""The CUDA kernels' own source, compiled as C++ and run on the CPU, against the NumPy reference.

This checks indexing, tiling, bounds checks, split-K, two-pass reductions and barrier placement
of every kernel, through the same launch plans the GPU uses (see tests/emulation). It needs g++,
not a GPU; GPU timing and warp-level behaviour are left to tests/test_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.launch import plan_column_reduce, plan_matmul
from inr_cli.config import Config
from inr_cli.network import NetworkSpec, init_parameters
from inr_cli.pixels import PixelImage
from inr_cli.render import render_float
from inr_cli.trainer import Trainer
from tests.kernel_checks import (
    check_column_reduce, check_fill, check_fourier_features, check_fused_layer, check_matmul, check_mse_loss,
    check_sample_batch, check_schedule_and_optimizers, check_activations, cpu,
)


MATMUL_CASES = [  # (m, n, k): one row, width one, ragged edges, every tile choice, split-K
    (1, 1, 1), (1, 5, 3), (3, 1, 9), (37, 65, 70), (130, 129, 17), (200, 3, 33), (3, 140, 40),
    (70, 40, 9), (40, 70, 9), (64, 64, 1100), (5, 70, 1500),
]


@pytest.mark.parametrize("m,n,k", MATMUL_CASES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul(emulated, m, n, k, trans):
    check_matmul(emulated, m, n, k, trans)


def test_split_k_and_tiles_are_exercised():
    assert plan_matmul(64, 64, 1100, True, False, sm_count=4).splits > 1
    assert plan_matmul(5, 70, 1500, True, False, sm_count=4).tile.name == "8x256"
    assert plan_matmul(200, 3, 33, False, True, sm_count=4).tile.name == "256x8"
    assert {plan_matmul(m, n, k, False, False, 4).tile.name for m, n, k in MATMUL_CASES} >= {
        "128x128", "128x64", "64x128", "256x8", "8x256"}


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 40), (2000, 1), (1500, 33), (70000, 2)])
def test_column_reduce(emulated, rows, cols):
    check_column_reduce(emulated, rows, cols)


def test_column_reduce_two_pass_happens():
    assert plan_column_reduce(70000, 2).row_blocks > 1
    assert plan_column_reduce(100, 2).row_blocks == 1


@pytest.mark.parametrize("n", [1, 255, 257, 5000])
def test_fill(emulated, n):
    check_fill(emulated, n)


@pytest.mark.parametrize("activation", ["linear", "sigmoid", "sine", "relu"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (300, 3), (33, 70)])
def test_activations(emulated, activation, rows, cols):
    check_activations(emulated, activation, rows, cols)


@pytest.mark.parametrize("rows,cols", [(1, 1), (700, 3), (100000, 1)])
def test_mse_loss(emulated, rows, cols):
    check_mse_loss(emulated, rows, cols)


def test_schedule_and_optimizers(emulated):
    check_schedule_and_optimizers(emulated, 1001)


def test_sample_batch_bit_identical(emulated):
    check_sample_batch(emulated, 997, 300, 2**40 + 3, 123456789)


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
    check_fused_layer(emulated, rows, in_f, out_f, activation)


@pytest.mark.parametrize("rows,m", [(1, 1), (70, 5), (33, 256)])
def test_fourier_features(emulated, rows, m):
    check_fourier_features(emulated, rows, m)


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
