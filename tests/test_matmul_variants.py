"""The matmul experiments' harness (dev/matmul/harness.py, issue 14): every variant file is right on
the awkward shapes before any GPU times it, and a wrong one is caught, not timed. The kernels run
under the CPU emulation here; on a GPU the harness runs the same check first."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emulation.emulated_backend import compiler

HARNESS_PATH = Path(__file__).resolve().parent.parent / "dev" / "matmul" / "harness.py"
spec = importlib.util.spec_from_file_location("matmul_harness", HARNESS_PATH)
harness = sys.modules["matmul_harness"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(harness)

FILE_VARIANTS = {number: v for number, v in harness.VARIANTS.items() if v.source is not None}
needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ runs the kernels on the CPU")


def test_every_variant_file_is_registered_under_its_number():
    files = {int(re.match(r"(\d+)_", path.name).group(1)): path.name for path in HARNESS_PATH.parent.glob("*.cu")}
    assert files == {number: v.source for number, v in FILE_VARIANTS.items()}


@needs_gxx
@pytest.mark.parametrize("number", FILE_VARIANTS)
def test_variant_is_right_on_awkward_shapes(number):
    runner = harness.make_runner(FILE_VARIANTS[number], emulate=True)
    assert runner.ops, "a variant defines at least one of matmul_nt, matmul_nn, matmul_tn"
    assert harness.check_variant(runner) == []


@needs_gxx
def test_a_wrong_variant_is_caught(tmp_path):
    """The naive kernel with its K loop one short: every op fails the check, and each failure names
    the op and the shape, so the harness reports it and times nothing."""
    source = (HARNESS_PATH.parent / "02_naive.cu").read_text()
    broken = tmp_path / "99_broken.cu"
    broken.write_text(source.replace("i < K;", "i < K - 1;"))
    runner = harness.FileVariant(broken, {}, emulate=True)
    failures = harness.check_variant(runner)
    assert {failure.split()[0] for failure in failures} == {"nt", "nn", "tn"}
    assert any("37x65x70: wrong values" in failure for failure in failures)


@needs_gxx
def test_an_op_a_variant_lacks_is_not_checked(tmp_path):
    source = (HARNESS_PATH.parent / "02_naive.cu").read_text()
    only_nt = tmp_path / "98_nt.cu"
    only_nt.write_text(source[:source.index('extern "C" __global__ void matmul_nn')])
    runner = harness.FileVariant(only_nt, {}, emulate=True)
    assert runner.ops == ("nt",)
    assert harness.check_variant(runner) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
@pytest.mark.parametrize("number", FILE_VARIANTS)
def test_nvcc_compiles_variant(tmp_path, number):
    path = HARNESS_PATH.parent / FILE_VARIANTS[number].source
    result = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings",
                             "-o", str(tmp_path / "out.ptx"), str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ".entry" in (tmp_path / "out.ptx").read_text()
