"""Every setting declared as changing the fit (settings.py, fits=True) does change it: a tiny network
trained with the setting at another value ends with other parameters, on the NumPy reference and
through the kernels (their CPU emulation). A setting the trainer dropped on its way would train the
same network twice and fail here; a setting that cannot change the fit belongs in the table with
fits=False (a resumed run and a fit-many rerun may then change it)."""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli import settings
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.config import Config, build_config, with_values
from inr_cli.core.network import NetworkSpec, init_networks
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Signals, run_steps
from inr_cli.formats.data import load_training_data
from inr_cli.formats.export import write_safetensors
from inr_cli.formats.start import resolved_start
from inr_cli.runs.training import fresh_state
from tests.conftest import make_image
from tests.kernel_checks import OPTIMIZER_SETTINGS, check_schedule_and_optimizers

STEPS = 5  # trained in every case, whatever the step budget (training.steps) says
OTHER_IMAGE = "<another image>"
START_FILE = "<a start file>"  # a network of the base's shape, drawn from another seed
# Each fitting setting of `inr train`: another value than the base configuration's, and what else
# it needs to matter (a choice used only with another option), given to both runs.
CHANGED = {
    "network.model": ("sigmoid", {}),
    "network.hidden": (9, {}),
    "network.layers": (3, {}),
    "network.omega0": (30.0, {}),  # the base's 0 is chosen from the image's size
    "network.init_output_at_mean": (False, {}),  # on by default
    "network.start_output_at_mean": (True, {"training.init": START_FILE}),  # a file start's own biases by default
    "network.weight_scale": (2.0, {}),
    "network.linear_output": (True, {"network.model": "relu"}),  # a SIREN's output is linear either way
    "network.max_bytes": ("1000", {"network.hidden": 16}),  # 1,484 bytes at 16 wide: narrowed to fit
    # A hash grid sized to a budget gets twice the entries in float16
    "network.dtype": ("float16", {"encoding.name": "hashgrid", "encoding.levels": 3, "network.max_bytes": "2k"}),
    "encoding.name": ("fourier", {}),
    "encoding.features": (4, {"encoding.name": "fourier"}),
    "encoding.sigma": (3.0, {"encoding.name": "fourier"}),
    "encoding.levels": (3, {"encoding.name": "hashgrid"}),
    "encoding.level_features": (1, {"encoding.name": "hashgrid"}),
    "encoding.log2_table_size": (4, {"encoding.name": "hashgrid"}),  # every level hashed into 16 entries
    "encoding.min_resolution": (4, {"encoding.name": "hashgrid"}),
    "encoding.max_resolution": (32, {"encoding.name": "hashgrid"}),  # the base's 0 is chosen from the image
    "optimizer.name": ("sgd", {}),
    "optimizer.lr": (1e-3, {}),
    "optimizer.lr_min": (1e-4, {}),
    "optimizer.warmup": (2, {}),
    "optimizer.beta1": (0.8, {}),
    "optimizer.beta2": (0.95, {}),
    "optimizer.eps": (1e-2, {}),
    "optimizer.momentum": (0.5, {"optimizer.name": "sgd"}),
    "training.steps": (50, {}),  # the cosine schedule's length
    "training.batch_size": (10, {}),
    "training.seed": (1, {}),
    "training.init": (START_FILE, {}),  # shared and random draw the same one network
    "training.target_psnr": (1.0, {}),  # reached at the first reading: the fit stops there
    "training.precision": ("tf32", {}),  # the layer products' operands rounded (on the GPU; the CPU engine runs FP32)
    "data.source": (OTHER_IMAGE, {}),
    "data.size": (4, {}),
    "data.gray": (True, {}),
}
FITTING = sorted(s.key for s in settings.SETTINGS if s.fits and settings.TRAIN in s.commands)


def test_every_fitting_setting_is_changed_below():
    assert sorted(CHANGED) == FITTING


@pytest.fixture
def base(tmp_path) -> tuple[Config, str]:
    """A tiny run's configuration, as the command line builds one (the siren preset under it), on a
    6x5 image; another image for data.source."""
    image = make_image(tmp_path / "image.png", "RGB", size=(6, 5), seed=1)
    other = make_image(tmp_path / "other.png", "RGB", size=(6, 5), seed=2)
    values = {"network.hidden": 8, "network.layers": 2, "training.steps": STEPS, "training.cuda_graph": False,
              "data.source": str(image)}
    # Fourier features of 8 where they are used (the command line would refuse them in a SIREN); the
    # device left to auto, as TF32 is (the backends are this test's own).
    return with_values(build_config(None, values), {"encoding.features": 8}), str(other)


