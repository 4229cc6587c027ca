"""A base with modulations (functa) and sets of latents: the batched latent pass against an
independent float64 reference and finite differences (the inner loop's gradient with respect to the
latents, the base's gradients), the outer gradient through the K inner steps against finite
differences of the loss after them, the kernels under the CPU emulation against the reference, and
the path of a user: meta-init --modulations, resumed; fit-many --init BASE, resumed; info, render,
export, the loader, to_torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.cli import app
from inr_cli.core.coords import pixel_grid
from inr_cli.core.modulations import LatentPass, ModulatedBase, first_base, fit_latents
from inr_cli.core.network import NetworkSpec, init_parameters, layer_views
from inr_cli.core.training_loop import Interrupted
from inr_cli.errors import InrError
from inr_cli.sets import meta_base
from inr_cli.sets.meta_base import outer_gradient
from tests import failpoints

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SPEC = NetworkSpec("siren", 1, 8, 2, 30.0, "none")
SIDE, LATENT = 6, 4


# --- an independent reference: the modulated SIREN, its loss and dL/dz in float64, per image ---
def loss_and_latent_gradient(spec: NetworkSpec, params, shift_map, z, coords, target) -> tuple[float, np.ndarray]:
    layers = [(w[0], b[0]) for w, b in layer_views(spec, np.asarray(params, np.float64)[None])]
    shifts, hidden, omega = np.asarray(shift_map, np.float64) @ z, spec.hidden, spec.omega0
    h, before = np.asarray(coords, np.float64), []
    for i, (weight, bias) in enumerate(layers):
        h = h @ weight.T + bias
        if i < spec.layers:
            before.append(h + shifts[i * hidden:(i + 1) * hidden])
            h = np.sin(omega * before[-1])
    error = h - target
    grad, shift_grads = 2 * error / error.size, np.zeros(spec.layers * hidden)
    for i in range(spec.layers, 0, -1):
        grad = (grad @ layers[i][0]) * omega * np.cos(omega * before[i - 1])
        shift_grads[(i - 1) * hidden:i * hidden] = grad.sum(axis=0)
    return float(np.mean(error ** 2)), np.asarray(shift_map, np.float64).T @ shift_grads


def loss_after_steps(spec: NetworkSpec, theta: np.ndarray, steps: int, targets: np.ndarray) -> float:
    """The mean over the images of the loss after `steps` steps z <- z - rates * dL/dz from 0."""
    count, shifts = spec.parameter_count(), spec.layers * spec.hidden
    params, shift_map = theta[:count], theta[count:count + shifts * LATENT].reshape(shifts, LATENT)
    coords, total = pixel_grid(SIDE, SIDE), 0.0
    for target in targets:
        z = np.zeros(LATENT)
        for _ in range(steps):
            z = z - theta[-LATENT:] * loss_and_latent_gradient(spec, params, shift_map, z, coords, target)[1]
        total += loss_and_latent_gradient(spec, params, shift_map, z, coords, target)[0]
    return total / len(targets)


def a_base(rate: float = 0.3, steps: int = 3) -> ModulatedBase:
    return first_base(SPEC, init_parameters(SPEC, 1), LATENT, rate, steps, 0)


def targets_of(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (count, SIDE * SIDE, 1)).astype(np.float32)


@pytest.mark.parametrize("backend", [NumpyBackend(), CpuBackend()], ids=lambda b: b.name)
def test_the_latent_pass_is_the_reference_and_its_gradients_the_differences_of_its_loss(backend):
    base, targets = a_base(), targets_of(3)
    latents = np.random.default_rng(1).normal(0, 0.3, (3, LATENT))
    latent_pass = LatentPass(backend, base, targets, SIDE, SIDE)
    latent_pass.set_latents(latents)
    latent_pass.loss_and_shift_grads()
    coords, eps = pixel_grid(SIDE, SIDE), 1e-6
    params, shift_map = base.params.astype(np.float64), base.shift_map.astype(np.float64)
    z32 = latents.astype(np.float32).astype(np.float64)  # what the pass was given

    def losses(params, shift_map, z):
        return np.array([loss_and_latent_gradient(SPEC, params, shift_map, zi, coords, t)[0]
                         for zi, t in zip(z, targets)])

    np.testing.assert_allclose(latent_pass.read_loss(), losses(params, shift_map, z32), rtol=1e-5)
    differences = np.stack([(losses(params, shift_map, z32 + eps * e) - losses(params, shift_map, z32 - eps * e))
                            / (2 * eps) for e in np.eye(LATENT)], axis=1)
    np.testing.assert_allclose(latent_pass.latent_gradients(), differences, rtol=1e-4, atol=1e-5 * np.abs(
        differences).max())
    # the base's gradients, summed over the networks, against differences along every coordinate
    gradient = latent_pass.base_gradients()
    flat = np.concatenate([params, shift_map.ravel()])
    count = SPEC.parameter_count()

    def total(values):
        return losses(values[:count], values[count:].reshape(shift_map.shape), z32).sum()

    steps = np.eye(flat.size) * eps
    differences = np.array([(total(flat + step) - total(flat - step)) / (2 * eps) for step in steps])
    np.testing.assert_allclose(gradient, differences, rtol=1e-4, atol=1e-5 * np.abs(differences).max())


def test_a_latent_drawn_through_the_base_is_the_network_that_expand_gives():
    """The fitting pass and the network every reader draws (ModulatedBase.expand) are one function."""
    from inr_cli.core.render import render_networks

    base, targets = a_base(), targets_of(2)
    latent_pass = LatentPass(NumpyBackend(), base, targets, SIDE, SIDE)
    fitted = fit_latents(latent_pass, 3)
    drawn = render_networks(NumpyBackend(), SPEC, base.expand(fitted["latents"]), SIDE, SIDE)
    loss = np.mean((drawn.reshape(2, -1, 1) - targets) ** 2, axis=(1, 2))
    # the render clips to [0, 1]: never worse than the raw output's loss
    assert np.all(loss <= fitted["loss"] * (1 + 1e-5))
    raw = LatentPass(NumpyBackend(), base, targets, SIDE, SIDE)
    raw.set_latents(fitted["latents"])
    raw.loss_and_shift_grads()
    np.testing.assert_allclose(raw.read_loss(), fitted["loss"], rtol=1e-6)


def test_fitting_k_steps_takes_k_backward_passes_and_the_loss_of_the_latent_it_returns():
    """The reading after the last step needs no gradient: fit_latents makes one backward pass a step,
    not one a reading, and what it returns is what a full pass at its latents gives."""
    base, targets = a_base(), targets_of(2)
    backend = NumpyBackend()
    calls = []
    backward = backend.linear_backward_input

    def counted(*args, **kwargs):
        calls.append(1)
        return backward(*args, **kwargs)

    backend.linear_backward_input = counted
    fitted = fit_latents(LatentPass(backend, base, targets, SIDE, SIDE), 3)
    assert len(calls) == 3 * SPEC.layers
    full = LatentPass(NumpyBackend(), base, targets, SIDE, SIDE)
    full.set_latents(fitted["latents"])
    full.loss_and_shift_grads()
    np.testing.assert_array_equal(full.read_loss(), fitted["loss"])


def test_the_outer_gradient_is_the_difference_of_the_loss_after_the_inner_steps():
    """The gradient of the loss after K steps (through them: second order), along random directions of
    θ (the base, the map, the rates), against central differences of the float64 reference; the
    first-order gradient (the K steps held) is off by far more, so the test tells them apart."""
    steps = 3
    base, targets = a_base(0.3, steps), targets_of(2)
    theta = base.flat()
    gradient, losses = outer_gradient(LatentPass(CpuBackend(), base, targets, SIDE, SIDE), base)
    assert abs(np.mean(losses) - loss_after_steps(SPEC, theta, steps, targets)) < 1e-5
    directions = np.random.default_rng(2).standard_normal((6, theta.size))
    directions[:, -LATENT:] *= 0.1  # the rates' scale
    eps = 1e-5
    differences = np.array([(loss_after_steps(SPEC, theta + eps * d, steps, targets)
                             - loss_after_steps(SPEC, theta - eps * d, steps, targets)) / (2 * eps)
                            for d in directions])
    error = np.abs(directions @ gradient - differences).max() / np.abs(differences).max()
    assert error < 2e-3, error
    first_order = directions @ first_order_gradient(base, targets)
    assert np.abs(first_order - differences).max() / np.abs(differences).max() > 20 * error


def first_order_gradient(base: ModulatedBase, targets: np.ndarray) -> np.ndarray:
    """The base's gradient at the latents after the K steps, the steps held fixed (first-order MAML)."""
    latent_pass = LatentPass(CpuBackend(), base, targets, SIDE, SIDE)
    z = np.zeros((len(targets), LATENT))
    for _ in range(base.inner_steps):
        z = z - base.rates * meta_base._at(latent_pass, z, whole=False)[1]
    return np.concatenate([meta_base._at(latent_pass, z, whole=True)[2], np.zeros(LATENT)]) / len(targets)


