"""network.weight_scale (weight scaling, Yeom, Lee & Lee 2024): the bound of every weight but the
output layer's multiplied by the factor before the draw. Checked against the initialisation written out again here from
its description, through every way a network is started (inr train, fit-many, the API), and in
training on the NumPy reference, the CPU engine and the kernels (emulated)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli import api
from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.cli import app
from inr_cli.core.network import NetworkSpec, frequency_view, init_parameters, layer_views, output_means
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.images import load_image
from inr_cli.formats.network_set import load_network_set
from tests.test_fit_many import make_folder
from tests.test_networks import config_for, images

runner = CliRunner()
PRESETS = {  # small networks of every kind: sine, sigmoid with Fourier features, ReLU with Fourier features
    "siren": {"hidden": 12, "layers": 3},
    "sigmoid": {"hidden": 10, "layers": 2, "fourier_features": 4},
    "fourier": {"hidden": 8, "layers": 2, "fourier_features": 5},
}
NET = ["--hidden", "12", "--layers", "2", "--lr", "1e-3", "--steps", "3", "--device", "cpu", "--preview-every", "0",
       "-q"]


def spec_for(preset: str) -> NetworkSpec:
    return NetworkSpec.from_config(config_for(preset, **PRESETS[preset]), 3)


def drawn_here(spec: NetworkSpec, seed: int, weight_scale: float) -> np.ndarray:
    """The initialisation as init_parameters' docstring describes it, drawn in its order (the
    frequencies B, then each layer's weights and biases), without its views or helpers."""
    rng = np.random.default_rng(seed)
    parts = []
    if spec.encoding == "fourier":
        parts.append(rng.normal(0.0, spec.fourier_sigma, (spec.fourier_features, spec.in_features)).astype(np.float32))
    shapes = spec.layer_shapes()
    for index, (out_f, in_f) in enumerate(shapes):
        scale = weight_scale if index < len(shapes) - 1 else 1.0
        if spec.model == "siren":
            bound = scale * (1.0 / in_f if index == 0 else math.sqrt(6.0 / in_f) / spec.omega0)
            weight = rng.uniform(-bound, bound, (out_f, in_f)).astype(np.float32)
            bias = rng.uniform(-1.0 / math.sqrt(in_f), 1.0 / math.sqrt(in_f), out_f).astype(np.float32)
        else:
            bound = scale * math.sqrt(6.0 / (in_f + out_f))
            weight = rng.uniform(-bound, bound, (out_f, in_f)).astype(np.float32)
            bias = np.zeros(out_f, np.float32)
        parts += [weight.ravel(), bias]
    return np.concatenate([p.ravel() for p in parts])


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("weight_scale", [1.0, 1.5, 2.0])
def test_initialisation_is_the_one_described(preset, weight_scale):
    spec = spec_for(preset)
    np.testing.assert_array_equal(init_parameters(spec, 7, weight_scale=weight_scale),
                                  drawn_here(spec, 7, weight_scale))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_scale_2_doubles_every_weight_but_the_output_layers(preset):
    spec = spec_for(preset)
    plain = init_parameters(spec, 3)[None]
    scaled = init_parameters(spec, 3, weight_scale=2.0)[None]
    assert np.array_equal(init_parameters(spec, 3, weight_scale=1.0), plain[0])  # 1 is today's init
    plain_layers, scaled_layers = layer_views(spec, plain), layer_views(spec, scaled)
    for (w, b), (w2, b2) in zip(plain_layers[:-1], scaled_layers[:-1]):
        assert np.array_equal(w2, 2 * w) and np.any(w != 0)
        assert np.array_equal(b2, b)
    assert np.array_equal(scaled_layers[-1][0], plain_layers[-1][0])
    assert np.array_equal(scaled_layers[-1][1], plain_layers[-1][1])
    if spec.encoding == "fourier":
        assert np.array_equal(frequency_view(spec, scaled), frequency_view(spec, plain))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_scaled_networks_train_alike_on_the_reference_the_engine_and_the_kernels(emulated, preset):
    """Two networks, each started from its own scaled draw, a few steps on each backend: the CPU
    engine gives the reference's bits, the kernels the reference's values within float rounding."""
    config = config_for(preset, steps=4, cuda_graph=False, weight_scale=2.0, **PRESETS[preset])
    pictures, seeds = images(2, 6, 7), [5, 6]
    spec = NetworkSpec.from_config(config, pictures[0].n_channels)
    assert config.network.weight_scale == 2.0

    def train(backend):
        state = TrainingState.fresh(spec, seeds, None, config.network.weight_scale)
        assert np.array_equal(state.params[1], init_parameters(spec, 6, weight_scale=2.0))
        trainer = Trainer(backend, spec, config, pictures, state, seeds)
        losses = []
        for _ in range(4):
            trainer.step()
            losses.append(trainer.read_loss())
        return trainer.state().params, np.array(losses)

    reference, reference_losses = train(NumpyBackend())
    engine, engine_losses = train(CpuBackend())
    kernels, kernel_losses = train(emulated)
    assert (reference_losses[-1] < reference_losses[0]).all()
    np.testing.assert_allclose(engine_losses, reference_losses, rtol=1e-5)
    np.testing.assert_allclose(engine, reference, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(kernel_losses, reference_losses, rtol=1e-4)
    np.testing.assert_allclose(kernels, reference, rtol=1e-3, atol=1e-5)
    unscaled = config_for(preset, steps=4, cuda_graph=False, **PRESETS[preset])
    plain = Trainer(NumpyBackend(), spec, unscaled, pictures, TrainingState.fresh(spec, seeds), seeds)
    plain.step()
    assert not np.allclose(plain.read_loss(), reference_losses[0])  # the scale changed the start


def trained_from_scaled_init(path, run: ckpt.Checkpoint, seed: int, weight_scale: float) -> np.ndarray:
    """What a run of `run`'s settings on the image at `path` reaches from init_parameters(weight_scale)
    (its output at the image's mean colour, as the run's settings start it)."""
    image = load_image(path)
    assert run.config.network.init_output_at_mean
    mean = output_means(run.config, [image])[0]
    state = TrainingState(init_parameters(run.spec, seed, mean, weight_scale=weight_scale)[None], None, None, 0,
                          0.0, np.full(1, np.nan))
    trainer = Trainer(CpuBackend(), run.spec, run.config, [image], state, [seed])
    for _ in range(run.step):
        trainer.step()
    return trainer.state().params[0]


def test_inr_train_starts_from_the_scaled_draw_records_it_and_keeps_it_on_resume(tmp_path, rgb_png):
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["train", str(rgb_png), "--run-dir", str(run_dir), "--weight-scale", "2", *NET])
    assert result.exit_code == 0, result.output
    run = ckpt.load(run_dir)
    assert run.config.network.weight_scale == 2.0
    assert "weight_scale = 2.0" in (run_dir / "config.toml").read_text()
    assert np.array_equal(run.params, trained_from_scaled_init(rgb_png, run, 0, 2.0))
    assert not np.array_equal(run.params, trained_from_scaled_init(rgb_png, run, 0, 1.0))
    result = runner.invoke(app, ["train", str(run_dir), "--resume", "--steps", "5", "--weight-scale", "3"])
    assert result.exit_code == 2 and "--weight-scale cannot change" in result.output, result.output
    result = runner.invoke(app, ["train", str(run_dir), "--resume", "--steps", "5", "-q"])
    assert result.exit_code == 0, result.output
    assert ckpt.load(run_dir).config.network.weight_scale == 2.0


