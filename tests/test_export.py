"""inr export: the files load with the libraries users would use, and onnxruntime draws the very
pixels inr render draws."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.cli import app
from inr_cli.core.coords import pixel_grid
from inr_cli.core.network import layer_views
from inr_cli.formats import checkpoint as ckpt

runner = CliRunner()


@pytest.fixture(scope="module", params=["siren", "fourier", "sigmoid", "hashgrid"])
def run_dir(request, tmp_path_factory):
    from tests.conftest import make_image

    base = tmp_path_factory.mktemp(request.param)
    image = make_image(base / "img.png", "RGB", size=(12, 8))
    flags = {"siren": ["--preset", "siren", "--omega0", "30"],
             "fourier": ["--preset", "fourier", "--fourier-features", "6"],
             "sigmoid": ["--preset", "sigmoid"],
             "hashgrid": ["--preset", "hashgrid", "--hash-levels", "3", "--hash-log2-size", "6",
                          "--hash-min-res", "2"]}[request.param]
    result = runner.invoke(app, ["train", str(image), "--steps", "20", "--hidden", "16", "--layers", "2", "-q",
                                 "--device", "cpu", "--run-dir", str(base / "run"), *flags])
    assert result.exit_code == 0, result.output
    return base / "run"


@pytest.mark.numerics
def test_onnx_draws_the_pixels_inr_render_draws(run_dir, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    result = runner.invoke(app, ["export", str(run_dir), "-o", str(tmp_path / "model.onnx")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["render", str(run_dir), "--width", "40", "--height", "30", "--device", "cpu",
                                 "-o", str(tmp_path / "render.png"), "-q"])
    assert result.exit_code == 0, result.output
    rendered = np.asarray(Image.open(tmp_path / "render.png")).astype(int)
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    colours = session.run(None, {"coords": pixel_grid(40, 30)})[0]
    drawn = np.round(colours.reshape(30, 40, 3) * 255).astype(int)
    assert np.abs(drawn - rendered).max() <= 1  # float rounding of sin/exp between runtimes: at most one level
    assert (drawn == rendered).mean() > 0.99


def test_safetensors_hold_the_weights_by_layer(run_dir, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open

    result = runner.invoke(app, ["export", str(run_dir), "-o", str(tmp_path / "model.safetensors")])
    assert result.exit_code == 0, result.output
    tensors = safetensors_numpy.load_file(str(tmp_path / "model.safetensors"))
    saved = ckpt.load(run_dir)
    for i, (weight, bias) in enumerate(layer_views(saved.spec, saved.state.params)):
        assert np.array_equal(tensors[f"layers.{i}.weight"], weight[0])
        assert np.array_equal(tensors[f"layers.{i}.bias"], bias[0])
    assert ("encoding.frequencies" in tensors) == (saved.spec.encoding == "fourier")
    assert ("encoding.table" in tensors) == (saved.spec.encoding == "hashgrid")
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as handle:
        metadata = handle.metadata()
        assert '"model"' in metadata["spec"]
    if saved.spec.encoding == "hashgrid":  # the table as the README lays it out: entries of F, levels in turn
        grid = json.loads(metadata["hash_grid"])
        entries = sum(size for _, _, size, _ in grid["levels"])
        assert tensors["encoding.table"].shape == (entries, grid["features"]) and grid["prime"] == 2654435761
        assert np.array_equal(tensors["encoding.table"].ravel(), saved.state.params[0, : entries * grid["features"]])
    # inr info, render and export read the file as they read its run
    described = [json.loads(runner.invoke(app, ["info", str(where), "--json"]).stdout)
                 for where in (run_dir, tmp_path / "model.safetensors")]
    facts = ("model", "hidden", "layers", "encoding", "params", "width", "height", "channels", "model_bytes")
    assert {key: described[1][key] for key in facts} == {key: described[0][key] for key in facts}
    assert described[1]["exported"] and "step" not in described[1]
    for source, name in ((run_dir, "run.png"), (tmp_path / "model.safetensors", "export.png")):
        result = runner.invoke(app, ["render", str(source), "--size", "30", "--device", "cpu", "-q",
                                     "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "run.png")), np.asarray(Image.open(tmp_path / "export.png")))
    result = runner.invoke(app, ["render", str(tmp_path / "model.safetensors"), "--image", "img.png"])
    assert result.exit_code == 2 and "holds one network" in result.stderr, result.output


def test_an_export_written_twice_is_the_same_bytes(run_dir, tmp_path):
    """safetensors writes its metadata in a new order each time; a file inr writes is the same bytes
    for the same network (a set records its start's sha256), and reads back the same."""
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    written = []
    for name in ("once.safetensors", "twice.safetensors", "thrice.safetensors"):
        result = runner.invoke(app, ["export", str(run_dir), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        written.append((tmp_path / name).read_bytes())
    assert written[0] == written[1] == written[2]
    with safe_open(str(tmp_path / "once.safetensors"), framework="numpy") as handle:
        metadata = handle.metadata()
    assert list(metadata) and json.loads(metadata["spec"])["model"] == ckpt.load(run_dir).spec.model


def exported_set(tmp_path, count: int):
    """A set of `count` small networks fitted into tmp_path/set, and its .safetensors export beside it."""
    from tests.conftest import make_image

    images = tmp_path / "images"
    images.mkdir()
    for i in range(count):
        make_image(images / f"img{i}.png", "RGB", size=(8, 6), seed=i)
    result = runner.invoke(app, ["fit-many", str(images), "-o", str(tmp_path / "set"), "--steps", "5", "--hidden",
                                 "8", "--layers", "2", "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    exported = tmp_path / "set.safetensors"
    assert runner.invoke(app, ["export", str(tmp_path / "set"), "-o", str(exported)]).exit_code == 0
    return exported


def assert_member_drawn_as_from_the_folder(tmp_path, exported, image: str) -> None:
    """render --image draws the same pixels from the set's export as from its folder (tmp_path/set)."""
    for source, name in ((tmp_path / "set", "folder.png"), (exported, "export.png")):
        result = runner.invoke(app, ["render", str(source), "--image", image, "--size", "16", "--device", "cpu",
                                     "-q", "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "folder.png")),
                          np.asarray(Image.open(tmp_path / "export.png")))


def test_a_set_export_is_read_as_its_folder(tmp_path):
    """A set's .safetensors: inr info describes the set, inr render draws one image's network (--image)
    as from the folder, and inr export writes that network out again."""
    pytest.importorskip("safetensors")
    exported = exported_set(tmp_path, 3)
    described = [json.loads(runner.invoke(app, ["info", str(where), "--json"]).stdout)
                 for where in (tmp_path / "set", exported)]
    assert described[1]["count"] == 3 and described[1] == described[0]
    assert_member_drawn_as_from_the_folder(tmp_path, exported, "img1.png")
    result = runner.invoke(app, ["render", str(exported), "--size", "16"])
    assert result.exit_code == 2 and "name one with --image NAME" in result.stderr, result.output
    one = tmp_path / "one.safetensors"
    assert runner.invoke(app, ["export", str(exported), "--image", "img2.png", "-o", str(one)]).exit_code == 0
    assert json.loads(runner.invoke(app, ["info", str(one), "--json"]).stdout)["width"] == 8


def test_one_image_of_a_set_export_is_drawn_from_its_own_network_alone(tmp_path):
    """render --image reads the named image's network from a set's .safetensors and no other: with
    another image's weights made NaN in the file, reading the whole set refuses it, while the named
    image still draws exactly as from the set's folder."""
    pytest.importorskip("safetensors")
    import struct

    exported = exported_set(tmp_path, 3)
    data = bytearray(exported.read_bytes())
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_size])
    start, end = header["layers.0.weight"]["data_offsets"]
    row_bytes = (end - start) // 3  # img2's network is the third row of every tensor
    data[8 + header_size + start + 2 * row_bytes: 8 + header_size + start + 2 * row_bytes + 4] = struct.pack(
        "<f", float("nan"))
    exported.write_bytes(bytes(data))
    result = runner.invoke(app, ["info", str(exported)])
    assert result.exit_code == 1 and "network 2's weights hold NaN" in result.stderr, result.output
    assert_member_drawn_as_from_the_folder(tmp_path, exported, "img1.png")
    result = runner.invoke(app, ["render", str(exported), "--image", "img2.png", "-o", str(tmp_path / "2.png")])
    assert result.exit_code == 1 and "network 2's weights hold NaN" in result.stderr, result.output
    result = runner.invoke(app, ["render", str(exported), "--image", "img9.png", "-o", str(tmp_path / "9.png")])
    assert result.exit_code != 0 and "no image named 'img9.png' in this set" in result.stderr, result.output

def test_one_image_of_an_older_set_export_that_holds_names_alone_is_drawn(tmp_path):
    """An export of an older inr holds the images' names without their index: render --image draws
    the named image's network at the size asked (its own unknown), as the library reads it, not a
    KeyError from the missing width; inr info says what it holds and that its PSNR is not known."""
    pytest.importorskip("safetensors")
    from safetensors import safe_open
    from safetensors.numpy import save_file

    exported = exported_set(tmp_path, 2)
    with safe_open(str(exported), framework="numpy") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        metadata = {key: value for key, value in handle.metadata().items() if key != "index"}
    older = tmp_path / "older.safetensors"
    save_file(tensors, str(older), metadata=metadata)
    result = runner.invoke(app, ["render", str(older), "--image", "img1.png", "--size", "16", "--device", "cpu",
                                 "-q", "-o", str(tmp_path / "older.png")])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert Image.open(tmp_path / "older.png").size == (16, 16)
    said = runner.invoke(app, ["info", str(older)])  # was a KeyError: 'psnr'
    assert said.exit_code == 0 and said.exception is None, said.output
    assert "set       2 networks (siren, 2 hidden x 8)\nPSNR      not recorded" in said.stdout, said.stdout
    described = json.loads(runner.invoke(app, ["info", str(older), "--json"]).stdout)
    assert described["count"] == 2 and described["mean_psnr"] is None and described["steps"] is None

def test_export_refuses_unknown_formats_before_work(tmp_path):
    # a run inr train started (its config.toml), so that the format is what is refused: a missing RUN, or a
    # folder that holds neither a run nor a set, is said first
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text("")
    result = runner.invoke(app, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "model.pt")])
    assert result.exit_code == 2 and "unknown export format '.pt'" in result.output


def test_render_checks_the_image_extension_before_rendering(run_dir, tmp_path, monkeypatch):
    import inr_cli.commands.render as render_command

    def never(*args, **kwargs):
        raise AssertionError("rendered before checking the output name")

    monkeypatch.setattr(render_command, "render_at_depth", never)
    result = runner.invoke(app, ["render", str(run_dir), "--size", "9999", "-o", str(tmp_path / "big.xyz")])
    assert result.exit_code == 2 and "unknown image extension '.xyz'" in result.output


def test_onnx_carries_no_unused_initializer(run_dir, tmp_path, capfd):
    """A network without sines has no omega0: onnxruntime warned 'Removing initializer omega0' at
    every load of a sigmoid or relu export."""
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    result = runner.invoke(app, ["export", str(run_dir), "-o", str(tmp_path / "model.onnx")])
    assert result.exit_code == 0, result.output
    model = onnx.load(str(tmp_path / "model.onnx"))
    used = {name for node in model.graph.node for name in node.input}
    unused = [init.name for init in model.graph.initializer if init.name not in used]
    assert unused == [], unused
    assert ("omega0" in used) == (ckpt.load(run_dir).spec.model == "siren")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 1  # warnings and worse
    capfd.readouterr()
    onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"])
    assert "omega0" not in capfd.readouterr().err


@pytest.mark.parametrize("model,encoding,refusal", [
    ("siren", "hashgrid", "a siren set with the hashgrid encoding has no counterpart"),
    ("siren", "fourier", "a siren set with the fourier encoding has no counterpart"),
    ("relu", "hashgrid", "a relu set with the hashgrid encoding has no counterpart"),
    ("sigmoid", "none", "a sigmoid set has no counterpart"),
])
def test_the_arena_layout_names_what_it_cannot_hold(model, encoding, refusal):
    """fit-a-nef's layout is a SIREN on the coordinates: any other set is refused naming its model
    and its encoding as they are (a hash grid is not said to be Fourier features)."""
    from inr_cli.core.network import NetworkSpec, init_networks
    from inr_cli.errors import InrError
    from inr_cli.formats.export import arena_layout

    grid = dict(hash_levels=2, hash_features=2, hash_log2_size=6, hash_min_resolution=2,
                hash_max_resolution=8) if encoding == "hashgrid" else {}
    spec = NetworkSpec(model=model, out_features=3, hidden=4, layers=1, omega0=30.0, encoding=encoding,
                       fourier_features=3 if encoding == "fourier" else 0,
                       fourier_sigma=1.0 if encoding == "fourier" else 0.0, **grid)
    with pytest.raises(InrError, match=refusal):
        arena_layout(spec, init_networks(spec, [0, 1]))
    siren = NetworkSpec(model="siren", out_features=3, hidden=4, layers=1, omega0=30.0, encoding="none",
                        fourier_features=0, fourier_sigma=0.0)
    config, params = arena_layout(siren, init_networks(siren, [0, 1]))
    assert params.shape == (2, siren.parameter_count()) and config[0][0] == "kernel_net_0.linear.bias"


def test_a_float16_network_round_trips_through_its_checkpoint_and_exports(tmp_path):
    """--dtype float16: the finished run's checkpoint and its exports hold the parameters in float16
    (no Adam moments), inr_cli.load, safetensors and onnxruntime read them back to one network drawn
    in float32, inr info counts its bytes, and the run trains further from it."""
    onnx, onnxruntime = pytest.importorskip("onnx"), pytest.importorskip("onnxruntime")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    import inr_cli
    from tests.conftest import make_image

    image = make_image(tmp_path / "img.png", "RGB", size=(24, 16))
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", str(image), "--steps", "8", "--preset", "hashgrid", "--hash-levels", "3",
                                 "--hash-min-res", "2", "--hidden", "16", "--max-bytes", "4k", "--dtype", "float16",
                                 "--preview-every", "0", "-q", "--device", "cpu", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    with np.load(run / ckpt.FILENAME) as stored:
        assert stored["params"].dtype == np.float16 and "moment1" not in stored and "moment2" not in stored
        params16 = stored["params"]
    saved = ckpt.load(run)
    assert saved.params.dtype == np.float32 and np.array_equal(saved.params, params16[0].astype(np.float32))
    counted = json.loads(runner.invoke(app, ["info", str(run), "--json"]).stdout)
    assert counted["dtype"] == "float16" and counted["model_bytes"] == 2 * saved.spec.parameter_count() <= 4000
    assert counted["bits_per_pixel"] == pytest.approx(counted["model_bytes"] * 8 / (24 * 16), abs=1e-3)

    net = inr_cli.load(run)
    for name in ("model.safetensors", "model.onnx"):
        assert runner.invoke(app, ["export", str(run), "-o", str(tmp_path / name)]).exit_code == 0
    tensors = safetensors_numpy.load_file(str(tmp_path / "model.safetensors"))
    assert {tensor.dtype for tensor in tensors.values()} == {np.dtype(np.float16)}
    assert np.array_equal(inr_cli.load(tmp_path / "model.safetensors").render(size=48), net.render(size=48))
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert {i.data_type for i in model.graph.initializer if i.name.endswith(".stored")} == {onnx.TensorProto.FLOAT16}
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    coords = pixel_grid(24, 16)
    np.testing.assert_allclose(session.run(None, {"coords": coords})[0], net(coords), atol=1e-6)

    result = runner.invoke(app, ["train", str(run), "--resume", "--steps", "12", "-q"])
    assert result.exit_code == 0, result.output
    assert ckpt.load(run).step == 12
