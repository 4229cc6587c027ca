"""Every command through Typer's CliRunner: what it prints, what it writes, how it fails."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli import __version__
from inr_cli.cli import app
from inr_cli.errors import UsageError
from tests.conftest import make_image

runner = CliRunner()
SMALL = ["--hidden", "16", "--layers", "2", "--device", "cpu", "-q"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def trained(tmp_path, rgb_png):
    result = run("train", rgb_png, "--steps", "5", "--run-dir", tmp_path / "run", *SMALL)
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


def test_version_and_help():
    assert run("--version").stdout.strip() == f"inr {__version__}"
    result = run("--help")
    assert result.exit_code == 0
    for command in ("encode", "decode", "train", "render", "eval", "info", "doctor"):
        assert command in result.stdout
        assert run(command, "--help").exit_code == 0


def test_help_texts_survive_rich_markup():
    """Rich reads `[word...]` in a help text as a markup tag and drops it: say defaults in brackets."""
    import re

    import typer.main

    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            assert not re.search(r"\[[a-z#/@]", getattr(param, "help", None) or ""), (command.name, param.name)
    assert "render-WxH.png" in " ".join(run("render", "--help").stdout.split())


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_encode_decode_roundtrip(tmp_path, mode):
    src = make_image(tmp_path / "img.png", mode)
    result = run("encode", src, "-o", tmp_path / "img.csv")
    assert result.exit_code == 0 and result.stdout.strip() == str(tmp_path / "img.csv")
    result = run("decode", tmp_path / "img.csv", "-o", tmp_path / "back.png")
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "back.png")), np.asarray(Image.open(src)))


def test_encode_size_gray_and_default_output(tmp_path, coffee):
    import shutil

    src = tmp_path / "photo.png"
    shutil.copy(coffee, src)
    result = run("encode", src, "--size", "30", "--gray")
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "photo.csv").read_text().splitlines()
    assert lines[0] == "x,y,l" and len(lines) == 1 + 30 * 20
    grey = (tmp_path / "photo.csv").read_bytes()
    result = run("encode", src)  # the default name exists: kept, and the tool's own name written, said so
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "photo-encoded.csv")
    assert result.stderr.strip() == (f"note: {tmp_path / 'photo.csv'} exists and is kept: writing "
                                      f"{tmp_path / 'photo-encoded.csv'}; -o names another")
    assert (tmp_path / "photo.csv").read_bytes() == grey
    assert (tmp_path / "photo-encoded.csv").read_text().splitlines()[0] == "x,y,r,g,b"
    result = run("encode", src, "--gray")  # both names taken: the tool's own one is replaced, in one note
    assert result.exit_code == 0 and result.stderr.strip() == (
        f"note: {tmp_path / 'photo.csv'} exists and is kept: replacing {tmp_path / 'photo-encoded.csv'} (the "
        f"default output name); -o names another")
    assert (tmp_path / "photo-encoded.csv").read_text().splitlines()[0] == "x,y,l"
    assert (tmp_path / "photo.csv").read_bytes() == grey


@pytest.mark.parametrize("args,code,message", [
    (["encode", "missing.png"], 1, "no such file"),
    (["encode", "{tmp}/text.png"], 1, "not an image"),
    (["encode", "{tmp}", "--size", "10"], 1, "directory"),
    (["encode", "{rgb}", "--size", "0"], 2, "--size must be a positive"),
    (["encode", "{rgb}", "-o", "{tmp}/y.png"], 2, "{tmp}/y.png: encode writes a pixel CSV, not an image; name a CSV "
                                                  "file (-o {tmp}/y.csv)"),
    (["decode", "{tmp}/bad.csv"], 1, "{tmp}/bad.csv line 2"),  # the folder too: runs/a/x.csv, runs/b/x.csv
    (["train", "{rgb}", "--steps", "0"], 2, "--steps (training.steps) must be positive"),
    (["train", "{rgb}", "--lr", "-1"], 2, "--lr (optimizer.lr) must be positive"),
    (["train", "{rgb}", "--hidden", "0"], 2, "--hidden (network.hidden) must be positive"),
    (["train", "{rgb}", "--batch-size", "-5"], 2, "--batch-size (training.batch_size) must not be negative"),
    (["train", "{rgb}", "--model", "resnet"], 2, "'resnet' is not one of 'siren', 'sigmoid', 'relu'"),
    (["train", "{rgb}", "--device", "tpu"], 2, "'tpu' is not one of"),
    (["train", "{rgb}", "--no-such-flag"], 2, "No such option"),
    (["render", "--size", "5"], 2, "Missing argument"),
    (["train", "{rgb}", "--config", "{tmp}/bad.toml"], 2, "unknown key 'network.widht'"),
    (["train", "{rgb}", "--config", "{tmp}/broken.toml"], 2, "line 2"),
    (["train", "{rgb}", "--config", "{tmp}/type.toml"], 2, "must be an integer"),
    (["train", "{rgb}", "--size", "0"], 2, "--size must be positive, got 0"),
    (["train", "{rgb}", "--preset", "hashgrid", "--hash-log2-size", "nan"], 2,
     "--hash-log2-size (encoding.log2_table_size) must be a finite number, got nan"),
    (["train", "{rgb}", "--encoding", "fourier", "--fourier-sigma", "nan"], 2,
     "--fourier-sigma (encoding.sigma) must be a finite number, got nan"),
    (["train", "{rgb}", "--set", "network.widht=3"], 2, "unknown key 'network.widht' (known in [network]"),
    (["train", "{rgb}", "--set", "network.hidden=wide"], 2, "network.hidden must be an integer, got 'wide'"),
    (["train", "{rgb}", "--set", "hidden"], 2, "expected section.key=value"),
    (["train", "{rgb}", "--set", "optimizer.beta1=1.5"], 2, "optimizer.beta1 and optimizer.beta2 must be below 1"),
    (["train", "{rgb}", "--steps", "50", "--warmup", "50"], 2,
     "--warmup (optimizer.warmup) must be below --steps (training.steps), 50; got 50"),
    (["train", "{rgb}", "--precision", "tf32", "--device", "cpu"], 2,
     "--precision tf32 (training.precision) runs on a GPU's tensor cores; --device cpu trains in FP32"),
    (["train", "{rgb}", "--matmul", "cublas", "--precision", "tf32", "--device", "cpu"], 2,
     "--matmul cublas multiplies in FP32 only; --precision tf32 needs --matmul kernel"),  # said with or without a GPU
    (["train", "{rgb}", "--hidden", "8", "--set", "network.hidden=9"], 2, "network.hidden is given twice"),
    (["fit-many", "{tmp}", "-o", "{tmp}/set", "--set", "data.source=x"], 2, "not a setting of fit-many"),
    (["train", "--resume", "{tmp}/nowhere"], 1, "no such run"),
    (["render", "{tmp}/nowhere"], 1, "no such run"),
    (["info", "{tmp}"], 1, "no checkpoint.npz"),
])
def test_errors_are_one_line_with_exit_code(tmp_path, rgb_png, args, code, message):
    (tmp_path / "text.png").write_text("not really a png")
    (tmp_path / "bad.csv").write_text("x,y,l\n0,0,7\n")
    (tmp_path / "bad.toml").write_text("[network]\nwidht = 3\n")
    (tmp_path / "broken.toml").write_text("[network]\nhidden = = 3\n")
    (tmp_path / "type.toml").write_text("[network]\nhidden = \"wide\"\n")
    args = [a.format(tmp=tmp_path, rgb=rgb_png) for a in args]
    result = run(*args)
    assert result.exit_code == code, result.output
    assert message.format(tmp=tmp_path) in result.output
    assert "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0, result.output


def test_train_writes_run_and_info_reports_it(trained):
    result = run("info", trained, "--json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["step"] == 5 and info["model"] == "siren" and info["width"] == 13 and info["height"] == 9
    assert info["params"] == 2 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3
    assert info["model_bytes"] == info["params"] * 4 and info["image_bytes"] == 13 * 9 * 3
    text = run("info", trained).stdout
    assert "siren" in text and "step      5 of 5" in text


def test_render_sizes_and_aspect(trained, tmp_path):
    result = run("render", trained, "--size", "26", "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    path = result.stdout.strip()
    assert Image.open(path).size == (26, 18)
    result = run("render", trained, "--width", "7", "--height", "30", "-o", tmp_path / "x.png", "--device", "cpu")
    assert Image.open(tmp_path / "x.png").size == (7, 30)
    result = run("render", trained, "--height", "90", "-o", tmp_path / "h.png", "--device", "cpu", "-q")
    assert Image.open(tmp_path / "h.png").size == (130, 90)
    result = run("render", trained / "checkpoint.npz", "-o", tmp_path / "d.png", "--device", "cpu", "-q")
    assert Image.open(tmp_path / "d.png").size == (13, 9)


@pytest.mark.parametrize("args,message", [
    (["--size", "0"], "--size must be a positive"),
    (["--width", "-3"], "--width must be a positive"),
    (["--size", "10", "--width", "4"], "either --size or --width"),
    (["--size", "100000"], "exceeds the limit of 65535"),
    (["--width", "60000", "--height", "60000"], "exceeds the limit of 2147483648 pixels"),
])
def test_render_refuses_bad_sizes(trained, args, message):
    result = run("render", trained, *args)
    assert result.exit_code == 2 and message in result.output


def test_eval_reports_psnr_and_ssim(trained, rgb_png):
    result = run("eval", trained, rgb_png, "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert set(scores) == {"psnr", "ssim", "step", "params", "width", "height"}
    assert 0 < scores["psnr"] < 60 and -1 <= scores["ssim"] <= 1
    text = run("eval", trained, rgb_png, "--device", "cpu").stdout
    assert "PSNR" in text and "SSIM" in text


def test_train_on_csv_and_grey(tmp_path):
    src = make_image(tmp_path / "g.png", "L")
    assert run("encode", src, "-o", tmp_path / "g.csv").exit_code == 0
    result = run("train", tmp_path / "g.csv", "--steps", "3", "--run-dir", tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    assert Image.open(tmp_path / "r" / "render.png").mode == "L"


def test_train_rgba(tmp_path):
    src = make_image(tmp_path / "a.png", "RGBA")
    result = run("train", src, "--steps", "3", "--model", "sigmoid", "--run-dir", tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    assert Image.open(tmp_path / "r" / "render.png").mode == "RGBA"


def test_train_sample_with_no_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("train", "--steps", "2", "--size", "24", *SMALL)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "sample" / "checkpoint.npz").is_file()


def test_config_file_and_flag_precedence(tmp_path, rgb_png):
    (tmp_path / "c.toml").write_text("[network]\nmodel = \"sigmoid\"\nhidden = 12\n[training]\nsteps = 4\n")
    result = run("train", rgb_png, "--config", tmp_path / "c.toml", "--steps", "3", "--layers", "1",
                 "--run-dir", tmp_path / "r", "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    saved = (tmp_path / "r" / "config.toml").read_text()
    assert 'model = "sigmoid"' in saved and "hidden = 12" in saved and "steps = 3" in saved
    assert "lr = 0.003" in saved  # from the sigmoid preset
    # the saved effective config is itself a valid config file
    result = run("train", rgb_png, "--config", tmp_path / "r" / "config.toml", "--run-dir", tmp_path / "r2",
                 "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output


def test_config_toml_shows_what_the_run_uses_and_trains_the_same_network_again(tmp_path, rgb_png):
    """A ReLU hash-grid run's config.toml leaves out a SIREN's omega0, Fourier features' keys, SGD's
    momentum and the start a set would tell apart, naming them in a comment; given back to --config
    it fits the very same network."""
    args = ["--preset", "hashgrid", "--hash-levels", "4", "--hash-log2-size", "8", "--steps", "2", "--device", "cpu",
            "-q"]
    assert run("train", rgb_png, *args, "--run-dir", tmp_path / "r").exit_code == 0
    saved = (tmp_path / "r" / "config.toml").read_text()
    active = [line for line in saved.splitlines() if not line.startswith("#")]
    for left_out in ("omega0 =", "features =", "sigma =", "momentum =", "init =", "start_output_at_mean ="):
        assert not any(line.startswith(left_out) for line in active), left_out
    assert "#   network.omega0: a SIREN's frequency" in saved and "levels = 4" in saved and "eps = 1e-15" in saved
    result = run("train", rgb_png, "--config", tmp_path / "r" / "config.toml", "--run-dir", tmp_path / "again",
                 "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    import dataclasses

    from inr_cli.formats import checkpoint as ckpt

    first, again = ckpt.load(tmp_path / "r"), ckpt.load(tmp_path / "again")
    assert np.array_equal(first.params, again.params)  # the same function: omega0, which it has no use for, aside
    assert dataclasses.replace(first.spec, omega0=0) == dataclasses.replace(again.spec, omega0=0)


def test_set_reaches_every_key_and_bool_flags_undo_a_config(tmp_path, rgb_png):
    (tmp_path / "c.toml").write_text("[data]\ngray = true\n")
    result = run("train", rgb_png, "--config", tmp_path / "c.toml", "--no-gray", "--set", "optimizer.beta2=0.95",
                 "--set", "training.steps=2", "--set", "network.init_output_at_mean=false", "--run-dir",
                 tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    saved = (tmp_path / "r" / "config.toml").read_text()
    assert "beta2 = 0.95" in saved and "steps = 2" in saved and "gray = false" in saved
    assert "init_output_at_mean = false" in saved


def test_doctor_runs_without_gpu():
    result = run("doctor")
    assert result.exit_code == 0
    assert "kernels" in result.stdout and "gpu" in result.stdout and "numpy" in result.stdout
    report = json.loads(run("doctor", "--json").stdout)
    assert report["python"] and report["numpy"] == np.__version__ and "gpu" in report


def test_device_gpu_without_gpu_is_a_clear_error(rgb_png, tmp_path):
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present")
    result = run("train", rgb_png, "--device", "gpu", "--run-dir", tmp_path / "r", "-q")
    assert result.exit_code == 1 and "--device gpu:" in result.output
    result = run("train", rgb_png, "--device", "gpu", "--run-dir", tmp_path / "r")  # said before any plan
    assert result.exit_code == 1 and result.stderr.strip().startswith("error: --device gpu:"), result.stderr
    assert not (tmp_path / "r").exists()
    result = run("train", rgb_png, "--steps", "1", "--hidden", "8", "--run-dir", tmp_path / "r2")
    assert result.exit_code == 0 and "GPU" not in result.output  # no CuPy: the CPU is the user's choice


def test_a_broken_gpu_is_noted_but_never_under_quiet(rgb_png, tmp_path, monkeypatch):
    """CuPy installed but no usable GPU: `auto` says so once and goes on on the CPU; -q says nothing."""
    from inr_cli.backends import gpu_probe

    monkeypatch.setattr(gpu_probe, "cupy_installed", lambda: True)
    monkeypatch.setattr(gpu_probe, "gpu_unavailable_reason", lambda: "no CUDA device found")
    result = run("train", rgb_png, "--steps", "1", "--hidden", "8", "--run-dir", tmp_path / "r")
    assert result.exit_code == 0 and result.output.count("no usable GPU (no CUDA device found); using the CPU") == 1
    result = run("train", rgb_png, "--steps", "1", "--hidden", "8", "--run-dir", tmp_path / "q", "-q")
    assert result.exit_code == 0 and "GPU" not in result.output
    result = run("render", tmp_path / "r", "--size", "8", "-q", "-o", tmp_path / "x.png")
    assert result.exit_code == 0 and "GPU" not in result.output


def test_fourier_preset_trains_renders_and_keeps_frequencies(tmp_path, rgb_png):
    from inr_cli.formats import checkpoint as ckpt

    run_dir = tmp_path / "f"
    result = run("train", rgb_png, "--preset", "fourier", "--steps", "4", "--hidden", "16", "--fourier-features",
                 "8", "--run-dir", run_dir, "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    saved = ckpt.load(run_dir)
    assert saved.spec.model == "relu" and saved.spec.encoding == "fourier" and saved.spec.fourier_features == 8
    assert "[encoding]" in (run_dir / "config.toml").read_text()
    result = run("render", run_dir, "--size", "20", "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    assert run("train", rgb_png, "--preset", "nope").exit_code == 2


def test_eval_train_size_trains_renders_and_compares(tmp_path, coffee):
    run_dir = tmp_path / "up"
    args = ["eval", run_dir, coffee, "--train-size", "24", "--steps", "30", "--device", "cpu", "--json"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert (scores["width"], scores["height"]) == (600, 400)
    assert (scores["train_width"], scores["train_height"]) == (24, 16)
    assert set(scores["lanczos"]) == {"psnr", "ssim"} and set(scores["bicubic"]) == {"psnr", "ssim"}
    assert 10 < scores["lanczos"]["psnr"] < 40
    step = scores["step"]
    result = run(*args)  # the run now exists: reused, not retrained
    assert result.exit_code == 0 and json.loads(result.stdout.strip().splitlines()[-1])["step"] == step
    text = run("eval", run_dir, coffee, "--train-size", "24", "--device", "cpu").stdout
    assert "lanczos" in text and "bicubic" in text
    # The run reused only beside the very image it learned: not another size, not other pixels, and
    # a --train-size that shrinks nothing is refused
    flipped = tmp_path / "flipped.png"
    Image.open(coffee).transpose(Image.FLIP_LEFT_RIGHT).save(flipped)
    for reference, size, refusal in ((coffee, "48", "was trained at 24x16, not at 48x32"),
                                     (flipped, "24", "was trained on other pixels than"),
                                     (coffee, "600", "is not smaller than")):
        result = run("eval", run_dir, reference, "--train-size", size, "--device", "cpu")
        assert result.exit_code == 2 and refusal in result.stderr, result.output


def test_presets_hold_what_they_tune_and_runs_hold_every_key(tmp_path):
    """A preset sets some keys, the settings' defaults the rest; the effective configuration holds
    every key (a run's config.toml those it uses, and names the rest), and a configuration missing
    one (a checkpoint's) is refused, naming it."""
    from inr_cli.config import (
        KEY_TYPES,
        build_config,
        from_values,
        preset_path,
        presets,
        read_toml,
        to_toml,
        unused_settings,
    )

    for name in presets():
        assert set(read_toml(preset_path(name))) < set(KEY_TYPES), name
        config = build_config(None, {}, name)
        written = tmp_path / f"{name}.toml"
        written.write_text(to_toml(config, every_key=True))
        assert set(read_toml(written)) == set(KEY_TYPES), name
        written.write_text(to_toml(config))
        unused = unused_settings(config)
        assert set(read_toml(written)) == set(KEY_TYPES) - set(unused) and unused, name
        assert all(key in written.read_text() for key in unused), name
    partial = tmp_path / "partial.toml"
    partial.write_text("[network]\nmodel = \"siren\"\n")
    with pytest.raises(UsageError, match="key 'network.hidden' is not set"):
        from_values(read_toml(partial), str(partial))


def test_a_runs_config_file_reproduces_the_run(tmp_path, rgb_png):
    """`inr train --config RUN/config.toml` with no data trains on the run's own image."""
    run("train", rgb_png, "--steps", "2", "--run-dir", tmp_path / "a", *SMALL)
    result = run("train", "--config", tmp_path / "a" / "config.toml", "--run-dir", tmp_path / "b", "-q")
    assert result.exit_code == 0, result.output
    from inr_cli.formats import checkpoint as ckpt

    a, b = ckpt.load(tmp_path / "a"), ckpt.load(tmp_path / "b")
    assert b.data_fingerprint == a.data_fingerprint and b.config.data.source == str(rgb_png.resolve())
    assert np.array_equal(a.params, b.params)


def test_readme_path_decode_after_encode_and_honest_notices(tmp_path):
    """README claims tried literally: decode right after encode works; relu and enlarging say so."""
    src = make_image(tmp_path / "photo.png", "RGB", size=(20, 10))
    assert run("encode", src).exit_code == 0
    result = run("decode", tmp_path / "photo.csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "photo-decoded.png")
    assert f"{tmp_path / 'photo.png'} exists (the image encoded, perhaps) and is kept" in result.stderr
    assert (np.asarray(Image.open(tmp_path / "photo-decoded.png")) == np.asarray(Image.open(src))).all()
    result = run("decode", tmp_path / "photo.csv")  # both names taken: the tool's own one is replaced
    assert result.exit_code == 0 and "replacing" in result.output and "photo-decoded.png" in result.output
    assert (np.asarray(Image.open(tmp_path / "photo.png")) == np.asarray(Image.open(src))).all()
    result = run("encode", src, "--size", "40", "-o", tmp_path / "big.csv")
    assert result.exit_code == 0 and "enlarges it" in result.output
    result = run("train", src, "--model", "relu", "--steps", "1", "--hidden", "8", "--fourier-features", "4",
                 "--device", "cpu", "--run-dir", tmp_path / "r")
    assert result.exit_code == 0 and "Fourier features" in result.output and "--encoding none" in result.output


def test_the_commands_that_take_a_set_say_so_in_their_help(tmp_path):
    """info, render, export and view read an inr fit-many folder as well as a run: their help says so,
    and info does what its help says."""
    import typer.main

    commands = typer.main.get_command(app).commands
    for command in ("info", "render", "export", "view"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
        # The command's own help names the set: Typer's plain help (the lowest version, without Rich)
        # leaves the argument's help out.
        assert "RUN|SET" in result.output and "fit-many folder" in commands[command].help, (command, result.output)
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(2):
        make_image(folder / f"{seed}.png", "RGB", seed=seed)
    assert run("fit-many", folder, "-o", tmp_path / "set", "--steps", "2", "--hidden", "8", "--device", "cpu",
               "-q").exit_code == 0
    result = run("info", tmp_path / "set", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["count"] == 2


def test_short_help_completion_and_listed_choices():
    result = CliRunner().invoke(app, ["train", "-h"], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "--model" in result.output
    for choice in ("siren|sigmoid|relu", "auto|cpu|gpu", "adam|sgd", "none|fourier", "kernel|cublas"):
        assert choice in result.output, choice
    assert "--install-completion" in run("-h").output


def test_outputs_respect_the_umask_and_never_go_through_a_link_or_a_pipe(tmp_path, rgb_png):
    """Files come out with the mode a plain write gives them; a link or a FIFO named as the output is
    refused, even with --force (-o - is standard output)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        import inr_cli.formats.atomic as atomic

        saved_umask = atomic.UMASK
        atomic.UMASK = 0o022
        assert run("encode", rgb_png, "-o", tmp_path / "a.csv").exit_code == 0
        assert stat.S_IMODE(os.stat(tmp_path / "a.csv").st_mode) == 0o644
        assert run("train", rgb_png, "--steps", "2", "--run-dir", tmp_path / "r", *SMALL).exit_code == 0
        for name in ("checkpoint.npz", "render.png", "metrics.csv", "config.toml"):
            assert stat.S_IMODE(os.stat(tmp_path / "r" / name).st_mode) == 0o644, name
    finally:
        os.umask(old)
        atomic.UMASK = saved_umask
    (tmp_path / "link.csv").symlink_to(tmp_path / "a.csv")
    before = (tmp_path / "a.csv").read_bytes()
    result = run("encode", rgb_png, "-o", tmp_path / "link.csv", "--gray", "--force")
    assert result.exit_code == 2 and "is a link" in result.stderr, result.output
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "a.csv").read_bytes() == before
    os.mkfifo(tmp_path / "pipe.csv")
    result = run("encode", rgb_png, "-o", tmp_path / "pipe.csv")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, result.output


def test_encode_writes_a_csv_under_any_name_but_an_images(tmp_path, rgb_png):
    """A CSV under an image's extension is a file no reader opens, inr's own included: refused
    before anything is read or written, in any case of the letters; any other name is written."""
    for name in ("y.png", "y.JPG", "y.tiff", "y.bmp"):
        result = run("encode", rgb_png, "-o", tmp_path / name)
        assert result.exit_code == 2 and result.stderr.strip() == (
            f"error: {tmp_path / name}: encode writes a pixel CSV, not an image; name a CSV file "
            f"(-o {tmp_path / 'y.csv'})"), result.output
        assert not (tmp_path / name).exists()
    for name in ("y.csv", "y.txt", "y"):
        result = run("encode", rgb_png, "-o", tmp_path / name)
        assert result.exit_code == 0 and result.stdout.strip() == str(tmp_path / name), result.output
        assert (tmp_path / name).read_text().startswith("x,y,r,g,b\n")
    assert run("encode", rgb_png, "-o", "-").stdout.startswith("x,y,r,g,b\n")


def test_dash_is_standard_output_and_input(tmp_path, rgb_png):
    result = run("encode", rgb_png, "-o", "-")
    assert result.exit_code == 0 and result.stdout.startswith("x,y,r,g,b\n")
    result = CliRunner().invoke(app, ["decode", "-", "-o", str(tmp_path / "back.png")], input=result.stdout)
    assert result.exit_code == 0, result.output
    assert (np.asarray(Image.open(tmp_path / "back.png")) == np.asarray(Image.open(rgb_png))).all()
    assert run("decode", "-").exit_code == 2


def test_progress_shows_time_left_at_80_columns_and_plain_lines_off_a_terminal(tmp_path, rgb_png):
    import io

    from rich.console import Console

    from inr_cli.progress import TrainingProgress

    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=True, color_system=None)
    with TrainingProgress(0, 3000, quiet=False, console=console) as progress:
        progress.update(1500, 1.234e-3, 29.09, 1e-4, 123.4)
    line = buffer.getvalue().split("\x1b[2K")[-1]  # the last redraw of the line
    assert re.search(r"step 1500/3000 +\d+:\d\d:\d\d +left +\d+:\d\d:\d\d", line), line
    # At 80 columns a field is dropped whole or shown whole, never cut; the bar keeps some room.
    assert "PSNR 29.09 dB  123.4 steps/s" in line and " lr " not in line and "━" in line, line
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", buffer.getvalue())  # each redraw on a line of its own
    assert max(len(row) for row in drawn.splitlines()) <= 80
    result = run("train", rgb_png, "--steps", "4", "--log-every", "2", "--run-dir", tmp_path / "r", "--hidden", "8",
                 "--layers", "1", "--device", "cpu")
    assert result.exit_code == 0
    assert re.search(r"step 4/4  elapsed \d+:\d\d:\d\d  left \d+:\d\d:\d\d", result.output), result.output


def test_train_json_summary(tmp_path, rgb_png):
    result = run("train", rgb_png, "--steps", "3", "--run-dir", tmp_path / "r", "--json", *SMALL)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["step"] == 3 and summary["run_dir"] == str(tmp_path / "r") and summary["psnr"] > 0


def test_eval_train_size_into_a_checkpoint_path_trains_the_run_that_holds_it(tmp_path, coffee):
    """RUN may name the checkpoint a training run will write: the run is its folder."""
    checkpoint = tmp_path / "up" / "checkpoint.npz"
    result = run("eval", checkpoint, coffee, "--train-size", "12", "--steps", "3", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    assert checkpoint.is_file() and (tmp_path / "up" / "config.toml").is_file()
