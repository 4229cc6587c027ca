"""Where commands write, as a user types them: -o never replaces a file silently, a run's training
image is never replaced, `render -o -` is a PNG on standard output, and a render shows its progress."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import make_image
from tests.test_cli import SMALL, run

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "inr_cli", *map(str, args)], stdout=subprocess.PIPE, cwd=cwd,
                          env=env, **kwargs)


@pytest.fixture
def photo_run(tmp_path):
    """A run trained on tmp/photo.png, as the issue's user did."""
    photo = make_image(tmp_path / "photo.png", "RGB", size=(32, 24))
    result = run("train", photo, "--steps", "3", "--run-dir", tmp_path / "runs" / "photo", *SMALL)
    assert result.exit_code == 0, result.output
    return tmp_path / "runs" / "photo", photo


def one_line_error(result, code, *words):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and result.output.strip().count("\n") == 0, result.output
    for word in words:
        assert word in result.output, (word, result.output)


def test_render_never_overwrites_the_training_image(photo_run):
    run_dir, photo = photo_run
    before = photo.read_bytes()
    one_line_error(run("render", run_dir, "--size", "32", "-o", photo), 2, str(photo), "--force")
    one_line_error(run("render", run_dir, "--size", "32", "-o", photo, "--force"), 2, str(photo), "never overwritten")
    assert photo.read_bytes() == before


@pytest.mark.parametrize("command", ["render", "encode", "decode", "export"])
def test_an_existing_output_is_refused_unless_force(photo_run, tmp_path, command):
    run_dir, photo = photo_run
    csv = tmp_path / "photo.csv"
    assert run("encode", photo, "-o", csv).exit_code == 0
    source = {"render": run_dir, "encode": photo, "decode": csv, "export": run_dir}[command]
    existing = tmp_path / ("out.onnx" if command == "export" else "out.csv" if command == "encode" else "out.png")
    existing.write_bytes(b"precious")
    one_line_error(run(command, source, "-o", existing), 2, str(existing), "already exists", "--force")
    assert existing.read_bytes() == b"precious"
    if command == "export":
        pytest.importorskip("onnx")
    result = run(command, source, "-o", existing, "--force")
    assert result.exit_code == 0, result.output
    assert existing.read_bytes() != b"precious"


def test_a_commands_input_is_never_its_output(tmp_path):
    src = make_image(tmp_path / "a.png", "RGB")
    assert run("encode", src, "-o", tmp_path / "a.csv").exit_code == 0
    one_line_error(run("decode", tmp_path / "a.csv", "-o", tmp_path / "a.csv", "--force"), 2, "never overwritten")
    before = src.read_bytes()
    # encode's input is an image, which an -o of encode's never is: refused as such, before the rule above
    one_line_error(run("encode", src, "-o", src, "--force"), 2, f"{src}: encode writes a pixel CSV, not an image")
    assert src.read_bytes() == before


def test_a_default_output_that_exists_is_replaced_with_a_notice(photo_run):
    run_dir, photo = photo_run
    first = run("render", run_dir, "--size", "16", "-q", "--device", "cpu")
    assert first.exit_code == 0 and "replacing" not in first.output
    target = Path(first.stdout.strip())
    target.write_bytes(b"old")
    again = run("render", run_dir, "--size", "16", "-q", "--device", "cpu")
    assert again.exit_code == 0, again.output
    assert f"replacing {target}" in again.stderr and again.stderr.count("\n") == 1
    assert Image.open(target).size == (16, 12)


@pytest.mark.parametrize("command", ["render", "encode", "decode", "export", "meta-init"])
def test_a_file_option_ending_in_a_slash_is_refused_not_written_as_a_file(photo_run, tmp_path, command):
    run_dir, photo = photo_run
    csv = tmp_path / "photo.csv"
    assert run("encode", photo, "-o", csv).exit_code == 0
    source = {"render": run_dir, "encode": photo, "decode": csv, "export": run_dir, "meta-init": tmp_path}[command]
    folder = f"{tmp_path}/out/"  # a folder's spelling: pathlib would drop the slash and write a file 'out'
    one_line_error(run(command, source, "-o", folder), 2, folder, "names a folder")
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_a_file_name_ending_in_a_slash(photo_run, tmp_path):
    import inr_cli

    net = inr_cli.load(photo_run[0])
    with pytest.raises(ValueError, match="names a folder"):
        net.write_tiles(f"{tmp_path}/tiles/", size=16)
    assert not (tmp_path / "tiles").exists()


