"""Hostile and malformed files where inr reads: checkpoints, a set's files, images, list files,
special files and URLs. Each is refused with one line on stderr (no traceback, no warning) and a
non-zero exit, nothing outside the output changes, and nothing is sized from what a file merely
declares."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats import network_set, set_index
from tests.conftest import make_image, rewrite_npz

ROOT = Path(__file__).resolve().parent.parent
NET = ["--hidden", "8", "--layers", "1", "--steps", "3", "--device", "cpu", "-q"]


class Ran:
    def __init__(self, code: int, stdout: str, stderr: str, peak_bytes: int | None):
        self.code, self.stdout, self.stderr, self.peak_bytes = code, stdout, stderr, peak_bytes


# `inr` that writes, as it exits, the most memory it held (VmHWM: this program's own, from after its
# exec; a parent's rusage would count the pages of the test process it was forked from).
PEAK_REPORTER = """
import atexit, os, sys
def report():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM"))
    with open(os.environ["INR_TEST_PEAK_FILE"], "w") as out:
        out.write(peak)
atexit.register(report)
sys.argv[0] = "inr"
from inr_cli.cli import main
sys.exit(main())
"""


def inr(*args, env: dict | None = None, timeout: float = 300, measure: bool = False,
        limit_bytes: int | None = None, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        address_space: int | None = None) -> Ran:
    """`inr ARGS` in a process of its own, as a user runs it (the interpreter's own warning filters);
    with `measure`, the most memory it held; with `limit_bytes`, no file it writes may grow beyond
    that (RLIMIT_FSIZE: a write past it fails as on a full disk, "File too large"). `stdin` and
    `stdout`: a file or a pipe in place of /dev/null and the pipe read here; with `address_space`, the
    most memory it may map (RLIMIT_AS), so that an input read without end is an out-of-memory line,
    never the machine's memory taken."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    environment.update({"PYTHONPATH": str(ROOT), **(env or {})})
    with tempfile.TemporaryDirectory() as scratch:
        peak_file = Path(scratch) / "peak"
        environment["INR_TEST_PEAK_FILE"] = str(peak_file)
        program = ["-c", PEAK_REPORTER] if measure else ["-m", "inr_cli"]
        def limited():
            for kind, limit in ((resource.RLIMIT_FSIZE, limit_bytes), (resource.RLIMIT_AS, address_space)):
                if limit is not None:
                    resource.setrlimit(kind, (limit, limit))

        process = subprocess.Popen([sys.executable, *program, *map(str, args)], env=environment,
                                   stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=limited if (limit_bytes, address_space) != (None, None) else None)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        peak = int(peak_file.read_text()) * 1024 if measure else None
        return Ran(process.returncode, stdout, stderr, peak)


def refused(ran: Ran, *fragments: str) -> str:
    """The one line on stderr of a command that failed, which says each of `fragments`."""
    lines = ran.stderr.strip().splitlines()
    assert ran.code != 0, f"exit 0:\n{ran.stderr}"
    assert ran.code != -9, "killed: it hung"
    assert len(lines) == 1 and "Traceback" not in ran.stderr and "Warning" not in ran.stderr, ran.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path, leave_out: Path | None = None) -> dict:
    """Every file under `folder` (but `leave_out`) with its contents' hash and modification time."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if leave_out is not None and (path == leave_out or leave_out in path.parents):
            continue
        if path.is_symlink() or not path.is_file():
            found[path] = "link" if path.is_symlink() else "other"
        else:
            found[path] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return found


def refused_leaving_all(tmp_path: Path, args: list, *fragments: str, out: Path | None = None,
                        env: dict | None = None) -> str:
    """`inr ARGS` is refused in one line and changes nothing under tmp_path but `out`."""
    before = snapshot(tmp_path, out)
    line = refused(inr(*args, env=env), *fragments)
    assert snapshot(tmp_path, out) == before, "a file outside the output changed"
    return line


# --- checkpoints ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trained")
    image = make_image(folder / "img.png", "RGB", size=(12, 9), seed=3)
    ran = inr("train", image, *NET, "--preview-every", "0", "--run-dir", folder / "run")
    assert ran.code == 0, ran.stderr
    return folder / "run" / ckpt.FILENAME


def tampered(trained: Path, tmp_path: Path, **changes) -> Path:
    """A copy of a real run whose checkpoint has `changes` (None removes an array)."""
    run = tmp_path / "run"
    run.mkdir()
    rewrite_npz(trained, run / ckpt.FILENAME, **changes)
    return run


def spec_with(trained: Path, **fields) -> np.ndarray:
    with np.load(trained, allow_pickle=False) as npz:
        spec = json.loads(str(npz["spec"]))
    return np.array(json.dumps({**spec, **fields}))


@pytest.mark.parametrize("change,message", [
    (lambda t: {"spec": spec_with(t, hidden="16")}, "'hidden' is \"16\", expected an integer"),
    (lambda t: {"spec": spec_with(t, hidden=1_000_000)}, "'hidden' is 1000000, above inr's limit of"),
    (lambda t: {"spec": spec_with(t, layers=-2)}, "'layers' is -2"),
    (lambda t: {"spec": spec_with(t, omega0=float("nan"))}, "'omega0' is nan"),
    (lambda t: {"spec": spec_with(t, evil=1)}, "unknown field 'evil'"),
    (lambda t: {"spec": np.array("[" * 100_000 + "]" * 100_000)}, "bad network or config description"),
    (lambda t: {"spec": np.array("[1, 2]")}, "not an object"),
    (lambda t: {"config": np.array('{"network": 5}')}, "bad network or config description"),
    (lambda t: {"config": np.array("[]")}, "not an object"),
    (lambda t: {"step": np.zeros((3, 3), np.int64)}, "'step' is a (3, 3) array of int64, expected an integer"),
    (lambda t: {"step": np.array(-4)}, "step -4"),
    (lambda t: {"format_version": np.array("2")}, "'format_version' is text, expected an integer"),
    (lambda t: {"format_version": np.array(2.0)}, "'format_version' is one float64, expected an integer"),
    (lambda t: {"data_shape": np.array([-9, 12, 3])}, "'data_shape' is (-9, 12, 3)"),
    (lambda t: {"data_shape": np.array([0, 0, 3])}, "'data_shape' is (0, 0, 3)"),
    (lambda t: {"data_shape": np.array([1 << 20, 1 << 20, 3])}, "not (height, width, channels)"),
    (lambda t: {"channels": np.array("r,g,<script>")}, "are not l, r,g,b or r,g,b,a"),
    (lambda t: {"params": np.zeros((1, 5), np.float32)}, "'params' has shape (1, 5) float32"),
    (lambda t: {"moment2": np.zeros((2, 3), np.float64)}, "'moment2' has shape (2, 3) float64"),
    (lambda t: {"seconds": np.array(float("inf"))}, "'seconds' (the training time) is inf"),
    (lambda t: {"loss": np.zeros(4)}, "'loss' holds 4 values for 1 network"),
    (lambda t: {"step": np.array(10 ** 12)}, "step 1000000000000 of"),  # past the run's total
    (lambda t: {"data_fingerprint": None}, "'data_fingerprint' is missing"),
])
def test_a_tampered_checkpoint_is_one_line(trained, tmp_path, change, message):
    run = tampered(trained, tmp_path, **change(trained))
    refused_leaving_all(tmp_path, ["info", run], message)


def test_train_refuses_at_once_the_networks_a_reader_calls_damaged(trained, tmp_path):
    """One set of limits for both: settings beyond them are refused before anything is trained or
    allocated (a table too large for memory would be allocated first), the network's size in the
    words the checkpoint's reader uses for a file that declares the same network."""
    image = make_image(tmp_path / "img.png", "RGB", size=(12, 9), seed=3)
    flags = ["--steps", "3", "--device", "cpu", "-q", "--run-dir", tmp_path / "run"]
    for given, said in ((["--encoding", "hashgrid", "--hash-levels", "65"],
                         "--hash-levels (encoding.levels) must be at most 64, got 65"),
                        (["--hidden", "70000"], "--hidden (network.hidden) must be at most 65536, got 70000"),
                        (["--seed", str(1 << 64)],  # the seeds are unsigned 64-bit numbers
                         f"--seed (training.seed) must be at most {(1 << 64) - 1}, got {1 << 64}")):
        refused_leaving_all(tmp_path, ["train", image, *flags, *given], said)
    ran = inr("train", image, *flags, "--hidden", "65536", "--layers", "2", measure=True)
    refused(ran, "the settings give a network of 4,295,426,051 parameters, above inr's limit of 2,147,483,648")
    assert ran.peak_bytes < 1 << 30 and not (tmp_path / "run").exists()
    declared = tampered(trained, tmp_path, spec=spec_with(trained, hidden=65536, layers=2))
    refused_leaving_all(tmp_path, ["info", declared], "a network of 4,295,426,051 parameters, above inr's limit")


