"""A wheel built from this tree (not editable) carries kernels/ and configs/ and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("hatchling", reason="hatchling builds the wheel (pip install hatchling)")
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return next(out.glob("inr-*.whl"))


def test_wheel_contains_kernels_configs_and_sample(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    kernels = {Path(n).name for n in names if n.startswith("inr_cli/kernels/")}
    assert {p.name for p in (ROOT / "kernels").glob("*.cu")} <= kernels
    assert {"inr_cli/configs/siren.toml", "inr_cli/configs/sigmoid.toml", "inr_cli/data/sample.png"} <= names


def test_installed_wheel_finds_its_files(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from inr_cli.resources import kernels_dir, configs_dir, sample_image; "
            "print(kernels_dir()); print(configs_dir()); print(sample_image().is_file()); "
            "print(sorted(p.name for p in kernels_dir().glob('*.cu')))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    kernels, configs, sample, listing = result.stdout.splitlines()
    assert kernels.startswith(str(site)) and configs.startswith(str(site))
    assert sample == "True" and "matmul.cu" in listing
