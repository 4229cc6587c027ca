"""`inr fit-many`: a folder becomes a data set of networks, the same wherever it was fitted, and
nothing is lost when a worker or the driver dies (in-process and on a real local Ray)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.network_set import INDEX, INDEX_COLUMNS, SHARDS, WEIGHTS, WEIGHTS_PART, load_network_set
from inr_cli.sets.plan import image_seed
from inr_cli.sets.storage import shard_name
from tests import failpoints

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
# Each network from its own draw (--init random): the tests below compare one with `inr train --seed` alone.
NET = ["--init", "random", "--hidden", "12", "--layers", "2", "--omega0", "60", "--lr", "3e-3", "--steps", "40",
       "--device", "cpu", "-q"]


def make_folder(folder: Path, count: int = 5, size=(14, 10)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        w, h = size
        yy, xx = np.mgrid[0:h, 0:w]
        values = np.stack([np.sin(xx / (2 + i)), np.cos(yy / (3 + i)), np.sin((xx + yy) / (4 + i))], -1) * 0.4 + 0.5
        Image.fromarray((values * 255).astype(np.uint8)).save(folder / f"img{i}.png")
    return folder


def fit(*args):
    return runner.invoke(app, ["fit-many", *map(str, args)])


def inr(*args, failpoint: str = "") -> subprocess.Popen:
    return python_module("inr_cli", *args, failpoint=failpoint)


def python_module(module: str, *args, failpoint: str = "") -> subprocess.Popen:
    """`python -m module args` on this source tree, its stdout and stderr piped (finish reads them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(failpoints.environment(failpoint) if failpoint else {})}
    return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    """Its exit code and stderr. Both pipes are read while it runs: a process that says much (Ray's
    own log lines when a worker dies) would otherwise block on a full pipe, and the test with it."""
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


def shards_on_disk(out: Path) -> int:
    folder = out / SHARDS
    return len(list(folder.glob("?????.npz"))) if folder.is_dir() else 0  # not the packs in flight


