"""Every kernel file compiles with nvcc for the GPUs we target (Hopper, and sm_80 as a floor)."""

from __future__ import annotations

import shutil

import pytest

from inr_cli.resources import kernels_dir

KERNEL_FILES = sorted(kernels_dir().glob("*.cu"))


def test_kernel_files_exist():
    names = {p.name for p in KERNEL_FILES}
    assert {"fill.cu", "column_reduce.cu", "matmul.cu", "activations.cu", "loss.cu", "optimizer.cu"} <= names


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvcc_compiles(path, arch, nvcc_builds):
    """sm_90 to SASS (a cubin, as the figures need it: the PTX on the way), sm_80 to PTX (unoptimised:
    the front end's check); each file compiled once a session (conftest.nvcc_builds), whichever test
    asks first."""
    result, output = nvcc_builds(path, arch)
    assert result.returncode == 0, result.stderr
    if arch == "sm_90":
        assert output.stat().st_size > 0 and "Compiling entry function" in result.stderr
    else:
        assert ".entry" in output.read_text()


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


# Spills known and owed a fix: {kernel: (bytes stored, bytes loaded)}. An entry must match what ptxas
# reports, so that a spill that grows fails, and one that is mended asks for its entry's removal.
# network_backward_16_fp32: the fused network's backward at width 16 in FP32 (fused_network.cu, whose
# kernels are being redesigned), a 32-byte stack frame that ptxas spills to and reloads.
KNOWN_SPILLS = {"network_backward_16_fp32": (32, 40)}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
def test_no_kernel_spills_or_falls_below_its_designed_occupancy(nvcc_builds):
    """Every kernel the launchers use, as ptxas compiles it for sm_90: no spill to local memory (but
    KNOWN_SPILLS, exactly), and the blocks an SM can hold (registers and shared memory allowing, at the
    launcher's block size) at least what its design in launch.KERNEL_DESIGNS counts on."""
    from benchmarks.kernel_figures import occupancy, parse_ptxas
    from inr_cli.backends.launch import design_of

    problems, kernels = [], 0
    for path in KERNEL_FILES:
        result, _ = nvcc_builds(path, "sm_90")
        assert result.returncode == 0, result.stderr
        for name, f in parse_ptxas(result.stderr, path.name).items():
            kernels += 1
            design = design_of(name)
            blocks, limited_by = occupancy(f.registers, f.shared + design.dynamic_shared, design.threads)
            if (f.spill_stores, f.spill_loads) != KNOWN_SPILLS.get(name, (0, 0)):
                problems.append(f"{name} spills {f.spill_stores} bytes stored, {f.spill_loads} loaded (known: "
                                f"{KNOWN_SPILLS.get(name, 'none')})")
            if blocks < design.blocks_per_sm:
                problems.append(f"{name}: {blocks} blocks an SM ({limited_by}: {f.registers} registers, "
                                f"{f.shared + design.dynamic_shared} bytes shared), its design needs "
                                f"{design.blocks_per_sm}")
    assert kernels >= 80  # matmul's 50, the fused network's 16, the rest: every instantiation was read
    assert not problems, "\n".join(problems)


def test_occupancy_follows_the_sm90_limits():
    """Closed forms from sm_90's limits: 65536 registers in units of 256 a warp, 228 KB of shared memory
    with 1 KB reserved a block, 2048 threads and 32 blocks an SM."""
    from benchmarks.kernel_figures import occupancy

    assert occupancy(32, 0, 256) == (8, "threads")
    assert occupancy(128, 0, 256) == (2, "registers")  # 4096 registers a warp: 16 warps
    assert occupancy(255, 0, 256) == (1, "registers")  # 8192 a warp (255 x 32 rounded up to 256s)
    assert occupancy(40, 0, 256) == (6, "registers")  # 1280 a warp: 51 warps, 48 in groups of 4
    assert occupancy(16, 48 * 1024, 128) == (4, "shared memory")  # 49 KB a block
    assert occupancy(16, 0, 32) == (32, "blocks")


def test_ptxas_report_and_sass_are_read_per_kernel(tmp_path):
    """parse_ptxas reads registers, spills and shared memory from ptxas's report as it words them; the
    instruction mix (where nvdisasm is found) counts a kernel's atomics and FMAs."""
    from benchmarks.kernel_figures import compile_cubin, disassembler, instruction_mix, parse_ptxas

    report = """ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 17408 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers
"""
    figures = parse_ptxas(report)
    a, b = figures["a"], figures["b"]
    assert (a.registers, a.spill_stores, a.spill_loads, a.stack, a.shared) == (255, 12, 16, 8, 17408)
    assert (b.registers, b.spill_stores, b.spill_loads, b.shared) == (24, 0, 0, 0)
    if shutil.which("nvcc") is None or disassembler() is None:
        pytest.skip("the SASS half needs nvcc and nvdisasm (pip install nvidia-cuda-nvdisasm)")
    source = tmp_path / "probe.cu"
    source.write_text('extern "C" __global__ void probe(float* t, const float* x, float y)\n'
                      "{ atomicAdd(t + threadIdx.x % 7, fmaf(x[threadIdx.x], y, 1.0f)); }\n")
    result = compile_cubin(source, tmp_path)
    assert result.returncode == 0, result.stderr
    mix = instruction_mix(tmp_path / "probe.cubin", disassembler())["probe"]
    assert mix["atomic"] == 1 and mix["ffma"] == 1 and mix["ldg"] == 1 and mix["total"] > 3
