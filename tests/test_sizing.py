"""Settings that follow the image's size (issue 16): chosen where the configuration leaves them at
0, kept where a flag or a file sets them, and said by `inr train`."""

from __future__ import annotations

import math
import tracemalloc

import pytest
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.config import build_config, flags_to_values, with_values
from inr_cli.core.encodings import LEVEL_HASHED, create_encoding, table_entries
from inr_cli.core.network import NetworkSpec
from inr_cli.core.sizing import (
    LEVELS_HASHED,
    LEVELS_SMALL_IMAGE,
    LEVELS_WHOLE,
    OMEGA0_PER_PIXEL,
    OMEGA0_RANGE,
    SIGMA_PER_PIXEL,
    SIGMA_RANGE,
    fit_to_image,
    image_bytes,
    model_bytes,
)
from inr_cli.formats import checkpoint as ckpt
from inr_cli.limits import MAX_LOG2_TABLE_SIZE
from tests.conftest import make_image


def preset(name: str, **flags):
    return build_config(None, flags_to_values(flags), name)


@pytest.mark.parametrize("width,height", [(13, 9), (48, 32), (90, 128), (256, 171), (1024, 840)])
def test_omega0_grows_with_the_longer_side_within_its_range(width, height):
    config, reasons = fit_to_image(preset("siren"), width, height, 3)
    expected = min(max(OMEGA0_PER_PIXEL * max(width, height), OMEGA0_RANGE[0]), OMEGA0_RANGE[1])
    assert config.network.omega0 == pytest.approx(expected, abs=0.05)
    assert len(reasons) == 1 and f"{max(width, height)}-px image" in reasons[0] and "--omega0" in reasons[0]