def wait_for_shards(process: subprocess.Popen, out: Path, count: int) -> bool:
    """Until `count` shards are on disk (True) or the process ended (False): an event, not a time."""
    while shards_on_disk(out) < count:
        if process.poll() is not None:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted in-process run, packs of 2: what every other way must reproduce bit for bit."""
    base = tmp_path_factory.mktemp("reference")
    folder = make_folder(base / "images")
    result = fit(folder, "-o", base / "out", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    return folder, base / "out"


def test_output_is_a_data_set_of_networks(reference):
    folder, out = reference
    weights = np.load(out / WEIGHTS)  # one NumPy call
    with open(out / INDEX, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["name"] for r in rows] == sorted(p.name for p in folder.iterdir())
    assert set(INDEX_COLUMNS) <= set(rows[0])
    networks = load_network_set(out)
    assert weights.dtype == np.float32 and weights.shape == (5, networks.spec.parameter_count())
    assert all(float(r["psnr"]) > 10 and int(r["steps"]) == 40 for r in rows)
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.core.metrics import psnr
    from inr_cli.core.render import render_float
    from inr_cli.formats.images import load_image

    for i, row in enumerate(rows):  # each row's PSNR is its own network's render against its own image
        image = load_image(folder / row["name"])
        drawn = render_float(CpuBackend(), networks.spec, weights[i], image.width, image.height)
        assert psnr(drawn, image.values) == pytest.approx(float(row["psnr"]), abs=1e-3)
    assert len({r["seed"] for r in rows}) == 5
    result = runner.invoke(app, ["info", str(out), "--json"])
    assert result.exit_code == 0, result.output
    import json

    summary = json.loads(result.stdout)
    assert summary["count"] == 5 and summary["bytes_per_image"] == 4 * networks.spec.parameter_count()
    assert summary["mean_psnr"] == pytest.approx(np.mean([float(r["psnr"]) for r in rows]), abs=1e-3)
    result = runner.invoke(app, ["render", str(out), "--image", "img2.png", "--size", "28", "--device", "cpu", "-o",
                                 str(out.parent / "two.png"), "-q"])
    assert result.exit_code == 0, result.output
    assert Image.open(out.parent / "two.png").size == (28, 20)
    result = runner.invoke(app, ["render", str(out), "--image", "nope.png"])
    assert result.exit_code == 1 and "no image named 'nope.png'" in result.output


@pytest.mark.numerics
def test_same_network_whatever_the_pack_and_as_inr_train(reference, tmp_path):
    folder, out = reference
    result = fit(folder, "-o", tmp_path / "one-pack", "--pack", "5", *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "one-pack" / WEIGHTS), np.load(out / WEIGHTS))
    networks = load_network_set(out)
    row = networks.row("img3.png")
    seed = networks.index[row]["seed"]
    result = runner.invoke(app, ["train", str(folder / "img3.png"), "--seed", seed, "--run-dir",
                                 str(tmp_path / "single"), "--preview-every", "0", *NET])
    assert result.exit_code == 0, result.output
    assert np.array_equal(ckpt.load(tmp_path / "single").params, networks.weights[row])


def test_rerun_resumes_and_refuses_changed_settings(reference, tmp_path):
    folder, out = reference
    result = fit(folder, "-o", out, "--pack", "2", *NET)  # finished: nothing to do, same set
    assert result.exit_code == 0, result.output
    result = fit(folder, "-o", out, "--pack", "2", *NET[:-1], "--steps", "41")
    assert result.exit_code == 2 and "training.steps = 40, not 41" in result.output
    result = fit(folder, "-o", out, "--pack", "3", *NET)
    assert result.exit_code == 2 and "--pack 2" in result.output
    # omega0 left to the size (0; the sets preset gives 30) is the one the set already has (an older
    # inr chose 60 for every size); given by hand, it must match
    sized = [a for i, a in enumerate(NET) if "--omega0" not in NET[max(i - 1, 0):i + 1]]
    assert len(sized) == len(NET) - 2
    result = fit(folder, "-o", out, "--pack", "2", *sized, "--omega0", "0")
    assert result.exit_code == 0, result.output
    result = fit(folder, "-o", out, "--pack", "2", *sized, "--omega0", "30")
    assert result.exit_code == 2 and "omega0 = 60" in result.output, result.output
    # what the command does not say is the set's own (the sets preset, under it, would say omega0 30 and
    # lr 1e-3); a --config file's keys and a named preset's are said, and checked
    assert fit(folder, "-o", out, "--device", "cpu", "-q").exit_code == 0
    config = tmp_path / "lr.toml"
    config.write_text("[optimizer]\nlr = 1e-3\n")
    result = fit(folder, "-o", out, "--config", config, "--device", "cpu", "-q")
    assert result.exit_code == 2 and "optimizer.lr = 0.003, not 0.001" in result.output
    result = fit(folder, "-o", out, "--preset", "fourier", *sized)  # (--omega0 does nothing in its ReLU network)
    assert result.exit_code == 2 and "network.model = 'siren', not 'relu'" in result.output


def test_driver_killed_then_same_command_completes_bit_identical(reference, tmp_path):
    """SIGKILL of the driver once two shards are written (the failpoint kills it then, whatever the
    machine's speed); the same command again completes the set, bit for bit the uninterrupted one."""
    folder, out = reference
    target = tmp_path / "out"
    args = ["fit-many", folder, "-o", target, "--pack", "1", *NET]
    process = inr(*args, failpoint="driver-after=2")
    code, stderr = finish(process)
    assert code == -signal.SIGKILL, stderr
    assert shards_on_disk(target) == 2 and not (target / WEIGHTS).exists()
    result = fit(*args[1:])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))
    assert not list((target / SHARDS).glob(".*.tmp"))


def test_networks_are_written_at_their_rows_and_a_rerun_fits_only_what_lost_them(reference, tmp_path):
    """Each shard's networks go straight to their rows of weights.npy.part (its shard file keeps
    names and scores, not networks); the shards whose rows file is gone, and a shard removed from a
    finished set, are fitted again, and the set is the uninterrupted one, bit for bit."""
    folder, out = reference
    expected = np.load(out / WEIGHTS)
    target = tmp_path / "out"
    args = ["fit-many", folder, "-o", target, "--pack", "1", *NET]
    assert finish(inr(*args, failpoint="driver-after=2"))[0] == -signal.SIGKILL
    part = np.load(target / WEIGHTS_PART)
    fitted = [i for i in range(5) if (target / shard_name(i)).is_file()]
    assert len(fitted) == 2 and all("params" not in np.load(target / shard_name(i)).files for i in fitted)
    assert all(np.array_equal(part[i], expected[i]) == (i in fitted) for i in range(5))
    (target / WEIGHTS_PART).unlink()
    result = fit(*args[1:-1])  # not quiet: its notice is read
    assert result.exit_code == 0, result.output
    assert "2 finished shards had their networks only in the set's weights file" in result.output
    assert np.array_equal(np.load(target / WEIGHTS), expected)
    assert not (target / WEIGHTS_PART).exists()
    kept = {i: (target / shard_name(i)).stat().st_mtime_ns for i in (0, 1, 2, 4)}
    (target / shard_name(3)).unlink()
    weights = np.load(target / WEIGHTS, mmap_mode="r+")
    weights[3] = 0
    weights.flush()
    del weights
    result = fit(*args[1:])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(target / WEIGHTS), expected)
    assert kept == {i: (target / shard_name(i)).stat().st_mtime_ns for i in kept}


