"""A set's weights as data to learn from: integer labels, a seeded stratified split, batches shuffled
per epoch for NumPy/JAX and a PyTorch Dataset, standardisation from the training split, and the
export that keeps every index.csv column and loads back as the set."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import inr_cli
from inr_cli.cli import app
from inr_cli.weights_data import label_codes

runner = CliRunner()
NET = ["--init", "random", "--hidden", "6", "--layers", "2", "--omega0", "30", "--steps", "3", "--device", "cpu", "-q"]
CLASSES = {"circle": 6, "square": 4, "10": 3, "2": 3}


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    base = tmp_path_factory.mktemp("labelled")
    rng = np.random.default_rng(0)
    for label, count in CLASSES.items():
        (base / "images" / label).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)).save(base / "images" / label / f"{i}.png")
    result = runner.invoke(app, ["fit-many", str(base / "images"), "-o", str(base / "set"), *NET])
    assert result.exit_code == 0, result.output
    return base / "set"


def test_labels_are_integers_with_their_names(labelled):
    nets = inr_cli.load(labelled)
    assert nets.label_names == ["2", "10", "circle", "square"]  # whole numbers in their order, then text
    assert [nets.label_names[c] for c in nets.labels] == [row["label"] for row in nets.index]
    assert label_codes(["b", "a", "b"])[0].tolist() == [1, 0, 1]


def test_a_split_is_stratified_seeded_and_disjoint(labelled):
    nets = inr_cli.load(labelled)
    train, test = nets.split(test=0.25, seed=3)
    assert sorted(np.concatenate([train.rows, test.rows]).tolist()) == list(range(len(nets)))
    assert not set(train.rows) & set(test.rows)
    # each class keeps its share on both sides (rounded, one at least)
    counts = np.bincount(test.labels, minlength=4).tolist()
    assert counts == [1, 1, 2, 1]  # 2: 3 images, 10: 3, circle: 6, square: 4
    again = nets.split(test=0.25, seed=3)
    assert np.array_equal(again[1].rows, test.rows)
    assert not all(np.array_equal(nets.split(test=0.25, seed=s)[1].rows, test.rows) for s in range(4, 8))


def test_batches_cover_the_view_once_per_epoch_in_a_new_order(labelled):
    nets = inr_cli.load(labelled)
    train, _ = nets.split(test=0.25, seed=0)
    epochs = []
    for epoch in range(2):
        seen = [(x, y) for x, y in train.batches(4, seed=1, epoch=epoch)]
        weights = np.concatenate([x for x, _ in seen])
        labels = np.concatenate([y for _, y in seen])
        assert weights.flags.writeable and weights.dtype == np.float32
        # each batch is the rows' own weights and labels, whatever the order
        match = {tuple(nets.weights[r]): nets.labels[r] for r in train.rows}
        assert len(weights) == len(train) and all(match[tuple(w)] == y for w, y in zip(weights, labels))
        epochs.append(weights)
    assert not np.array_equal(epochs[0], epochs[1])
    assert np.array_equal(np.concatenate([x for x, _ in train.batches(4, seed=1, epoch=1)]), epochs[1])
    ordered = np.concatenate([x for x, _ in train.batches(5, shuffle=False)])
    assert np.array_equal(ordered, np.asarray(nets.weights)[train.rows])


def test_standardisation_comes_from_the_training_split(labelled):
    nets = inr_cli.load(labelled)
    train, test = nets.split(seed=0)
    mean, std = train.statistics()
    raw = np.asarray(nets.weights, dtype=np.float64)[train.rows]
    np.testing.assert_allclose(mean, raw.mean(0), rtol=1e-6, atol=1e-7)
    scaled = train.standardized(mean, std).weights
    varied = raw.std(0) > 1e-3
    assert varied.sum() > 10
    np.testing.assert_allclose(scaled.mean(0)[varied], 0, atol=1e-3)
    np.testing.assert_allclose(scaled.std(0)[varied], 1, rtol=1e-3)
    test_scaled = test.standardized(mean, std).weights
    np.testing.assert_allclose(test_scaled, (np.asarray(nets.weights)[test.rows] - mean) / std, rtol=1e-6)


def test_a_torch_dataset_trains_a_classifier_without_warnings(labelled):
    torch = pytest.importorskip("torch")
    nets = inr_cli.load(labelled)
    train, _ = nets.split(seed=0)
    dataset = train.to_torch_dataset()
    assert len(dataset) == len(train)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a read-only array makes torch.from_numpy warn
        x, y = dataset[0]
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True,
                                             generator=torch.Generator().manual_seed(0))
        model = torch.nn.Linear(nets.spec.parameter_count(), 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert torch.equal(x, torch.from_numpy(np.asarray(nets.weights[train.rows[0]]).copy()))
    assert y == int(nets.labels[train.rows[0]])
    assert torch.isfinite(loss)


def test_numpy_batches_feed_jax(labelled):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    nets = inr_cli.load(labelled)
    weights = jnp.zeros((nets.spec.parameter_count(), 4))

    def loss(w, x, y):
        logits = x @ w
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(y)), y])

    for x, y in nets.batches(8, seed=0, epoch=0):
        weights = weights - 0.1 * jax.grad(loss)(weights, jnp.asarray(x), jnp.asarray(y))
    assert bool(jnp.isfinite(weights).all()) and float(jnp.abs(weights).sum()) > 0


def test_a_split_by_group_holds_whole_groups_out(labelled):
    nets = inr_cli.load(labelled)
    groups = [name.split("/")[1] for name in nets.names]  # the file name: 0.png .. 5.png, across classes
    train, test = nets.split(test=0.3, seed=1, groups=groups)
    held = {groups[i] for i in test.rows}
    assert held and not held & {groups[i] for i in train.rows}  # no group on both sides
    assert len(held) == round(0.3 * len(set(groups)))
    assert sorted(np.concatenate([train.rows, test.rows]).tolist()) == list(range(len(nets)))
    assert np.array_equal(nets.split(test=0.3, seed=1, groups=groups)[1].rows, test.rows)
    with pytest.raises(inr_cli.InrError, match="one per network"):
        nets.split(groups=groups[1:])


def test_a_class_list_codes_sets_fitted_apart_alike(labelled):
    nets = inr_cli.load(labelled)
    classes = ["circle", "square", "2", "10", "triangle"]  # one class this set lacks
    view = nets.view(classes=classes)
    assert view.label_names == classes
    assert [classes[c] for c in view.labels] == [row["label"] for row in nets.index]
    train, _ = nets.split(test=0.25, seed=0, classes=classes)
    assert train.label_names == classes
    with pytest.raises(inr_cli.InrError, match="label '2' is not one of the classes given"):
        nets.view(classes=["circle", "square", "10"])


def test_export_keeps_every_column_and_loads_back_as_the_set(labelled, tmp_path):
    out = tmp_path / "set.safetensors"
    result = runner.invoke(app, ["export", str(labelled), "-o", str(out)])
    assert result.exit_code == 0, result.output
    nets, back = inr_cli.load(labelled), inr_cli.load(out)
    assert isinstance(back, inr_cli.TrainedSet) and back.spec == nets.spec and back.channels == nets.channels
    assert back.index == nets.index  # labels, seeds, psnr ... every column, typed the same
    assert np.array_equal(back.weights, nets.weights)
    assert np.array_equal(back.labels, nets.labels) and back.label_names == nets.label_names
    one = tmp_path / "one.safetensors"
    assert runner.invoke(app, ["export", str(labelled), "--image", "circle/2.png", "-o", str(one)]).exit_code == 0
    network = inr_cli.load(one)
    assert isinstance(network, inr_cli.TrainedNetwork)
    assert np.array_equal(network.params, nets["circle/2.png"].params) and (network.width, network.height) == (6, 6)


def test_a_set_exports_to_the_hdf5_file_neural_field_arena_reads(labelled, tmp_path):
    """params [N, P] in fit-a-nef's layout and its param_config, labels [N]: the networks, drawn by a
    forward pass written as fit-a-nef's flax SIREN computes it from those arrays, are the set's."""
    h5py = pytest.importorskip("h5py")
    import json

    nets = inr_cli.load(labelled)
    out = tmp_path / "shapes_0-16.hdf5"  # neural-field-arena reads the rows' range from the name
    result = runner.invoke(app, ["export", str(labelled), "-o", str(out)])
    assert result.exit_code == 0, result.output
    with h5py.File(out, "r") as f:
        params, labels = f["params"][:], f["labels"][:]
        config = json.loads(f["param_config"][0])
        names = [n.decode() for n in f["names"][:]]
        omega0, label_names = float(f.attrs["omega_0"]), json.loads(f.attrs["label_names"])
    assert names == nets.names and labels.tolist() == nets.labels.tolist() and label_names == nets.label_names
    assert [key for key, _ in config] == ["kernel_net_0.linear.bias", "kernel_net_0.linear.kernel",
                                          "kernel_net_1.linear.bias", "kernel_net_1.linear.kernel",
                                          "output_linear.bias", "output_linear.kernel"]
    assert params.shape == nets.weights.shape and params.dtype == np.float32
    coords = np.random.default_rng(0).uniform(-1, 1, (50, 2)).astype(np.float32)
    for row in (0, 9):
        tensors, at = {}, 0
        for key, shape in config:
            tensors[key] = params[row, at:at + int(np.prod(shape))].reshape(shape)
            at += int(np.prod(shape))
        x = coords.astype(np.float64)
        for i in range(2):
            x = np.sin(omega0 * (x @ tensors[f"kernel_net_{i}.linear.kernel"] + tensors[f"kernel_net_{i}.linear.bias"]))
        drawn = x @ tensors["output_linear.kernel"] + tensors["output_linear.bias"]
        np.testing.assert_allclose(drawn, nets[row](coords, clip=False), atol=1e-4)
    assert runner.invoke(app, ["export", str(labelled), "--image", "circle/2.png", "-o",
                               str(tmp_path / "one.hdf5")]).exit_code == 2


def test_labels_come_from_a_csv_or_a_list_files_second_column(tmp_path):
    folder = tmp_path / "flat"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (5, 5, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    (tmp_path / "labels.csv").write_text("name,label\n0.png,odd one\n1.png,b\n2.png,b\n3.png,a\n")
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "a"), "--labels",
                                 str(tmp_path / "labels.csv"), *NET])
    assert result.exit_code == 0, result.output
    nets = inr_cli.load(tmp_path / "a")
    assert [row["label"] for row in nets.index] == ["odd one", "b", "b", "a"]
    assert nets.label_names == ["a", "b", "odd one"] and nets.labels.tolist() == [2, 1, 1, 0]
    (tmp_path / "relabelled.csv").write_text("name,label\n0.png,a\n1.png,b\n2.png,b\n3.png,a\n")
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "a"), "--labels",
                                 str(tmp_path / "relabelled.csv"), *NET])  # a rerun may not relabel the set
    assert result.exit_code == 1 and "0.png is labelled 'a' now, 'odd one' in this set" in result.output
    assert [row["label"] for row in inr_cli.load(tmp_path / "a").index] == ["odd one", "b", "b", "a"]
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "with space.png").write_bytes((folder / "3.png").read_bytes())
    (tmp_path / "list.txt").write_text("flat/0.png\tcat\nflat/1.png,dog\nflat/2.png owl\nmore/with space.png\n")
    result = runner.invoke(app, ["fit-many", str(tmp_path / "list.txt"), "-o", str(tmp_path / "b"), *NET])
    assert result.exit_code == 0, result.output
    # a tab, a comma or a space after a path that exists parts the label; a path with a space stays whole
    assert {row["name"]: row["label"] for row in inr_cli.load(tmp_path / "b").index} == {
        "flat/0.png": "cat", "flat/1.png": "dog", "flat/2.png": "owl", "more/with space.png": ""}
    (tmp_path / "short.csv").write_text("0.png,a\n")
    result = runner.invoke(app, ["fit-many", str(folder), "-o", str(tmp_path / "c"), "--labels",
                                 str(tmp_path / "short.csv"), *NET])
    assert result.exit_code == 1 and "no label for 1.png and 2 more" in result.output
