"""The benchmarks time the networks their names and BENCHMARKS.md say: a preset that changes must
not silently change a figure's meaning (the sigmoid preset took Fourier features in issue 16, and
sigmoid-200, the original system's setting, would have followed it)."""

from __future__ import annotations

import pytest

from benchmarks.bench_step import SETTINGS, setting_config
from benchmarks.common import configure
from inr_cli.core.network import NetworkSpec


def spec_of(name: str) -> NetworkSpec:
    setting = SETTINGS[name]
    return NetworkSpec.from_config(setting_config(setting), 1 if setting["gray"] else 3)


def test_sigmoid_200_is_the_original_system():
    spec = spec_of("sigmoid-200")
    assert (spec.model, spec.layers, spec.hidden, spec.encoding, spec.out_features) == ("sigmoid", 2, 64, "none", 1)
    assert spec.layer_shapes()[0] == (64, 2)  # x, y as they are


@pytest.mark.parametrize("name", ["siren-512", "siren-1024"])
def test_siren_settings_are_3x256_at_the_papers_omega0(name):
    spec = spec_of(name)
    assert (spec.model, spec.layers, spec.hidden, spec.omega0, spec.encoding) == ("siren", 3, 256, 30.0, "none")


@pytest.mark.parametrize("name", ["sigmoid-preset-200", "sigmoid-preset-512"])
def test_sigmoid_preset_settings_run_the_preset(name):
    setting = SETTINGS[name]
    preset = NetworkSpec.from_config(configure("sigmoid", setting["size"]), 3)
    spec = spec_of(name)
    assert spec == preset
    assert (spec.layers, spec.hidden, spec.encoding) == (4, 128, "fourier")


@pytest.mark.parametrize("name", ["siren64-200", "siren64-512"])
def test_narrow_siren_settings_are_3x64(name):
    spec = spec_of(name)
    assert (spec.model, spec.layers, spec.hidden) == ("siren", 3, 64)
    assert max(max(shape) for shape in spec.layer_shapes()) == 64  # width within the fused kernel's 128