def test_a_shard_file_that_holds_its_networks_is_assembled(reference, tmp_path):
    """Shard files that hold the networks (an output in a bucket, an older inr's) are written
    into weights.npy at their rows."""
    folder, out = reference
    expected = np.load(out / WEIGHTS)
    target = tmp_path / "out"
    assert fit(folder, "-o", target, "--pack", "2", *NET).exit_code == 0
    shard = dict(np.load(target / shard_name(1)))
    rows = [int(name[3]) for name in shard["names"]]  # img2.png, img3.png
    with open(target / shard_name(1), "wb") as handle:
        np.savez(handle, **shard, params=expected[rows])
    weights = np.load(target / WEIGHTS, mmap_mode="r+")
    weights[rows] = 0
    weights.flush()
    del weights
    assert fit(folder, "-o", target, "--pack", "2", *NET).exit_code == 0
    assert np.array_equal(np.load(target / WEIGHTS), expected)


def test_an_output_in_a_bucket(reference, tmp_path):
    """-o URL through fsspec (here its in-memory file system, which this process alone sees): the
    shard files hold the networks, the driver streams them into weights.npy, and the files are
    the local set's, byte for byte; a rerun fits only the missing shards."""
    fsspec = pytest.importorskip("fsspec")
    folder, out = reference
    bucket = fsspec.filesystem("memory")
    url = f"memory://inr-test-{os.getpid()}-{tmp_path.name}/set"
    result = fit(folder, "-o", url, "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    root = url.removeprefix("memory:/")
    for name in (WEIGHTS, INDEX):
        assert bucket.cat_file(f"{root}/{name}") == (out / name).read_bytes(), name
    assert not [p for p in bucket.find(root) if p.endswith(".tmp")]
    bucket.rm_file(f"{root}/{shard_name(2)}")
    bucket.rm_file(f"{root}/{WEIGHTS}")
    result = fit(folder, "-o", url, "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert bucket.cat_file(f"{root}/{WEIGHTS}") == (out / WEIGHTS).read_bytes()
    bucket.rm(root, recursive=True)


def test_bad_folders(tmp_path):
    folder = make_folder(tmp_path / "mixed", count=2)
    make_folder(tmp_path / "other", count=1, size=(9, 9))
    (tmp_path / "other" / "img0.png").rename(folder / "small.png")
    result = fit(folder, "-o", tmp_path / "o1", *NET)
    assert result.exit_code == 1 and "img0.png is 14x10 but small.png is 9x9" in result.output
    assert not (tmp_path / "o1" / WEIGHTS).exists()
    result = fit(folder, "-o", tmp_path / "o2", "--size", "12", *NET[:-1])  # --size shrinks, never enlarges
    assert result.exit_code == 0, result.output
    assert result.stderr.count("smaller than --size") == 1  # said once for the set
    assert "1 of 3 images are smaller than --size 12 (the smallest: small.png, 9x9)" in result.stderr
    index = load_network_set(tmp_path / "o2").index
    sizes = {(r["name"], r["width"], r["height"]) for r in index}
    assert ("small.png", "9", "9") in sizes and ("img0.png", "12", "9") in sizes
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.core.metrics import psnr
    from inr_cli.core.render import render_float
    from inr_cli.formats.images import load_image

    small = load_image(folder / "small.png")  # the PSNR is of the image itself, not of an upscale
    networks = load_network_set(tmp_path / "o2")
    row = networks.row("small.png")
    drawn = render_float(CpuBackend(), networks.spec, networks.weights[row], 9, 9)
    assert psnr(drawn, small.values) == pytest.approx(float(index[row]["psnr"]), abs=1e-3)
    summary = json.loads(runner.invoke(app, ["info", str(tmp_path / "o2"), "--json"]).stdout)
    assert summary["image_bytes_mean"] == pytest.approx((9 * 9 + 2 * 12 * 9) * 3 / 3)
    (folder / "notes.txt").write_text("not an image")
    result = fit(folder, "-o", tmp_path / "o3", "--size", "12", *NET)
    assert result.exit_code == 1 and "notes.txt" in result.output and "--skip-unreadable" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "o3" / SHARDS).exists()
    result = fit(folder, "-o", tmp_path / "o4", "--size", "12", "--skip-unreadable", *NET[:-1])
    assert result.exit_code == 0 and "skipped notes.txt" in result.output
    assert len(load_network_set(tmp_path / "o4").index) == 3



@pytest.mark.parametrize("options,message", [
    ({"pack": 0}, "--pack must be a positive number of networks, got 0"),
    ({"workers": 0}, "--workers must be positive, got 0"),
    ({"ray": "local", "gpus_per_worker": 0.0}, "--gpus-per-worker must be a positive share of a GPU, got 0"),
    ({"ray": "local", "gpus_per_worker": 1.5},
     "--gpus-per-worker must be a share of one GPU (0 < F <= 1) or a whole number, got 1.5"),
    ({"ray": "local", "gpus_per_worker": float("inf")},
     "--gpus-per-worker must be a share of one GPU (0 < F <= 1) or a whole number, got inf"),
    ({"gpus_per_worker": 0.5}, "--gpus-per-worker places Ray workers: it needs --ray"),
])
def test_bad_options_are_refused_before_any_work_by_the_command_and_the_api(tmp_path, options, message):
    """fit-many's own options, checked in one place for both: one line, exit 2 (UsageError), no Ray
    started and nothing written."""
    import inr_cli
    from inr_cli.errors import UsageError

    folder = make_folder(tmp_path / "images", count=1)
    flags = [item for key, value in options.items() for item in (f"--{key.replace('_', '-')}", value)]
    result = fit(folder, "-o", tmp_path / "out", *flags, *NET)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    with pytest.raises(UsageError) as raised:
        inr_cli.fit_many(folder, tmp_path / "out", **options, device="cpu", quiet=True)
    assert message in str(raised.value)
    assert not (tmp_path / "out").exists()

def test_seed_depends_on_the_run_seed_and_the_name_only():
    assert image_seed(0, "a.png") == image_seed(0, "a.png")
    assert len({image_seed(s, n) for s in (0, 1) for n in ("a.png", "b.png")}) == 4
    assert 0 <= image_seed(7, "x") < 2**63


@pytest.fixture(scope="module")
def ray_available():
    pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")


@pytest.mark.cluster
def test_on_a_local_ray_with_a_worker_killed_mid_shard(ray_available, reference, tmp_path):
    """A real local Ray. The worker fitting img2.png's shard is SIGKILLed (the failpoint, once): Ray
    restarts it, the shard is sent again, and the set is the in-process set, bit for bit."""
    folder, out = reference
    target = tmp_path / "ray"
    process = inr("fit-many", folder, "-o", target, "--pack", "2", "--ray", "local", "--workers", "1", *NET,
                  failpoint="worker-at=img2.png")
    code, stderr = finish(process)
    assert code == 0, stderr
    assert "shard 1 was lost" in stderr and "it is sent again" in stderr
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))