def test_bad_weight_scale_is_one_line(rgb_png, tmp_path):
    result = runner.invoke(app, ["train", str(rgb_png), "--run-dir", str(tmp_path / "r"), "--weight-scale", "0",
                                 *NET])
    assert result.exit_code == 2 and "weight" in result.output and "Traceback" not in result.output


def test_the_api_and_fit_many_start_from_the_scaled_draw(tmp_path):
    folder = make_folder(tmp_path / "images", count=2)
    # omega0 given: inr train's preset takes it from the size, fit-many's (sets) fixes it
    flags = {"hidden": 12, "layers": 2, "omega0": 30.0, "lr": 1e-3, "steps": 3, "device": "cpu", "quiet": True}
    network = api.fit(folder / "img1.png", run_dir=tmp_path / "api-run", weight_scale=2.0, preview_every=0, **flags)
    run = ckpt.load(tmp_path / "api-run")
    assert np.array_equal(network.params, trained_from_scaled_init(folder / "img1.png", run, 0, 2.0))

    api.fit_many(folder, tmp_path / "set", weight_scale=2.0, init="random", **flags)
    networks = load_network_set(tmp_path / "set")
    row = networks.row("img1.png")
    seed = int(networks.index[row]["seed"])
    assert np.array_equal(networks.weights[row], trained_from_scaled_init(folder / "img1.png", run, seed, 2.0))
    with pytest.raises(InrError, match="weight_scale = 2.0, not 3.0"):
        api.fit_many(folder, tmp_path / "set", weight_scale=3.0, init="random", **flags)
