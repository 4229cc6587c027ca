"""Hostile and careless input on the surfaces added after the single-image path: meta-init and its
checkpoint, --init FILE, tune's folder and journal, join and fit-many --add, labels, the loader and
the API, safetensors starts and sets. Each case is refused in one line naming the file and the
problem, with a non-zero exit (or gives its documented result), replaces nothing of the user's,
leaves no partial output, never hangs, and allocates nothing from what a file merely declares.

The walk of every command against the output policy is tests/test_output_policy.py."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli
from inr_cli.cli import app
from inr_cli.formats.network_set import INDEX, PLAN, WEIGHTS
from inr_cli.sets.storage import shard_name
from tests.conftest import rewrite_npz
from tests.test_hostile_inputs import inr, refused, refused_leaving_all, snapshot
from tests.test_output_policy import NET, inputs_in, make_images

runner = CliRunner()
META = ["--outer-steps", "2", "--inner-steps", "2", "--meta-batch", "2", "--eval-every", "1"]
MINE = b"the user's own bytes\n"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line(result, code: int) -> str:
    """The one line on stderr of a command that failed with `code`."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def ok(result):
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The policy test's inputs (test_output_policy.inputs_in), a labelled set and a finished meta-init."""
    base = inputs_in(tmp_path_factory.mktemp("surfaces"))
    for label, first in (("a", 6), ("b", 8)):
        make_images(base / "classes" / label, 2, first=first)
    ok(run("fit-many", base / "classes", "-o", base / "labelled", "--steps", "2", *NET))
    (base / "meta").mkdir()
    ok(run("meta-init", base / "imgs", "-o", base / "meta" / "learned.safetensors", *META, *NET))
    return base


