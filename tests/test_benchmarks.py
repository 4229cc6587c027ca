"""The benchmarks time the networks their names and BENCHMARKS.md say: a preset that changes must
not silently change a figure's meaning (the sigmoid preset took Fourier features in issue 16, and
sigmoid-200, the original system's setting, would have followed it)."""

from __future__ import annotations

import numpy as np
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


def test_the_emoji_faces_are_aligned_faces_split_by_the_seed(tmp_path):
    """learned_start.py --images faces: every face of the font, centred on white, the held-out ones
    drawn by the seed and never among those learned from (Debian's fonts-noto-color-emoji)."""
    from PIL import Image

    from benchmarks.emoji_faces import FACES, FONT, write_faces

    if not FONT.exists():
        pytest.skip(f"{FONT}: apt-get install fonts-noto-color-emoji")
    import numpy as np

    write_faces(tmp_path / "a" / "train", tmp_path / "a" / "test", 32, 20, seed=0)
    write_faces(tmp_path / "b" / "train", tmp_path / "b" / "test", 32, 20, seed=1)
    names = {split: {p.name for p in (tmp_path / "a" / split / "face").iterdir()} for split in ("train", "test")}
    assert len(names["test"]) == 20 and len(names["train"]) == len(FACES) - 20
    assert not names["test"] & names["train"]
    assert names["test"] != {p.name for p in (tmp_path / "b" / "test" / "face").iterdir()}
    faces = np.stack([np.asarray(Image.open(p), dtype=np.float32) / 255
                      for p in sorted((tmp_path / "a").glob("*/face/*.png"))])
    assert faces.shape == (len(FACES), 32, 32, 3)
    yellow = (faces[..., 0] > 0.7) & (faces[..., 2] < 0.5)
    # the disc's left cheek in the same place in most faces (a few are red, green, blue or a robot)
    assert np.median(yellow[:, 12:20, 4:8].mean(axis=(1, 2))) > 0.8
    assert np.median(yellow[:, 1:4, 14:18].mean(axis=(1, 2))) > 0.8  # and the top of the disc
    assert (faces[:, 0, 0] > 0.95).all(axis=1).mean() > 0.9  # white corners


def test_a_time_to_quality_run_is_keyed_by_the_settings_it_trains_with(monkeypatch):
    """--resume must not reuse a run saved before a preset's default changed: the key holds the
    settings the recipe trains with, not only the recipe's own flags."""
    from benchmarks import time_to_quality
    from benchmarks.recipes import RECIPES

    def key(recipe, targets=time_to_quality.TARGETS):
        return time_to_quality.job_key(("cpu", 1, "default", recipe, "cub", 64, 2000, 10, False, 2, (), True, False,
                                        targets))

    before = key(RECIPES["default"])
    assert key(RECIPES["default"], (30.0,)) != before
    real = time_to_quality.configure
    monkeypatch.setattr(time_to_quality, "configure",
                        lambda preset, size, **flags: real(preset, size, **{"lr": 1e-3, **flags}))
    assert key(RECIPES["default"]) != before  # the same recipe, a preset whose lr changed


def test_time_to_quality_tables_count_a_missed_target_as_the_budget():
    from benchmarks.time_to_quality import summary_rows, targets_of

    def run(image, steps, budget=100):
        reached = {f"{t:g}dB": ({"step": s, "seconds": 1.0} if s else None) for t, s in steps.items()}
        return {"size": 64, "recipe": "r", "image": image, "budget": budget, "reached": reached, "best_psnr": 40.0}

    runs = [run("a", {30.0: 10, 35.0: 20}), run("b", {30.0: 30, 35.0: None}), run("c", {30.0: 50})]
    assert targets_of(runs) == [30.0, 35.0]
    row = summary_rows(runs)[64]["r"]
    assert row["steps_30dB"] == 30  # median of 10, 30, 50
    assert row["steps_35dB"] == 60  # median of 20 and the budget (100); run c did not ask for 35 dB
    assert row["unreached_35dB"] == 1


