"""The output policy (inr_cli/outputs.py) on every command of the CLI, the commands enumerated from
the Typer app itself: a command added tomorrow fails here until it says how it writes.

Each command that writes has a recipe: how to run it with its output at a given path (a command
with several writers, one recipe each: ONNX, a set's safetensors and hdf5, a TIFF). Every recipe
is run with a file and a folder of the user's in the way, with its output one of its inputs, inside
a folder it reads images from, in a read-only folder, in a missing one, on a device that refuses
every write, on a full disk, and with a link (to nothing, to a file of the user's) or a FIFO where
its output goes; then every file it wrote beside its output (found by running it once into a folder
of its own) is put in its way in turn, as a file, a link and a FIFO. A refusal is one line on stderr
and a non-zero exit, and leaves every file as it was; --force, where a command has it, replaces only
what the command writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import typer.main
from PIL import Image
from typer.testing import CliRunner

from inr_cli.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
NET = ["--hidden", "8", "--layers", "1", "--device", "cpu", "-q"]
MINE = b"the user's own bytes\n"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def refused(result) -> str:
    """One line on stderr, no traceback (no exception escaped the command), a non-zero exit."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def snapshot(folder: Path) -> dict:
    """Every path under `folder` with what it is: a regular file by its bytes' hash, never opened
    otherwise (a FIFO would block, a device never end)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        mode = os.lstat(path).st_mode
        found[path] = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(mode) else stat.S_IFMT(mode)
    return found


def make_images(folder: Path, count: int, first: int = 0) -> Path:
    folder.mkdir(parents=True)
    for i in range(first, first + count):
        yy, xx = np.mgrid[0:8, 0:10]
        values = np.stack([np.sin(xx / (2 + i)), np.cos(yy / (3 + i)), np.sin((xx + yy) / (4 + i))], -1) * 0.4 + 0.5
        Image.fromarray((values * 255).astype(np.uint8)).save(folder / f"i{i}.png")
    return folder


def inputs_in(base: Path) -> Path:
    """What a command reads: images (imgs/, more/, img.png), a pixel CSV, a run, two sets fitted
    alike (set/, set2/) and a start exported from the run (omega0 30: the sets preset's, as meta-init's)."""
    make_images(base / "imgs", 4)
    make_images(base / "more", 2, first=4)
    shutil.copy(base / "imgs" / "i0.png", base / "img.png")
    for args in (["encode", base / "img.png", "-o", base / "img.csv"],
                 ["train", base / "img.png", "--run-dir", base / "run", "--steps", "2", "--omega0", "30", *NET],
                 ["fit-many", base / "imgs", "-o", base / "set", "--steps", "2", *NET],
                 ["fit-many", base / "more", "-o", base / "set2", "--steps", "2", *NET],
                 ["export", base / "run", "-o", base / "start.safetensors"]):
        result = run(*args)
        assert result.exit_code == 0, result.output
    return base


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return inputs_in(tmp_path_factory.mktemp("inputs"))


@dataclass
class Recipe:
    """How a command writes: `args(base, out)` runs it with its output at `out` (a file with
    `suffix`, or a folder); `force`: whether it has --force; `inputs` and `folders`: the files it
    reads and the folders it reads images from (relative to the base)."""

    command: str
    args: Callable[[Path, Path], list]
    suffix: str = ""  # "" for a folder output
    force: bool = False
    inputs: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    scratch: tuple[str, ...] = field(default=())  # folders beside the output it works in, {} its name
    what: str = ""  # which of a command's writers, where it has several

    @property
    def folder(self) -> bool:
        return not self.suffix

    @property
    def id(self) -> str:
        return f"{self.command}{'-' + self.what if self.what else ''}"


META = ["--outer-steps", "1", "--inner-steps", "2", "--meta-batch", "2", "--eval-every", "1"]
RECIPES = [
    Recipe("encode", lambda b, o: ["encode", b / "img.png", "-o", o], ".csv", True, ("img.png",)),
    Recipe("decode", lambda b, o: ["decode", b / "img.csv", "-o", o], ".png", True, ("img.csv",)),
    Recipe("render", lambda b, o: ["render", b / "run", "-o", o, "--device", "cpu", "-q"], ".png", True,
           ("run/checkpoint.npz", "img.png")),
    Recipe("render", lambda b, o: ["render", b / "run", "-o", o, "--depth", "16", "--device", "cpu", "-q"], ".tiff",
           True, ("run/checkpoint.npz", "img.png"), what="tiff"),
    Recipe("export", lambda b, o: ["export", b / "run", "-o", o], ".safetensors", True, ("run/checkpoint.npz",)),
    Recipe("export", lambda b, o: ["export", b / "run", "-o", o], ".onnx", True, ("run/checkpoint.npz",), what="onnx"),
    Recipe("export", lambda b, o: ["export", b / "set", "-o", o], ".safetensors", True, ("set/weights.npy",),
           what="set"),
    Recipe("export", lambda b, o: ["export", b / "set", "-o", o], "_0-4.hdf5", True, ("set/weights.npy",),
           what="hdf5"),
    Recipe("meta-init", lambda b, o: ["meta-init", b / "imgs", "-o", o, "--init", b / "start.safetensors", *META,
                                      *NET], ".safetensors", True, ("start.safetensors",), ("imgs",)),
    Recipe("train", lambda b, o: ["train", b / "img.png", "--run-dir", o, "--steps", "2", *NET], inputs=("img.png",)),
    Recipe("fit-many", lambda b, o: ["fit-many", b / "imgs", "-o", o, "--steps", "2", *NET], force=True,
           folders=("imgs",)),
    Recipe("join", lambda b, o: ["join", b / "set", b / "set2", "-o", o], folders=("set", "set2"),
           scratch=(".{}.joining",)),
    Recipe("tune", lambda b, o: ["tune", b / "imgs", "-o", o, "--trials", "1", "--sample", "2", "--steps", "2", *NET],
           folders=("imgs",)),
    Recipe("eval", lambda b, o: ["eval", o, b / "img.png", "--train-size", "8", "--steps", "2", "--device", "cpu"],
           inputs=("img.png",)),
]
# The commands that write nothing, each run as a user would (doctor without nvcc on its PATH: its
# compile of the kernels goes to a temporary folder of its own, and takes a minute).
WRITES_NOTHING = {
    "info": [lambda b: ["info", b / "run"], lambda b: ["info", b / "set"]],
    "presets": [lambda b: ["presets"], lambda b: ["presets", "siren"]],
    "eval": [lambda b: ["eval", b / "run", b / "img.png", "--device", "cpu"]],
    "doctor": [lambda b: ["doctor"]],
}
# The commands that serve until stopped, and write nothing while they do.
SERVES = {"view": [lambda b: ["view", b / "run", "--no-browser", "--device", "cpu"],
                   lambda b: ["view", b / "set", "--no-browser", "--device", "cpu"]]}


def all_commands(command, prefix: str = "") -> list[str]:
    """Every command and subcommand of a Click command (Click's own or Typer's copy), by its full name."""
    if hasattr(command, "commands"):
        return [name for sub, child in command.commands.items()
                for name in all_commands(child, f"{prefix} {sub}".strip())]
    return [prefix]


def test_every_command_says_how_it_writes():
    commands = all_commands(typer.main.get_command(app))
    assert len(commands) >= 14
    described = {recipe.command for recipe in RECIPES} | set(WRITES_NOTHING) | set(SERVES)
    assert not set(commands) - described, f"commands with no recipe here: {sorted(set(commands) - described)}"


@pytest.mark.parametrize("command", sorted(WRITES_NOTHING))
def test_a_command_that_writes_nothing_writes_nothing(base, command, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    for way in WRITES_NOTHING[command]:
        before = snapshot(base)
        result = run(*way(base))
        assert result.exit_code == 0, result.output
        assert snapshot(base) == before


@pytest.mark.parametrize("command", sorted(SERVES))
def test_a_server_writes_nothing_while_it_serves(base, command):
    for way in SERVES[command]:
        before = snapshot(base)
        server = subprocess.Popen([sys.executable, "-m", "inr_cli", *map(str, way(base))], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            ready, _, _ = select.select([server.stdout], [], [], 120)
            assert ready, "the server did not say where it serves"
            url = server.stdout.readline().strip()
            with urllib.request.urlopen(url, timeout=60) as page:
                assert page.status == 200
        finally:
            server.send_signal(signal.SIGINT)
            server.communicate(timeout=60)
        assert server.returncode == 0, server.stderr
        assert snapshot(base) == before


@pytest.fixture
def place(tmp_path) -> Path:
    """A folder of the user's where an output goes, with a file of theirs in it."""
    folder = tmp_path / "place"
    folder.mkdir()
    (folder / "theirs.txt").write_bytes(MINE)
    return folder