@pytest.mark.cluster
def test_on_a_local_ray_driver_killed_then_rerun(ray_available, reference, tmp_path):
    folder, out = reference
    target = tmp_path / "ray"
    args = ["fit-many", folder, "-o", target, "--pack", "2", "--ray", "local", "--workers", "1", *NET]
    process = inr(*args, failpoint="driver-after=1")
    code, stderr = finish(process)
    assert code == -signal.SIGKILL, stderr
    assert 1 <= shards_on_disk(target) < 3 and not (target / WEIGHTS).exists()
    rerun = inr(*args)
    code, stderr = finish(rerun)
    assert code == 0, stderr
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))


def test_ctrl_c_keeps_the_finished_shards_and_says_how_to_go_on(tmp_path):
    folder = make_folder(tmp_path / "photos", count=6)
    out = tmp_path / "out"
    process = inr("fit-many", folder, "-o", out, "--pack", "1", "--hidden", "12", "--steps", "5000", "--device", "cpu")
    assert wait_for_shards(process, out, 1), process.stderr.read()
    process.send_signal(signal.SIGINT)
    code, stderr = finish(process)
    assert code == 130, stderr
    assert "run the same command again" in stderr and "Traceback" not in stderr
    assert shards_on_disk(out) >= 1
    named = re.findall(rf"{re.escape(str(tmp_path))}\S*[^;.\s]", stderr.split("SIGINT: ", 1)[1])
    assert named and all(Path(path).exists() for path in named), stderr  # it names what it kept