def test_gpu_goals_report_judges_each_goal_from_what_was_measured(tmp_path):
    """dev/gpu_checks.sh's report: each goal from the figures in goals.jsonl (a line cut short by a
    call's end ignored), met or not, and "not measured" where a figure is missing; a measurement that
    failed whole is a row with its error."""
    import json

    from benchmarks import gpu_goals

    rows = [
        {"measurement": "tf32-step", "who": "ours-tf32", "ms": 4.0},
        {"measurement": "tf32-step", "who": "torch-eager-tf32", "ms": 10.0},
        {"measurement": "tf32-step", "who": "torch-compile-tf32", "error": "RuntimeError: no compiler"},
        {"measurement": "fused-sigmoid", "who": "ours-fused", "ms": 0.1},
        {"measurement": "fused-sigmoid", "who": "torch-eager", "ms": 1.5},
        {"measurement": "matmul", "m": 8, "n": 8, "k": 8, "op": "nt", "fp32_vs_cublas": 0.95, "tf32_vs_cublas": 2.0},
        {"measurement": "matmul", "m": 8, "n": 8, "k": 8, "op": "tn", "fp32_vs_cublas": 0.8, "tf32_vs_cublas": 1.9},
        *({"measurement": "tf32-fit", "who": who, "settings": "stable", "photo": "coffee", "size": 256, "steps": 1000,
           "psnr": psnr} for who, psnr in (("fp32", 30.0), ("fp32-cublas", 30.5), ("tf32", 30.4))),
        *({"measurement": name, "error": f"CUDARuntimeError: {name}"} for name in ("matmul", "tf32-fit", "fused-pack")),
    ]
    (tmp_path / gpu_goals.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"measurement": "fu')
    text = gpu_goals.report(tmp_path, "bash dev/gpu_checks.sh first")
    assert "| TF32 step, SIREN 3x256 512x512: ours / PyTorch TF32 eager | 0.4 | <= 0.5 | yes |" in text
    assert "| TF32 step: ours / torch.compile TF32 | not measured | < 1 | - |" in text
    assert "| Fused sigmoid 2x64 200x200: PyTorch eager / ours | 15 | >= 20 | **no** |" in text
    assert "| Fused pack, 2048 SIREN 3x64 32x32: PyTorch bmm / ours | not measured | >= 3 | - |" in text
    assert "| FP32 matmul / cuBLAS, the worst SIREN 512 product | 0.8 | >= 0.9 | **no** |" in text
    assert "| TF32 fit: dB outside FP32's spread (ours vs cuBLAS, at least 0.2 dB) | -0.1 | <= 0 | yes |" in text
    assert "RuntimeError: no compiler" in text and "`bash dev/gpu_checks.sh first`" in text
    assert "| fused-pack | - | CUDARuntimeError: fused-pack |" in text


def test_gpu_checks_refuses_an_unknown_part():
    import subprocess

    from benchmarks.common import ROOT

    result = subprocess.run(["bash", str(ROOT / "dev" / "gpu_checks.sh"), "--dry-run", "tests"], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 2 and "unknown part 'tests'" in result.stderr


def test_kernel_cost_model_counts_every_launch_of_a_step():
    """benchmarks/kernel_costs.py: a step recorded through the real launchers, every kernel it launches
    counted (fused and layer by layer, FP32 and TF32, the hash grid, Fourier features, SGD), and a
    product's counts against the closed form."""
    from benchmarks.kernel_costs import DEVICES, Setting, cost_of, kernel_table, product_launches, record_step

    [(name, grid, block, args)] = product_launches(300, 40, 20, "nt").launches
    cost = cost_of(name, grid, block, args)
    assert cost.fp32 == 2 * 300 * 40 * 20 and cost.tf32 == 0
    assert cost.hbm == 4 * (300 * 20 + 40 * 20 + 300 * 40)
    [(name, grid, block, args)] = product_launches(300, 64, 20, "nn", precision="tf32").launches
    assert cost_of(name, grid, block, args).tf32 == 2 * 300 * 64 * 20
    sigmoid = dict(hidden=16, layers=2, encoding="none")
    settings = [Setting("sigmoid", "sigmoid", 16, 1, sigmoid, networks=2, fused_variant="one-kernel"),
                Setting("sigmoid", "sigmoid", 16, 1, sigmoid, networks=2),
                Setting("siren", "siren", 16, 3, dict(hidden=32, layers=2), precision="tf32", fused=False),
                Setting("siren", "siren", 16, 3, dict(hidden=32, layers=2), precision="tf32"),
                Setting("hashgrid", "hashgrid", 32, 3, dict(hash_levels=4, hash_log2_size=8, batch_size=256)),
                Setting("fourier", "fourier", 16, 3, dict(hidden=16, layers=2, fourier_features=8, optimizer="sgd"))]
    kernels = set()
    for setting in settings:
        rows = kernel_table(record_step(setting).launches, DEVICES["H200"])
        kernels |= {row["kernel"] for row in rows}
        assert all(row["floor_ms"] > 0 and row["launches"] > 0 and row["predicted_ms"] > row["floor_ms"]
                   for row in rows), rows
    assert {"network_train_fp32", "network_forward_16_fp32", "network_backward_32_tf32", "hashgrid_backward_f2_rows",
            "hashgrid_encode_f2_rows", "fourier_features", "sgd_update", "adam_update", "sample_batch_f32"} <= kernels
    assert any(k.startswith("linear_forward_tf32_") for k in kernels), kernels
    # One kernel a step: 2 -> 16 -> 16 -> 1 on 256 rows of 2 networks: every layer forward and its weight
    # gradient, every layer's input gradient but the first's, and the bias gradients' sums.
    [train] = [launch for launch in record_step(settings[0]).launches if launch[0] == "network_train_fp32"]
    macs_per_row = 2 * (2 * 16 + 16 * 16 + 16 * 1) + 16 * 16 + 16 * 1
    assert cost_of(*train).fp32 == 2 * 256 * (2 * macs_per_row + 16 + 16 + 1)


def test_kernel_cost_model_counts_the_hash_grid_kernels_by_variant():
    """Per point and level (256 points, 4 levels of F = 2): an atomic a corner where the backward adds
    its F features as a vector, F of them otherwise; the rows kernels move F floats of the encoding and
    (u, v) once a point, the others a sector and (u, v) for each level."""
    from benchmarks.kernel_costs import DEVICES, SECTOR, Setting, kernel_table, record_step
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    pl, expected = 256 * 4, {"rows": ("f2_rows", 4, 4 * 2 / 4 + 4 * 2), "levels": ("f2_levels", 4, 4 * 2 + SECTOR),
                             "rows-scalar": ("f2_rows", 8, 4 * 2 / 4 + 4 * 2), "any": ("any", 8, 4 * 2 + SECTOR)}
    for variant in HASHGRID_VARIANTS:
        setting = Setting("hashgrid", "hashgrid", 32, 3, dict(hash_levels=4, hash_log2_size=8, batch_size=256),
                          hashgrid=variant)
        kernels = {row["kernel"]: row for row in kernel_table(record_step(setting).launches, DEVICES["H200"])}
        suffix, adds, rows_bytes = expected[variant]
        encode = kernels[f"hashgrid_encode_{suffix}"]
        backward = kernels[f"hashgrid_backward_{suffix}{'_scalar' if variant == 'rows-scalar' else ''}"]
        assert backward["atomics_m"] * 1e6 == adds * pl
        assert encode["l2_mb"] * 1e6 == pytest.approx((4 * SECTOR + rows_bytes) * pl)
        assert backward["l2_mb"] * 1e6 == pytest.approx((rows_bytes + SECTOR * adds) * pl)


@pytest.mark.slow
def test_gpu_checks_kernels_part_runs_dry_on_the_cpu(tmp_path):
    """dev/gpu_checks.sh's kernels part, as a GPU would run it, on the CPU at toy sizes (one setting):
    each kernel timed beside its floor, written to goals.jsonl, and the report's table of kernels."""
    import json
    import os
    import subprocess
    import sys

    from benchmarks.common import ROOT

    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
           "INR_DRY_SETTINGS": "200x200 grey, fused, one kernel"}
    result = subprocess.run(["bash", str(ROOT / "dev" / "gpu_checks.sh"), "--dry-run", "kernels"], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=600)
    rows = [json.loads(line) for line in (tmp_path / "goals.jsonl").read_text().splitlines()]
    timed = [r for r in rows if r["measurement"] == "kernels"]
    assert {r["kernel"] for r in timed} >= {"network_train_fp32", "adam_update"}
    assert all(r["kernel_ms"] > 0 and r["floor_ms"] > 0 and r["predicted_ms"] > 0 for r in timed), timed
    assert {r.get("who") for r in rows if r["measurement"] == "hashgrid-step"} == {
        "ours-fused", "ours-fused-levels", "ours-fused-rows-scalar", "ours-fused-any", "ours-fused-one-kernel",
        "ours-fused-tf32", "ours-layers", "torch-hashgrid"}
    report = (tmp_path / "benchmarks-block.md").read_text()
    assert "| sigmoid 2x64, 200x200 grey, fused, one kernel | network_train_fp32 |" in report
    assert "Hash grid step, 2^18 samples, 16 levels, ReLU 2x64: ours fused (ms)" in report
    assert result.returncode == 0, result.stdout[-3000:]


def test_kodak_budgets_scale_with_the_photo_and_the_report_judges_the_goal():
    """benchmarks/kodak.py holds GaussianImage's budgets in bytes per pixel value (a photo drawn at
    half its size gets a quarter), and dev/gpu_checks.sh's report says the preset's mean against the
    goal: 43.9 dB in at most 5 s a photo."""
    from benchmarks import gpu_goals, kodak
    from inr_cli.core.pixels import PixelImage

    half = PixelImage(np.zeros((256, 384, 3), np.float32), ("r", "g", "b"))
    assert kodak.budget_bytes("300k", half) == 300_000 and kodak.budget_bytes("560k", half) == 560_000
    assert kodak.budget_bytes("image", half) == 384 * 256 * 3

    def row(contestant, psnr, seconds):
        return {"contestant": contestant, "budget": "image", "psnr": psnr, "seconds_run": seconds, "ssim": 0.99,
                "steps_run": 2000}

    met = gpu_goals.kodak_lines({"rows": [row("hashgrid", 44.5, 4.0), row("hashgrid", 43.5, 4.5)]}, "k.json")
    assert met == ["- Kodak, hashgrid at image bytes, 2 photos (`k.json`): mean 44.00 dB, SSIM 0.9900, 4.25 s a "
                   "photo, 2000 steps (goal: 43.9 dB in at most 5 s a photo: met)"]
    slow = gpu_goals.kodak_lines({"rows": [row("hashgrid", 44.5, 5.5), row("hashgrid-f32", 40.0, 4.0)]}, "k.json")
    assert "**not met**" in slow[0] and "goal" not in slow[1]


def test_half_precision_rounds_bf16_as_torch_does():
    """benchmarks/half_precision.py's BF16 rounding (to nearest, ties to even, on the top 16 bits)
    against PyTorch's conversion, bit for bit: ties both ways, the largest finite values, subnormals,
    infinities and NaN."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from benchmarks.half_precision import round_bf16

    rng = np.random.default_rng(0)
    bits = np.concatenate([rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x007FFFFF,
                                     0x7F800000, 0xFF800000, 0x7FC00000], np.uint32)])
    x = bits.view(np.float32)
    theirs = torch.from_numpy(x.copy()).to(torch.bfloat16).to(torch.float32).numpy()
    ours = round_bf16(x)
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))
