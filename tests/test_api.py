"""inr from Python: load() gives the very pixels `inr render` writes, fit() and fit_many() the very
networks the commands fit, and the PyTorch and JAX forms compute the same function (checked against a
NumPy forward pass written here from the README's description of the format)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli
from inr_cli.cli import app
from inr_cli.errors import InrError, UsageError
from inr_cli.extras import install_hint
from tests.conftest import add_label_column, make_image
from tests.test_fit_many import make_folder

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
NET = ["--hidden", "16", "--layers", "2", "--steps", "20", "--device", "cpu", "-q"]
KINDS = {"siren": ["--preset", "siren", "--omega0", "30"],
         "fourier": ["--preset", "fourier", "--fourier-features", "6"],
         "sigmoid": ["--preset", "sigmoid", "--fourier-features", "6"],
         "hashgrid": ["--preset", "hashgrid", "--hash-levels", "3", "--hash-log2-size", "6", "--hash-min-res", "2"]}


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module", params=list(KINDS))
def trained(request, tmp_path_factory):
    """A run and a set of three networks of one model kind, fitted by the commands."""
    base = tmp_path_factory.mktemp(request.param)
    image = make_image(base / "held-back.png", "RGB", size=(12, 8), seed=7)
    invoke("train", image, "--run-dir", base / "run", *NET, *KINDS[request.param])
    folder = make_folder(base / "images", count=3, size=(12, 8))
    invoke("fit-many", folder, "-o", base / "set", *NET, *KINDS[request.param])
    return base


def reference_forward(spec, params: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """The format as the README writes it down, in float64: per layer W [out, in] then b [out],
    after the Fourier frequencies B [m, 2] or the hash grid's table [entries, F] when there are any
    (the hash grid's lookup: the NumPy reference's)."""
    params, h = params.astype(np.float64), coords.astype(np.float64)
    at = 0
    if spec.encoding == "hashgrid":
        from inr_cli.backends.numpy_backend import NumpyBackend
        from inr_cli.core.encodings import create_encoding

        grid = create_encoding(spec)
        at = grid.parameter_count
        encoded = np.empty((1, len(h), grid.features))
        NumpyBackend().hashgrid_encode(coords[None], params[None, :at], encoded, grid.level_table)
        h = encoded[0]
    if spec.encoding == "fourier":
        frequencies = params[: spec.fourier_features * 2].reshape(spec.fourier_features, 2)
        at = frequencies.size
        h = np.concatenate([np.cos(2 * np.pi * h @ frequencies.T), np.sin(2 * np.pi * h @ frequencies.T)], -1)
    sizes = [h.shape[1]] + [spec.hidden] * spec.layers + [spec.out_features]
    for i in range(len(sizes) - 1):
        weight = params[at : at + sizes[i + 1] * sizes[i]].reshape(sizes[i + 1], sizes[i])
        at += weight.size
        bias = params[at : at + sizes[i + 1]]
        at += bias.size
        h = h @ weight.T + bias
        last = i == len(sizes) - 2
        if spec.model == "siren":
            h = h if last else np.sin(spec.omega0 * h)
        elif spec.model == "relu" and not last:
            h = np.maximum(h, 0)
        elif not last or not spec.linear_output:
            h = 1 / (1 + np.exp(-h))
    assert at == params.size
    return np.clip(h, 0, 1)


def random_coords(rows: int, seed: int = 0, networks: int | None = None) -> np.ndarray:
    shape = (rows, 2) if networks is None else (networks, rows, 2)
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.numerics
def test_render_is_the_file_inr_render_writes(trained, tmp_path):
    import tifffile

    net = inr_cli.load(trained / "run")
    assert isinstance(net, inr_cli.TrainedNetwork) and net.channels == ("r", "g", "b")
    invoke("render", trained / "run", "--width", "30", "--height", "17", "--device", "cpu", "-o", tmp_path / "r.png")
    assert np.array_equal(net.render(width=30, height=17, device="cpu"), np.asarray(Image.open(tmp_path / "r.png")))
    for depth in (16, 32):
        invoke("render", trained / "run", "--size", "25", "--depth", depth, "--device", "cpu",
               "-o", tmp_path / f"{depth}.tif")
        pixels = net.render(size=25, depth=depth, device="cpu")
        assert pixels.dtype == {16: np.uint16, 32: np.float32}[depth]
        assert np.array_equal(pixels, tifffile.imread(tmp_path / f"{depth}.tif"))
    assert net.render(device="cpu").shape == (8, 12, 3)  # the training size

    networks = inr_cli.load(trained / "set")
    invoke("render", trained / "set", "--image", "img1.png", "--size", "20", "--device", "cpu",
           "-o", tmp_path / "s.png")
    assert np.array_equal(networks["img1.png"].render(size=20, device="cpu"),
                          np.asarray(Image.open(tmp_path / "s.png")))


@pytest.mark.numerics
def test_networks_evaluate_the_format_the_readme_describes(trained):
    net = inr_cli.load(trained / "run")
    coords = random_coords(300)
    colours = net(coords)
    assert colours.shape == (300, 3) and colours.dtype == np.float32
    assert np.abs(colours - reference_forward(net.spec, net.params, coords)).max() < 1e-5
    assert np.array_equal(np.clip(net(coords, clip=False), 0, 1), colours)  # clip=False: the network's own values

    networks = inr_cli.load(trained / "set")
    assert len(networks) == 3 and networks.names == ["img0.png", "img1.png", "img2.png"]
    assert networks.weights.shape == (3, networks.spec.parameter_count())
    shared, own = networks(coords), networks(random_coords(50, 1, networks=3))
    assert shared.shape == (3, 300, 3) and own.shape == (3, 50, 3)
    for i, one in enumerate(networks):
        assert np.array_equal(one.params, networks.weights[i])
        assert np.abs(shared[i] - reference_forward(networks.spec, one.params, coords)).max() < 1e-5
    # the per-layer views are the flat parameters, in the README's order
    weight, bias = net.layers[0]
    assert weight.shape == (16, net.spec.encoded_features) and bias.shape == (16,)
    assert np.shares_memory(weight, net.params)


def test_torch_computes_the_same_function(trained):
    torch = pytest.importorskip("torch")
    net, networks = inr_cli.load(trained / "run"), inr_cli.load(trained / "set")
    coords = random_coords(257)
    module = net.to_torch()
    assert isinstance(module, torch.nn.Module)
    assert np.abs(module(torch.from_numpy(coords)).detach().numpy() - net(coords)).max() < 1e-5
    stack = networks.to_torch()
    own = random_coords(64, 2, networks=3)
    assert np.abs(stack(torch.from_numpy(own)).detach().numpy() - networks(own)).max() < 1e-5
    assert np.abs(stack(torch.from_numpy(coords)).detach().numpy() - networks(coords)).max() < 1e-5
    # its parameters are trainable, and moving it moves them
    assert all(p.requires_grad for p in module.parameters())
    assert module.to(torch.float64).layers[0].weight.dtype == torch.float64


def test_torch_gradients_equal_finite_differences(trained):
    """The modules' autograd gradients of a random projection of the output, against central
    differences at every coordinate and at sampled parameter entries of each tensor (half where the
    gradient is nonzero: a hash table's is mostly zero)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for network in (inr_cli.load(trained / "run"), inr_cli.load(trained / "set")):
        # float64, so that central differences are accurate; unclipped, so that the function is smooth
        module = network.to_torch(clip=False).to(torch.float64)
        single = isinstance(network, inr_cli.TrainedNetwork)
        coords = torch.from_numpy(random_coords(5, 3, networks=None if single else len(network))).double()
        weights = torch.from_numpy(rng.standard_normal(tuple(module(coords).shape)))

        def loss(module=module, coords=coords, weights=weights):
            with torch.no_grad():
                return float((module(coords) * weights).sum())

        coords.requires_grad_(True)
        module.zero_grad()
        (module(coords) * weights).sum().backward()
        coords.requires_grad_(False)
        entries = [(coords, coords.grad.clone(), np.arange(coords.numel()))]
        for parameter in module.parameters():
            grad = parameter.grad.detach().clone().reshape(-1)
            nonzero = np.flatnonzero(grad.numpy())
            picked = np.concatenate([rng.choice(nonzero, min(8, len(nonzero)), replace=False),
                                     rng.choice(grad.numel(), min(8, grad.numel()), replace=False)])
            entries.append((parameter, grad, picked))
        eps = 1e-6
        for tensor, grad, picked in entries:
            flat = tensor.data.reshape(-1)
            for i in picked:
                kept = float(flat[i])
                flat[i] = kept + eps
                up = loss()
                flat[i] = kept - eps
                down = loss()
                flat[i] = kept
                exact = float(grad.reshape(-1)[i])
                assert abs((up - down) / (2 * eps) - exact) <= 1e-6 + 1e-4 * abs(exact), (tensor.shape, i)


def test_jax_computes_the_same_function_jitted_and_vmapped(trained):
    jax = pytest.importorskip("jax")
    net, networks = inr_cli.load(trained / "run"), inr_cli.load(trained / "set")
    coords = random_coords(200)
    params, apply = net.to_jax()
    assert np.abs(np.asarray(jax.jit(apply)(params, coords)) - net(coords)).max() < 1e-5
    stacked, apply_set = networks.to_jax()
    own = random_coords(40, 4, networks=3)
    assert np.abs(np.asarray(jax.jit(apply_set)(stacked, own)) - networks(own)).max() < 1e-5
    assert np.abs(np.asarray(apply_set(stacked, coords)) - networks(coords)).max() < 1e-5
    # the one-network function vmapped over the stacked parameters by hand is the set's
    one_params, apply_one = networks[0].to_jax()
    by_hand = jax.vmap(apply_one, in_axes=(0, None))(stacked, coords)
    assert np.array_equal(np.asarray(by_hand), np.asarray(apply_set(stacked, coords)))
    assert jax.tree_util.tree_structure(one_params) == jax.tree_util.tree_structure(stacked)


def test_modules_take_only_points_of_two_coordinates(trained):
    """A module's or an apply function's coords are [..., 2], as net(coords)'s: any other last axis is
    net(coords)'s one line (a ValueError that is an InrError), eager, traced or jitted; never a hash
    grid reading the first two columns of [rows, 3] without a word, nor an IndexError from inside."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    for network in (inr_cli.load(trained / "run"), inr_cli.load(trained / "set")):
        module, (params, apply) = network.to_torch(), network.to_jax()
        for shape in ((5, 3), (5, 1), (5,)):
            coords = np.zeros(shape, np.float32)
            for call, given in ((module, (torch.from_numpy(coords),)), (apply, (params, coords)),
                                (jax.jit(apply), (params, coords))):
                with pytest.raises(ValueError) as caught:
                    call(*given)
                assert isinstance(caught.value, InrError), str(caught.value)
                assert str(caught.value) == f"coords of shape {list(shape)}: expected [rows, 2] (u, v) in [-1, 1]"
        assert module(torch.zeros((5, 2))).shape[-2:] == (5, len(network.channels))


def test_fit_is_inr_train_bit_for_bit(tmp_path, capfd):
    image = make_image(tmp_path / "photo.png", "RGB", size=(10, 7), seed=3)
    invoke("train", image, "--run-dir", tmp_path / "by-command", "--hidden", "8", "--layers", "2", "--steps", "12",
           "--device", "cpu", "-q", "--set", "optimizer.beta2=0.95", "--omega0", "25")
    capfd.readouterr()
    net = inr_cli.fit(image, run_dir=tmp_path / "by-api", hidden=8, layers=2, steps=12, device="cpu", quiet=True,
                      settings={"optimizer.beta2": 0.95}, omega0=25)
    assert capfd.readouterr() == ("", "")  # quiet: nothing printed at all
    assert np.array_equal(net.params, inr_cli.load(tmp_path / "by-command").params)
    assert (tmp_path / "by-api" / "config.toml").read_text() == (tmp_path / "by-command" / "config.toml").read_text()

    inr_cli.fit(image, run_dir=tmp_path / "shown", hidden=8, layers=2, steps=3, device="cpu")
    shown = capfd.readouterr()
    assert "training siren (2x8)" in shown.err and shown.out == ""  # progress as the command shows it


def test_fit_of_an_array_or_pil_image_is_fit_of_the_file(tmp_path, monkeypatch):
    """An image given as pixels trains the very network its file trains; its run keeps it as
    image.npy (in its own dtype), so that the run resumes from the command line."""
    monkeypatch.chdir(tmp_path)
    args = dict(hidden=8, layers=2, steps=6, device="cpu", quiet=True)
    image = make_image(tmp_path / "photo.png", "RGB", size=(10, 7), seed=5)
    from_file = inr_cli.fit(image, run_dir=tmp_path / "file", **args).params
    pixels = np.asarray(Image.open(image))
    net = inr_cli.fit(pixels, **args)  # runs/array, as `inr train` names a run after its image
    assert np.array_equal(net.params, from_file)
    saved = np.load(tmp_path / "runs" / "array" / "image.npy")
    assert saved.dtype == np.uint8 and np.array_equal(saved, pixels)
    with Image.open(image) as opened:
        assert np.array_equal(inr_cli.fit(opened, run_dir=tmp_path / "pil", **args).params, from_file)
    grey = make_image(tmp_path / "grey.png", "L", size=(9, 6), seed=2)
    assert np.array_equal(inr_cli.fit(np.asarray(Image.open(grey)), run_dir=tmp_path / "grey-array", **args).params,
                          inr_cli.fit(grey, run_dir=tmp_path / "grey-file", **args).params)
    # floats in [0, 1] are kept as they are, not cut to 8 bits
    values = np.random.default_rng(1).random((7, 10, 3))
    inr_cli.fit(values, run_dir=tmp_path / "floats", **args)
    assert np.array_equal(np.load(tmp_path / "floats" / "image.npy"), values)
    before = inr_cli.load(tmp_path / "floats").params
    invoke("train", "--resume", tmp_path / "floats", "--steps", "9", "-q")
    from inr_cli.formats import checkpoint

    assert checkpoint.load(tmp_path / "floats").step == 9
    assert not np.array_equal(inr_cli.load(tmp_path / "floats").params, before)


def test_a_run_of_an_array_resumes_after_it_was_moved(tmp_path):
    """The run keeps its image (image.npy) and records where it was; moved elsewhere and the old
    place gone, it resumes from the image it holds, to the network the run left in place trains."""
    values = np.random.default_rng(3).random((7, 10, 3))
    inr_cli.fit(values, run_dir=tmp_path / "kept", hidden=8, layers=2, steps=6, device="cpu", quiet=True)
    shutil.copytree(tmp_path / "kept", tmp_path / "moved")
    invoke("train", "--resume", tmp_path / "kept", "--steps", "9", "-q")
    (tmp_path / "kept" / "image.npy").unlink()
    invoke("train", "--resume", tmp_path / "moved", "--steps", "9", "-q")
    assert np.array_equal(inr_cli.load(tmp_path / "moved").params, inr_cli.load(tmp_path / "kept").params)
    (tmp_path / "moved" / "image.npy").unlink()  # gone from both places: said, not guessed
    result = runner.invoke(app, ["train", "--resume", str(tmp_path / "moved"), "--steps", "12", "-q"])
    assert result.exit_code == 1 and "image.npy" in result.output and "Traceback" not in result.output


def pil_file(path: Path, kind: str) -> Path:
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (7, 10, 3), dtype=np.uint8)
    if kind == "exif":  # stored on its side, turned upright by its EXIF orientation when read
        exif = Image.Exif()
        exif[0x0112] = 6
        Image.fromarray(rgb).save(path, exif=exif, quality=95)
    elif kind == "P":
        Image.fromarray(rgb).convert("P").save(path)
    elif kind == "LA":
        Image.fromarray(rgb[..., :2], "LA").save(path)
    else:  # I;16
        Image.fromarray(rng.integers(0, 65536, (7, 10), dtype=np.uint16)).save(path)
    return path


@pytest.mark.parametrize("kind", ["P", "LA", "I;16", "exif"])
def test_fit_of_a_pil_image_in_any_mode_is_fit_of_its_file(tmp_path, kind):
    path = pil_file(tmp_path / ("image.jpg" if kind == "exif" else "image.png"), kind)
    args = dict(hidden=8, layers=1, steps=4, device="cpu", quiet=True)
    with Image.open(path) as opened:
        net = inr_cli.fit(opened, run_dir=tmp_path / "pil", **args)
    assert np.array_equal(net.params, inr_cli.fit(path, run_dir=tmp_path / "file", **args).params)
    if kind == "exif":
        assert (net.width, net.height) == (7, 10)


def test_a_run_that_cannot_start_leaves_no_array_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pixels = np.zeros((5, 6, 3), np.uint8)
    with pytest.raises(UsageError, match="no-such-preset"):
        inr_cli.fit(pixels, preset="no-such-preset", quiet=True)
    assert not (tmp_path / "runs" / "array").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no-such-preset"):
        inr_cli.fit(pixels, preset="no-such-preset", run_dir=tmp_path / "empty", quiet=True)
    assert list((tmp_path / "empty").iterdir()) == []


def test_pixels_from_an_array_against_their_definition():
    from inr_cli.formats.images import pixels_from_array

    rng = np.random.default_rng(0)
    bytes_ = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
    image = pixels_from_array(bytes_, "x")
    assert image.channels == ("r", "g", "b") and image.bit_depth == 8
    assert np.allclose(image.values, bytes_ / 255.0, atol=1e-7)
    words = rng.integers(0, 65536, (3, 4), dtype=np.uint16)
    image = pixels_from_array(words, "x")
    assert image.channels == ("l",) and image.bit_depth == 16 and image.values.shape == (3, 4, 1)
    assert np.allclose(image.values[..., 0], words / 65535.0, atol=1e-7)
    assert np.array_equal(pixels_from_array(words.astype(">u2"), "x").values, image.values)  # either byte order
    grey_alpha = rng.random((3, 4, 2)).astype(np.float32)
    image = pixels_from_array(grey_alpha, "x")  # as a grey+alpha file is read: RGBA
    assert image.channels == ("r", "g", "b", "a")
    assert np.array_equal(image.values, grey_alpha[..., [0, 0, 0, 1]])


@pytest.mark.parametrize("array, message", [
    (np.zeros((4, 5, 6), np.uint8), r"arrays\.npy: an image array is \(height, width\) or \(height, width, channels\) "
                                    r"with 1 to 4 channels, got shape \(4, 5, 6\)"),
    (np.full((4, 5), 1.5), r"arrays\.npy: float pixel values must be in \[0, 1\], these run from 1\.5 to 1\.5"),
    (np.full((4, 5), np.nan), r"arrays\.npy: the image array holds NaN or infinite values"),
    (np.zeros((4, 5), np.int64), r"arrays\.npy: pixels of type int64 are not read; give uint8"),
    (np.zeros((0, 5), np.uint8), r"arrays\.npy: the image array is empty"),
])
def test_a_bad_array_is_one_line_naming_it(tmp_path, monkeypatch, array, message):
    """The same line from a .npy file on the command line, and from the API, where nothing is left
    behind."""
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "arrays.npy", array)
    assert re.fullmatch(re.escape(f"{tmp_path}/") + message + ".*",
                        cli_error("train", "arrays.npy", "--steps", "2", "-q"))
    with pytest.raises(InrError, match=message.replace("arrays\\.npy", "image")):
        inr_cli.fit(array, steps=2, quiet=True)
    assert not (tmp_path / "runs").exists()


def test_an_array_file_that_is_not_one_image(tmp_path):
    np.savez(tmp_path / "two.npz", a=np.zeros((3, 3)), b=np.ones((3, 3)))
    (tmp_path / "two.npz").rename(tmp_path / "two.npy")
    assert cli_error("train", tmp_path / "two.npy", "-q") == (f"{tmp_path / 'two.npy'}: an archive of arrays (.npz); "
                                                             f"save one image with numpy.save")
    (tmp_path / "cut.npy").write_bytes(b"\x93NUMPY\x01\x00")
    assert cli_error("train", tmp_path / "cut.npy", "-q").startswith(f"{tmp_path / 'cut.npy'}: not a NumPy array "
                                                                     f"file (")
    image = make_image(tmp_path / "photo.png", "RGB", size=(6, 5))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="used is not empty .*an image given as an array starts its run in a new"):
        inr_cli.fit(np.asarray(Image.open(image)), run_dir=tmp_path / "used", steps=2, quiet=True)
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["notes.txt"]


def test_fit_many_fits_a_folder_of_arrays_as_their_images(tmp_path):
    from inr_cli.config import build_config, flags_to_values
    from inr_cli.formats.data import load_training_data
    from inr_cli.sets import inputs

    folder = make_folder(tmp_path / "images", count=2, size=(9, 6))
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    for path in sorted(folder.iterdir()):
        np.save(arrays / f"{path.stem}.npy", np.asarray(Image.open(path)))
    config = build_config(None, flags_to_values({"source": "x", "size": 8}), None)
    for path in sorted(folder.iterdir()):  # what the workers learn and decode: the image's own pixels
        data = (arrays / f"{path.stem}.npy").read_bytes()
        assert inputs.describe(f"{path.stem}.npy", data, config) == inputs.describe(path.name, path.read_bytes(),
                                                                                    config)
        assert np.array_equal(inputs.decode(f"{path.stem}.npy", data, config).values,
                              load_training_data(str(path), 8).values)
    networks = inr_cli.fit_many(arrays, tmp_path / "set", hidden=8, layers=2, steps=5, device="cpu", quiet=True)
    assert networks.names == ["img0.npy", "img1.npy"]
    assert [(row["width"], row["height"]) for row in networks.index] == [(9, 6), (9, 6)]
    assert np.isfinite(networks.weights).all()


def test_fit_many_is_inr_fit_many_bit_for_bit(tmp_path):
    folder = make_folder(tmp_path / "images", count=3, size=(9, 6))
    args = ["--hidden", "8", "--layers", "2", "--steps", "10", "--device", "cpu", "-q"]
    invoke("fit-many", folder, "-o", tmp_path / "by-command", "--pack", "2", *args)
    networks = inr_cli.fit_many(folder, tmp_path / "by-api", pack=2, hidden=8, layers=2, steps=10, device="cpu",
                                quiet=True)
    assert isinstance(networks, inr_cli.TrainedSet) and networks.names == ["img0.png", "img1.png", "img2.png"]
    assert np.array_equal(np.load(tmp_path / "by-command" / "weights.npy"), networks.weights)
    by_command = (tmp_path / "by-command" / "index.csv").read_text()
    assert (tmp_path / "by-api" / "index.csv").read_text() == by_command
    # index: every column of index.csv, numbers as numbers, whatever columns there are
    assert networks.index[1]["name"] == "img1.png" and networks.index[1]["width"] == 9
    assert isinstance(networks.index[1]["psnr"], float)
    add_label_column(tmp_path / "by-api", ["cat", "7", "cat"])
    assert [row["label"] for row in inr_cli.load(tmp_path / "by-api").index] == ["cat", "7", "cat"]


def cli_error(*args) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code != 0
    return result.output.strip().removeprefix("error: ")


def test_errors_carry_the_commands_messages(tmp_path):
    image = make_image(tmp_path / "photo.png", "RGB", size=(10, 7))
    with pytest.raises(InrError) as raised:
        inr_cli.fit(tmp_path / "missing.png", steps=5, quiet=True)
    assert str(raised.value) == cli_error("train", tmp_path / "missing.png", "--steps", "5", "-q")
    with pytest.raises(UsageError) as raised:
        inr_cli.fit(image, steps=-3, quiet=True, run_dir=tmp_path / "r")
    assert str(raised.value) == cli_error("train", image, "--steps", "-3", "-q", "--run-dir", tmp_path / "r")
    with pytest.raises(UsageError) as raised:
        inr_cli.fit(image, settings={"optimizer.lr": 1e-3, "optimizer.lr_min": 1e-2}, quiet=True)
    assert str(raised.value) == cli_error("train", image, "--set", "optimizer.lr=1e-3", "--set",
                                          "optimizer.lr_min=1e-2", "-q")
    with pytest.raises(InrError) as raised:
        inr_cli.load(tmp_path)
    assert str(raised.value) == cli_error("render", tmp_path)
    # what only Python can get wrong: a misspelt keyword, a value of the wrong type, bad coordinates
    with pytest.raises(UsageError, match="stpes= is not a setting of train; did you mean steps="):
        inr_cli.fit(image, stpes=5)
    with pytest.raises(UsageError, match="hidden= must be an integer, got '8'"):
        inr_cli.fit(image, hidden="8")
    with pytest.raises(UsageError, match="checkpoint_every is not a setting of fit-many"):
        inr_cli.fit_many(tmp_path, tmp_path / "out", settings={"training.checkpoint_every": 5})
    assert not (tmp_path / "out").exists()
    net = inr_cli.fit(image, steps=2, hidden=8, layers=1, device="cpu", quiet=True, run_dir=tmp_path / "tiny")
    with pytest.raises(UsageError, match=r"coords of shape \[5, 3\]: expected \[rows, 2\]"):
        net(np.zeros((5, 3)))
    with pytest.raises(UsageError, match=r"depth \(bits per channel\) is one of 8, 16, 32"):
        net.render(depth=12)


def test_missing_framework_is_one_line_naming_the_extra(trained, monkeypatch):
    from inr_cli import frameworks

    net = inr_cli.load(trained / "run")
    frameworks._torch_module_class.cache_clear()
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` meets where it is not installed
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(InrError, match="^" + re.escape(f"to_torch() needs torch, which is not installed: "
                                                       f"{install_hint('torch')}") + "$"):
        net.to_torch()
    with pytest.raises(InrError, match="^" + re.escape(f"to_jax() needs jax, which is not installed: "
                                                       f"{install_hint('jax')}") + "$"):
        net.to_jax()
    with pytest.raises(InrError, match=r"^to_torch_dataset\(\) needs torch, which is not installed: "):
        inr_cli.load(trained / "set").to_torch_dataset()
    frameworks._torch_module_class.cache_clear()


def test_import_inr_cli_stays_light():
    """`import inr_cli` loads none of the heavy modules; the API loads NumPy, but neither framework nor
    the command line's modules."""
    heavy = ["numpy", "torch", "jax", "rich", "typer"]
    code = ("import sys, json, inr_cli; first = [m for m in {heavy} if m in sys.modules]; "
            "inr_cli.load; inr_cli.fit; second = [m for m in {heavy} if m in sys.modules]; "
            "print(json.dumps([first, second]))").format(heavy=heavy)
    output = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    first, second = json.loads(output)
    assert first == []
    assert "numpy" in second and not {"torch", "jax", "rich", "typer"} & set(second)


def test_export_of_a_whole_set_stacks_each_layer(trained, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open

    from inr_cli.core.network import frequency_view, layer_views
    from inr_cli.formats.export import encoding_tensor

    networks = inr_cli.load(trained / "set")
    invoke("export", trained / "set", "-o", tmp_path / "set.safetensors")
    tensors = safetensors_numpy.load_file(str(tmp_path / "set.safetensors"))
    weights = np.asarray(networks.weights)
    for i, (weight, bias) in enumerate(layer_views(networks.spec, weights)):
        assert np.array_equal(tensors[f"layers.{i}.weight"], weight) and tensors[f"layers.{i}.weight"].shape[0] == 3
        assert np.array_equal(tensors[f"layers.{i}.bias"], bias)
    encoding = frequency_view(networks.spec, weights)
    name = encoding_tensor(networks.spec)
    assert {key for key in tensors if key.startswith("encoding.")} == ({name} if encoding is not None else set())
    if encoding is not None:
        assert np.array_equal(tensors[name].reshape(encoding.shape), encoding) and tensors[name].shape[0] == 3
    with safe_open(str(tmp_path / "set.safetensors"), framework="numpy") as handle:
        metadata = handle.metadata()
    assert json.loads(metadata["names"]) == networks.names
    assert json.loads(metadata["spec"])["hidden"] == 16
    # the file's names are the PyTorch module's: it loads straight into it
    pytest.importorskip("torch")
    from safetensors.torch import load_file

    module = networks.to_torch()
    module.load_state_dict(load_file(str(tmp_path / "set.safetensors")))
    assert sorted(module.state_dict()) == sorted(tensors)

    result = runner.invoke(app, ["export", str(trained / "set"), "-o", str(tmp_path / "set.onnx")])
    assert result.exit_code == 2 and "exported whole as .safetensors" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "set.onnx").exists()
