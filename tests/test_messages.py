"""What commands say, as a user types them: eval against a reference of another shape, doctor
compiling the kernels, a wrong input named before anything else, a command without its arguments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inr_cli import settings
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
    assert "note: trained at 16x12, rendered at the reference's 32x24" in result.stderr
    assert "warning" not in result.stderr
    other = make_image(tmp_path / "tall.png", "RGB", size=(12, 30))
    result = run("eval", small_run, other, "--device", "cpu", "--json")  # a stretched render is not scored
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"error: {other} is 12x30, another aspect ratio than the 16x12 the network was "
                                      f"trained at: its render would be stretched to be scored; give a reference "
                                      f"of the training image's shape")


def test_a_command_that_reads_a_network_given_the_image_says_to_train_it_first(tmp_path):
    image = make_image(tmp_path / "photo.jpg", "RGB")
    for command in (["render", image], ["info", image], ["export", image, "-o", tmp_path / "x.onnx"]):
        result = run(*command)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == (f"error: {image} is an image, not a trained network: train one on it first "
                                          f"(`inr train {image}`), then give its run (runs/photo)")


def test_a_name_with_colons_is_quoted_as_it_is(tmp_path):
    """Rich reads ":smile:" as an emoji code; a message names the file exactly."""
    missing = tmp_path / "a:smile:b:100:.png"
    result = run("encode", missing)
    assert result.exit_code == 1 and result.stderr.strip() == f"error: {missing}: no such file"


def test_a_run_or_set_that_does_not_exist_is_said_so_whatever_the_other_arguments(tmp_path):
    """A missing RUN|SET is not taken for a single run: --image, a set's -o or a second set are not
    what is refused."""
    missing = tmp_path / "nope-set"
    for command in (["render", missing, "--image", "A/x.png"], ["render", missing],
                    ["export", missing, "-o", tmp_path / "n.hdf5"], ["export", missing, "-o", tmp_path / "n.onnx",
                                                                     "--image", "x.png"]):
        result = run(*command)
        assert result.exit_code == 1 and result.stderr.strip() == f"error: {missing}: no such run or set", command
    result = run("join", missing, tmp_path / "other", "-o", tmp_path / "joined")
    assert result.exit_code == 1 and result.stderr.strip() == f"error: {missing}: no such set"
    assert not (tmp_path / "joined").exists() and not (tmp_path / "n.hdf5").exists()
    for command in (["info", missing], ["view", missing], ["eval", missing, make_image(tmp_path / "a.png", "L")]):
        result = run(*command)
        assert result.exit_code == 1 and f"error: {missing}: no such run" in result.stderr, command


@pytest.mark.parametrize("contents", [(), ("notes.txt", "photo.png")])
def test_a_folder_that_holds_neither_a_run_nor_a_set_is_said_so(tmp_path, contents):
    """An empty folder, or one of the user's files, given as RUN|SET: was "--image names an image of an
    inr fit-many folder; FOLDER is a single run" (render, export) or "no checkpoint.npz in this directory
    (is it a run directory?)" (info, view), though a set is as good an answer. A run inr train has
    started (its config.toml, no checkpoint yet) is still a run."""
    folder = tmp_path / "folder"
    folder.mkdir()
    for name in contents:
        make_image(folder / name, "RGB") if name.endswith(".png") else (folder / name).write_text("mine\n")
    expected = (f"error: {folder}: neither a run nor a set (no checkpoint.npz, no fit-many.json in this folder): "
                f"give the folder of an inr train run or of an inr fit-many set")
    commands = [["render", folder, "--image", "x.png", "-o", tmp_path / "x.png"], ["render", folder, "-o",
                tmp_path / "x.png"], ["export", folder, "--image", "x.png", "-o", tmp_path / "x.safetensors"],
                ["export", folder, "-o", tmp_path / "x.safetensors"], ["info", folder]]
    if contents:  # an empty folder is said to view as such: it waits for nothing (inr view --next does)
        commands.append(["view", folder, "--no-browser", "--device", "cpu"])
    for command in commands:
        result = run(*command)
        assert result.exit_code == 1 and result.stderr.strip() == expected, (command, result.output)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder"]
    (folder / "config.toml").write_text("")
    result = run("render", folder, "--image", "x.png", "-o", tmp_path / "x.png")
    assert result.exit_code == 2 and f"{folder} is a single run" in result.stderr, result.output


def test_a_meta_init_checkpoint_or_a_set_given_as_a_run_says_what_it_is_and_what_to_give(tmp_path):
    """Neither is a damaged checkpoint nor a folder missing one: each is named for what it is."""
    from tests.test_fit_many import make_folder

    folder = make_folder(tmp_path / "images", count=4)
    start = tmp_path / "start.safetensors"
    result = run("meta-init", folder, "-o", start, "--hidden", "8", "--layers", "2", "--outer-steps", "4",
                 "--inner-steps", "2", "--meta-batch", "2", "--eval-every", "2", "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    kept = tmp_path / "start.safetensors.meta.npz"
    for command in (["info", kept], ["render", kept], ["eval", kept, folder / "img0.png"]):
        result = run(*command)
        assert result.exit_code == 2 and result.stderr.strip() == (
            f"error: {kept} is an inr meta-init checkpoint (what it resumes its learning from), not a run: give "
            f"the start or base it learns, {start}"), command
    assert run("render", start, "--size", "8", "-o", tmp_path / "start.png").exit_code == 0  # what it points to
    result = run("fit-many", folder, "-o", tmp_path / "set", "--hidden", "8", "--layers", "2", "--steps", "2",
                 "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    result = run("eval", tmp_path / "set", folder / "img0.png")
    assert result.exit_code == 2 and result.stderr.strip() == (
        f"error: {tmp_path / 'set'} is a set of networks (an inr fit-many folder), not a run: draw one of them with "
        f"inr render {tmp_path / 'set'} --image NAME, or browse them with inr view {tmp_path / 'set'}")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on this machine")
def test_doctor_compiles_the_kernels_with_nvcc(monkeypatch, nvcc_builds):
    """No GPU here (CuPy absent or no device): doctor --compile compiles every kernel file with nvcc -ptx,
    saying so first; plain doctor says that it skipped them and how to check them. Its nvcc runs are
    the session's (conftest.nvcc_builds: what tests/test_kernels_compile.py compiles for sm_80, with
    warnings as errors besides); the command doctor gives nvcc runs for real in the next test."""
    import inr_cli.commands.doctor as doctor
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason
    from inr_cli.resources import kernels_dir

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable: doctor compiles with CuPy (tests/test_gpu.py)")
    result = run("doctor")
    assert result.exit_code == 0, result.output
    assert "skipped: no usable GPU to run the kernels; inr doctor --compile checks" in result.stdout
    assert ": ok" not in result.stdout
    monkeypatch.setattr(doctor, "_compile_ptx", lambda nvcc, path, folder: nvcc_builds(path, doctor.NVCC_ARCH)[0])
    result = run("doctor", "--compile")
    assert result.exit_code == 0, result.output
    assert "compiling" in result.stderr and "kernel files with nvcc" in result.stderr
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
        result = run("doctor", "--json", "--compile")
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines()[-1] == f"error: kernels that do not compile: bad.cu (in {tmp_path})"
        report = json.loads(result.stdout)
        assert report["kernel_files"]["good.cu"] == "ok"
        assert (report["kernel_files"]["bad.cu"].startswith("FAILED")
                and "undefined_name" in report["kernel_files"]["bad.cu"])
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    result = run("doctor", "--compile")
    assert result.exit_code == 0
    assert "skipped: no usable GPU (no GPU in this test) and nvcc is not on PATH" in result.stdout


def test_a_bad_input_is_the_only_message_not_the_output_it_would_have_replaced(tmp_path):
    """decode and encode read their input before they say that a default output name is replaced."""
    bad_csv = tmp_path / "photo.csv"
    bad_csv.write_text("x,y,r\n0,0,not a number\n")
    for existing in ("photo.png", "photo-decoded.png"):
        make_image(tmp_path / existing, "RGB")
    result = run("decode", bad_csv)
    assert result.exit_code != 0 and "replacing" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    good = make_image(tmp_path / "good.png", "RGB")
    assert run("encode", good).exit_code == 0
    assert run("encode", good).exit_code == 0  # good.csv is kept: good-encoded.csv
    broken = tmp_path / "good.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    result = run("encode", broken)  # good-encoded.csv exists: the default name it would replace
    assert result.exit_code != 0 and "note" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    make_image(broken, "RGB", seed=1)
    result = run("encode", broken)
    assert result.exit_code == 0 and "note: " in result.stderr and "replacing " in result.stderr


def test_an_image_given_to_decode_or_a_csv_given_to_encode_says_which_command_it_wants(tmp_path):
    image = make_image(tmp_path / "photo.png", "RGB")
    assert run("encode", image).exit_code == 0
    result = run("decode", image)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {image} is an image; decode turns a pixel CSV into one "
                                      f"(`inr encode {image}` writes the CSV)")
    result = run("encode", tmp_path / "photo.csv")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'photo.csv'} is already a pixel CSV; "
                                      f"`inr decode {tmp_path / 'photo.csv'}` turns it into an image")


@pytest.mark.parametrize("command", ["encode", "decode", "render", "view", "export", "eval", "info", "fit-many"])
def test_a_command_without_its_arguments_is_a_usage_error(command):
    """As a missing argument is: its help on stderr, exit code 2, nothing on stdout (no_args_is_help
    alone would print the help and succeed)."""
    result = run(command)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("Usage: ") and f" {command} " in result.stderr.splitlines()[0]


def test_one_missing_argument_and_no_command_are_usage_errors_too(small_run):
    result = run("eval", small_run)
    assert result.exit_code == 2 and "Missing argument 'REFERENCE'" in result.stderr
    assert run().exit_code == 2  # `inr` alone: no command given
    assert run("--help").exit_code == 0


def test_help_lists_every_command_whole_and_options_with_their_defaults_and_metavars():
    """At 80 columns: `inr --help` cuts no summary; every option's value is named as N, FILE, NAME...
    (not Typer's <int>, <path>); train's flags say their defaults, a preset's own where it has one."""
    import typer.main

    from inr_cli.cli import SUMMARIES, app

    runner = CliRunner()
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    commands = typer.main.get_command(app).commands
    assert set(SUMMARIES) == set(commands)
    listed = top.split("Commands:")[1]
    for name, summary in SUMMARIES.items():
        assert f"  {name}" in listed and summary in listed, name
    assert "..." not in listed and max(map(len, top.splitlines())) <= 80
    for name in commands:
        output = runner.invoke(app, [name, "--help"], env={"COLUMNS": "80"}).output
        options = [line for line in output.split("Options:")[1].splitlines() if line.startswith("  -")]
        assert not [line for line in options if "<" in line.split("  ")[1]], (name, options)
    train = " ".join(runner.invoke(app, ["train", "--help"], env={"COLUMNS": "80"}).output.split())
    assert "--hidden N Neurons per hidden layer. Default: 256 (hashgrid preset: 64; sigmoid preset: 128)." in train
    assert "Default: 0.0004 (fourier, sets, sigmoid presets: 0.003; hashgrid preset: 0.005)." in train
    assert "--gray / --no-gray Train on one grey channel. Default: false." in train
    for name in ("fit-many", "meta-init"):  # a set's commands start from the sets preset, and say so
        shown = " ".join(runner.invoke(app, [name, "--help"], env={"COLUMNS": "80"}).output.split())
        assert "Default: 0.003 (hashgrid preset: 0.005; siren preset: 0.0004)." in shown, name
        assert "Default: 30 (hashgrid, siren presets: 0)." in shown, name


def test_presets_are_listed_and_printed_whole_for_a_config_file(tmp_path):
    from inr_cli.config import build_config, presets, read_toml

    listed = run("presets")
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == presets()
    assert "siren 3x256, lr 0.0004, 1000 steps" in listed.stdout and "inr presets NAME" in listed.stderr
    whole = run("presets", "sigmoid")
    assert whole.exit_code == 0
    (tmp_path / "mine.toml").write_text(whole.stdout)
    assert len(read_toml(tmp_path / "mine.toml")) == len(settings.SETTINGS)  # every key
    assert build_config(tmp_path / "mine.toml", {}) == build_config(None, {}, "sigmoid")
    result = run("presets", "nope")
    assert result.exit_code == 2
    assert "no preset 'nope' (available: fourier, hashgrid, sets, sigmoid, siren)" in result.stderr


def test_messages_show_paths_inside_the_working_directory_relative(tmp_path, monkeypatch):
    from inr_cli.commands.paths import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "runs" / "photo") == str(Path("runs") / "photo")
    assert shown_path("runs/photo") == str(Path("runs") / "photo")
    outside = tmp_path.parent / "elsewhere"
    assert shown_path(outside) == str(outside)