@pytest.mark.parametrize("signal_name,exit_code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_mid_pack_saves_it_and_the_rerun_continues_it_bit_identical(reference, tmp_path, signal_name,
                                                                           exit_code):
    """The process sends itself the signal after step 25 of its first pack (a failpoint: a real
    signal at a step the test chose): the pack's state is saved under the set folder, the message
    names it, and the same command continues it to the uninterrupted set, bit for bit."""
    folder, out = reference
    target = tmp_path / "out"
    args = ["fit-many", folder, "-o", target, "--pack", "2", *NET]
    code, stderr = finish(inr(*args, failpoint=f"signal-at={signal_name}@25"))
    assert code == exit_code, stderr
    saved = target / SHARDS / "00000.pack-0.partial.npz"
    assert (f"{signal_name}: none of the 5 images is fitted yet; the pack in flight is saved at step 25 of 40 in "
            f"{saved}; run the same command again to go on") in stderr, stderr
    assert ckpt.load(saved).step == 25 and shards_on_disk(target) == 0
    result = fit(*args[1:-1])  # without -q: the rerun says what it takes up
    assert result.exit_code == 0, result.output
    assert f"taking up the pack saved in {saved}: 2 networks at step 25 of 40\n" in result.stderr
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))
    assert (target / INDEX).read_bytes() == (out / INDEX).read_bytes()  # the losses and scores too
    assert not list((target / SHARDS).glob("*.partial.npz"))  # removed once their shard is written


def test_a_pack_in_flight_is_saved_at_the_clock_interval(reference, tmp_path):
    """--checkpoint-seconds as in inr train: a pack killed outright (SIGKILL after step 25, no
    chance to save) is continued from its last saved step, bit for bit."""
    folder, out = reference
    target = tmp_path / "out"
    args = ["fit-many", folder, "-o", target, "--pack", "2", "--checkpoint-seconds", "1e-9", *NET]
    code, stderr = finish(inr(*args, failpoint="signal-at=SIGKILL@25"))
    assert code == -signal.SIGKILL, stderr
    assert ckpt.load(target / SHARDS / "00000.pack-0.partial.npz").step == 24  # saved after every step before
    result = fit(*args[1:])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(target / WEIGHTS), np.load(out / WEIGHTS))


def test_progress_moves_with_the_steps_on_a_piped_stderr(tmp_path):
    """Off a terminal (a log, a batch job) a plain line comes at the first reading of the first
    pack, with the step within the pack, long before the pack ends, and one at the end."""
    folder = make_folder(tmp_path / "photos", count=3)
    code, stderr = finish(inr("fit-many", folder, "-o", tmp_path / "out", "--pack", "3", *NET[:-1]))
    assert code == 0, stderr
    lines = stderr.splitlines()
    pattern = r"images 0/3  elapsed \d+:\d\d:\d\d  left \S+  step (\d+)/40  pack PSNR [\d.]+ dB  [\d.e+-]+ images/s"
    during = [(i, int(m.group(1))) for i, line in enumerate(lines) if (m := re.fullmatch(pattern, line))]
    end = [i for i, line in enumerate(lines) if re.fullmatch(r"images 3/3  elapsed .* mean PSNR [\d.]+ dB .*", line)]
    assert during and during[0][1] < 40 and end and during[0][0] < end[0], stderr


def test_progress_at_80_columns_shows_the_pack_in_flight():
    import io

    from rich.console import Console

    from inr_cli.progress import ImageProgress

    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=True, color_system=None)
    with ImageProgress(12, 2, 1000, quiet=False, console=console) as progress:  # 2 fitted by an earlier run
        progress.add(2, [30.0, 32.0])
        progress.pack_started(4, 0)
        progress.reading(400, np.full(4, 1e-3))
        progress.bar.refresh()
        line = buffer.getvalue().split("\x1b[2K")[-1]
    assert re.search(r"images 4/12 +\d+:\d\d:\d\d left \S+ +step 400/1000 +mean PSNR 31.00 dB", line), line
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", buffer.getvalue())
    assert max(len(row) for row in drawn.splitlines()) <= 80
    assert progress.fields()[2] == "step 400/1000" and "pack PSNR 30.00 dB" in progress.fields()


def test_quiet_prints_nothing_but_the_output(tmp_path, capsys):
    """-q and quiet=True: no progress and no note (the omega0 chosen for the size is one)."""
    import inr_cli

    folder = make_folder(tmp_path / "photos", count=2)
    # omega0 from the size (0: the sets preset's is 30), whose choice is a note
    sized = [a for i, a in enumerate(NET[:-1]) if "--omega0" not in NET[max(i - 1, 0):i + 1]] + ["--omega0", "0", "-q"]
    loud = fit(folder, "-o", tmp_path / "loud", *sized[:-1])
    assert loud.exit_code == 0 and "omega0 15 for a 14-px image" in loud.output, loud.output
    quiet = fit(folder, "-o", tmp_path / "quiet", *sized)
    assert quiet.exit_code == 0 and quiet.output == f"{tmp_path / 'quiet'}\n", quiet.output
    capsys.readouterr()
    inr_cli.fit_many(folder, tmp_path / "api", hidden=12, layers=2, lr=3e-3, steps=40, device="cpu", quiet=True)
    assert capsys.readouterr() == ("", "")