def test_parameters_that_are_not_finite_draw_nothing(trained, tmp_path):
    with np.load(trained) as npz:
        params = npz["params"].copy()
    params[0, 3] = np.nan
    run = tampered(trained, tmp_path, params=params)
    out = tmp_path / "out.png"
    refused_leaving_all(tmp_path, ["render", run, "-o", out], "NaN or infinite", out=out)
    assert not (tmp_path / "out.png").exists()


def _zip_member(archive: zipfile.ZipFile, name: str, array_header: dict, data_bytes: int) -> None:
    """One .npy member of `data_bytes` zero bytes, streamed: the test never holds the array."""
    header = __import__("io").BytesIO()
    np.lib.format.write_array_header_1_0(header, array_header)
    with archive.open(name, "w", force_zip64=True) as member:
        member.write(header.getvalue())
        chunk = bytes(1 << 22)
        for start in range(0, data_bytes, len(chunk)):
            member.write(chunk[: min(len(chunk), data_bytes - start)])


def zip_bomb(trained: Path, path: Path, hidden: int, layers: int) -> int:
    """A checkpoint of deflated zeros whose spec declares `layers` x `hidden` neurons: every array
    the size the spec asks for. Returns the bytes its arrays would take."""
    spec = json.loads(str(spec_with(trained, hidden=hidden, layers=layers)))
    from inr_cli.core.network import NetworkSpec

    parameters = NetworkSpec(**spec).parameter_count()
    with np.load(trained, allow_pickle=False) as npz:
        small = {name: npz[name] for name in npz.files if name not in ("params", "moment1", "moment2")}
    small["spec"] = np.array(json.dumps(spec))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, value in small.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, value, allow_pickle=False)
        for name in ("params", "moment1", "moment2"):
            _zip_member(archive, f"{name}.npy", {"descr": "<f4", "fortran_order": False, "shape": (1, parameters)},
                        parameters * 4)
    return 3 * parameters * 4


