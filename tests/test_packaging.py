"""A wheel built from this tree (not editable) carries kernels/ and configs/ and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from inr_cli.errors import InrError

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
    # The run-directory service is a package named runs/, as are the run folders .gitignore keeps out.
    assert "inr_cli/runs/training.py" in names
    # inr view's page, and the viewer library it needs with no network, under its licence.
    static = ROOT / "inr_cli" / "viewer" / "static"
    assert {f"inr_cli/viewer/static/{p.relative_to(static).as_posix()}"
            for p in static.rglob("*") if p.is_file()} <= names
    assert {"inr_cli/viewer/static/index.html", "inr_cli/viewer/static/openseadragon/openseadragon.min.js",
            "inr_cli/viewer/static/openseadragon/LICENSE.txt",
            "inr_cli/viewer/static/openseadragon/images/zoomin_rest.png"} <= names


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


def test_wheel_metadata_license_version_and_headers(wheel):
    import inr_cli

    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = archive.read(metadata).decode()
    assert "License-Expression: MIT" in text
    assert f"Version: {inr_cli.__version__}" in text  # the version lives in one place
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert {"inr_cli/kernels/constants.cuh", "inr_cli/kernels/activation_math.cuh"} <= names
    for extra in ("cuda12", "cuda13", "cluster"):
        assert f"Provides-Extra: {extra}" in text


def test_install_hints_give_each_extras_packages_as_pyproject_lists_them(monkeypatch):
    """A missing optional package is named with the command that installs it, whichever way inr was
    installed: the extra's requirements from the package metadata (here pyproject's, written as
    metadata writes them), or `.[extra]` where inr runs uninstalled from its folder."""
    from importlib import metadata

    from inr_cli import extras

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    written = [f"{requirement}; extra == '{extra}'" for extra, requirements in declared.items()
               for requirement in requirements] + ["numpy>=1.26"]
    monkeypatch.setattr(metadata, "requires", lambda name: written if name == "inr" else None)
    assert extras.install_hint("export") == ("pip install 'onnx>=1.14' 'safetensors>=0.4' 'onnxruntime>=1.16' (inr's "
                                             "export extra)")
    assert extras.install_hint("export", "safetensors") == "pip install 'safetensors>=0.4' (inr's export extra)"
    for extra, requirements in declared.items():
        assert extras.extra_packages(extra) == requirements
    assert extras.install_hint("gpu", "cupy") == "pip install 'cupy-cuda13x>=13.0' (inr's gpu extra)"  # named otherwise
    monkeypatch.setitem(sys.modules, "onnx", None)  # what `import onnx` meets where it is not installed
    with pytest.raises(InrError) as raised:
        extras.require("onnx", "writing onnx files", "export", "or write .safetensors")
    assert str(raised.value) == ("writing onnx files needs onnx, which is not installed: pip install 'onnx>=1.14' "
                                 "(inr's export extra); or write .safetensors")
    assert extras.require("json", "reading", "export").loads("[1]") == [1]

    def uninstalled(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "requires", uninstalled)
    assert extras.install_hint("tune") == "pip install '.[tune]' in inr's folder"
