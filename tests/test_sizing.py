"""Settings that follow the image's size (issue 16): chosen where the configuration leaves them at
0, kept where a flag or a file sets them, and said by `inr train`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.config import build_config, flags_to_values
from inr_cli.core.sizing import OMEGA0_PER_PIXEL, OMEGA0_RANGE, SIGMA_PER_PIXEL, SIGMA_RANGE, fit_to_image
from inr_cli.formats import checkpoint as ckpt
from tests.conftest import make_image


def preset(name: str, **flags):
    return build_config(None, flags_to_values(flags), name)


@pytest.mark.parametrize("width,height", [(13, 9), (48, 32), (90, 128), (256, 171), (1024, 840)])
def test_omega0_grows_with_the_longer_side_within_its_range(width, height):
    config, reasons = fit_to_image(preset("siren"), width, height)
    expected = min(max(OMEGA0_PER_PIXEL * max(width, height), OMEGA0_RANGE[0]), OMEGA0_RANGE[1])
    assert config.network.omega0 == pytest.approx(expected, abs=0.05)
    assert len(reasons) == 1 and f"{max(width, height)}-px image" in reasons[0] and "--omega0" in reasons[0]


@pytest.mark.parametrize("longer", [32, 128, 200, 256, 1024])
def test_sigma_follows_the_size_where_left_at_zero(longer):
    """The sigmoid preset leaves sigma to the size; the fourier preset does when asked with 0."""
    expected = min(max(SIGMA_PER_PIXEL * longer, SIGMA_RANGE[0]), SIGMA_RANGE[1])
    for config in (preset("sigmoid"), preset("fourier", fourier_sigma=0.0)):
        chosen, reasons = fit_to_image(config, longer, longer * 3 // 4)
        assert chosen.encoding.sigma == pytest.approx(expected, abs=0.05)
        assert any(f"Fourier sigma {chosen.encoding.sigma:g} for a {longer}-px image" in r for r in reasons)


def test_a_value_given_by_hand_is_kept():
    config, reasons = fit_to_image(preset("siren", omega0=45.0), 32, 32)
    assert config.network.omega0 == 45.0 and reasons == []
    fixed = preset("fourier")  # its sigma is the preset's own, not 0
    assert fit_to_image(fixed, 32, 32)[0].encoding.sigma == fixed.encoding.sigma == 6.0
    assert fit_to_image(preset("sigmoid", fourier_sigma=10.0), 32, 32)[0].encoding.sigma == 10.0


def test_train_says_what_it_chose_and_saves_it(tmp_path):
    image = make_image(tmp_path / "small.png", "RGB", size=(40, 30))
    args = ["train", str(image), "--steps", "2", "--hidden", "8", "--layers", "1", "--device", "cpu",
            "--preview-every", "0"]
    chosen = CliRunner().invoke(app, [*args, "--run-dir", str(tmp_path / "auto")])
    assert chosen.exit_code == 0, chosen.output
    omega0 = fit_to_image(preset("siren"), 40, 30)[0].network.omega0
    assert f"omega0 {omega0:g} for a 40-px image" in chosen.output
    assert ckpt.load(tmp_path / "auto").spec.omega0 == omega0  # the run keeps the value, not "auto"
    assert f"omega0 = {omega0!r}" in (tmp_path / "auto" / "config.toml").read_text()
    by_hand = CliRunner().invoke(app, [*args, "--omega0", "33", "--run-dir", str(tmp_path / "hand")])
    assert by_hand.exit_code == 0, by_hand.output
    assert "omega0" not in by_hand.output and ckpt.load(tmp_path / "hand").spec.omega0 == 33.0


def test_a_negative_value_is_refused(tmp_path):
    image = make_image(tmp_path / "small.png", "RGB")
    result = CliRunner().invoke(app, ["train", str(image), "--omega0", "-1", "--device", "cpu"])
    assert result.exit_code == 2 and "must not be negative" in result.output