def output_in(recipe: Recipe, folder: Path) -> Path:
    return folder / f"out{recipe.suffix}"


def refused_leaving_all(recipe: Recipe, base: Path, out: Path, watched: Path, force: bool = False) -> str:
    before, inputs = snapshot(watched), snapshot(base)
    line = refused(run(*recipe.args(base, out), *(["--force"] if force else [])))
    assert snapshot(watched) == before, "a file of the user's changed"
    assert snapshot(base) == inputs, "an input changed"
    return line


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_a_file_of_the_users_is_replaced_only_with_force(recipe, base, place):
    out = output_in(recipe, place)
    out.write_bytes(MINE)
    refused_leaving_all(recipe, base, out, place)
    if recipe.force and not recipe.folder:
        result = run(*recipe.args(base, out), "--force")
        assert result.exit_code == 0, result.output
        assert out.read_bytes() != MINE and (place / "theirs.txt").read_bytes() == MINE
    for force in ([False, True] if recipe.force else [False]):
        if recipe.folder:  # a file where the folder goes is never replaced
            refused_leaving_all(recipe, base, out, place, force)


def test_a_file_at_a_default_output_name_is_kept_and_the_tools_own_name_written(base, tmp_path):
    """encode and decode without -o: a file at IMAGE.csv or CSV.png (notes of the user's, another
    image) is kept, and the tool's own name beside it is written, in one note that says so; that name
    of the tool's is replaced, said so, the next time."""
    for command, source, kept, written in (("encode", "img.png", "img.csv", "img-encoded.csv"),
                                           ("decode", "img.csv", "img.png", "img-decoded.png")):
        shutil.copy(base / source, tmp_path / source)
        (tmp_path / kept).write_bytes(MINE)
        for doing in ("writing", "replacing"):
            result = run(command, tmp_path / source)
            assert result.exit_code == 0, result.output
            assert result.stdout.strip() == str(tmp_path / written)
            note = result.stderr.strip()
            assert note.startswith(f"note: {tmp_path / kept} exists") and "\n" not in note, note
            assert f"is kept: {doing} {tmp_path / written}" in note, note
            assert (tmp_path / kept).read_bytes() == MINE
        if command == "encode":
            assert (tmp_path / written).read_bytes() == (base / "img.csv").read_bytes()
        else:
            assert np.array_equal(np.asarray(Image.open(tmp_path / written)), np.asarray(Image.open(base / kept)))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_a_folder_of_the_users_is_never_replaced(recipe, base, place):
    out = output_in(recipe, place)
    out.mkdir()
    (out / "theirs.txt").write_bytes(MINE)
    refused_leaving_all(recipe, base, out, place)
    if recipe.force:
        if recipe.folder:  # --force writes the output beside the user's files, which stay
            result = run(*recipe.args(base, out), "--force")
            assert result.exit_code == 0, result.output
            assert (out / "theirs.txt").read_bytes() == MINE
        else:
            refused_leaving_all(recipe, base, out, place, force=True)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.folder], ids=lambda recipe: recipe.id)
