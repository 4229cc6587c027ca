"""What commands say, as a user types them: eval against a reference of another shape, and doctor
compiling the kernels."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import make_image
from tests.test_cli import SMALL, run


@pytest.fixture
def small_run(tmp_path):
    image = make_image(tmp_path / "photo.png", "RGB", size=(16, 12))
    result = run("train", image, "--steps", "3", "--run-dir", tmp_path / "run", *SMALL)
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


def test_eval_says_when_the_reference_has_another_shape(small_run, tmp_path):
    same = run("eval", small_run, tmp_path / "photo.png", "--device", "cpu")
    assert same.exit_code == 0 and "trained at" not in same.stderr, same.output
    bigger = make_image(tmp_path / "big.png", "RGB", size=(32, 24))
    result = run("eval", small_run, bigger, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "PSNR" in result.stdout
    assert "note: the run was trained at 16x12, the reference is 32x24: rendered at the reference's size" \
        in result.stderr and "warning" not in result.stderr
    other = make_image(tmp_path / "tall.png", "RGB", size=(12, 30))
    result = run("eval", small_run, other, "--device", "cpu", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["width"] == 12
    lines = [line for line in result.stderr.splitlines() if "trained at" in line]
    assert len(lines) == 1 and lines[0].startswith("warning:") and "16x12" in lines[0] and "12x30" in lines[0]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
def test_doctor_compiles_the_kernels_with_nvcc():
    """No GPU here (CuPy absent or no device): doctor compiles every kernel file with nvcc -ptx."""
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason
    from inr_cli.resources import kernels_dir

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable: doctor compiles with CuPy (tests/test_gpu.py)")
    result = run("doctor")
    assert result.exit_code == 0, result.output
    assert "nvcc" in result.stdout
    for path in kernels_dir().glob("*.cu"):
        assert f"{path.name}: ok" in result.stdout, result.stdout


def test_doctor_reports_a_kernel_that_fails_and_a_skipped_check(tmp_path, monkeypatch):
    import inr_cli.commands.doctor as doctor

    monkeypatch.setattr(doctor, "gpu_unavailable_reason", lambda: "no GPU in this test")
    (tmp_path / "good.cu").write_text('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n')
    (tmp_path / "bad.cu").write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    monkeypatch.setattr(doctor, "kernels_dir", lambda: tmp_path)
    if shutil.which("nvcc") is not None:
        result = run("doctor", "--json")
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [f"error: kernels that do not compile: bad.cu (in {tmp_path})"]
        report = json.loads(result.stdout)
        assert report["kernel_files"]["good.cu"] == "ok"
        assert report["kernel_files"]["bad.cu"].startswith("FAILED") and "undefined_name" in report["kernel_files"]["bad.cu"]
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    result = run("doctor")
    assert result.exit_code == 0
    assert "skipped: no usable GPU (no GPU in this test) and nvcc is not on PATH" in result.stdout