def test_a_zip_bomb_checkpoint_is_refused_before_it_is_read(trained, tmp_path):
    """A few hundred kilobytes declaring hundreds of megabytes: refused from the archive's directory,
    with the memory of a command that reads nothing (inr info, render, export, view and the API
    read a checkpoint through the same load)."""
    run = tmp_path / "bomb"
    run.mkdir()
    declared = zip_bomb(trained, run / ckpt.FILENAME, hidden=4000, layers=3)
    size = (run / ckpt.FILENAME).stat().st_size
    assert declared > 200 * size
    before = snapshot(tmp_path)
    for args in (["info", run], ["export", run, "-o", tmp_path / "x.onnx"], ["render", run, "-o", tmp_path / "x.png"]):
        ran = inr(*args, measure=True)
        refused(ran, "zip bomb")
        assert ran.peak_bytes < declared / 2, f"{args[0]} took {ran.peak_bytes:,} bytes"
    assert snapshot(tmp_path) == before
    import inr_cli

    with pytest.raises(InrError, match="zip bomb"):
        inr_cli.load(run)


@pytest.mark.parametrize("damage,message", [
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not a readable checkpoint"),
    (lambda p: _lie_about_a_size(p), "declares"),
])
def test_a_truncated_or_lying_archive_is_one_line(trained, tmp_path, damage, message):
    run = tampered(trained, tmp_path)
    damage(run / ckpt.FILENAME)
    refused_leaving_all(tmp_path, ["info", run], message)