@pytest.mark.parametrize("longer", [32, 128, 200, 256, 1024])
def test_sigma_follows_the_size_where_left_at_zero(longer):
    """The sigmoid preset leaves sigma to the size; the fourier preset does when asked with 0."""
    expected = min(max(SIGMA_PER_PIXEL * longer, SIGMA_RANGE[0]), SIGMA_RANGE[1])
    for config in (preset("sigmoid"), preset("fourier", fourier_sigma=0.0)):
        chosen, reasons = fit_to_image(config, longer, longer * 3 // 4, 3)
        assert chosen.encoding.sigma == pytest.approx(expected, abs=0.05)
        assert any(f"Fourier sigma {chosen.encoding.sigma:g} for a {longer}-px image" in r for r in reasons)


def test_a_value_given_by_hand_is_kept():
    config, reasons = fit_to_image(preset("siren", omega0=45.0), 32, 32, 3)
    assert config.network.omega0 == 45.0 and reasons == []
    fixed = preset("fourier")  # its sigma is the preset's own, not 0
    assert fit_to_image(fixed, 32, 32, 3)[0].encoding.sigma == fixed.encoding.sigma == 6.0
    assert fit_to_image(preset("sigmoid", fourier_sigma=10.0), 32, 32, 3)[0].encoding.sigma == 10.0


def test_train_says_what_it_chose_and_saves_it(tmp_path):
    image = make_image(tmp_path / "small.png", "RGB", size=(40, 30))
    args = ["train", str(image), "--steps", "2", "--hidden", "8", "--layers", "1", "--device", "cpu",
            "--preview-every", "0"]
    chosen = CliRunner().invoke(app, [*args, "--run-dir", str(tmp_path / "auto")])
    assert chosen.exit_code == 0, chosen.output
    omega0 = fit_to_image(preset("siren"), 40, 30, 3)[0].network.omega0
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


# The network sized to the image: the hash grid's tables (table_for_image) and the byte budget.
SIZES = [(256, 256), (512, 384), (768, 512), (1536, 1024), (4000, 2250), (16384, 8192), (40000, 25000)]


def sized_network(config, width, height, channels=3):
    fitted, reasons = fit_to_image(config, width, height, channels)
    return fitted, NetworkSpec.from_config(fitted, channels), reasons


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_hash_grid_grows_with_the_image_within_its_bytes(dtype):
    """256 px to a gigapixel: no larger than the image's 8-bit bytes, the largest tables that are, and
    growing with the pixel count; counted, not allocated."""
    counts, tables = [], []
    for width, height in SIZES:
        config, spec, reasons = sized_network(preset("hashgrid", dtype=dtype), width, height)
        count, entries = spec.parameter_count(), table_entries(spec.hash_log2_size)
        assert model_bytes(count, dtype) <= image_bytes(width, height, 3)
        if entries < 1 << MAX_LOG2_TABLE_SIZE:  # a table one entry larger would not fit
            larger = with_values(config, {"encoding.log2_table_size": math.log2(entries + 1)})
            larger_bytes = model_bytes(NetworkSpec.from_config(larger, 3).parameter_count(), dtype)
            assert larger_bytes > image_bytes(width, height, 3)
        assert f"tables of {entries:,} entries a level for the image's 8-bit bytes" in reasons[-1]
        # 8 levels where the bytes hash 16 (each then with twice the entries); a gigapixel's bytes hold
        # 16 levels of inr's largest tables
        if width * height <= 9_000_000 or (width, height) == SIZES[-1]:
            assert spec.hash_levels == (16 if (width, height) == SIZES[-1] else 8)
        counts.append(count)
        tables.append(entries)
    assert counts == sorted(counts) and tables == sorted(tables) and tables[0] < tables[-1]
    assert tables[-1] == 1 << MAX_LOG2_TABLE_SIZE  # a gigapixel reaches inr's largest table
    tracemalloc.start()
    sized_network(preset("hashgrid", dtype=dtype), *SIZES[-1])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes allocated to size a gigapixel's network"


def test_an_image_under_256_px_keeps_every_vertex():
    """Drawn larger more often than stored: its tables hold each level whole (none hashed), as they did
    before the sizing rule, whatever its bytes."""
    config, spec, reasons = sized_network(preset("hashgrid"), 128, 96)
    grid = create_encoding(spec)
    assert not grid.level_table[:, LEVEL_HASHED].any() and "holding every vertex" in reasons[-1]
    assert spec.hash_levels == LEVELS_SMALL_IMAGE and "hash grid of 32 levels" in reasons[-1]
    assert model_bytes(spec.parameter_count(), "float32") > image_bytes(128, 96, 3)
    # From 256 px, or under a budget named, the levels follow the bytes as for any image
    assert sized_network(preset("hashgrid"), 256, 171)[1].hash_levels == LEVELS_HASHED
    assert sized_network(preset("hashgrid", max_bytes="1m"), 128, 96)[1].hash_levels == LEVELS_WHOLE
    assert sized_network(preset("hashgrid", hash_levels=12), 128, 96)[1].hash_levels == 12


def test_float16_doubles_what_the_image_bytes_hold():
    half = sized_network(preset("hashgrid", dtype="float16"), 768, 512)[1].parameter_count()
    full = sized_network(preset("hashgrid", dtype="float32"), 768, 512)[1].parameter_count()
    assert 1.95 < half / full < 2.05


def test_a_table_set_by_hand_wins_and_the_run_says_so():
    config, spec, reasons = sized_network(preset("hashgrid", hash_log2_size=19.0, dtype="float32"), 768, 512)
    assert table_entries(spec.hash_log2_size) == 1 << 19 and config.encoding.log2_table_size == 19
    assert spec.hash_levels == 16  # the paper's, with its tables
    assert "by hand (--hash-log2-size)" in reasons[-1] and "9.52x the image's" in reasons[-1]
    # Under a budget named too, the hand table is the largest it may keep.
    config, spec, _ = sized_network(preset("hashgrid", hash_log2_size=19.0, max_bytes="500k", dtype="float32"),
                                    768, 512)
    assert model_bytes(spec.parameter_count(), "float32") <= 500_000 < 4 * spec.parameter_count() + 4 * 16


@pytest.mark.parametrize("name", ["siren", "fourier", "sigmoid", "hashgrid"])
@pytest.mark.parametrize("budget", ["20k", "image"])
def test_a_byte_budget_sizes_every_network(name, budget):
    config, spec, reasons = sized_network(preset(name, max_bytes=budget, dtype="float16"), 128, 96)
    most = 20_000 if budget == "20k" else image_bytes(128, 96, 3)
    assert model_bytes(spec.parameter_count(), "float16") <= most
    assert f"for --max-bytes {budget}" in reasons[-1]
    if name != "hashgrid":  # a unit wider (the Fourier features in proportion) would not fit
        given = preset(name)
        wider = with_values(config, {"network.hidden": spec.hidden + 1, "encoding.features": max(
            1, given.encoding.features * (spec.hidden + 1) // given.network.hidden)})
        assert model_bytes(NetworkSpec.from_config(wider, 3).parameter_count(), "float16") > most


def test_a_budget_nothing_fits_is_refused_by_name(tmp_path):
    image = make_image(tmp_path / "small.png", "RGB", size=(40, 30))
    for args, says in ((["--preset", "hashgrid", "--max-bytes", "10k"], "--max-bytes 10k: the smallest hash grid"),
                       (["--max-bytes", "500"], "--max-bytes 500: the narrowest siren network"),
                       (["--max-bytes", "lots"], "error: --max-bytes 'lots' is not a byte budget"),
                       (["--set", "network.max_bytes=0"], "error: --set network.max_bytes '0' is not a byte budget")):
        result = CliRunner().invoke(app, ["train", str(image), "--device", "cpu", "--run-dir",
                                          str(tmp_path / "run"), *args])
        assert result.exit_code == 2 and says in result.output, result.output
        assert len(result.output.strip().splitlines()[-1]) and "Traceback" not in result.output
    assert not (tmp_path / "run" / "checkpoint.npz").exists()