def sized(config: Config):
    image = load_training_data(config.data.source, config.data.size, config.data.gray)
    config, _ = fit_to_image(config, image.width, image.height, image.n_channels)
    return image, config, NetworkSpec.from_config(config, image.n_channels)


def fit(backends, config: Config) -> np.ndarray:
    """The parameters after STEPS steps, the network set up as `inr train` sets it up (on the backend
    of its training.precision)."""
    image, config, spec = sized(resolved_start(config))
    seed = config.training.seed
    state = fresh_state(config, spec, image)  # as run_training starts a new run
    trainer = Trainer(backends[config.training.precision], spec, config, [image], state, [seed])

    def stop_at_steps(step):
        if step == STEPS:
            raise _Done

    try:  # the step loop itself, reading the loss at every step (where a target PSNR is checked)
        run_steps(trainer, Signals(), 1, on_step=stop_at_steps, target_psnr=config.training.target_psnr)
    except _Done:
        pass
    return trainer.state().params[0]


class _Done(Exception):
    pass


@pytest.fixture(params=["numpy", "kernels"])
def backends(request) -> dict:
    """The NumPy reference or the kernels (their CPU emulation), by training.precision, as make_backend
    takes it from the configuration."""
    if request.param == "numpy":
        return {precision: NumpyBackend(precision) for precision in settings.PRECISIONS}
    return {"fp32": request.getfixturevalue("emulated"), "tf32": request.getfixturevalue("emulated_tf32")}


@pytest.mark.parametrize("key", FITTING)
def test_a_fitting_setting_changes_the_fit(backends, base, key, tmp_path):
    config, other_image = base
    value, needs = CHANGED[key]
    value = other_image if value is OTHER_IMAGE else value
    start = str(tmp_path / "start.safetensors")
    if START_FILE in (value, needs.get("training.init")):
        image, _, spec = sized(config)
        write_safetensors(spec, init_networks(spec, [123])[0], image.channels, start)
        value = start if value is START_FILE else value
        needs = {k: start if v is START_FILE else v for k, v in needs.items()}
    before = with_values(config, needs)
    assert before.get(key) != value, f"{key}: the changed value is the base's"
    first, second = fit(backends, before), fit(backends, with_values(before, {key: value}))
    assert np.isfinite(first).all() and np.isfinite(second).all()
    assert first.shape != second.shape or not np.array_equal(first, second), f"{key} = {value!r} fitted the same"
    again = fit(backends, before)  # and the same setting fits the same
    if before.encoding.name == "hashgrid" and backends["fp32"].name != "numpy":  # atomics add in the order they land
        np.testing.assert_allclose(again, first, rtol=1e-5, atol=1e-7)
    else:
        assert np.array_equal(again, first)


class _Ignores:
    """A backend whose `operation` reads one argument at a default, as a kernel with that bug would."""

    def __init__(self, operation: str, position: int, default: float):
        self.operation, self.position, self.default = operation, position, default

    def __getattr__(self, name):
        function = getattr(NumpyBackend(), name)
        if name != self.operation:
            return function

        def with_the_default(*args):
            args = list(args)
            args[self.position] = self.default
            return function(*args)

        return with_the_default


DEFAULTS = OPTIMIZER_SETTINGS[0]


@pytest.mark.parametrize("operation,position,name", [
    ("advance_schedule", 2, "lr"), ("advance_schedule", 3, "lr_min"), ("advance_schedule", 5, "warmup"),
    ("advance_schedule", 6, "beta1"), ("advance_schedule", 7, "beta2"), ("adam_update", 5, "beta1"),
    ("adam_update", 6, "beta2"),
    ("adam_update", 7, "eps"), ("sgd_update", 4, "momentum"),
])
def test_the_optimizer_kernel_checks_see_each_setting(operation, position, name):
    """kernel_checks' optimizer check fails a backend that reads any one setting at its default."""
    check_schedule_and_optimizers(NumpyBackend(), 64)  # the reference against itself passes
    with pytest.raises(AssertionError):
        check_schedule_and_optimizers(_Ignores(operation, position, DEFAULTS[name]), 64)