def test_render_dash_writes_png_bytes_to_stdout(photo_run):
    run_dir, _ = photo_run
    for depth, _dtype in (("8", np.uint8), ("16", np.uint16)):
        result = cli("render", run_dir, "--size", "20", "-o", "-", "--depth", depth, "--device", "cpu")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(b"\x89PNG\r\n\x1a\n")
        with Image.open(io.BytesIO(result.stdout)) as im:
            assert im.size == (20, 15)
        if depth == "8":
            file = cli("render", run_dir, "--size", "20", "--device", "cpu", "-q")
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(result.stdout))),
                                  np.asarray(Image.open(file.stdout.decode().strip())))
    result = cli("render", run_dir, "-o", "-", "--depth", "32")
    assert result.returncode == 2 and result.stdout == b"" and b"TIFF" in result.stderr


def test_unknown_extension_lists_the_working_ones_with_the_usage_code(photo_run, tmp_path):
    run_dir, _ = photo_run
    one_line_error(run("render", run_dir, "-o", tmp_path / "x.xyz"), 2, "'.xyz'", ".png", ".jpg", ".tif")
    one_line_error(run("render", run_dir, "--depth", "32", "-o", tmp_path / "x.png"), 2, "TIFF")
    one_line_error(run("decode", tmp_path / "none.csv", "-o", tmp_path / "x.xyz"), 2, ".png, .jpg")
    assert not (tmp_path / "x.xyz").exists()


def test_render_shows_a_progress_bar_on_a_terminal_only(photo_run):
    """stderr on a pseudo-terminal gets a bar over the chunks (8-bit and deep renders); a pipe or -q
    gets none."""
    import pty

    run_dir, _ = photo_run
    for depth in ("8", "16"):
        leader, follower = pty.openpty()
        try:
            result = cli("render", run_dir, "--size", "600", "--depth", depth, "--device", "cpu", stderr=follower)
            os.close(follower)
            chunks = []
            while True:
                try:
                    data = os.read(leader, 65536)
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(leader)
        shown = b"".join(chunks).decode(errors="replace")
        assert result.returncode == 0, shown
        assert "render 600x450" in shown and "100%" in shown, shown
    piped = cli("render", run_dir, "--size", "600", "--device", "cpu")
    assert piped.returncode == 0 and b"render 600x450" not in piped.stderr


def test_a_scratch_folder_killed_before_its_marker_or_its_release_stays_inrs(tmp_path, monkeypatch):
    """Killed between making a scratch folder and marking it, inr left an empty folder: the next
    command takes it as its own. Killed while releasing one to its output name, the folder is still
    marked (the marker goes after the rename), so the next command removes or resumes it."""
    from inr_cli import outputs

    work = tmp_path / ".out.joining"
    work.mkdir()  # what a kill between mkdir and the marker leaves
    with outputs.scratch(work) as made:
        (made / "rows").write_bytes(b"work")
        monkeypatch.setattr(outputs.os, "rename", lambda a, b: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            outputs.release(made, tmp_path / "out")
        assert outputs.is_scratch(made), "a scratch folder without its marker would be refused next time"
        monkeypatch.undo()
        outputs.release(made, tmp_path / "out")
    assert (tmp_path / "out" / "rows").read_bytes() == b"work" and not outputs.is_scratch(tmp_path / "out")
    assert not work.exists()
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_bytes(b"mine")
    with pytest.raises(outputs.UsageError, match="never deletes what it did not make"):
        outputs.remove_scratch(tmp_path / "theirs")
