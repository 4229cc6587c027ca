"""Every backward pass against central finite differences, in float64."""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.model import backward, forward, loss_and_output_grad
from inr_cli.network import NetworkSpec, init_parameters, parameter_views
from inr_cli.workspace import Workspace

cpu = NumpyBackend()


def loss_and_grads(spec, flat, x, t):
    ws = Workspace(spec, x.shape[0], cpu, training=True, dtype=np.float64)
    params = parameter_views(spec, flat)
    grads_flat = np.zeros_like(flat)
    out = forward(cpu, spec, params, ws, x, x.shape[0])
    loss_and_output_grad(cpu, ws, out, t, x.shape[0])
    backward(cpu, spec, params, parameter_views(spec, grads_flat), ws, x, x.shape[0])
    return float(ws.loss[0]), grads_flat


@pytest.mark.parametrize("model,omega0", [("siren", 30.0), ("siren", 3.0), ("sigmoid", 30.0)])
def test_parameter_gradients_match_finite_differences(model, omega0):
    spec = NetworkSpec(model, out_features=3, hidden=7, layers=2, omega0=omega0)
    rng = np.random.default_rng(0)
    flat = init_parameters(spec, 1).astype(np.float64)
    x = rng.uniform(-1, 1, (11, 2))
    t = rng.uniform(0, 1, (11, 3))
    _, grads = loss_and_grads(spec, flat, x, t)
    eps = 1e-6
    numeric = np.empty_like(flat)
    for i in range(flat.size):
        plus, minus = flat.copy(), flat.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric[i] = (loss_and_grads(spec, plus, x, t)[0] - loss_and_grads(spec, minus, x, t)[0]) / (2 * eps)
    np.testing.assert_allclose(grads, numeric, rtol=1e-5, atol=1e-8)


def test_gradient_is_not_trivially_zero():
    spec = NetworkSpec("siren", 1, 5, 1, 30.0)
    flat = init_parameters(spec, 0).astype(np.float64)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 2))
    _, grads = loss_and_grads(spec, flat, x, np.full((4, 1), 0.5))
    assert np.abs(grads).max() > 1e-6


def test_siren_initialisation_bounds():
    spec = NetworkSpec("siren", 3, 64, 3, 30.0)
    views = parameter_views(spec, init_parameters(spec, 0))
    assert np.abs(views[0][0]).max() <= 1 / 2
    for weight, _ in views[1:]:
        assert np.abs(weight).max() <= np.sqrt(6 / weight.shape[1]) / 30
        assert np.abs(weight).max() > 0.8 * np.sqrt(6 / weight.shape[1]) / 30


def test_fourier_relu_gradients_and_frozen_frequencies():
    """ReLU MLP on Fourier features: layer gradients match finite differences, and the frequency
    matrix B at the front of the parameter vector gets exactly zero gradient (it is never trained)."""
    from inr_cli.network import encoding_view

    spec = NetworkSpec("relu", out_features=2, hidden=6, layers=2, encoding="fourier", fourier_features=4,
                       fourier_sigma=2.0)
    rng = np.random.default_rng(3)
    flat = init_parameters(spec, 2).astype(np.float64)
    x = rng.uniform(-1, 1, (9, 2))
    t = rng.uniform(0, 1, (9, 2))

    def loss(f):
        ws = Workspace(spec, 9, cpu, training=True, dtype=np.float64)
        out = forward(cpu, spec, parameter_views(spec, f), ws, x, 9, encoding_view(spec, f))
        loss_and_output_grad(cpu, ws, out, t, 9)
        return float(ws.loss[0]), ws, f

    value, ws, _ = loss(flat)
    grads = np.zeros_like(flat)
    backward(cpu, spec, parameter_views(spec, flat), parameter_views(spec, grads), ws, x, 9)
    assert (grads[: spec.encoding_size()] == 0).all()
    eps = 1e-6
    for i in range(spec.encoding_size(), flat.size):
        plus, minus = flat.copy(), flat.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric = (loss(plus)[0] - loss(minus)[0]) / (2 * eps)
        assert grads[i] == pytest.approx(numeric, rel=1e-4, abs=1e-7)
    encoded = ws.encoded
    angle = 2 * np.pi * x @ encoding_view(spec, flat).T
    np.testing.assert_allclose(encoded, np.concatenate([np.cos(angle), np.sin(angle)], axis=1), rtol=1e-10)