def _lie_about_a_size(path: Path) -> None:
    """The params member's uncompressed size in the central directory made 1000 times larger."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("params.npy")
    entry = data.rfind(b"PK\x01\x02", 0, data.find(b"params.npy", data.find(b"PK\x01\x02")))
    assert entry >= 0
    struct.pack_into("<I", data, entry + 24, info.file_size * 1000)
    path.write_bytes(bytes(data))


def test_an_export_given_where_a_checkpoint_is_expected(trained, tmp_path):
    pytest.importorskip("safetensors")
    model = tmp_path / "model.safetensors"
    assert inr("export", trained, "-o", model).code == 0
    reference = make_image(tmp_path / "reference.png", "RGB", size=(8, 6))
    refused_leaving_all(tmp_path, ["eval", model, reference], "is an exported network (inr export), not a run",
                        "inr render")


def test_a_damaged_or_endless_export_is_one_line_where_it_is_read(trained, tmp_path):
    """inr info and inr render read a .safetensors export: one cut short, or a FIFO of that name
    (read, it would never end), is refused in one line, nothing written."""
    pytest.importorskip("safetensors")
    model = tmp_path / "model.safetensors"
    assert inr("export", trained, "-o", model).code == 0
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    for command in ("info", "render"):
        refused_leaving_all(tmp_path, [command, model], "model.safetensors", "not a readable safetensors file")
        refused_leaving_all(tmp_path, [command, fifo], "fifo.safetensors", "a FIFO, not a file inr reads")


# --- a set of networks --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fitted")
    images = _mkdir(folder / "images")
    for i in range(3):
        make_image(images / f"img{i}.png", "RGB", size=(8, 6), seed=i)
    ran = inr("fit-many", folder / "images", "-o", folder / "set", *NET)
    assert ran.code == 0, ran.stderr
    return folder / "set"


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def copy_of(fitted: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fitted, tmp_path / "set"))


def edit_description(folder: Path, **spec_fields) -> None:
    path = folder / network_set.DESCRIPTION
    document = json.loads(path.read_text())
    document["spec"].update(spec_fields)
    path.write_text(json.dumps(document))


def rewrite_index(folder: Path, edit) -> None:
    path = folder / network_set.INDEX
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")


@pytest.mark.parametrize("damage,message", [
    (lambda s: edit_description(s, hidden="16"), "'hidden' is \"16\", expected an integer"),
    (lambda s: edit_description(s, hidden=1_000_000), "'hidden' is 1000000"),
    (lambda s: edit_description(s, hidden=12000), "declares 51 'float32' parameters, the network has"),
    (lambda s: _drop_declared_count(s) or edit_description(s, hidden=12000),
     "expected (N, 72003) float32 as network.json says"),
    (lambda s: (s / network_set.DESCRIPTION).write_text("[" * 100_000), "not JSON"),
    (lambda s: (s / network_set.DESCRIPTION).write_text('{"format_version": 7}'), "written by a newer inr"),
    (lambda s: rewrite_index(s, lambda lines: lines + ["extra,1,1,1,1,1,1"]), "line 5: more rows than the 3"),
    (lambda s: rewrite_index(s, lambda lines: lines[:2]), "1 rows for the 3 networks"),
    (lambda s: rewrite_index(s, lambda lines: [lines[0], lines[1] + ",9"] + lines[2:]), "line 2: 8 values, expected 7"),
    (lambda s: rewrite_index(s, lambda lines: [lines[0], "img0.png,x,1,1,1,1,1"] + lines[2:]), "psnr 'x'"),
    (lambda s: rewrite_index(s, lambda lines: [lines[0], "img0.png,1,1,1,1,-8,1"] + lines[2:]), "width '-8'"),
    (lambda s: rewrite_index(s, lambda lines: ["name,psnr"] + lines[1:]), "line 1: the columns are not"),
    (lambda s: (s / network_set.INDEX).write_bytes(b"name,psnr\xff\n"), "not a readable CSV row"),
    (lambda s: rewrite_index(s, lambda lines: [lines[0], lines[2]] + lines[2:]), "is also on line 2"),
    (lambda s: np.save(s / network_set.WEIGHTS, np.zeros((0, _params(s)), np.float32)), "holds no networks"),
    (lambda s: np.save(s / network_set.WEIGHTS, np.zeros(10)), "weights of shape (10,) float64"),
    (lambda s: _truncate(s / network_set.WEIGHTS), "truncated"),
])
def test_a_damaged_set_is_one_line(fitted, tmp_path, damage, message):
    folder = copy_of(fitted, tmp_path)
    damage(folder)
    refused_leaving_all(tmp_path, ["info", folder], message)
    refused_leaving_all(tmp_path, ["render", folder, "--image", "img0.png", "-o", tmp_path / "x.png"], message,
                        out=tmp_path / "x.png")
    import inr_cli

    with pytest.raises(InrError, match="^[^\n]+$") as raised:  # an InrError of one line, from the API too
        inr_cli.load(folder)
    assert message in str(raised.value)


def _drop_declared_count(folder: Path) -> None:
    path = folder / network_set.DESCRIPTION
    document = json.loads(path.read_text())
    del document["parameters_per_network"]
    path.write_text(json.dumps(document))


def _params(folder: Path) -> int:
    return json.loads((folder / network_set.DESCRIPTION).read_text())["parameters_per_network"]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def test_index_csv_keeps_names_from_running_as_formulas():
    """A name or label that a spreadsheet would run (=, +, -, @) is written behind an apostrophe and
    read back exactly, as is every name that begins with an apostrophe."""
    for name in ["=HYPERLINK(\"http://x\")", "+1", "-2.png", "@SUM(A1)", "\tx", "'=x", "''", "'", "'a", "a=b", "plain"]:
        cell = set_index.index_cell(name)
        assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r")
        assert set_index.index_text(cell) == name


# --- images, folders and lists ------------------------------------------------------------------


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG that declares its size and holds no pixels: what a decompression bomb's header says."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path


def grey_png_of_zeros(path: Path, width: int, height: int) -> Path:
    """A real grey PNG, streamed row block by row block (the test never holds its pixels), with its
    EXIF before the pixels so that reading its header decodes nothing."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    exif = Image.Exif()
    exif[0x0112] = 1  # orientation: as stored
    tiff = exif.tobytes().removeprefix(b"Exif\x00\x00")
    deflate, rows = zlib.compressobj(1), bytes((width + 1) * 256)  # 256 rows, each a filter byte and zeros
    with open(path, "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        handle.write(chunk(b"eXIf", tiff))
        stream = bytearray()
        for start in range(0, height, 256):
            stream += deflate.compress(rows[: (width + 1) * min(256, height - start)])
        stream += deflate.flush()
        handle.write(chunk(b"IDAT", bytes(stream)))
        handle.write(chunk(b"IEND", b""))
    return path


def test_a_header_that_declares_too_many_pixels(tmp_path):
    """Refused from the header by inr's own limit, in one line, by the probe of fit-many as by inr
    train; --skip-unreadable fits the others and lists it."""
    images = _mkdir(tmp_path / "images")
    make_image(images / "a.png", "RGB", size=(8, 6))
    png_header_only(images / "huge.png", 50000, 50000)
    refused_leaving_all(tmp_path, ["fit-many", images, "-o", tmp_path / "out", *NET], "huge.png: declared image size "
                        "is too large", out=tmp_path / "out")
    refused_leaving_all(tmp_path, ["train", images / "huge.png", *NET, "--run-dir", tmp_path / "run"],
                        "declared image size is too large", out=tmp_path / "run")
    ran = inr("fit-many", images, "-o", tmp_path / "out", *NET, "--skip-unreadable")
    assert ran.code == 0 and "Traceback" not in ran.stderr and "skipped huge.png" in ran.stderr, ran.stderr


@pytest.mark.parametrize("side", [10000, 16000])
def test_an_image_within_inr_limit_but_beyond_pillow_default_is_probed(tmp_path, side):
    """Within inr's limit (which inr train accepts) and beyond Pillow's own, where Pillow warns
    (10000 x 10000, a RuntimeWarning on stderr) or refuses (16000 x 16000): the probe reads its size
    from the header, and nothing warns."""
    from inr_cli.config import build_config
    from inr_cli.sets import inputs

    path = grey_png_of_zeros(tmp_path / "large.png", side, side)
    config = build_config(None, {"data.size": 32})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert inputs.probe([("large.png", str(path))], config)[0][:3] == (32, 32, "l")


def test_symbolic_link_loops_in_a_folder(tmp_path):
    images = _mkdir(tmp_path / "images" / "cats")
    make_image(images / "a.png", "RGB", size=(8, 6))
    (images / "up").symlink_to("..")
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "images", "-o", tmp_path / "out", *NET],
                        "a symbolic link loop", out=tmp_path / "out")
    (images / "up").unlink()
    (images / "self").symlink_to("self")
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "images", "-o", tmp_path / "out", *NET],
                        "self: cannot follow", out=tmp_path / "out")


