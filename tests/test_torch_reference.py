"""The benchmarks' PyTorch peer (benchmarks/torch_reference.py) trains the very network ours does:
the same losses and the same function after a few steps from the same parameters, eager and compiled.
A speed ratio against a peer that trained something else would mean nothing. PyTorch is not a
dependency of inr: skipped where it is not installed (CI); runs where the benchmarks run."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common import configure, make_trainer, photo
from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.core.coords import pixel_grid
from inr_cli.core.render import render_float

torch = pytest.importorskip("torch", reason="PyTorch is the benchmarks' peer, not a dependency of inr")

from benchmarks.torch_reference import TorchTrainer, optimizer_settings, use_tf32  # noqa: E402

NETWORKS = {
    "siren": ("siren", dict(hidden=32, layers=2, omega0=30.0, lr=1e-3)),
    "sigmoid-fourier": ("sigmoid", dict(hidden=32, layers=2, fourier_features=16, lr=3e-3)),
}
STEPS = 5


def trained_pair(network: str, compile_mode: str | None):
    preset, flags = NETWORKS[network]
    image = photo("coffee", 16, 12)
    config = configure(preset, 16, steps=20, lr_min=1e-5, **flags)
    ours = make_trainer(CpuBackend(), config, [image])
    start = np.array(ours.params[0], copy=True)
    coords = pixel_grid(image.width, image.height)
    peer = TorchTrainer(torch, ours.spec, start, coords, image.targets(), config.optimizer.lr,
                        config.optimizer.lr_min, config.training.steps, 0, 0, "cpu", compile_mode=compile_mode,
                        **optimizer_settings(config.optimizer))
    ours_losses, peer_losses = [], []
    for _ in range(STEPS):
        ours.step()
        peer.step()
        ours_losses.append(float(ours.read_loss()[0]))
        peer_losses.append(peer.read_loss())
    ours_values = render_float(CpuBackend(), ours.spec, ours.params[:1], image.width, image.height, clip=False)
    peer_values = peer.render(coords).numpy().reshape(ours_values.shape)
    return np.array(ours_losses), np.array(peer_losses), ours_values, peer_values


@pytest.mark.parametrize("network", NETWORKS)
def test_eager_peer_trains_our_network(network):
    ours_losses, peer_losses, ours_values, peer_values = trained_pair(network, None)
    assert ours_losses[-1] < ours_losses[0]  # it trained: the comparison below is not of two idle networks
    np.testing.assert_allclose(peer_losses, ours_losses, rtol=1e-4)
    np.testing.assert_allclose(peer_values, ours_values, atol=1e-4)


def test_compiled_peer_trains_our_network():
    """torch.compile'd loss and optimizer step, with the schedule's learning rate changing each step."""
    ours_losses, peer_losses, ours_values, peer_values = trained_pair("siren", "default")
    np.testing.assert_allclose(peer_losses, ours_losses, rtol=1e-4)
    np.testing.assert_allclose(peer_values, ours_values, atol=1e-4)


def test_tf32_switch_is_pytorchs_matmul_precision():
    try:
        use_tf32(torch, True)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        use_tf32(torch, False)
    assert torch.get_float32_matmul_precision() == "highest"
