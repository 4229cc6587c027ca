"""Rendering in chunks, the coordinate convention, and checkpoints that refuse to lie."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.core.coords import axis_centres, pixel_grid
from inr_cli.core.metrics import psnr, ssim
from inr_cli.core.network import NetworkSpec, init_parameters
from inr_cli.core.render import render_float, render_rows
from inr_cli.core.state import TrainingState
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from tests.conftest import rewrite_npz
from tests.test_networks import config_for

cpu = CpuBackend()
CONFIG = config_for("siren", hidden=16, layers=2, omega0=30.0)
SPEC = NetworkSpec.from_config(CONFIG, 3)


def test_pixel_centres_in_the_unit_square():
    np.testing.assert_allclose(axis_centres(2), [-0.5, 0.5])
    np.testing.assert_allclose(axis_centres(4), [-0.75, -0.25, 0.25, 0.75])
    grid = pixel_grid(3, 2)
    assert grid.shape == (6, 2)
    np.testing.assert_allclose(grid[1], [0.0, -0.5])  # x=1 of 3, y=0 of 2
    np.testing.assert_allclose(pixel_grid(3, 4, 2, 4), pixel_grid(3, 4)[6:])


def test_chunked_render_equals_one_pass():
    params = init_parameters(SPEC, 0)
    whole = np.concatenate([v for _, _, v in render_rows(cpu, SPEC, params, 37, 23, chunk_pixels=10**6)])
    chunked = np.concatenate([v for _, _, v in render_rows(cpu, SPEC, params, 37, 23, chunk_pixels=100)])
    np.testing.assert_allclose(chunked, whole, rtol=1e-6, atol=1e-7)


def test_every_canvas_shows_the_same_picture():
    """A 2x canvas's pixel (2i+1/2) sits at the same point as the 1x canvas's edge between samples:
    check instead that odd sizes share centres: pixel 1 of 3 and pixel 4 of 9 are both u=0."""
    params = init_parameters(SPEC, 1)
    small = render_float(cpu, SPEC, params, 3, 3)
    large = render_float(cpu, SPEC, params, 9, 9)
    np.testing.assert_allclose(large[4, 4], small[1, 1], atol=1e-6)
    np.testing.assert_allclose(large[1, 7], small[0, 2], atol=1e-6)


def test_metrics_closed_forms():
    a = np.random.default_rng(0).random((20, 20, 3))
    assert psnr(a, a) == float("inf")
    assert psnr(np.zeros((4, 4, 1)), np.full((4, 4, 1), 0.1)) == pytest.approx(20.0)
    assert ssim(a, a) == pytest.approx(1.0)
    assert ssim(a, 1 - a) < 0
    assert 0 < ssim(a, np.clip(a + 0.05, 0, 1)) < 1


def make_checkpoint(networks: int = 1, **changes) -> ckpt.Checkpoint:
    state = TrainingState.fresh(SPEC, range(networks))
    state.moment1 = np.full_like(state.params, 0.25)
    state.step, state.seconds, state.loss = 3, 1.5, np.linspace(0.5, 0.7, networks)
    fields = dict(spec=SPEC, config=CONFIG, state=state, total_steps=10, data_fingerprint="abc",
                  data_shape=(4, 5, 3), channels=("r", "g", "b"))
    fields.update(changes)
    return ckpt.Checkpoint(**fields)


@pytest.mark.parametrize("networks", [1, 3])
def test_checkpoint_roundtrip(tmp_path, networks):
    saved = make_checkpoint(networks)
    ckpt.save(saved, tmp_path / "c.npz")
    back = ckpt.load(tmp_path / "c.npz")
    assert back.spec == SPEC and back.config == CONFIG and back.step == 3 and back.channels == ("r", "g", "b")
    assert back.state.seconds == 1.5 and np.array_equal(back.state.loss, saved.state.loss)
    assert np.array_equal(back.state.params, saved.state.params) and back.state.params.shape[0] == networks
    assert np.array_equal(back.state.moment1, saved.state.moment1) and not back.state.moment2.any()
    assert not list(tmp_path.glob(".*tmp")), "temporary file left behind"


@pytest.mark.parametrize("damage,message", [
    (lambda p: p.write_bytes(p.read_bytes()[:200]), "not a readable checkpoint"),
    (lambda p: p.write_text("hello"), "not a readable checkpoint"),
    (lambda p: rewrite_npz(p, format_version=np.array(99)), "written by a newer inr (format 99)"),
    (lambda p: rewrite_npz(p, params=None), "'params' is missing"),
    (lambda p: rewrite_npz(p, moment1=np.zeros(7, np.float32)), "'moment1' has shape (7,)"),
    (lambda p: rewrite_npz(p, moment2=np.zeros((2, SPEC.parameter_count()), np.float32)), "moments do not match"),
    (lambda p: rewrite_npz(p, format_version=np.array(0)), "checkpoint format 0 is not one"),
    (lambda p: rewrite_npz(p, config=np.array('{"network": {"model": "siren"}}')), "bad network or config"),
    (lambda p: rewrite_npz(p, params=np.array([{"evil": 1}], dtype=object)), "pickled objects, refused"),
    (lambda p: rewrite_npz(p, magic=np.array("something")), "not an inr checkpoint"),
])
def test_damaged_checkpoints_are_refused(tmp_path, damage, message):
    path = tmp_path / "checkpoint.npz"
    ckpt.save(make_checkpoint(), path)
    damage(path)
    with pytest.raises(InrError) as info:
        ckpt.load(path)
    assert message in str(info.value)


def test_pickle_payload_is_never_unpickled(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled!')",))

    path = tmp_path / "checkpoint.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("params.npy", pickle.dumps(Boom()))
    with pytest.raises(InrError):
        ckpt.load(path)
