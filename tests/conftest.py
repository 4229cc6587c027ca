from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.xdist_scheduling import pytest_xdist_make_scheduler  # noqa: F401 - xdist's scheduler, mended

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason

    # Under pytest-xdist (--dist loadgroup, pyproject.toml): the Ray clusters one at a time on one
    # worker (each takes both cores while it runs), and the tests that share the session's nvcc
    # builds (nvcc_builds) on one worker, so that each file is compiled once.
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif "nvcc_builds" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("nvcc"))
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def emulated():
    """The kernels of kernels/ compiled as C++ and run on the CPU (see tests/emulation)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: cannot run the kernels' logic on the CPU")
    from tests.emulation.emulated_backend import EmulatedBackend

    return EmulatedBackend()


@pytest.fixture(scope="session")
def emulated_tf32(emulated):
    """The same, with the layer products in TF32 (--precision tf32)."""
    from tests.emulation.emulated_backend import EmulatedBackend

    return EmulatedBackend(precision="tf32")


@pytest.fixture(scope="session")
def nvcc_builds(tmp_path_factory):
    """A kernel file compiled by nvcc at most once a session for each architecture, shared by the tests
    that need it (tests/test_kernels_compile.py, doctor's in tests/test_messages.py): nvcc takes
    minutes on the largest files. nvcc_builds(path, arch) is (the CompletedProcess, its output):
    for sm_90 a cubin with ptxas's report (benchmarks/kernel_figures.compile_cubin: the PTX on the way,
    then the registers, spills and SASS the figures read); for another arch its PTX unoptimised
    (-Xcicc -O0): the front end's check of the file for that arch (its intrinsics, its #if paths) in a
    tenth of the time, the optimiser having run on the same code for sm_90."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found on this machine")
    import subprocess

    from benchmarks.kernel_figures import ARCH, compile_cubin

    builds = {}

    def build(path: Path, arch: str):
        key = (Path(path), arch)
        if key not in builds:
            folder = tmp_path_factory.mktemp(f"nvcc-{arch}-{key[0].stem}")
            if arch == ARCH:
                builds[key] = compile_cubin(key[0], folder), folder / f"{key[0].stem}.cubin"
            else:
                output = folder / f"{key[0].stem}.ptx"
                builds[key] = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-Xcicc", "-O0", "-std=c++17", "-Werror",
                                              "all-warnings", "-o", str(output), str(key[0])], capture_output=True,
                                             text=True, timeout=900), output
        return builds[key]

    return build


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def make_image(path: Path, mode: str, size=(13, 9), seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    w, h = size
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    array = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    Image.fromarray(array[..., 0] if channels == 1 else array).save(path)
    return path


@pytest.fixture
def rgb_png(tmp_path):
    return make_image(tmp_path / "rgb.png", "RGB")


@pytest.fixture
def coffee():
    return FIXTURES / "coffee.png"


def add_label_column(set_folder: Path, labels: list[str]) -> None:
    """index.csv of a fitted set with a label column, as a set fitted from class folders has."""
    with open(set_folder / "index.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(set_folder / "index.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, [*(name for name in rows[0] if name != "label"), "label"])
        writer.writeheader()
        writer.writerows({**row, "label": label} for row, label in zip(rows, labels, strict=True))


def rewrite_npz(source: Path, target: Path | None = None, **changes) -> None:
    """The .npz at `source` written again, to `target` (default: in its place), with `changes`: each
    array set to its value, or removed where the value is None (a damaged or tampered file)."""
    with np.load(source, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    for name, value in changes.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    np.savez(source if target is None else target, **arrays)