def test_a_folder_holding_only_a_file_managers_files_is_empty_to_every_command(recipe, base, place):
    """One rule for every folder output (outputs.IGNORED): what a file manager leaves is kept."""
    out = output_in(recipe, place)
    out.mkdir()
    (out / ".DS_Store").write_bytes(MINE)
    result = run(*recipe.args(base, out))
    assert result.exit_code == 0, result.output
    assert (out / ".DS_Store").read_bytes() == MINE


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.inputs or r.folders], ids=lambda recipe: recipe.id)
def test_an_output_that_is_an_input_or_inside_an_input_folder_is_refused_even_with_force(recipe, base):
    for name in recipe.inputs + recipe.folders:
        for force in {False, recipe.force}:
            refused_leaving_all(recipe, base, base / name, base, force)
    for name in recipe.folders:
        for force in {False, recipe.force}:
            refused_leaving_all(recipe, base, base / name / f"out{recipe.suffix}", base, force)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if not r.folder], ids=lambda recipe: recipe.id)
def test_a_file_into_a_missing_folder_is_one_line(recipe, base, tmp_path):
    refused_leaving_all(recipe, base, tmp_path / "missing" / f"out{recipe.suffix}", tmp_path)


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` refuses new files: its mode, or, for root (whom the mode does not stop), a read-only
    bind mount of it."""
    folder.chmod(0o555)
    mounted = False
    try:
        probe = folder / ".probe"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            probe.unlink()
            done = subprocess.run(["mount", "--bind", folder, folder], capture_output=True)
            if done.returncode != 0:
                pytest.skip("cannot make a folder read-only here (root, without mount)")
            mounted = True
            if subprocess.run(["mount", "-o", "remount,bind,ro", folder], capture_output=True).returncode != 0:
                pytest.skip("cannot make a folder read-only here (root, without a read-only remount)")
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", folder], check=True)
        folder.chmod(0o755)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_an_output_in_a_read_only_folder_is_one_line_and_leaves_nothing(recipe, base, place):
    with read_only(place):
        line = refused_leaving_all(recipe, base, output_in(recipe, place), place)
    assert "Read-only file system" in line or "Permission denied" in line, line


def full_device(folder: Path, name: str) -> Path:
    """A device that refuses every write as a full disk does: for root, a node of /dev/full of the
    test's own, named `name` (a writer that replaces its target replaces that one, not the
    system's); else /dev/full itself."""
    if os.geteuid() != 0:
        return Path("/dev/full")
    node = folder / name
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    return node


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_an_output_on_a_full_device_is_one_line(recipe, base, tmp_path):
    full = full_device(tmp_path, f"full{recipe.suffix}")
    line = refused_leaving_all(recipe, base, full, tmp_path, force=recipe.force)  # not /dev: others write there
    assert stat.S_ISCHR(os.stat(full).st_mode), "the device was replaced"
    if not recipe.folder and full.suffix == recipe.suffix:
        assert "No space left on device" in line or "not a regular file" in line, line


@contextlib.contextmanager
def full_disk(folder: Path):
    """`folder`, a small file system of its own filled to the last byte (a tmpfs: root only)."""
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", folder],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small file system here (root and mount needed)")
    try:
        with open(folder / ".filler", "wb", buffering=0) as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 512)
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if not r.folder], ids=lambda recipe: recipe.id)
def test_a_file_on_a_full_disk_is_one_line_in_the_systems_words(recipe, base, tmp_path):
    """Whatever library writes the file (h5py's own words run to lines, with a time in them), the
    line names the file and the system's reason."""
    with full_disk(tmp_path / "full") as full:
        out = output_in(recipe, full)
        line = refused_leaving_all(recipe, base, out, full, recipe.force)
        assert str(out) in line and "No space left on device" in line and "time" not in line, line


@contextlib.contextmanager
def never_hangs(seconds: int = 60):
    """A command that opened a FIFO to write would wait for a reader for ever: fail instead."""
    def hung(signum, frame):
        raise AssertionError(f"still running after {seconds} s: it opened a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_a_link_or_a_fifo_as_the_output_is_refused_even_with_force_before_it_is_opened(recipe, base, tmp_path):
    """Through a link to nothing a write would create a file wherever it points; through a link to a
    file it would change a file the user never named (replacing the link, the link they made); a
    FIFO would block for ever. Each is refused, with --force where the command has it."""
    (tmp_path / "elsewhere").mkdir()
    theirs = tmp_path / "elsewhere" / f"theirs{recipe.suffix or '.txt'}"
    theirs.write_bytes(MINE)
    (tmp_path / f"nothing{recipe.suffix}").symlink_to(tmp_path / "elsewhere" / f"target{recipe.suffix}")
    (tmp_path / f"link{recipe.suffix}").symlink_to(theirs)
    os.mkfifo(tmp_path / f"fifo{recipe.suffix}")
    with never_hangs():
        for name in ("nothing", "link", "fifo"):
            out = tmp_path / f"{name}{recipe.suffix}"
            line = refused_leaving_all(recipe, base, out, tmp_path, recipe.force)
            assert str(out) in line, line



@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.folder], ids=lambda recipe: recipe.id)
def test_a_folder_output_named_through_a_link_is_the_folder_it_names(recipe, base, tmp_path):
    """As every folder on a path is followed; the files inr writes in it are checked as any are:
    a link put among them afterwards is refused by the command that goes on with the folder."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "theirs.txt").write_bytes(MINE)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    result = run(*recipe.args(base, link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and any((tmp_path / "elsewhere").iterdir())
    written = sorted(path for path in (tmp_path / "elsewhere").rglob("*") if path.is_file())
    written[-1].unlink()
    written[-1].symlink_to(tmp_path / "theirs.txt")
    for force in {False, recipe.force}:
        before = snapshot(tmp_path)
        result = run(*recipe.args(base, link), *(["--force"] if force else []))
        if result.exit_code != 0 or recipe.command != "eval":  # eval reads a run that is there, writes nothing
            refused(result)
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.id)
def test_what_a_command_writes_beside_its_output_is_checked_as_the_output_is(recipe, base, tmp_path):
    """Run once into a folder of its own, a command leaves its output and whatever it names after
    it; each of those, in the way of a second run, is refused (replaced only with --force), and
    nothing else is left beside the output (scratch folders are gone)."""
    clean = tmp_path / "clean"
    clean.mkdir()
    result = run(*recipe.args(base, output_in(recipe, clean)))
    assert result.exit_code == 0, result.output
    beside = sorted(path.name for path in clean.iterdir() if path.name != f"out{recipe.suffix}")
    if recipe.folder:
        assert beside == [], f"{recipe.command} left {beside} beside its output folder"
    for name in beside:
        place = tmp_path / f"place-{name}"
        place.mkdir()
        (place / name).write_bytes(MINE)
        refused_leaving_all(recipe, base, output_in(recipe, place), place)
        if recipe.force:
            result = run(*recipe.args(base, output_in(recipe, place)), "--force")
            assert result.exit_code == 0, result.output
        (place / name).unlink()  # a link or a FIFO there: refused even with --force, never opened
        (place / name).symlink_to(place / "theirs")
        (place / "theirs").write_bytes(MINE)
        refused_leaving_all(recipe, base, output_in(recipe, place), place, recipe.force)
        (place / name).unlink()
        os.mkfifo(place / name)
        with never_hangs():
            refused_leaving_all(recipe, base, output_in(recipe, place), place, recipe.force)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.scratch], ids=lambda recipe: recipe.id)
def test_a_folder_of_the_users_where_a_command_works_is_refused_never_deleted(recipe, base, place):
    out = output_in(recipe, place)
    for pattern in recipe.scratch:
        theirs = place / pattern.format(out.name)
        theirs.mkdir()
        (theirs / "theirs.txt").write_bytes(MINE)
        refused_leaving_all(recipe, base, out, place)
        shutil.rmtree(theirs)
