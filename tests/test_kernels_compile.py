"""Every kernel file compiles with nvcc for the GPUs we target (Hopper, and sm_80 as a floor)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from inr_cli.resources import kernels_dir

KERNEL_FILES = sorted(kernels_dir().glob("*.cu"))


def test_kernel_files_exist():
    names = {p.name for p in KERNEL_FILES}
    assert {"fill.cu", "column_reduce.cu", "matmul.cu", "activations.cu", "loss.cu", "optimizer.cu"} <= names


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvcc_compiles(tmp_path, path, arch):
    result = subprocess.run(
        ["nvcc", "-ptx", f"-arch={arch}", "-std=c++17", "-Werror", "all-warnings",
         "-o", str(tmp_path / "out.ptx"), str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert ".entry" in (tmp_path / "out.ptx").read_text()


def test_launch_tiles_match_the_kernel_instantiations():
    """The host's launch plans (block size, K-split alignment) describe the tiles the .cu compiles,
    in each precision."""
    import re

    from inr_cli.backends.launch import TILES_BY_PRECISION

    text = (kernels_dir() / "matmul.cu").read_text()
    engines = {}
    for name, engine, values in re.findall(r"^using (\w+) = (Simt|Mma)Tile<([^>]*)>;", text, re.M):
        bm, bn, bk, x, y, *_ = (int(v) if v.strip().isdigit() else v for v in values.split(","))
        threads = (bm // x) * (bn // y) if engine == "Simt" else 32 * x * y  # TM, TN or the warps
        engines[name] = (bm, bn, bk, threads)
    compiled = {tile: engines[engine] for tile, engine in re.findall(r"^MATMUL_ALL\((\w+), (\w+)\)", text, re.M)}
    planned = {t.kernel_tile: (t.bm, t.bn, t.bk, t.threads) for tiles in TILES_BY_PRECISION.values()
               for t in tiles.values()}
    assert compiled == planned


def test_fused_widths_match_the_kernel_instantiations():
    import re

    from inr_cli.backends.launch import FUSED_WIDTHS
    from inr_cli.settings import PRECISIONS

    text = (kernels_dir() / "fused_network.cu").read_text()
    compiled = {(int(w), p) for w, p in re.findall(r"^FUSED_NETWORK\((\d+), (\w+), ", text, re.M)}
    assert compiled == {(w, p) for w in FUSED_WIDTHS for p in PRECISIONS}


def test_shared_constants_are_written_once():
    """The numbers host and kernels share live in kernels/constants.cuh, which launch.py reads; no
    other kernel file may define them again."""
    import re

    from inr_cli.backends import launch

    shared = set(launch.CONSTANTS)
    assert {"ACT_LINEAR", "ACT_SIGMOID", "ACT_SINE", "ACT_RELU", "REDUCE_TX", "REDUCE_TY", "LOSS_THREADS"} <= shared
    assert launch.ACTIVATION_CODES == {"linear": 0, "sigmoid": 1, "sine": 2, "relu": 3}
    for path in [*KERNEL_FILES, *kernels_dir().glob("*.cuh")]:
        if path.name == "constants.cuh":
            continue
        redefined = set(re.findall(r"^#define (\w+)", path.read_text(), re.M)) & shared
        assert not redefined, f"{path.name} defines {redefined} again"
        if re.search(r"\b(ACT_\w+|REDUCE_T[XY]|LOSS_THREADS)\b", path.read_text()):
            assert '#include "constants.cuh"' in path.read_text(), f"{path.name} uses constants.cuh without it"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ lists the kernels a file defines")
def test_the_fused_network_kernels_are_those_compiled_apart():
    """The CUDA backend compiles fused_network.cu on its own, at the first launch of a kernel named
    network_*: that file defines those kernels and no other file does."""
    from inr_cli.backends.cuda_backend import FUSED_NETWORK_SOURCE
    from tests.emulation.emulated_backend import _kernels

    for path in KERNEL_FILES:
        names = _kernels([path], [f"-I{kernels_dir()}"])
        assert names and all(name.startswith("network_") == (path.name == FUSED_NETWORK_SOURCE) for name in names)