def test_class_folders_give_labels_and_the_same_networks(reference, tmp_path):
    """Images in class folders: searched recursively, the first folder level is the label; each
    network is the one `inr train` gives its file (the seed comes from the name, cat/img0.png)."""
    folder, _ = reference
    classes = tmp_path / "classes"
    for label, names in (("cat", ["img0.png", "img1.png"]), ("dog", ["img2.png"])):
        (classes / label / "deeper").mkdir(parents=True)
        for name in names:
            (classes / label / name).write_bytes((folder / name).read_bytes())
    (classes / "dog" / "deeper" / "img3.png").write_bytes((folder / "img3.png").read_bytes())
    (classes / ".hidden").mkdir()
    (classes / ".hidden" / "x.png").write_bytes((folder / "img4.png").read_bytes())
    result = fit(classes, "-o", tmp_path / "out", "--pack", "3", *NET)
    assert result.exit_code == 0, result.output
    networks = load_network_set(tmp_path / "out")
    assert [(r["name"], r["label"]) for r in networks.index] == [
        ("cat/img0.png", "cat"), ("cat/img1.png", "cat"), ("dog/deeper/img3.png", "dog"), ("dog/img2.png", "dog")]
    row = networks.row("dog/deeper/img3.png")
    result = runner.invoke(app, ["train", str(classes / "dog/deeper/img3.png"), "--seed", networks.index[row]["seed"],
                                 "--run-dir", str(tmp_path / "single"), "--preview-every", "0", *NET])
    assert result.exit_code == 0, result.output
    assert np.array_equal(ckpt.load(tmp_path / "single").params, networks.weights[row])


def test_a_list_file_and_a_folder_url_give_the_folder_set(reference, tmp_path):
    """A list of paths (relative to the list) and file:// URLs through fsspec, as users list a data
    set: the same networks as the folder, row for row, and only the listed images."""
    fsspec = pytest.importorskip("fsspec")
    folder, out = reference
    expected = np.load(out / WEIGHTS)
    listing = tmp_path / "images.txt"
    (tmp_path / "some").mkdir()
    for name in ("img1.png", "img3.png"):
        (tmp_path / "some" / name).write_bytes((folder / name).read_bytes())
    listing.write_text("# two images\nsome/img1.png\n\nsome/img3.png\n")
    result = fit(listing, "-o", tmp_path / "listed", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    listed = load_network_set(tmp_path / "listed")
    assert [r["name"] for r in listed.index] == ["some/img1.png", "some/img3.png"]
    # the seed depends on the name: the same network as the folder's when the name is the same
    url = fsspec.core.strip_protocol(str(folder))
    result = fit(f"file://{url}", "-o", tmp_path / "url", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "url" / WEIGHTS), expected)
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"file://{folder / name}\n" for name in ("img0.png", "img4.png")))
    result = fit(urls, "-o", tmp_path / "urls", *NET)
    assert result.exit_code == 0, result.output
    # named below the folder the URLs share, as that folder's images are: the same seeds
    assert [r["name"] for r in load_network_set(tmp_path / "urls").index] == ["img0.png", "img4.png"]
    assert np.array_equal(np.load(tmp_path / "urls" / WEIGHTS), expected[[0, 4]])
    urls.write_text(f"file://{folder}/img0.png\nfile://{folder}/nope.png\n")
    result = fit(urls, "-o", tmp_path / "bad", *NET)
    assert result.exit_code == 1 and "nope.png" in result.output and "Traceback" not in result.output


def test_a_rerun_reads_no_image_and_notices_changed_files(reference, tmp_path):
    """A rerun compares the listing with the plan (names and sizes), decoding nothing; a file that
    changed under the same size is caught by the worker that reads it, before it is fitted."""
    folder, _ = reference
    copy = tmp_path / "images"
    copy.mkdir()
    for path in folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "out"
    args = ["fit-many", copy, "-o", out, "--pack", "1", *NET]
    assert finish(inr(*args, failpoint="driver-after=2"))[0] == -signal.SIGKILL
    (copy / "img0.png").write_bytes(b"")  # finished already: a rerun does not read it
    data = bytearray((copy / "img4.png").read_bytes())
    data[-20] ^= 0xFF  # same size, other bytes: not fitted yet
    (copy / "img4.png").write_bytes(bytes(data))
    result = fit(*args[1:])
    assert result.exit_code == 1 and "img0.png changed since" in result.output
    (copy / "img0.png").write_bytes((folder / "img0.png").read_bytes())
    result = fit(*args[1:])
    assert result.exit_code == 1 and "img4.png: the file changed since this set was planned" in result.output
    (copy / "extra.png").write_bytes((folder / "img0.png").read_bytes())
    result = fit(*args[1:])
    assert result.exit_code == 1 and "extra.png is new" in result.output