def test_the_kernels_give_the_reference_s_latent_fit_and_outer_gradient(emulated):
    """The GPU's kernels (under the CPU emulation) through the same pass: the latents fitted, the
    losses, the outer gradient, as the NumPy reference computes them."""
    base, targets = a_base(0.3, 2), targets_of(2)
    ours, theirs = (fit_latents(LatentPass(b, base, targets, SIDE, SIDE), 3) for b in (emulated, NumpyBackend()))
    np.testing.assert_allclose(ours["latents"], theirs["latents"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours["loss"], theirs["loss"], rtol=1e-4)
    ours, theirs = (outer_gradient(LatentPass(b, base, targets, SIDE, SIDE), base)[0]
                    for b in (emulated, NumpyBackend()))
    assert np.linalg.norm(ours - theirs) <= 1e-3 * np.linalg.norm(theirs)


# --- the commands ---
def letters(folder: Path, count: int, seed: int) -> Path:
    """Grey 8-px images of one kind: a bar at a random place on white."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image = np.full((8, 8), 230, np.uint8)
        x = int(rng.integers(1, 6))
        image[1:7, x:x + 2] = int(rng.integers(0, 80))
        Image.fromarray(image).save(folder / f"{i:02d}.png")
    return folder


NET = ["--hidden", "8", "--layers", "2", "--device", "cpu", "-q"]
META = ["--modulations", "4", "--outer-steps", "6", "--meta-batch", "4", "--eval-every", "3"]


def test_more_latents_than_shifts_are_said_to_add_nothing(tmp_path):
    folder = letters(tmp_path / "kind", 8, 0)
    over = ["--modulations", "17", "--outer-steps", "1", "--meta-batch", "2", "--eval-every", "1"]
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "b.safetensors"), *NET, *over])
    assert result.exit_code == 0, result.output
    assert "--modulations 17 is more than the 16 shifts of a base 2x8" in result.output  # 2 layers of 8
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "c.safetensors"), *NET, *over[2:],
                                 "--modulations", "16"])
    assert result.exit_code == 0 and "is more than" not in result.output


def test_a_learning_that_no_outer_step_improved_is_no_success(tmp_path):
    """An outer rate far too large: every measured outer step is worse than the first base. meta-init
    says so in one line, exits 1 and writes no base (the first one, written as done, would pass for a
    learned base); its checkpoint stays, and a smaller rate with --force learns one."""
    folder = letters(tmp_path / "kind", 12, 0)
    out = tmp_path / "base.safetensors"
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), *NET, *META, "--outer-lr", "0.5"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no outer step improved on the first base" in errors[0], result.output
    assert "at outer step 0" in errors[0] and "--outer-lr (this run's 0.5)" in errors[0]
    assert "Traceback" not in result.output and not out.exists()
    assert Path(f"{out}.meta.npz").exists()
    # the same command again: the same answer from the checkpoint, still nothing written
    again = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), *NET, *META, "--outer-lr", "0.5"])
    assert again.exit_code == 1 and "no outer step improved" in again.output and not out.exists()
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), *NET, *META, "--outer-lr", "0.001",
                                 "--force"])
    assert result.exit_code == 0, result.output
    assert out.exists()
    # going on from a learned base (--init): the line also says that base may be the one to use
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "again.safetensors"), "--init",
                                 str(out), *NET, *META, "--outer-lr", "0.5"])
    assert result.exit_code == 1 and f"or the base --init {out} gives is already as good" in result.output, \
        result.output


def test_meta_init_learns_a_base_resumes_to_it_and_fit_many_fits_its_latents(tmp_path, monkeypatch):
    folder = letters(tmp_path / "kind", 12, 0)
    whole, cut = tmp_path / "whole.safetensors", tmp_path / "cut.safetensors"
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(whole), *NET, *META])
    assert result.exit_code == 0, result.output
    log = [line.split(",") for line in (tmp_path / "whole.csv").read_text().splitlines()[1:]]
    assert [int(row[0]) for row in log] == [0, 3, 6] and float(log[-1][2]) > float(log[0][2])
    from inr_cli.formats.modulated import read_base

    base, channels, facts = read_base(whole)
    assert (base.latent, base.inner_steps, channels, facts["method"]) == (4, 3, ("l",), "functa")
    # the same command again: done already, and the file the same bytes (a set records its sha256)
    written = whole.read_bytes()
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(whole), *NET, *META])
    assert result.exit_code == 0 and whole.read_bytes() == written, result.output
    # inr info says what the base is: its latents, shifts, steps, rates and how it was learned
    said = runner.invoke(app, ["info", str(whole)])
    assert said.exit_code == 0, said.output
    assert (f"4 latents an image over its 16 shifts (map and rates: {16 * 4 + 4} more numbers), fitted in 3 steps "
            f"at rates {base.rates.min():.3g} to {base.rates.max():.3g}") in said.output
    assert f"meta-init outer step {facts['outer_step']} of 6, from {facts['images']} images" in said.output
    described = json.loads(runner.invoke(app, ["info", str(whole), "--json"]).output)
    assert described["modulations"]["latent"] == 4 and described["modulations"]["shifts"] == 16
    assert described["params"] == base.params.size and described["image_bytes"] is None
    # it records its images' size, as an export does: inr render draws the base's own image (z = 0) at it
    assert (described["width"], described["height"]) == (8, 8)  # the letters'
    assert "images    8x8, the size it was learned at" in said.output
    drawn = runner.invoke(app, ["render", str(whole), "-o", str(tmp_path / "base.png")])
    assert drawn.exit_code == 0 and Image.open(tmp_path / "base.png").size == (8, 8), drawn.output
    # a signal in outer step 5: the checkpoint holds step 3 (the last measured); the same command goes on
    calls = {"n": 0}
    gradient = meta_base.outer_gradient

    def interrupted(*args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise Interrupted(signal.SIGINT)
        return gradient(*args)

    monkeypatch.setattr(meta_base, "outer_gradient", interrupted)
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(cut), *NET, *META])
    assert result.exit_code == 128 + signal.SIGINT and "the base is checkpointed at outer step 4" in result.output
    monkeypatch.setattr(meta_base, "outer_gradient", gradient)
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(cut), *NET, *META])
    assert result.exit_code == 0, result.output
    assert np.array_equal(read_base(cut)[0].flat(), base.flat())
    # another latent size is another learning: refused by name, not resumed
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(cut), *NET, *META[2:], "--modulations", "5"])
    assert result.exit_code == 2 and "--modulations 4, not 5" in result.output

    # fit-many over the base: the network and the steps are the base's, each row a latent
    unseen = letters(tmp_path / "unseen", 5, 1)
    out = tmp_path / "set"
    result = runner.invoke(app, ["fit-many", str(unseen), "-o", str(out), "--init", str(whole), "--device", "cpu",
                                 "--pack", "2"])
    assert result.exit_code == 0, result.output
    assert "done: 5 latents of 4 numbers over a base of" in result.output
    assert np.load(out / "weights.npy").shape == (5, 4)
    description = json.loads((out / "network.json").read_text())
    assert (description["format_version"], description["latent"], description["base"]) == (2, 4, "base.safetensors")
    assert (out / "base.safetensors").read_bytes() == whole.read_bytes()
    info = runner.invoke(app, ["info", str(out), "--json"])
    assert json.loads(info.output)["params_per_image"] == 4 and json.loads(info.output)["steps"] == 3

    import inr_cli

    nets = inr_cli.load(out)
    assert nets.weights.shape == (5, 4) and nets.base.latent == 4
    expanded = base.expand(np.load(out / "weights.npy"))
    # one member is drawn through the base as a [1, D] product, the set as [N, D]: the same product of
    # another shape may take another BLAS kernel, so equal to the bit only shape for shape
    one = base.expand(np.load(out / "weights.npy")[3:4])[0]
    assert np.array_equal(nets.networks(), expanded) and np.array_equal(nets["03.png"].params, one)
    np.testing.assert_allclose(one, expanded[3], rtol=0, atol=1e-6 * np.abs(expanded[3]).max())
    # each row's PSNR is of its latent drawn through the base
    drawn = nets["03.png"].render(depth=32)
    pixels = np.asarray(Image.open(unseen / "03.png"), np.float32) / 255
    psnr = -10 * np.log10(np.mean((np.clip(drawn[..., 0], 0, 1) - pixels) ** 2))
    assert abs(psnr - nets.index[3]["psnr"]) < 1e-2
    # inr render of one member is that network's render
    result = runner.invoke(app, ["render", str(out), "--image", "03.png", "-o", str(tmp_path / "r.png")])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "r.png")), nets["03.png"].render()[..., 0])

    # the gallery of inr view draws each latent through the base
    from inr_cli.viewer.sources import SetView

    assert np.array_equal(SetView(out).network(3).params, one)
    shown = SetView(out).state(3)["settings"]  # the latents step with the base's rates: no optimizer shown
    assert not shown["optimizer"] and "batch_size" not in shown["training"] and shown["network"]["hidden"] == 8
    # a set grown by --add is the set fitted at once
    (tmp_path / "more").mkdir()
    for name in ("00.png", "01.png", "02.png"):
        (tmp_path / "more" / name).write_bytes((unseen / name).read_bytes())
    grown = tmp_path / "grown"
    for extra in ([], ["--add"]):
        result = runner.invoke(app, ["fit-many", str(tmp_path / "more"), "-o", str(grown), "--init", str(whole), "-q",
                                     "--device", "cpu", "--pack", "2", *extra])
        assert result.exit_code == 0, result.output
        for name in ("03.png", "04.png"):
            (tmp_path / "more" / name).write_bytes((unseen / name).read_bytes())
    assert np.array_equal(np.load(grown / "weights.npy"), np.load(out / "weights.npy"))
    # exports: safetensors loads back as the same set, and torch's state dict from it; hdf5 has the latents
    result = runner.invoke(app, ["export", str(out), "-o", str(tmp_path / "set.safetensors")])
    assert result.exit_code == 0, result.output
    again = inr_cli.load(tmp_path / "set.safetensors")
    assert np.array_equal(again.weights, nets.weights) and np.array_equal(again.networks(), expanded)
    assert again.names == nets.names
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    module = nets.to_torch()
    module.load_state_dict(load_file(tmp_path / "set.safetensors"))
    coords = pixel_grid(8, 8)
    np.testing.assert_allclose(module(torch.from_numpy(coords)).detach().numpy(), nets(coords), atol=1e-5)
    h5py = pytest.importorskip("h5py")
    result = runner.invoke(app, ["export", str(out), "-o", str(tmp_path / "set_0-5.hdf5")])
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "set_0-5.hdf5") as f:
        assert np.array_equal(f["params"][...], nets.weights) and f.attrs["latent"] == 4
        assert np.array_equal(f["modulation_map"][...], base.shift_map)


def test_a_set_of_latents_draws_nothing_from_nan_and_its_base_expands_only_latents(tmp_path):
    """nets.base.expand(latents), documented for decoding latents a model made, takes real and finite
    latents of its size, refused as every array the API takes (a TypeError or ValueError that is an
    InrError naming `latents`), never NumPy's ValueError or a network of NaN; a damaged set of latents
    (a NaN row of weights.npy) is one line naming the image wherever its networks are drawn at once."""
    import warnings

    import torch

    import inr_cli

    folder = letters(tmp_path / "kind", 8, 0)
    base = tmp_path / "base.safetensors"
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(base), *NET, *META])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "set"), "--init", str(base),
                                 "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    nets = inr_cli.load(tmp_path / "set")
    assert nets.base.expand(np.zeros(4)).shape == (1, nets.spec.parameter_count())
    refused = [(None, TypeError, "latents is an array of numbers, got NoneType"),
               ("abc", TypeError, "latents is an array of numbers, got 'abc'"),
               ([[0.0] * 4, [0.0]], TypeError, "latents is an array of numbers, got list"),
               (np.zeros((1, 4), complex), TypeError, "complex values are not taken"),
               (np.array([[0.0, None, 0.0, 0.0]]), TypeError, "holds NoneType None"),
               (np.zeros((2, 3)), ValueError, "latents of shape [2, 3]: expected [N, 4] or [4]"),
               (np.full((1, 4), np.nan), ValueError, "latents holds NaN or infinite values")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's ComplexWarning among them
        for latents, kind, message in refused:
            with pytest.raises(kind) as caught:
                nets.base.expand(latents)
            assert isinstance(caught.value, InrError) and message in str(caught.value), str(caught.value)
    module, (params, apply) = nets.to_torch(), nets.to_jax()  # the set's modules: points of two coordinates
    for call in (lambda: module(torch.zeros((5, 3))), lambda: apply(params, np.zeros((5, 3), np.float32))):
        with pytest.raises(ValueError, match=r"coords of shape \[5, 3\]: expected \[rows, 2\]"):
            call()
    weights = np.load(tmp_path / "set" / "weights.npy", mmap_mode="r+")
    weights[1, 2] = np.nan
    weights.flush()
    del weights
    nets = inr_cli.load(tmp_path / "set")
    name = nets.names[1]
    coords = np.zeros((3, 2), np.float32)
    for call in (nets.networks, lambda: nets(coords), lambda: nets(coords, clip=False), nets.to_torch, nets.to_jax,
                 lambda: nets[1]):
        with pytest.raises(InrError, match=f"{name}: its network's parameters in weights.npy hold NaN"):
            call()
    assert np.isfinite(nets[0].params).all()


def test_a_set_of_latents_resumes_after_a_kill_to_the_set_fitted_at_once(tmp_path):
    from inr_cli.formats.modulated import write_base

    folder = letters(tmp_path / "kind", 6, 0)
    base = first_base(NetworkSpec("siren", 1, 8, 2, 30.0, "none"), init_parameters(SPEC, 2), LATENT, 0.3, 3, 0)
    write_base(base, ("l",), tmp_path / "base.safetensors", {})
    args = [sys.executable, "-m", "inr_cli", "fit-many", str(folder), "--init", str(tmp_path / "base.safetensors"),
            "--device", "cpu", "--pack", "2", "-q"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*args, "-o", str(tmp_path / "whole")], env=environment, check=True)
    killed = subprocess.run([*args, "-o", str(tmp_path / "cut")], capture_output=True,
                            env={**environment, **failpoints.environment("driver-after=1")})
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "cut" / "weights.npy").exists()
    subprocess.run([*args, "-o", str(tmp_path / "cut")], env=environment, check=True)
    assert np.array_equal(np.load(tmp_path / "cut" / "weights.npy"), np.load(tmp_path / "whole" / "weights.npy"))
    assert (tmp_path / "cut" / "index.csv").read_text() == (tmp_path / "whole" / "index.csv").read_text()


def test_what_a_base_cannot_take_is_refused_in_one_line(tmp_path):
    from inr_cli.formats.modulated import write_base

    folder = letters(tmp_path / "kind", 4, 0)
    path = tmp_path / "base.safetensors"
    write_base(a_base(), ("l",), path, {})
    for args, message in (
            (["fit-many", str(folder), "-o", str(tmp_path / "a"), "--init", str(path), "--batch-size", "16"],
             "--batch-size 16: the latents over a base are fitted on every pixel"),
            (["fit-many", str(folder), "-o", str(tmp_path / "f"), "--init", str(path), "--lr", "0.01"],
             "optimizer.lr: the latents over a base step with the rates learned with it"),
            (["fit-many", str(folder), "-o", str(tmp_path / "b"), "--init", str(path), "--hidden", "16"],
             "its network is not the one these settings fit (hidden 8 (the start) vs 16)"),
            (["meta-init", str(folder), "-o", str(tmp_path / "c.safetensors"), "--modulations", "4", "--ray", "local"],
             "a base with modulations is learned in this process"),
            (["meta-init", str(folder), "-o", str(tmp_path / "d.safetensors"), "--model", "relu", "--modulations", "4"],
             "a base with modulations is a SIREN without an encoding"),
            (["meta-init", str(folder), "-o", str(tmp_path / "g.safetensors"), "--modulations", "0"],
             "--modulations must be a number of latents (1 or more), got 0"),
            # a base where a start of whole networks is learned or trained: its map and rates are not dropped
            (["meta-init", str(folder), "-o", str(tmp_path / "h.safetensors"), "--init", str(path)],
             f"--init {path}: a base with modulations (4 latents an image), not a start of whole networks"),
            (["meta-init", str(folder), "-o", str(tmp_path / "i.safetensors"), "--init", str(path), "--modulations",
              "3"], f"--init {path}: a base of 4 latents an image, not 3; --modulations 4 goes on learning it"),
            (["train", str(folder / "00.png"), "--init", str(path), "--run-dir", str(tmp_path / "run")],
             f"inr fit-many FOLDER --init {path} fits latents over it")):
        result = runner.invoke(app, [*args, "--device", "cpu"])
        assert result.exit_code in (1, 2) and message in result.output, result.output
        assert "Traceback" not in result.output
    # a set whose base went missing, or a damaged base file: one line naming the file
    out = tmp_path / "set"
    assert runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path), "-q"]).exit_code == 0
    # a set of latents in one file is no start
    assert runner.invoke(app, ["export", str(out), "-o", str(tmp_path / "set.safetensors")]).exit_code == 0
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "e"), "--init",
                                 str(tmp_path / "set.safetensors"), "--hidden", "8", "--layers", "2", "-q"])
    assert result.exit_code == 1 and "a set of latents, not one start" in result.output, result.output
    (out / "base.safetensors").write_bytes(b"not a base")
    result = runner.invoke(app, ["info", str(out)])
    assert result.exit_code == 1 and str(out / "base.safetensors") in result.output
    # the same fit-many again puts the base back, as it fits a damaged shard again
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path)])
    assert result.exit_code == 0 and "is copied again from --init" in result.output, result.output
    assert (out / "base.safetensors").read_bytes() == path.read_bytes()
    assert runner.invoke(app, ["info", str(out)]).exit_code == 0
    (out / "base.safetensors").unlink()  # a FIFO in its place is neither read (it would hang) nor written through
    os.mkfifo(out / "base.safetensors")
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path)])
    assert result.exit_code == 1 and f"{out / 'base.safetensors'}: a FIFO" in result.output, result.output
    os.unlink(out / "base.safetensors")
    (out / "base.safetensors").write_bytes(b"not a base")
    (out / "base.safetensors").unlink()
    with pytest.raises(InrError, match="missing; a set of latents is drawn through its base"):
        __import__("inr_cli").load(out)


def test_a_base_that_is_no_file_is_a_damaged_set_not_a_missing_base(tmp_path):
    """A folder, a FIFO or a link to nothing where a set of latents keeps its base.safetensors: said
    as what it is (never opened: a FIFO would wait for a writer), not as a missing base."""
    from inr_cli.formats.modulated import write_base

    folder = letters(tmp_path / "kind", 3, 0)
    path = tmp_path / "base.safetensors"
    write_base(a_base(), ("l",), path, {})
    out = tmp_path / "set"
    assert runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path), "-q"]).exit_code == 0
    base = out / "base.safetensors"
    for kind, what in (("folder", "is a directory"), ("fifo", "a FIFO"), ("link", "a link to nothing")):
        base.rmdir() if base.is_dir() and not base.is_symlink() else base.unlink()
        if kind == "folder":
            base.mkdir()
        elif kind == "fifo":
            os.mkfifo(base)
        else:
            base.symlink_to(tmp_path / "nowhere")
        expected = f"{base}: {what}"
        for args in (["info", str(out)], ["export", str(out), "-o", str(tmp_path / "x.safetensors")],
                     ["render", str(out), "--image", "00.png", "-o", str(tmp_path / "x.png"), "--device", "cpu"]):
            result = runner.invoke(app, args)
            lines = result.stderr.strip().splitlines()
            assert result.exit_code == 1 and len(lines) == 1, result.output
            assert expected in lines[0] and "the set is damaged: remove it" in lines[0], lines[0]
            assert "missing" not in lines[0], lines[0]
        with pytest.raises(InrError, match=f"{what}.*the set is damaged"):
            __import__("inr_cli").load(out)
        # the same fit-many again: the same line, before anything is opened or fitted (was: a folder
        # "is a folder; -o names the file to write", a FIFO or a link "choose another -o")
        result = runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path), "-q"])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1, result.output
        assert expected in lines[0] and lines[0].endswith("; the set is damaged: remove it, then run the "
                                                                   "same inr fit-many command again"), lines[0]
    base.unlink()  # and what it says finishes the set
    held = np.load(out / "weights.npy")
    assert runner.invoke(app, ["fit-many", str(folder), "-o", str(out), "--init", str(path), "-q"]).exit_code == 0
    assert base.read_bytes() == path.read_bytes() and np.array_equal(np.load(out / "weights.npy"), held)
    assert runner.invoke(app, ["info", str(out)]).exit_code == 0


def test_a_base_learned_from_a_start_takes_the_start_s_omega0(tmp_path):
    """--init of a learned start (omega0 30) with --modulations: the start's network, not the base's
    default omega0 of 15, which the command never said."""
    from inr_cli.formats.export import write_safetensors

    folder = letters(tmp_path / "kind", 8, 0)
    start = tmp_path / "start.safetensors"
    write_safetensors(SPEC, init_parameters(SPEC, 3), ("l",), start)  # siren 2x8, omega0 30
    out = tmp_path / "base.safetensors"
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--init", str(start), "--device", "cpu",
                                 "-q", *META])
    assert result.exit_code == 0, result.output
    from inr_cli.formats.modulated import read_base

    base = read_base(out)[0]
    assert base.spec == SPEC and base.spec.omega0 == 30.0


def test_a_base_s_outer_rate_follows_its_depth_unless_said_or_checkpointed(tmp_path):
    """Not given, a base's --outer-lr is 1e-3 up to 3 hidden layers and 3e-4 deeper; a rerun takes
    the rate its checkpoint was learned with (an inr whose default differs goes on, not refuses)."""
    from inr_cli.formats.modulated import read_base

    folder = letters(tmp_path / "kind", 8, 0)
    short = ["--modulations", "4", "--outer-steps", "2", "--meta-batch", "2", "--eval-every", "1"]
    for layers, rate in (("3", 1e-3), ("4", 3e-4)):
        out = tmp_path / f"base{layers}.safetensors"
        result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--hidden", "4", "--layers", layers,
                                     "--device", "cpu", "-q", *short])
        assert result.exit_code in (0, 1), result.output  # 1: nothing learned in 2 steps, its checkpoint kept
        saved = json.loads(np.load(f"{out}.meta.npz")["settings"].item())
        assert saved["options"]["outer_lr"] == rate, layers
    out = tmp_path / "said.safetensors"
    args = ["meta-init", str(folder), "-o", str(out), "--hidden", "4", "--layers", "2", "--device", "cpu", "-q"]
    assert runner.invoke(app, [*args, *short, "--outer-lr", "5e-4"]).exit_code in (0, 1)
    result = runner.invoke(app, [*args, *short[:2], "--outer-steps", "3", *short[4:]])  # longer, the rate unsaid
    assert result.exit_code in (0, 1) and "was learned with" not in result.output, result.output
    assert json.loads(np.load(f"{out}.meta.npz")["settings"].item())["options"]["outer_lr"] == 5e-4
    if out.exists():
        assert read_base(out)[2]["outer_lr"] == 5e-4


def test_the_bases_outer_rate_decays_linearly_to_nothing(monkeypatch):
    """Adam's step on θ at outer step s is --outer-lr x (1 - s / outer steps), as Reptile's (betas 0
    here, so that a step is the rate times the gradient's sign): a long learning ends in small steps
    instead of falling apart."""
    from types import SimpleNamespace

    from inr_cli.sets import meta_base
    from inr_cli.sets.meta import MetaOptions

    gradient = np.array([0.5, -2.0, 3.0, 0.25])  # three of θ, then the one latent's rate
    monkeypatch.setattr(meta_base, "ADAM_BETAS", (0.0, 0.0))
    monkeypatch.setattr(meta_base, "outer_gradient", lambda latent_pass, base: (gradient.copy(), np.zeros(2)))
    options = MetaOptions(outer_steps=10, outer_lr=0.01, modulations=1)
    learning = SimpleNamespace(options=options, latent=1, size=4, _pass=lambda theta, chosen: None,
                               base=lambda theta: None)
    theta = np.array([1.0, 1.0, 1.0, 0.5])
    for step, rate in ((0, 0.01), (5, 0.005), (9, 0.001)):
        moved, _ = meta_base.ModulatedLearning.step(learning, theta, {}, step, [0])
        np.testing.assert_allclose(theta - moved, rate * np.sign(gradient), rtol=1e-6)
