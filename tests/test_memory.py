"""The memory estimate (inr_cli/core/memory.py): a configuration that does not fit is refused before
anything is allocated for it, naming the settings that drive it; and the estimate is within a fifth of
what a training allocates, for every model family (measured with tracemalloc, which counts NumPy's
arrays: the same on every machine). BENCHMARKS.md compares it with the peak resident set of the
presets at three sizes each (benchmarks/memory_estimate.py)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli.core.memory as memory
from inr_cli.cli import app

runner = CliRunner()
MB = 1 << 20


def photo(path, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    values = np.stack([np.sin(6 * xx + 3 * yy + k) for k in range(3)], -1) * 0.35 + 0.5 + rng.normal(0, 0.03,
                                                                                                  (size, size, 3))
    Image.fromarray((np.clip(values, 0, 1) * 255).astype(np.uint8)).save(path)
    return path


def one_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_hash_grid_beyond_the_machine_is_refused_before_a_parameter_is_drawn(tmp_path, monkeypatch):
    """About 2.1e9 parameters pass the settings' limits; their memory is named, with the settings that
    drive it as flags and keys, before any of it is asked for."""
    monkeypatch.setattr(memory, "host_room", lambda: 4 << 30)  # what is free here: asking for more would fail
    image = photo(tmp_path / "photo.png", 16)
    result = runner.invoke(app, ["train", str(image), "--encoding", "hashgrid", "--hash-levels", "64",
                                 "--hash-log2-size", "24", "--hash-max-res", "1048576", "--device", "cpu",
                                 "-q", "--run-dir", str(tmp_path / "run")])
    line = one_line(result, 1)
    assert "this training needs about" in line and "GB more host memory and 4.3 GB is free" in line, line
    for flag in ("--hash-levels (encoding.levels)", "--hash-log2-size (encoding.log2_table_size)"):
        assert flag in line, line
    assert not (tmp_path / "run").exists()


def test_an_image_beyond_the_machine_is_refused_by_encode_before_it_is_decoded(tmp_path, monkeypatch):
    """encode holds an image's pixels (its CSV is written a block of rows at a time): an image whose
    pixels, as its header declares them, would not fit the memory free is refused before a pixel is
    decoded (this file holds none: decoding it would fail), and so is a --size that enlarges an image
    beyond; nothing is written."""
    from tests.test_hostile_inputs import png_header_only

    monkeypatch.setattr(memory, "host_room", lambda: 4 << 30)
    declared = png_header_only(tmp_path / "huge.png", 50000, 30000)
    result = runner.invoke(app, ["encode", str(declared), "-o", str(tmp_path / "huge.csv")])
    line = one_line(result, 1)
    assert line.startswith(f"error: encoding {declared} (50000x30000) needs about 13.5 GB more host memory and "
                           f"4.3 GB is free (its decoding 9.0 GB, the image 4.5 GB; "), line
    assert line.endswith("; close other programs or use a machine with more memory"), line
    image = photo(tmp_path / "photo.png", 64)
    assert runner.invoke(app, ["encode", str(image), "-o", str(tmp_path / "photo.csv"), "--size", "128"]).exit_code == 0
    result = runner.invoke(app, ["encode", str(image), "-o", str(tmp_path / "large.csv"), "--size", "40000"])
    line = one_line(result, 1)
    assert line.startswith(f"error: encoding {image} (64x64) needs about 57.6 GB more host memory"), line
    assert "(its resize to 40000x40000 57.6 GB, the image 12 kB;" in line and line.endswith("; give a smaller --size")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["huge.png", "photo.csv", "photo.png"]


def test_an_address_space_limit_is_room_the_estimate_sees():
    """`ulimit -v` leaves a process less than the machine has free: host_room counts what the limit
    leaves (a process under one, as a subprocess here), and nothing without one."""
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    limit = 3 << 30
    code = "from inr_cli.core import memory; print(memory._address_space_room(), memory.host_room())"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    limited = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))).stdout.split()
    assert 0 < int(limited[0]) < limit and int(limited[1]) <= int(limited[0]), limited
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert memory._address_space_room() is None


def test_a_pack_and_a_render_beyond_the_machine_are_refused_naming_what_drives_them(tmp_path, monkeypatch):
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(3):
        photo(folder / f"i{i}.png", 16, seed=i)
    monkeypatch.setattr(memory, "host_room", lambda: 64 * MB)
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "set"), "--hidden", "2048",
                                 "--layers", "3", "--device", "cpu", "-q"])
    line = one_line(result, 1)
    assert "a pack of 3 networks (--pack) needs about" in line and "--hidden (network.hidden)" in line, line
    assert not (tmp_path / "set").exists()  # refused before the folder was made
    monkeypatch.undo()
    assert runner.invoke(app, ["train", str(folder / "i0.png"), "--steps", "1", "--hidden", "8", "--layers", "1",
                               "--device", "cpu", "-q", "--run-dir", str(tmp_path / "run")]).exit_code == 0
    monkeypatch.setattr(memory, "host_room", lambda: 64 * MB)
    result = runner.invoke(app, ["render", str(tmp_path / "run"), "--width", "30000", "--height", "3000",
                                 "-o", str(tmp_path / "big.png"), "--device", "cpu", "-q"])
    line = one_line(result, 1)
    assert "a 30000x3000 render needs about" in line and "--size, --width, --height" in line, line
    assert not (tmp_path / "big.png").exists()


FAMILIES = {
    "siren": ["train", "--preset", "siren", "--hidden", "32", "--layers", "2"],
    "fourier": ["train", "--preset", "fourier", "--hidden", "32", "--layers", "2", "--fourier-features", "32"],
    "sigmoid": ["train", "--preset", "sigmoid", "--hidden", "32", "--layers", "2", "--fourier-features", "32"],
    "hashgrid": ["train", "--preset", "hashgrid", "--hash-log2-size", "10", "--batch-size", "2048"],
    "sets": ["fit-many", "--hidden", "32", "--layers", "2", "--pack", "4"],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_estimate_is_within_a_fifth_of_what_a_training_allocates(tmp_path, monkeypatch, family):
    """What the check estimated against what tracemalloc saw allocated past it, at its peak: the
    training, its preview and the final render (fit-many: the pack, and scoring it)."""
    seen = []

    def hook(point, **details):
        if point == "memory-estimate" and not seen:
            seen.append((details["estimate"].needed, tracemalloc.get_traced_memory()[0]))
            tracemalloc.reset_peak()

    monkeypatch.setattr(memory, "hook", hook)
    command, *settings = FAMILIES[family]
    if command == "fit-many":
        (tmp_path / "images").mkdir()
        for i in range(4):
            photo(tmp_path / "images" / f"i{i}.png", 48, seed=i)
        args = [command, str(tmp_path / "images"), "-o", str(tmp_path / "out")]
    else:
        args = [command, str(photo(tmp_path / "photo.png", 72)), "--run-dir", str(tmp_path / "out")]
    tracemalloc.start()
    try:
        result = runner.invoke(app, [*args, *settings, "--steps", "2", "--device", "cpu", "-q"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    estimated, at_check = seen[0]
    measured = peak - at_check
    assert 0.8 < estimated / measured < 1.2, f"estimated {estimated / MB:.1f} MB, allocated {measured / MB:.1f} MB"


@pytest.mark.parametrize("backend_name", ["numpy", "cpu"])
def test_each_backends_training_step_is_estimated_within_a_fifth(backend_name):
    """The trainer's own buffers (parameters, moments, workspace, the images' copies) on the NumPy
    reference and the CPU engine, each with its own workspace: the step's estimate against what it
    allocates."""
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.backends.numpy_backend import NumpyBackend
    from inr_cli.config import build_config
    from inr_cli.core.network import NetworkSpec, init_networks
    from inr_cli.core.pixels import PixelImage
    from inr_cli.core.sizing import fit_to_image
    from inr_cli.core.state import TrainingState
    from inr_cli.core.trainer import Trainer

    backend = NumpyBackend() if backend_name == "numpy" else CpuBackend()
    size = 96
    image = PixelImage((np.random.default_rng(0).random((size, size, 3)) * 255).astype(np.uint8), ("r", "g", "b"))
    for preset, values in (("siren", {"network.hidden": 64, "network.layers": 2}),
                           ("hashgrid", {"encoding.log2_table_size": 12, "training.batch_size": 4096})):
        config, _ = fit_to_image(build_config(None, values, preset), size, size, 3)
        spec = NetworkSpec.from_config(config, 3)
        state = TrainingState(init_networks(spec, [0]), None, None, 0, 0.0, np.full(1, np.nan))
        tracemalloc.start()
        try:
            trainer = Trainer(backend, spec, config, [image], state, [0])
            trainer.step()
            measured = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        parts = memory.training_estimates(spec, size, size, config.training.batch_size, 1, backend, previews=False)[0]
        estimated = sum(part.bytes for part in parts.parts if part.what != "their copies for checkpoints")
        assert 0.8 < estimated / measured < 1.2, (preset, estimated / MB, measured / MB)


def test_inr_trains_checkpoints_are_counted_as_the_snapshots_it_keeps(monkeypatch):
    """inr train's estimate counts the snapshots runs/snapshots.py keeps, where the trainer runs: two
    of a small model; of a large one none in host memory (its checkpoints are written from the
    trainer's arrays) and one on a GPU, in device memory; the final pictures, the parameters once."""
    import types

    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.config import build_config
    from inr_cli.core import state
    from inr_cli.core.network import NetworkSpec
    from inr_cli.core.sizing import fit_to_image
    from inr_cli.runs.snapshots import Snapshots
    from inr_cli.runs.writer import BackgroundWriter

    spec = NetworkSpec.from_config(fit_to_image(build_config(None, {"network.hidden": 16}, "siren"), 64, 64, 3)[0], 3)
    model = spec.parameter_count() * 4
    cpu, gpu = CpuBackend(), types.SimpleNamespace(name="gpu", in_host_memory=False)

    def counted(backend) -> dict:
        estimates = memory.training_estimates(spec, 64, 64, 0, 1, backend, previews=False, snapshots=True)
        return {estimate.where: part.bytes for estimate in estimates for part in estimate.parts
                if "for checkpoints" in part.what and part.bytes}

    with BackgroundWriter() as writer:
        assert counted(cpu) == {"host memory": 6 * model} and counted(gpu) == {"GPU memory": 6 * model}
        assert Snapshots(cpu, (1, model // 4), writer).count == Snapshots(gpu, (1, model // 4), writer).count == 2
        monkeypatch.setattr(state, "SMALL_SNAPSHOT_BYTES", 3 * model - 1)
        assert counted(cpu) == {} and counted(gpu) == {"GPU memory": 3 * model}
        assert (Snapshots(cpu, (1, model // 4), writer).count, Snapshots(gpu, (1, model // 4), writer).count) == (0, 1)
    finishing = memory.finishing_estimate(spec, 64, 64, 1, cpu, snapshots=True)
    assert [part.bytes for part in finishing.parts if part.what == "the parameters"] == [model]