@pytest.mark.parametrize("suffix", [".npy", ".csv", ".png"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, suffix):
    fifo = tmp_path / f"x{suffix}"
    os.mkfifo(fifo)
    refused_leaving_all(tmp_path, ["train", fifo, *NET, "--run-dir", tmp_path / "run"], "a FIFO", out=tmp_path / "run")


def test_a_config_that_is_a_fifo_or_a_folder_is_named_as_such(tmp_path):
    image = make_image(tmp_path / "img.png", "RGB", size=(12, 9), seed=3)
    os.mkfifo(tmp_path / "fifo.toml")
    for config in (tmp_path / "fifo.toml", tmp_path):
        refused_leaving_all(tmp_path, ["train", image, *NET, "--config", config, "--run-dir", tmp_path / "run"],
                            f"{config}: not a config file (.toml) but a folder, FIFO or device")


# --- standard input, and the CSV of a large image ----------------------------------------------


# The most memory a `decode -` here may map: on code that read standard input without end, an
# out-of-memory line instead of the machine's memory.
READS_WITHOUT_END = 4 << 30


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_standard_input_that_is_a_device_is_refused_as_a_named_one_is(tmp_path, device):
    """`decode -` reading a device (/dev/zero never ends, a terminal waits for typing) is refused
    before a byte is read, in the words a device named as the input gets."""
    with open(device, "rb") as stdin:
        ran = inr("decode", "-", "-o", tmp_path / "z.png", stdin=stdin, address_space=READS_WITHOUT_END, timeout=120)
    refused(ran, "standard input: a device, not a file inr reads (it could block or never end); pipe a pixel CSV "
                 "in, or name its file")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("feeder,said", [
    (["yes"], "standard input line 1: header must start with 'x,y', found 'y'"),
    (["cat", "/dev/zero"], "standard input line 1: longer than 1024 bytes, not a header"),
])
def test_an_endless_pipe_that_is_no_pixel_csv_is_refused_at_its_first_line(tmp_path, feeder, said):
    """A pipe never says its size; its first line is checked as soon as it is read, so that an
    endless stream of anything but a pixel CSV is refused at once, not read to its end."""
    writer = subprocess.Popen(feeder, stdout=subprocess.PIPE)
    try:
        ran = inr("decode", "-", "-o", tmp_path / "z.png", stdin=writer.stdout, address_space=READS_WITHOUT_END,
                  timeout=120)
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    refused(ran, said)
    assert not list(tmp_path.iterdir())


def test_standard_input_is_read_up_to_the_largest_pixel_csv(tmp_path, monkeypatch):
    """What `decode -` reads is capped at the bytes of the pixel CSV of the largest image inr reads
    (MAX_CSV_BYTES, every row as long as encode writes one; made small here), refused in one line
    beyond, a block at a time."""
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from inr_cli.core.pixels import MAX_IMAGE_PIXELS, MAX_SIDE
    from inr_cli.formats import input_files, pixel_csv

    longest_value = max(len("%.8g" % v) for v in np.arange(65536, dtype=np.float32) / np.float32(65535))
    longest_row = len(f"{MAX_SIDE - 1},{MAX_SIDE - 1}") + 4 * (1 + longest_value) + len("\r\n")
    assert pixel_csv.MAX_CSV_BYTES >= MAX_IMAGE_PIXELS * longest_row
    text = "x,y,l\n" + "".join(f"{x},0,0.5\n" for x in range(100))
    monkeypatch.setattr(input_files, "READ_BYTES", 64)
    monkeypatch.setattr(pixel_csv, "MAX_CSV_BYTES", len(text))
    result = CliRunner().invoke(app, ["decode", "-", "-o", str(tmp_path / "at.png")], input=text)
    assert result.exit_code == 0 and Image.open(tmp_path / "at.png").size == (100, 1), result.output
    monkeypatch.setattr(pixel_csv, "MAX_CSV_BYTES", len(text) - 1)
    result = CliRunner().invoke(app, ["decode", "-", "-o", str(tmp_path / "beyond.png")], input=text)
    assert result.exit_code == 1 and result.stderr.strip() == (
        f"error: standard input: more than {len(text) - 1:,} bytes, more than the pixel CSV of the largest image inr "
        f"reads could be"), result.output
    assert not (tmp_path / "beyond.png").exists()


def test_a_named_csv_is_refused_before_it_is_read_when_too_large_or_beyond_the_memory_free(tmp_path, monkeypatch):
    """A file larger than any pixel CSV (MAX_CSV_BYTES, made small here), or one whose reading would
    not fit the memory free (made small here), is refused in one line before a byte of it is parsed."""
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from inr_cli.core import memory
    from inr_cli.formats import pixel_csv

    text = "x,y,r,g,b\n" + "".join(f"{x},{y},0.5,0.25,1\n" for y in range(64) for x in range(64))
    (tmp_path / "in.csv").write_text(text)
    monkeypatch.setattr(pixel_csv, "MAX_CSV_BYTES", len(text) - 1)
    result = CliRunner().invoke(app, ["decode", str(tmp_path / "in.csv"), "-o", str(tmp_path / "big.png")])
    assert result.exit_code == 1 and result.stderr.strip() == (
        f"error: {tmp_path / 'in.csv'}: {len(text):,} bytes, more than the pixel CSV of the largest image inr reads "
        f"({len(text) - 1:,})"), result.output
    monkeypatch.setattr(pixel_csv, "MAX_CSV_BYTES", len(text))
    needed = memory.csv_reading_estimate(len(text), 64 * 64, 5, pixel_csv.CSV_BLOCK_BYTES).needed
    monkeypatch.setattr(memory, "host_room", lambda: needed - 1)
    result = CliRunner().invoke(app, ["decode", str(tmp_path / "in.csv"), "-o", str(tmp_path / "room.png")])
    assert result.exit_code == 1 and result.stderr.startswith(f"error: reading {tmp_path / 'in.csv'} needs about "), \
        result.output
    assert "host memory" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "big.png").exists() and not (tmp_path / "room.png").exists()
    monkeypatch.setattr(memory, "host_room", lambda: 100 * needed)
    result = CliRunner().invoke(app, ["decode", str(tmp_path / "in.csv"), "-o", str(tmp_path / "fits.png")])
    assert result.exit_code == 0 and Image.open(tmp_path / "fits.png").size == (64, 64), result.output