def odd_images(folder: Path) -> Path:
    """Images whose header and decoded pixels could disagree: palettes with and without
    transparency, grey, 1-bit, CMYK, 16-bit grey, EXIF turned a quarter (JPEG and PNG)."""
    folder.mkdir(parents=True, exist_ok=True)
    rgb = (np.random.default_rng(0).random((20, 30, 3)) * 255).astype(np.uint8)
    image = Image.fromarray(rgb)
    image.save(folder / "rgb.jpg")
    Image.fromarray(rgb[..., 0]).save(folder / "grey.png")
    image.convert("P").save(folder / "palette.png")
    image.convert("P").save(folder / "palette-alpha.png", transparency=0)
    Image.fromarray(np.dstack([rgb, rgb[..., :1]])).save(folder / "rgba.png")
    image.convert("1").save(folder / "one-bit.png")
    image.convert("LA").save(folder / "grey-alpha.png")
    image.convert("CMYK").save(folder / "cmyk.jpg")
    Image.fromarray((rgb[..., 0].astype(np.uint16) * 257)).save(folder / "grey16.png")
    exif = image.getexif()
    exif[0x0112] = 6  # turned a quarter
    image.save(folder / "turned.jpg", exif=exif)
    image.save(folder / "turned.png", exif=exif)
    (folder / "pixels.csv").write_text("x,y,l\n0,0,0.5\n1,0,0.25\n")
    return folder


@pytest.mark.parametrize("size,gray", [(0, False), (16, False), (16, True), (48, False)])
def test_the_header_probe_says_what_the_decoder_gives(tmp_path, size, gray):
    """The plan reads only each file's header: its size and channels must be the decoded image's."""
    from inr_cli.config import build_config, flags_to_values
    from inr_cli.sets import inputs

    config = build_config(None, flags_to_values({"size": size, "gray": gray, "source": "x"}), None)
    for path in sorted(odd_images(tmp_path / "odd").iterdir()):
        image, digest = inputs.load(str(path), path.name, config)
        wanted = (image.width, image.height, ",".join(image.channels), digest)
        assert inputs.probe([(path.name, str(path))], config) == [wanted], path.name


def test_a_set_planned_when_size_enlarged_is_fitted_as_planned(tmp_path):
    """Before --size stopped enlarging a set's smaller images, a plan recorded them enlarged: such a set
    goes on fitting them at the planned size, to the pixels that `inr train --size` gives."""
    from inr_cli.config import build_config, flags_to_values
    from inr_cli.formats.data import load_training_data
    from inr_cli.sets import inputs
    from inr_cli.sets.packs import load_entry
    from inr_cli.sets.plan import ImageEntry

    path = make_folder(tmp_path / "small", count=1) / "img0.png"
    config = build_config(None, flags_to_values({"size": 21, "source": "x"}), None)
    _, digest = inputs.load(str(path), path.name, config)
    planned = ImageEntry(path.name, 21, 15, ("r", "g", "b"), digest, 0, str(path))
    enlarged = load_training_data(str(path), 21)
    assert np.array_equal(load_entry(planned, config).values, enlarged.values)
    now = ImageEntry(path.name, 14, 10, ("r", "g", "b"), digest, 0, str(path))
    assert load_entry(now, config).values.shape == (10, 14, 3)