def copy(made: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    (shutil.copytree if (made / name).is_dir() else shutil.copy)(made / name, target)
    return target


# --- meta-init: its checkpoint, read as untrusted -------------------------------------------------


def meta_copy(made: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished meta-init (its start, log, chart and checkpoint) and its checkpoint."""
    shutil.copytree(made / "meta", tmp_path / "meta")
    out = tmp_path / "meta" / "learned.safetensors"
    return out, out.with_name(out.name + ".meta.npz")


@pytest.mark.parametrize("damage,message", [
    (lambda c: c.write_bytes(c.read_bytes()[:200]), "damaged meta-init checkpoint"),
    (lambda c: rewrite_npz(c, step=None), "'step' is missing"),
    (lambda c: rewrite_npz(c, settings=None), "'settings' is missing"),
    (lambda c: rewrite_npz(c, step=np.int64(-1)), "outer step -1"),
    (lambda c: rewrite_npz(c, start=np.zeros(5), best=np.zeros(5)), "a start of 5 parameters"),
    (lambda c: rewrite_npz(c, best=np.zeros(5)), "differ in size"),
    (lambda c: rewrite_npz(c, log=np.array('[{"step": "x"}]')), "'log' is not a list of outer steps"),
    (lambda c: rewrite_npz(c, log=np.array("[" * 100000 + "]" * 100000)), "'log' is not JSON"),
    (lambda c: rewrite_npz(c, start=np.full(51, np.nan)), "NaN or infinite"),
    (lambda c: rewrite_npz(c, fingerprints=np.array("[1]")), "'fingerprints' are not one per image"),
    (lambda c: np.save(c.with_suffix(".x.npy"), np.array([{"x": 1}], dtype=object), allow_pickle=True)
     or os.replace(c.with_suffix(".x.npy"), c), "not a readable .npz archive"),
    (lambda c: rewrite_npz(c, start=np.array([{"evil": 1}], dtype=object)), "pickled"),
])
def test_a_damaged_meta_init_checkpoint_is_one_line_and_force_starts_again(made, tmp_path, damage, message):
    out, checkpoint = meta_copy(made, tmp_path)
    damage(checkpoint)
    args = ["meta-init", made / "imgs", "-o", out, *META, *NET]
    line = refused_leaving_all(tmp_path, args, message)
    assert str(checkpoint) in line
    ran = inr(*args, "--force")
    assert ran.code == 0, ran.stderr


def test_a_fifo_or_a_device_where_meta_init_keeps_its_checkpoint_is_refused_before_learning(made, tmp_path):
    out = tmp_path / "s.safetensors"
    os.mkfifo(tmp_path / "s.safetensors.meta.npz")
    refused_leaving_all(tmp_path, ["meta-init", made / "imgs", "-o", out, *META, *NET], "FIFO")
    (tmp_path / "s.safetensors.meta.npz").unlink()
    os.symlink("/dev/zero", tmp_path / "s.safetensors.meta.npz")
    refused_leaving_all(tmp_path, ["meta-init", made / "imgs", "-o", out, *META, *NET], "is a link")


@pytest.mark.parametrize("options,message", [
    (["--lr", "1e6", "--inner-steps", "8"], "blew up"),
    (["--outer-lr", "nan"], "--outer-lr must be a positive number"),
    (["--outer-lr", "inf"], "--outer-lr must be a positive number"),
    (["--holdout", "0.99"], "keeps all 3 images"),
])
def test_meta_init_options_that_cannot_learn_are_one_line(made, tmp_path, options, message):
    three = tmp_path / "three"
    three.mkdir()
    for name in ("i0.png", "i1.png", "i2.png"):
        shutil.copy(made / "imgs" / name, three / name)
    out = tmp_path / "s.safetensors"
    refused_leaving_all(tmp_path, ["meta-init", three, "-o", out, *META, *NET, *options], message)
    assert not out.exists()


def test_meta_init_on_a_full_disk_is_one_line_and_keeps_its_checkpoint(made, tmp_path):
    """The start is written last: a disk full then is one line, the learning kept in the checkpoint,
    and the same command writes the start once there is room."""
    out, checkpoint = meta_copy(made, tmp_path)
    out.unlink()
    before = checkpoint.read_bytes()
    args = ["meta-init", made / "imgs", "-o", out, *META, *NET]
    line = refused(inr(*args, limit_bytes=200), "the learning is checkpointed in")
    assert "File too large" in line and not out.exists() and checkpoint.read_bytes() == before
    assert inr(*args).code == 0 and out.is_file()


def test_meta_init_refuses_to_resume_over_images_that_changed(made, tmp_path):
    images = copy(made, "imgs", tmp_path)
    args = ["meta-init", images, "-o", tmp_path / "s.safetensors", *META, *NET]
    ok(run(*args))
    Image.fromarray(np.zeros((8, 10, 3), np.uint8)).save(images / "i1.png")
    refused_leaving_all(tmp_path, args, "i1.png has changed since")


# --- --init FILE: starts read as untrusted -------------------------------------------------------


def start_variant(made: Path, tmp_path: Path, tensors=None, **metadata) -> Path:
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    source = made / "start.safetensors"
    with safe_open(str(source), "numpy") as handle:
        saved = dict(handle.metadata())
    saved.update({key: value for key, value in metadata.items() if value is not None})
    for key in [key for key, value in metadata.items() if value is None]:
        saved.pop(key)
    path = tmp_path / "variant.safetensors"
    save_file(tensors(load_file(str(source))) if tensors else load_file(str(source)), str(path), metadata=saved)
    return path


def spec_of(made: Path, **fields) -> str:
    from safetensors import safe_open

    with safe_open(str(made / "start.safetensors"), "numpy") as handle:
        return json.dumps({**json.loads(handle.metadata()["spec"]), **fields})


@pytest.mark.parametrize("build,message", [
    (lambda m: {"spec": spec_of(m, hidden=-5)}, "'hidden' is -5"),
    (lambda m: {"spec": spec_of(m, hidden="16")}, "'hidden' is \"16\""),
    (lambda m: {"spec": spec_of(m, hidden=100000)}, "'hidden' is 100000"),
    (lambda m: {"spec": spec_of(m, hidden=40000)}, "do not match its network description"),
    (lambda m: {"spec": "[" * 100000 + "]" * 100000}, "not JSON"),
    (lambda m: {"spec": None}, "no network description"),
    (lambda m: {"channels": "x,y,z"}, "channels"),
    (lambda m: {"width": "abc"}, "its width 'abc'"),
    (lambda m: {"height": "0"}, "its height '0'"),
])
def test_a_tampered_start_is_one_line_naming_it(made, tmp_path, build, message):
    start = start_variant(made, tmp_path, **build(made))
    for args in (["train", made / "img.png", "--init", start, "--steps", "2", "--run-dir", tmp_path / "run", *NET],
                 ["fit-many", made / "imgs", "--init", start, "-o", tmp_path / "set", "--steps", "2", *NET],
                 ["meta-init", made / "imgs", "--init", start, "-o", tmp_path / "s.safetensors", *META, *NET]):
        line = refused_leaving_all(tmp_path, args, message)
        assert str(start) in line
    with pytest.raises(inr_cli.InrError, match=message.replace('"', '.').replace("'", ".")):
        inr_cli.load(start)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_start_holding_nan_or_inf_is_refused_naming_it_before_anything_is_written(made, tmp_path, value):
    def poisoned(tensors):
        tensors["layers.0.bias"] = tensors["layers.0.bias"] * value
        return tensors

    start = start_variant(made, tmp_path, poisoned)
    for args in (["train", made / "img.png", "--init", start, "--steps", "2", "--run-dir", tmp_path / "run", *NET],
                 ["meta-init", made / "imgs", "--init", start, "-o", tmp_path / "s.safetensors", *META, *NET],
                 ["fit-many", made / "imgs", "--init", start, "-o", tmp_path / "set", "--steps", "2", *NET]):
        line = refused_leaving_all(tmp_path, args, "NaN or infinite")
        assert str(start) in line and "--lr" not in line
    with pytest.raises(inr_cli.InrError, match="NaN or infinite"):
        inr_cli.load(start)


def sparse_start_with_a_large_unused_tensor(made: Path, path: Path, unused_bytes: int) -> Path:
    """The start with one more tensor of `unused_bytes` that its network does not have, written as a
    sparse file (the header declares it; the disk holds nothing of it)."""
    data = (made / "start.safetensors").read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    header["unused"] = {"dtype": "F32", "shape": [unused_bytes // 4],
                        "data_offsets": [len(body), len(body) + unused_bytes]}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded + body)
        handle.truncate(8 + len(encoded) + len(body) + unused_bytes)
    return path


def test_a_start_with_a_large_unused_tensor_reads_only_the_network(made, tmp_path):
    start = sparse_start_with_a_large_unused_tensor(made, tmp_path / "big.safetensors", 1 << 30)
    ran = inr("train", made / "img.png", "--init", start, "--steps", "2", "--run-dir", tmp_path / "run", *NET,
              "--omega0", "30", "--preview-every", "0", measure=True)  # the start's omega0 (made's: the sets preset's)
    assert ran.code == 0, ran.stderr
    assert ran.peak_bytes < 600 << 20, f"{ran.peak_bytes:,} bytes for a start of 51 parameters"


# --- tune: its folder and its journal --------------------------------------------------------------


TUNE = ["--trials", "1", "--steps", "2", *NET]


@pytest.fixture(scope="module")
def study(made, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("study") / "study"
    ok(run("tune", made / "img.png", "-o", folder, *TUNE))
    return folder


def journal_line(study: Path, tmp_path: Path, line: bytes) -> Path:
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    with open(folder / "study.journal", "ab") as handle:
        handle.write(line)
    return folder


@pytest.mark.parametrize("line,message", [
    (b"garbage\n", "not a record of a study's journal"),
    (b'{"op_code": 99, "worker_id": "w"}\n', "unknown operation"),
    (b'{"op_code": 4, "worker_id": "w"}\n', "not a journal of inr tune"),
    (b'[1, 2]\n', "unknown operation"),
])
def test_a_damaged_journal_is_one_line(made, study, tmp_path, line, message):
    folder = journal_line(study, tmp_path, line)
    refused_leaving_all(tmp_path, ["tune", made / "img.png", "-o", folder, "--resume", "--trials", "2",
                                   "--steps", "2", *NET], message)


def test_a_journal_without_one_whole_record_is_refused_not_emptied(made, tmp_path):
    """A last line cut short is dropped where whole records precede it; a file that is one unfinished
    line (a foreign file, or a first write killed) is left as it is and refused."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "study.journal").write_bytes(b"notes of mine, not a journal")
    for resume in ([], ["--resume"]):
        refused_leaving_all(tmp_path, ["tune", made / "img.png", "-o", folder, *resume, *TUNE],
                            "no line of it is whole", out=folder / ".lock")  # the study's lock is inr's
    assert (folder / "study.journal").read_bytes() == b"notes of mine, not a journal"


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_journal_that_is_not_a_file_is_refused_not_read(made, tmp_path, kind):
    folder = tmp_path / "study"
    folder.mkdir()
    journal = folder / "study.journal"
    if kind == "fifo":
        os.mkfifo(journal)
    elif kind == "zero":
        os.symlink("/dev/zero", journal)
    else:
        journal.mkdir()
    for resume in ([], ["--resume"]):
        refused_leaving_all(tmp_path, ["tune", made / "img.png", "-o", folder, *resume, *TUNE], "journal")


def test_a_study_resumed_on_an_image_that_changed_is_refused(made, study, tmp_path):
    image = copy(made, "img.png", tmp_path)
    folder = tmp_path / "study"
    ok(run("tune", image, "-o", folder, *TUNE))
    Image.fromarray(np.zeros((8, 10, 3), np.uint8)).save(image)
    refused_leaving_all(tmp_path, ["tune", image, "-o", folder, "--resume", "--trials", "2", "--steps", "2", *NET],
                        "has changed since the study")


def test_tune_on_a_full_disk_is_one_line(made, study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    ran = inr("tune", made / "img.png", "-o", folder, "--resume", "--trials", "3", "--steps", "2", *NET,
              limit_bytes=(folder / "study.journal").stat().st_size + 10)
    refused(ran, "File too large")


# --- join and fit-many --add -----------------------------------------------------------------------


def test_a_set_whose_index_renames_an_image_is_refused_by_join(made, tmp_path):
    first = copy(made, "set", tmp_path)
    text = (first / INDEX).read_text()
    (first / INDEX).write_text(text.replace("i1.png", "renamed.png"))
    refused_leaving_all(tmp_path, ["join", first, made / "set2", "-o", tmp_path / "joined"],
                        "do not name the same images")
    assert not any(path.name.startswith(".joined") for path in tmp_path.iterdir())


def both_folders(made: Path, tmp_path: Path) -> Path:
    both = tmp_path / "both"
    shutil.copytree(made / "imgs", both)
    shutil.copytree(made / "more", both, dirs_exist_ok=True)
    return both


def test_a_missing_shard_or_a_garbage_plan_is_one_line_for_join_and_add(made, tmp_path):
    both = both_folders(made, tmp_path)
    first = copy(made, "set", tmp_path)
    (first / shard_name(0)).unlink()
    refused_leaving_all(tmp_path, ["join", first, made / "set2", "-o", tmp_path / "joined"], "00000.npz")
    refused_leaving_all(tmp_path, ["fit-many", both, "-o", first, "--add", "--steps", "2", *NET], "00000.npz")
    shutil.rmtree(first)
    first = copy(made, "set", tmp_path)
    (first / PLAN).write_text("{garbage")
    for args in (["join", first, made / "set2", "-o", tmp_path / "joined"],
                 ["fit-many", both, "-o", first, "--add", "--steps", "2", *NET]):
        refused_leaving_all(tmp_path, args, "damaged plan")


def test_a_labelled_set_and_an_unlabelled_one_do_not_join(made, tmp_path):
    refused_leaving_all(made, ["join", made / "labelled", made / "set2", "-o", tmp_path / "joined"],
                        "is labelled and")
    assert not (tmp_path / "joined").exists()


def test_add_refuses_labels_that_contradict_the_sets(made, tmp_path):
    classes = copy(made, "classes", tmp_path)
    out = copy(made, "labelled", tmp_path)
    make_images(classes / "c", 1, first=10)
    labels = tmp_path / "labels.csv"
    labels.write_text("a/i6.png,b\na/i7.png,a\nb/i8.png,b\nb/i9.png,b\nc/i10.png,c\n")
    refused_leaving_all(tmp_path, ["fit-many", classes, "-o", out, "--add", "--labels", labels, "--steps", "2",
                                   *NET], "a/i6.png 'b'")


def test_a_label_holding_nul_is_refused(made, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_bytes(b"i0.png,a\ni1.png,b\x00c\ni2.png,a\ni3.png,a\n")
    refused_leaving_all(tmp_path, ["fit-many", made / "imgs", "-o", tmp_path / "set", "--labels", labels,
                                   "--steps", "2", *NET], "NUL")


@pytest.mark.parametrize("name", [".{}.joined", ".{}.previous", ".{}.adding"])
def test_a_folder_of_the_users_beside_a_set_is_never_deleted_by_add(made, tmp_path, name):
    out = copy(made, "set", tmp_path)
    both = both_folders(made, tmp_path)
    theirs = tmp_path / name.format("set")
    theirs.mkdir()
    (theirs / "theirs.txt").write_bytes(MINE)
    refused_leaving_all(tmp_path, ["fit-many", both, "-o", out, "--add", "--steps", "2", *NET], "is in the way")


def test_a_crash_between_adds_renames_is_finished_by_the_same_command(made, tmp_path):
    """Killed after OUT became .OUT.previous and before .OUT.joined became OUT: the same command
    names the joined set OUT and removes the old one, and the set is the one a plain run gives."""
    out = copy(made, "set", tmp_path)
    both = both_folders(made, tmp_path)
    add = ["fit-many", both, "-o", out, "--add", "--steps", "2", *NET]
    ok(run(*add))
    grown = snapshot(out)
    # the state the crash leaves: the old set as .set.previous, the joined one as .set.joined, both marked
    from inr_cli.outputs import mark_scratch

    joined, previous = tmp_path / ".set.joined", tmp_path / ".set.previous"
    out.rename(joined)
    mark_scratch(joined)
    copy(made, "set", tmp_path).rename(previous)
    mark_scratch(previous)
    ok(run(*add))
    assert not joined.exists() and not previous.exists()
    assert {path.relative_to(out): value for path, value in snapshot(out).items()} == \
        {path.relative_to(out): value for path, value in grown.items()}


def test_a_failing_join_leaves_nothing_behind(made, tmp_path):
    refused_leaving_all(made, ["join", made / "set", made / "set", "-o", tmp_path / "joined"], "in both")
    assert list(tmp_path.iterdir()) == []


# --- run directories and the pictures of a run -----------------------------------------------------


def test_train_refuses_a_folder_of_the_users_and_never_writes_over_its_image(made, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    for name in ("render.png", "config.toml", "metrics.csv"):
        (folder / name).write_bytes(MINE)
    refused_leaving_all(tmp_path, ["train", made / "img.png", "--run-dir", folder, "--steps", "2", *NET],
                        "holds no run")
    image = copy(made, "img.png", tmp_path)
    (tmp_path / "e").mkdir()
    os.replace(image, tmp_path / "e" / "render.png")
    refused_leaving_all(tmp_path, ["train", tmp_path / "e" / "render.png", "--run-dir", tmp_path / "e", "--steps",
                                   "2", *NET], "holds no run")


def test_a_very_wide_image_trains_with_its_pictures_drawn_within_limits_and_a_wider_one_is_refused(tmp_path):
    """65535 pixels a side is the limit every reader holds a file's declared size to (a PNG, an
    array, a CSV's coordinates), before it decodes a pixel."""
    wide = tmp_path / "wide.png"
    pixels = (np.random.default_rng(0).random((1, 65536, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(wide)
    refused(inr("train", wide, "--run-dir", tmp_path / "run", *NET), "65536x1, which exceeds the limit of 65535")
    np.save(tmp_path / "wide.npy", pixels)
    refused(inr("train", tmp_path / "wide.npy", "--run-dir", tmp_path / "run", *NET), "exceeds the limit of 65535")
    assert not (tmp_path / "run").exists()
    Image.fromarray(pixels[:, :65535]).save(wide)
    ran = inr("train", wide, "--run-dir", tmp_path / "run", "--steps", "4", "--preview-every", "1", *NET,
              measure=True)
    assert ran.code == 0, ran.stderr
    assert ran.peak_bytes < 1 << 30, f"{ran.peak_bytes:,} bytes"
    with Image.open(tmp_path / "run" / "previews.png") as animation:
        assert animation.width * animation.height <= 1 << 22


@pytest.mark.parametrize("command", ["encode", "train"])
def test_a_resize_beyond_the_limits_is_refused_before_it_is_made(made, tmp_path, command):
    args = (["encode", made / "img.png", "-o", tmp_path / "x.csv"] if command == "encode" else
            ["train", made / "img.png", "--run-dir", tmp_path / "run", *NET])
    ran = inr(*args, "--size", "1000000", measure=True)
    refused(ran, "size 1000000 makes an image of 1000000x800000, which exceeds the limit of 65535 pixels a side")
    assert ran.peak_bytes < 600 << 20


# --- write errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["encode", "export", "join", "render"])
def test_a_full_disk_is_one_line_and_keeps_the_earlier_output(made, tmp_path, case):
    out = tmp_path / {"encode": "x.csv", "export": "x.safetensors", "join": "joined", "render": "x.png"}[case]
    args = {"encode": ["encode", made / "img.png", "-o", out], "export": ["export", made / "run", "-o", out],
            "join": ["join", made / "set", made / "set2", "-o", out],
            "render": ["render", made / "run", "-o", out, "--size", "300"]}[case]
    if case != "join":
        out.write_bytes(MINE)
        args.append("--force")
    ran = inr(*args, limit_bytes=200)
    line = refused(ran)
    assert "File too large" in line, line
    assert (out.read_bytes() == MINE) if case != "join" else not out.exists()
    assert [path.name for path in tmp_path.iterdir()] == ([out.name] if case != "join" else [])


# --- the API -----------------------------------------------------------------------------------------


def test_the_api_raises_inrs_own_error_for_a_set_file_of_bad_names(made, tmp_path):
    exported = tmp_path / "set.safetensors"
    ok(run("export", made / "set", "-o", exported))
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    with safe_open(str(exported), "numpy") as handle:
        metadata = dict(handle.metadata())
    tensors = load_file(str(exported))
    for changes, message in (({"index": "[1, 2]"}, "its index"), ({"names": '["a", 5]'}, "its index"),
                             ({"index": None, "names": None}, "without their images' names"),
                             ({"names": json.dumps(["x"] * 4), "index": None}, "each given once")):
        saved = {**metadata, **{k: v for k, v in changes.items() if v is not None}}
        for key in [k for k, v in changes.items() if v is None]:
            saved.pop(key)
        save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=saved)
        with pytest.raises(inr_cli.InrError, match=message):
            inr_cli.load(tmp_path / "bad.safetensors")
    # the names of a set over the tensors of one network: not loaded as that one network
    save_file({name: tensor[0] for name, tensor in tensors.items()}, str(tmp_path / "one.safetensors"),
              metadata=metadata)
    with pytest.raises(inr_cli.InrError, match="names the images of a set, but its tensors hold one network"):
        inr_cli.load(tmp_path / "one.safetensors")


def test_labels_that_read_as_numbers_or_not_are_classes(made, tmp_path):
    out = copy(made, "set", tmp_path)
    rows = (out / INDEX).read_text().splitlines()
    labels = ["--5", "-3", "10", "x"]
    (out / INDEX).write_text("\n".join([rows[0] + ",label"] + [f"{row},'{label}" if label.startswith("-")
                                                               else f"{row},{label}"
                                                               for row, label in zip(rows[1:], labels)]) + "\n")
    nets = inr_cli.load(out)
    assert sorted(nets.label_names) == sorted(labels)
    assert [nets.label_names[code] for code in nets.labels] == labels


def test_nan_weights_are_never_handed_out(made, tmp_path):
    out = copy(made, "set", tmp_path)
    weights = np.load(out / WEIGHTS, mmap_mode="r+")
    weights[2, 0] = np.nan
    weights.flush()
    kept = np.array(weights[:2])
    del weights
    nets = inr_cli.load(out)
    with pytest.raises(inr_cli.InrError, match="i2.png: its network's parameters"):
        list(nets.batches(4, shuffle=False))
    with pytest.raises(inr_cli.InrError, match="NaN"):
        nets[2]
    batches = nets.batches(1, shuffle=False)
    for i in range(2):  # the networks before it are handed out, as they are
        assert np.array_equal(next(batches)[0], kept[i:i + 1])
    with pytest.raises(inr_cli.InrError, match="i2.png"):
        next(batches)
    coords = np.zeros((3, 2), np.float32)
    for call in (nets.networks, lambda: nets(coords), lambda: nets(coords, clip=False), nets.to_torch,
                 nets.to_jax):  # every network at once: none drawn from NaN
        with pytest.raises(inr_cli.InrError, match="i2.png: its network's parameters in weights.npy hold NaN"):
            call()
    for exported in ("set.safetensors", "set_0-4.hdf5"):  # an export holds only networks a reader takes
        line = one_line(run("export", out, "-o", tmp_path / exported), 1)
        assert "i2.png: its network's parameters hold NaN" in line and not (tmp_path / exported).exists(), line


def test_an_hdf5_export_is_named_for_the_rows_it_holds(made, tmp_path):
    """neural-field-arena reads NAME_START-END.hdf5 as rows START to END: a name that says other rows
    than the set holds is refused, naming one that says them."""
    pytest.importorskip("h5py")
    for name, said in (("train_0-400.hdf5", "name it train_0-4.hdf5"), ("test_10-12.hdf5", "name it test_10-14.hdf5"),
                       ("set.hdf5", "name it set_0-4.hdf5")):
        line = one_line(run("export", made / "set", "-o", tmp_path / name), 2)
        assert "holds 4 networks" in line and said in line and not (tmp_path / name).exists(), line
    ok(run("export", made / "set", "-o", tmp_path / "test_10-14.hdf5"))


def test_add_refuses_an_image_the_set_holds_that_changed(made, tmp_path):
    out = copy(made, "set", tmp_path)
    both = both_folders(made, tmp_path)
    Image.fromarray(np.zeros((8, 10, 3), np.uint8)).save(both / "i1.png")  # another size of file
    refused_leaving_all(tmp_path, ["fit-many", both, "-o", out, "--add", "--steps", "2", *NET],
                        "i1.png changed since the set")


def test_a_label_left_empty_is_refused(made, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("i0.png,a\ni1.png,\ni2.png,a\ni3.png,a\n")
    refused_leaving_all(tmp_path, ["fit-many", made / "imgs", "-o", tmp_path / "set", "--labels", labels,
                                   "--steps", "2", *NET], "line 2: expected name,label")