@pytest.mark.parametrize("flaw", ["blank lines", "a bad last line"])
def test_a_csv_the_fast_reader_refuses_is_parsed_a_block_at_a_time_within_its_estimate(tmp_path, monkeypatch, flaw):
    """Blank lines (allowed) or a bad line send a CSV to the line-by-line parser, which reads a block of
    lines at a time (small here, so that there are many), numbers the lines across blocks as one
    reading of the whole does, and holds no more than memory.csv_reading_estimate says."""
    import tracemalloc

    from inr_cli.core import memory
    from inr_cli.formats import pixel_csv

    rng = np.random.default_rng(0)
    values = rng.integers(0, 256, (96, 128, 3)).astype(np.float32) / 255
    write = tmp_path / "clean.csv"
    pixel_csv.write_csv(PixelImage(values, ("r", "g", "b")), write)
    data = write.read_bytes()
    rows = data.count(b"\n") - 1
    flawed = data.replace(b"\n", b"\n\n", 500) if flaw == "blank lines" else data + b"1,2\n"
    (tmp_path / "flawed.csv").write_bytes(flawed)
    monkeypatch.setattr(pixel_csv, "CSV_BLOCK_BYTES", 1 << 14)
    tracemalloc.start()
    try:
        if flaw == "blank lines":
            image = pixel_csv.read_csv(tmp_path / "flawed.csv")
        else:
            with pytest.raises(InrError, match=rf"flawed.csv line {rows + 2}: 2 values, expected 5$"):
                pixel_csv.read_csv(tmp_path / "flawed.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= memory.csv_reading_estimate(len(flawed), rows, 5, pixel_csv.CSV_BLOCK_BYTES).needed, peak
    if flaw == "blank lines":
        assert np.array_equal(image.values, pixel_csv.read_csv(write).values)


def test_encode_writes_a_large_image_in_bounded_memory(tmp_path):
    """The CSV of a 3000x3000 image (about 180 MB of text, which as Python strings took 1.3 GB and
    more) is made and written a block of rows at a time, to a file and to standard output: beyond
    what encoding a tiny image holds, the process holds little more than the image."""
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (3000, 3000), dtype=np.uint8)).save(tmp_path / "large.png", compress_level=1)
    make_image(tmp_path / "tiny.png", "L", size=(2, 2))
    ran = inr("encode", tmp_path / "tiny.png", "-o", tmp_path / "tiny.csv", measure=True)
    assert ran.code == 0, ran.stderr
    baseline = ran.peak_bytes
    ran = inr("encode", tmp_path / "large.png", "-o", tmp_path / "large.csv", measure=True)
    assert ran.code == 0, ran.stderr
    written = (tmp_path / "large.csv").stat().st_size
    assert written > 150e6 and ran.peak_bytes - baseline < written / 4, (written, ran.peak_bytes, baseline)
    with open(tmp_path / "out.csv", "wb") as stdout:
        ran = inr("encode", tmp_path / "large.png", "-o", "-", measure=True, stdout=stdout)
    assert ran.code == 0 and ran.peak_bytes - baseline < written / 4, (ran.stderr, ran.peak_bytes, baseline)
    assert filecmp.cmp(tmp_path / "out.csv", tmp_path / "large.csv", shallow=False)