def test_an_image_whose_pixels_are_broken_stops_the_run_naming_it(tmp_path):
    """Its header reads (the plan takes it), its pixels do not: the shard fails with one line."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        noise = (np.random.default_rng(i).random((64, 64, 3)) * 255).astype(np.uint8)
        Image.fromarray(noise).save(folder / f"img{i}.jpg")
    data = (folder / "img1.jpg").read_bytes()
    (folder / "img1.jpg").write_bytes(data[:len(data) * 3 // 4])  # the header whole, the pixels cut
    result = fit(folder, "-o", tmp_path / "out", "--pack", "1", *NET)
    assert result.exit_code == 1 and "img1.jpg: broken or truncated" in result.output
    assert "--skip-unreadable" not in result.output and "Traceback" not in result.output
    assert (tmp_path / "out" / shard_name(0)).is_file()  # the shard before it is kept


def test_until_psnr_stops_each_network_as_it_would_alone(tmp_path):
    """A target PSNR: each network leaves its pack at the reading where it reaches the target, the rest go
    on; each is the network `inr train --until-psnr` gives alone, and index.csv says where it stopped."""
    folder = make_folder(tmp_path / "images")
    net = [*NET[:NET.index("--steps")], "--steps", "300", "--device", "cpu", "-q"]
    result = fit(folder, "-o", tmp_path / "out", "--pack", "5", "--until-psnr", "22", *net[:-1])  # not quiet
    assert result.exit_code == 0, result.output
    networks = load_network_set(tmp_path / "out")
    steps = {row["name"]: int(row["steps"]) for row in networks.index}
    assert len(set(steps.values())) > 1 and all(s % 10 == 0 for s in steps.values()), steps
    assert min(steps.values()) < 300
    reached = [row for row in networks.index if int(row["steps"]) < 300]
    assert all(float(row["psnr"]) >= 21.9 for row in reached)
    met = [row for row in networks.index if int(row["steps"]) < 300 or float(row["psnr"]) >= 22]
    said = f"--until-psnr 22: {len(met)} of the {len(networks.index)} images fitted now reached it within 300 steps"
    assert said in result.output, result.output
    # inr info speaks of the set's steps, not of its first row's
    result = runner.invoke(app, ["info", str(tmp_path / "out"), "--json"])
    summary = json.loads(result.stdout)
    assert summary["steps"] == np.median(list(steps.values()))
    assert summary["mean_steps"] == pytest.approx(np.mean(list(steps.values())), abs=0.01)
    assert (summary["min_steps"], summary["max_steps"]) == (min(steps.values()), max(steps.values()))
    text = runner.invoke(app, ["info", str(tmp_path / "out")]).stdout
    assert f"steps median {summary['steps']:g}, mean {summary['mean_steps']:g}" in text and "steps each" not in text
    for name in ("img0.png", "img4.png"):
        row = networks.row(name)
        result = runner.invoke(app, ["train", str(folder / name), "--seed", networks.index[row]["seed"], "--run-dir",
                                     str(tmp_path / name), "--preview-every", "0", "--until-psnr", "22", *net])
        assert result.exit_code == 0, result.output
        alone = ckpt.load(tmp_path / name)
        assert alone.step == steps[name]
        assert np.array_equal(alone.params, networks.weights[row])


def test_log_every_sets_where_until_psnr_is_checked(tmp_path):
    """fit-many reads the loss every --log-every steps: a network stops at the first such reading at
    or above its target."""
    folder = make_folder(tmp_path / "images")
    net = [*NET[:NET.index("--steps")], "--steps", "300", "--device", "cpu", "-q"]
    result = fit(folder, "-o", tmp_path / "out", "--pack", "5", "--until-psnr", "22", "--log-every", "7", *net)
    assert result.exit_code == 0, result.output
    stopped = [int(row["steps"]) for row in load_network_set(tmp_path / "out").index if int(row["steps"]) < 300]
    assert stopped and all(s % 7 == 0 for s in stopped) and any(s % 10 for s in stopped), stopped


def test_images_count_as_their_networks_reach_the_target_or_the_budget():
    """An image is done when its network is, not when its shard is written: a single pack of the whole
    set counts its images as they leave it; a pack taken up counts its finished networks."""
    from inr_cli.progress import ImageProgress

    with ImageProgress(6, 0, 100, quiet=True) as progress:
        progress.pack_started(3, 0)
        progress.step(50)
        progress.networks_finished(1)  # at its target PSNR
        assert progress.fields()[0] == "images 1/6"
        progress.pack_started(2, 50)
        progress.step(100)
        progress.networks_finished(2)  # at the step budget, before the shard is written
        assert progress.fields()[0] == "images 3/6"
        progress.add(3, [30.0] * 3)
        assert progress.fields()[0] == "images 3/6" and progress.work_done == 300
        progress.took_up("shards/00001.pack-0.partial.npz", 2, 40, 1)  # one of three done before
        progress.pack_started(2, 40)
        assert progress.fields()[0] == "images 4/6" and progress.work_done == 300 + 100 + 2 * 40


def test_progress_never_goes_back_when_networks_leave_their_pack():
    """With --until-psnr, networks that reach their target leave the pack: their work counts as done,
    not as lost until the shard is written."""
    from inr_cli.progress import ImageProgress

    with ImageProgress(4, 0, 100, quiet=True) as progress:
        seen = []
        progress.pack_started(4, 0)
        progress.step(50)
        seen.append(progress.work_done)
        progress.networks_finished(3)
        progress.pack_started(1, 50)
        seen.append(progress.work_done)
        progress.step(100)
        seen.append(progress.work_done)
        progress.add(4, [30.0] * 4)
        seen.append(progress.work_done)
    assert seen == [200, 350, 400, 400]
