"""Every backward pass against central finite differences, in float64, with several networks at once."""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.core.network import Network, NetworkSpec, frequency_view, init_networks, layer_views
from inr_cli.core.workspace import Workspace
from tests.test_networks import config_for

cpu = NumpyBackend()


def spec_for(preset: str, out_features: int, **flags) -> NetworkSpec:
    return NetworkSpec.from_config(config_for(preset, **flags), out_features)


def loss_and_grads(spec, flat, x, t):
    """Each network's loss [N] and the gradients [N, P] of the sum of the losses."""
    n, rows = flat.shape[0], x.shape[1]
    ws = Workspace(spec, n, rows, cpu, training=True, dtype=np.float64)
    network = Network(spec, flat)
    grads = np.zeros_like(flat)
    loss = np.empty(n)
    out = network.forward(cpu, ws, x, rows)
    cpu.mse_loss(out, t, ws.grad[-1], loss)
    network.backward(cpu, ws, x, rows, layer_views(spec, grads), network.encoding.parameters(grads))
    return loss, grads, ws


def numeric_gradient(spec, flat, x, t, indices, eps=1e-6):
    numeric = np.zeros_like(flat)
    for n in range(flat.shape[0]):
        for i in indices:
            plus, minus = flat.copy(), flat.copy()
            plus[n, i] += eps
            minus[n, i] -= eps
            numeric[n, i] = (loss_and_grads(spec, plus, x, t)[0][n]
                             - loss_and_grads(spec, minus, x, t)[0][n]) / (2 * eps)
    return numeric


@pytest.mark.parametrize("preset,omega0", [("siren", 30.0), ("siren", 3.0), ("sigmoid", None)])
def test_parameter_gradients_match_finite_differences(preset, omega0):
    sine = {"omega0": omega0} if omega0 else {}  # given to a network without sine layers, it is refused
    spec = spec_for(preset, 3, hidden=7, layers=2, encoding="none", **sine)  # Fourier features: below
    rng = np.random.default_rng(0)
    flat = init_networks(spec, [1, 2]).astype(np.float64)
    x = rng.uniform(-1, 1, (1, 11, 2))  # one table of coordinates for both networks
    t = rng.uniform(0, 1, (2, 11, 3))
    _, grads, _ = loss_and_grads(spec, flat, x, t)
    numeric = numeric_gradient(spec, flat, x, t, range(flat.shape[1]))
    np.testing.assert_allclose(grads, numeric, rtol=1e-5, atol=1e-8)


def test_gradient_is_not_trivially_zero():
    spec = spec_for("siren", 1, hidden=5, layers=1, omega0=30.0)
    flat = init_networks(spec, [0]).astype(np.float64)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 2))
    _, grads, _ = loss_and_grads(spec, flat, x, np.full((1, 4, 1), 0.5))
    assert np.abs(grads).max() > 1e-6


def test_siren_initialisation_bounds():
    spec = spec_for("siren", 3, hidden=64, layers=3, omega0=30.0)
    views = layer_views(spec, init_networks(spec, [0]))
    assert np.abs(views[0][0]).max() <= 1 / 2
    for weight, _ in views[1:]:
        assert np.abs(weight).max() <= np.sqrt(6 / weight.shape[2]) / 30
        assert np.abs(weight).max() > 0.8 * np.sqrt(6 / weight.shape[2]) / 30


def test_fourier_relu_gradients_and_frozen_frequencies():
    """ReLU MLP on Fourier features: layer gradients match finite differences, and the frequency
    matrix B at the front of the parameter vector gets exactly zero gradient (it is never trained)."""
    spec = spec_for("fourier", 2, hidden=6, layers=2, fourier_features=4, fourier_sigma=2.0)
    rng = np.random.default_rng(3)
    flat = init_networks(spec, [2, 3]).astype(np.float64)
    x = rng.uniform(-1, 1, (2, 9, 2))  # a table of coordinates per network, as mini-batches draw them
    t = rng.uniform(0, 1, (2, 9, 2))
    _, grads, ws = loss_and_grads(spec, flat, x, t)
    assert (grads[:, : spec.encoding_size()] == 0).all()
    numeric = numeric_gradient(spec, flat, x, t, range(spec.encoding_size(), flat.shape[1]))
    np.testing.assert_allclose(grads, numeric, rtol=1e-4, atol=1e-7)
    angle = 2 * np.pi * np.matmul(x, frequency_view(spec, flat).swapaxes(1, 2))
    np.testing.assert_allclose(ws.encoded, np.concatenate([np.cos(angle), np.sin(angle)], axis=2), rtol=1e-10)


@pytest.mark.parametrize("shared_x, linear_output", [(True, True), (False, False)])
def test_hash_grid_gradients_match_finite_differences(shared_x, linear_output):
    """The hash grid's table is trained: its gradient, scattered onto the corners of each point's
    cells, and the ReLU MLP's after it (a linear output, the preset's, or the model's sigmoid), match
    finite differences, on dense levels and on hashed ones (a table of 2^5 entries: vertices collide)
    with points on cell edges and the image's border."""
    spec = spec_for("hashgrid", 2, hidden=6, layers=2, hash_levels=3, hash_features=2, hash_log2_size=5,
                    hash_min_res=2, hash_max_res=9, linear_output=linear_output)
    assert spec.activations() == ["relu", "relu", "linear" if linear_output else "sigmoid"]
    levels = spec_levels(spec)
    assert not levels[0, 3] and levels[-1, 3], "a dense level and a hashed one"
    rng = np.random.default_rng(4)
    flat = init_networks(spec, [5, 6]).astype(np.float64)
    flat[:, : spec.encoding_size()] = rng.uniform(-1, 1, (2, spec.encoding_size()))  # far from the start's 1e-4
    x = rng.uniform(-1, 1, (1 if shared_x else 2, 13, 2))
    x[:, 0] = (-1.0, 1.0)  # corners of the image
    x[:, 1] = (0.0, 0.5)  # on vertices of the coarsest levels
    t = rng.uniform(0, 1, (2, 13, 2))
    _, grads, _ = loss_and_grads(spec, flat, x, t)
    table = grads[:, : spec.encoding_size()]
    assert (table != 0).sum() > spec.encoding_size() // 4, "most of the table is reached"
    numeric = numeric_gradient(spec, flat, x, t, range(flat.shape[1]), eps=1e-5)
    np.testing.assert_allclose(grads, numeric, rtol=1e-4, atol=1e-8)


def spec_levels(spec):
    from inr_cli.core.encodings import create_encoding

    return create_encoding(spec).level_table