def test_special_files_in_a_list(tmp_path):
    os.mkfifo(tmp_path / "fifo.png")
    for line, message in (("/dev/zero", "/dev/zero: a device"), (str(tmp_path / "fifo.png"), "a FIFO")):
        (tmp_path / "list.txt").write_text(line + "\n")
        refused_leaving_all(tmp_path, ["fit-many", tmp_path / "list.txt", "-o", tmp_path / "out", *NET], message,
                            out=tmp_path / "out")
    os.mkfifo(tmp_path / "fifo.txt")
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "fifo.txt", "-o", tmp_path / "out", *NET], "a FIFO",
                        out=tmp_path / "out")


@pytest.mark.parametrize("content,message", [
    (b"a.png\nb\x00.png\n", "line 2: holds a NUL byte"),
    (b"a.png\n\n\xff\xfe.png\n", "line 3: not UTF-8 text"),
])
def test_unreadable_bytes_in_a_list(tmp_path, content, message):
    make_image(tmp_path / "a.png", "RGB", size=(8, 6))
    (tmp_path / "list.txt").write_bytes(content)
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "list.txt", "-o", tmp_path / "out", *NET], message,
                        out=tmp_path / "out")


def test_an_http_line_without_aiohttp(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import aiohttp  # noqa: F401
        pytest.skip("aiohttp is installed")
    except ImportError:
        pass
    (tmp_path / "list.txt").write_text("http://127.0.0.1:9/a.png\n")
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "list.txt", "-o", tmp_path / "out", *NET], "aiohttp",
                        out=tmp_path / "out")


def test_a_float_array_beyond_float32_is_one_line_and_no_warning(tmp_path):
    np.save(tmp_path / "huge.npy", np.full((4, 4, 3), 1e300))
    refused_leaving_all(tmp_path, ["train", tmp_path / "huge.npy", *NET, "--run-dir", tmp_path / "run"],
                        "must be in [0, 1]", out=tmp_path / "run")


# --- URLs: a server that never answers ---------------------------------------------------------


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word. `all_open` is
    set once `expect` connections are open at the same time."""

    def __init__(self, expect: int = 1):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.expect, self.connections, self.all_open = expect, [], threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections.append(connection)
            if len(self.connections) >= self.expect:
                self.all_open.set()

    def hang_up(self) -> None:
        for connection in self.connections:
            connection.close()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join()
        self.hang_up()


@pytest.fixture
def silent():
    servers = []

    def start(expect: int = 1) -> SilentServer:
        servers.append(SilentServer(expect))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_server_that_never_answers_costs_the_timeout(tmp_path, silent):
    pytest.importorskip("fsspec")
    server = silent()
    (tmp_path / "list.txt").write_text(f"ftp://127.0.0.1:{server.port}/a.png\n")
    line = refused_leaving_all(tmp_path, ["fit-many", tmp_path / "list.txt", "-o", tmp_path / "out", *NET],
                               "no answer within 0.3 s", "INR_NETWORK_TIMEOUT", out=tmp_path / "out",
                               env={"INR_NETWORK_TIMEOUT": "0.3"})
    assert server.all_open.is_set(), line


def test_silent_servers_are_probed_in_parallel(tmp_path, silent):
    """Four URLs on a server that answers none: all four connections are open at once (a probe one
    URL at a time would hold the first for the whole timeout). Once they are, the server hangs up."""
    pytest.importorskip("fsspec")
    server = silent(expect=4)
    (tmp_path / "list.txt").write_text("".join(f"ftp://127.0.0.1:{server.port}/{i}.png\n" for i in range(4)))
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "INR_NETWORK_TIMEOUT": "600"}
    process = subprocess.Popen([sys.executable, "-m", "inr_cli", "fit-many", str(tmp_path / "list.txt"), "-o",
                                str(tmp_path / "out"), *NET], env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert server.all_open.wait(120), "the probe did not open the four connections at once"
        server.hang_up()
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 1 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr


def test_a_bad_timeout_setting_is_one_line(tmp_path):
    pytest.importorskip("fsspec")
    (tmp_path / "list.txt").write_text("ftp://127.0.0.1:9/a.png\n")
    refused_leaving_all(tmp_path, ["fit-many", tmp_path / "list.txt", "-o", tmp_path / "out", *NET],
                        "INR_NETWORK_TIMEOUT='soon'", out=tmp_path / "out", env={"INR_NETWORK_TIMEOUT": "soon"})
