"""A trained network in formats other tools read: safetensors (the weights, named per layer) and
ONNX (the whole function, coordinates in, colours out, for onnxruntime and the runtimes after it).

Both keep the coordinate convention of the design notes: a pixel (x, y) of a W x H canvas is fed as
u = (x + 0.5) / W * 2 - 1, v = (y + 0.5) / H * 2 - 1, the input columns in that order (u, v).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from inr_cli.core.encodings import HASH_PRIME, create_encoding
from inr_cli.core.network import NetworkSpec, layer_views
from inr_cli.errors import InrError, UsageError
from inr_cli.extras import require
from inr_cli.formats.atomic import atomic_path

FORMATS = {".safetensors": "safetensors", ".onnx": "onnx"}
# A whole set only: neural-field-arena's (and fit-a-nef's) file of networks
SET_FORMATS = {".safetensors": "safetensors", ".hdf5": "hdf5"}
CONVENTION = "input (u, v) = ((x + 0.5) / W * 2 - 1, (y + 0.5) / H * 2 - 1); output channels in [0, 1]"


# neural-field-arena reads the rows a file holds from its name: NAME_START-END.hdf5, END - START rows.
ARENA_NAME = re.compile(r".+_(\d+)-(\d+)\.hdf5", re.IGNORECASE)
CHUNK_ROWS = 4096  # networks looked at a time when a set's weights are checked before an export


def finite_networks(weights: np.ndarray, names, what: str = "exported") -> None:
    """An export holds only networks that can be drawn (as every reader of inr's refuses the others):
    a row of NaN or infinite values, in a damaged set or a run that blew up, is refused by its name,
    in chunks of rows (a large set's weights are mapped from disk)."""
    for start in range(0, len(weights), CHUNK_ROWS):
        finite = np.isfinite(np.asarray(weights[start:start + CHUNK_ROWS])).all(axis=1)
        if not finite.all():
            bad = start + int(np.argmin(finite))
            raise InrError(f"{names[bad]}: its network's parameters hold NaN or infinite values (a damaged set, or a "
                           f"fit that blew up); nothing is {what}: fit it again")


def arena_rows(path: Path, networks: int) -> None:
    """The name of an hdf5 export says its rows as neural-field-arena reads them (NAME_START-END.hdf5,
    END - START the set's networks), or the file would be read as other rows than it holds."""
    found = ARENA_NAME.fullmatch(Path(path).name)
    if found is None or int(found.group(2)) - int(found.group(1)) != networks:
        first = int(found.group(1)) if found else 0
        stem = Path(path).name[:found.start(1) - 1] if found else Path(path).stem
        raise UsageError(f"{path}: neural-field-arena reads the rows of an hdf5 file from its name "
                         f"(NAME_START-END.hdf5) and this set holds {networks} networks: name it "
                         f"{stem}_{first}-{first + networks}.hdf5")


def need_writer(module: str):
    return require(module, f"writing {module} files", "export")


def encoding_tensor(spec: NetworkSpec) -> str | None:
    """The name of the encoding's tensor: encoding.frequencies (Fourier features, [m, 2]),
    encoding.table (the hash grid's tables, [entries, F], levels one after another), or None."""
    name = create_encoding(spec).export_name
    return None if name is None else f"encoding.{name}"


def tensor_views(spec: NetworkSpec, params: np.ndarray) -> dict[str, np.ndarray]:
    """Each tensor of an export by its name, as a view into [N, P] float32 parameters:
    encoding.frequencies [N, m, 2] with Fourier features or encoding.table [N, entries, F] with a hash
    grid, layers.I.weight [N, out, in] and layers.I.bias [N, out] (a reader fills them; N = 0 gives
    their shapes without a byte)."""
    views = {}
    encoding = create_encoding(spec).export_view(params)
    if encoding is not None:
        views[encoding_tensor(spec)] = encoding
    for i, (weight, bias) in enumerate(layer_views(spec, params)):
        views[f"layers.{i}.weight"], views[f"layers.{i}.bias"] = weight, bias
    return views


def stacked_tensors(spec: NetworkSpec, params: np.ndarray) -> dict[str, np.ndarray]:
    """The tensors of [N, P] parameters stacked over the networks (tensor_views), each contiguous."""
    return {name: np.ascontiguousarray(view)
            for name, view in tensor_views(spec, np.asarray(params, dtype=np.float32)).items()}


def named_tensors(spec: NetworkSpec, params: np.ndarray, dtype: str = "float32") -> dict[str, np.ndarray]:
    """layers.I.weight [out, in], layers.I.bias [out], and encoding.frequencies [m, 2] with Fourier features
    or encoding.table [entries, F] with a hash grid; in dtype (float32 or float16, network.dtype)."""
    stack = stacked_tensors(spec, np.asarray(params, dtype=np.float32).reshape(1, -1))
    return {name: tensor[0].astype(dtype, copy=False) for name, tensor in stack.items()}


def _metadata(spec: NetworkSpec, channels) -> dict[str, str]:
    """The description, activations, channels and convention; with a hash grid, how to read its table
    (hash_grid: levels [resolution, offset, size, hashed], prime, features)."""
    metadata = {"spec": spec.to_json(), "activations": json.dumps(spec.activations()), "channels": ",".join(channels),
                "convention": CONVENTION}
    if spec.encoding == "hashgrid":
        metadata["hash_grid"] = json.dumps(create_encoding(spec).description())
    return metadata


def _save_safetensors(tensors: dict[str, np.ndarray], metadata: dict[str, str], path: Path) -> None:
    need_writer("safetensors")
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    with atomic_path(path, suffix=".safetensors") as tmp:
        try:
            save_file(tensors, str(tmp), metadata=metadata)
        except SafetensorError as exc:  # its one error type, an OS error among its causes: atomic_path words it
            raise OSError(None, str(exc)) from None
        _sort_metadata(tmp)


def _sort_metadata(path: Path) -> None:
    """The header's metadata in key order, rewritten in place: safetensors writes it from a Rust
    HashMap, in another order in every process, so the same tensors and metadata made other bytes
    each time, and a set that records its start's sha256 took a rewritten start for a changed one.
    The JSON keeps its length (the same keys and values, as compact), padded with spaces as the
    format allows; the tensors' offsets are relative to the header's end and do not move."""
    with open(path, "r+b") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
        metadata = header.pop("__metadata__", None)
        if not metadata:
            return
        ordered = {"__metadata__": dict(sorted(metadata.items())), **header}
        text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
        if len(text) > length:  # not as compact as safetensors' own: its order is kept
            return
        handle.seek(8)
        handle.write(text.ljust(length))


def size_metadata(size: tuple[int, int] | None) -> dict[str, str]:
    """The metadata of the size (width, height) a network was trained at; none where it is not known."""
    return {"width": str(size[0]), "height": str(size[1])} if size else {}


def write_safetensors(spec: NetworkSpec, params: np.ndarray, channels, path: Path,
                      extra: dict[str, str] | None = None, dtype: str = "float32",
                      tensors: dict[str, np.ndarray] | None = None) -> None:
    """One network, its tensors in dtype (float32, or float16: F16 tensors, half the bytes); `extra`
    metadata beside the description (the size it was trained at: width, height; what a learned start
    records), `tensors` beside the network's (a base's modulations, as they are)."""
    _save_safetensors({**named_tensors(spec, params, dtype), **(tensors or {})},
                      {**_metadata(spec, channels), **(extra or {})}, path)


def write_set_safetensors(spec: NetworkSpec, weights: np.ndarray, channels, names, path: Path,
                          index: list[dict] | None = None, dtype: str = "float32") -> None:
    """A set of networks in one file: the tensors stacked over the networks (stacked_tensors), the
    image names in row order (metadata "names", a JSON list) and every index.csv column of every
    row (metadata "index", a JSON list of {column: text}, labels included) beside the description."""
    finite_networks(weights, names)
    metadata = {**_metadata(spec, channels), "names": json.dumps(list(names))}
    if index is not None:
        metadata["index"] = json.dumps(index)
    tensors = stacked_tensors(spec, weights)
    _save_safetensors({name: tensor.astype(dtype, copy=False) for name, tensor in tensors.items()}, metadata, path)


def arena_layout(spec: NetworkSpec, weights: np.ndarray) -> tuple[list, np.ndarray]:
    """The networks as fit-a-nef flattens a flax SIREN (its `param_config`, and `params` [N, P]): per
    layer, kernel_net_I.linear (the output layer: output_linear), its bias then its kernel [in, out]
    (the transpose of our weights [out, in]), row-major. Their SIREN computes sin(omega_0 (x K + b))
    in the hidden layers and a linear output, as ours does; its num_layers is our layers + 1."""
    encoded = create_encoding(spec).export_name is not None
    if spec.model != "siren" or encoded:
        raise InrError(f"a {spec.model} set{f' with the {spec.encoding} encoding' if encoded else ''} has no "
                       f"counterpart in fit-a-nef's SIREN layout; export it as .safetensors")
    views = layer_views(spec, np.asarray(weights, dtype=np.float32))
    config, columns = [], []
    for i, (weight, bias) in enumerate(views):
        name = "output_linear" if i == len(views) - 1 else f"kernel_net_{i}.linear"
        kernel = np.swapaxes(weight, 1, 2)  # [N, in, out]
        config += [[f"{name}.bias", [bias.shape[1]]], [f"{name}.kernel", list(kernel.shape[1:])]]
        columns += [bias, kernel.reshape(len(kernel), -1)]
    return config, np.ascontiguousarray(np.concatenate(columns, axis=1), dtype=np.float32)


def write_set_hdf5(spec: NetworkSpec, weights: np.ndarray, channels, names, labels: np.ndarray | None,
                   label_names: list[str], path: Path, base=None) -> None:
    """A set in the HDF5 file neural-field-arena's datasets read (and fit-a-nef's trainers write):
    `params` [N, P] in fit-a-nef's layout (arena_layout), `param_config` (its JSON, one string),
    `labels` [N] int64 where the set is labelled; beside them the image names, the label names and
    our description as attributes. Rows in index.csv's order. A set of latents over `base`: `params`
    are the latents [N, D] (param_config [["latent", [D]]]: what a model learns from), and the base
    beside them: `base_params` [P] in fit-a-nef's layout with `base_param_config`, `modulation_map`
    [L * H, D] and `modulation_rates` [D]."""
    arena_rows(path, len(weights))
    finite_networks(weights, names)
    h5py = require("h5py", "writing hdf5 files", "hdf5")
    if base is None:
        config, params = arena_layout(spec, weights)
    else:
        config, params = [["latent", [base.latent]]], np.ascontiguousarray(weights, dtype=np.float32)
    with atomic_path(path, suffix=".hdf5") as tmp:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("params", data=params)
            f.create_dataset("param_config", data=[json.dumps(config)], dtype=h5py.string_dtype())
            if base is not None:
                base_config, base_params = arena_layout(spec, base.params[None])
                f.create_dataset("base_params", data=base_params[0])
                f.create_dataset("base_param_config", data=[json.dumps(base_config)], dtype=h5py.string_dtype())
                f.create_dataset("modulation_map", data=base.shift_map)
                f.create_dataset("modulation_rates", data=base.rates)
                f.attrs["latent"], f.attrs["inner_steps"] = base.latent, base.inner_steps
            if labels is not None:
                f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
            f.create_dataset("names", data=list(names), dtype=h5py.string_dtype())
            f.attrs["label_names"] = json.dumps(list(label_names))
            f.attrs["omega_0"] = spec.omega0
            f.attrs["num_layers"] = spec.layers + 1
            for key, value in _metadata(spec, channels).items():
                f.attrs[key] = value


def onnx_model(spec: NetworkSpec, params: np.ndarray, channels, dtype: str = "float32"):
    """The forward pass as an ONNX graph: coords [rows, 2] -> colours [rows, C], clipped to [0, 1]; the
    network's parameters stored in dtype (float16: each cast to float32 in the graph, which computes
    in float32 either way)."""
    onnx = need_writer("onnx")
    from onnx import TensorProto, helper, numpy_helper

    tensors = named_tensors(spec, params)
    nodes, initializers = [], []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def parameter(name: str, value: np.ndarray) -> str:
        """A tensor of the network's parameters, as stored: float32, or float16 cast in the graph."""
        if dtype == "float32":
            return constant(name, value)
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name + ".stored"))
        return node("Cast", [name + ".stored"], name, to=TensorProto.FLOAT)

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def integer(name: str, value) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype=np.int64), name))
        return name

    h = "coords"
    if spec.encoding == "hashgrid":
        h = _hashgrid_nodes(create_encoding(spec), parameter("encoding.table", tensors["encoding.table"]),
                            constant, integer, node)
    if spec.encoding == "fourier":
        b_t = parameter("encoding.frequencies_t", tensors["encoding.frequencies"].T)
        angle = node("Mul", [node("MatMul", [h, b_t], "projection"), constant("two_pi", np.array(2 * math.pi))],
                     "angle")
        h = node("Concat", [node("Cos", [angle], "cos"), node("Sin", [angle], "sin")], "encoded", axis=1)
    # Only a sine layer reads omega0: an unused initializer makes onnxruntime warn at every load.
    omega = constant("omega0", np.array(spec.omega0)) if "sine" in spec.activations() else None
    for i, activation in enumerate(spec.activations()):
        weight_t = parameter(f"layers.{i}.weight_t", tensors[f"layers.{i}.weight"].T)
        z = node("Add", [node("MatMul", [h, weight_t], f"layers.{i}.product"),
                         parameter(f"layers.{i}.bias", tensors[f"layers.{i}.bias"])], f"layers.{i}.z")
        if activation == "sine":
            h = node("Sin", [node("Mul", [z, omega], f"layers.{i}.phase")], f"layers.{i}.a")
        elif activation == "sigmoid":
            h = node("Sigmoid", [z], f"layers.{i}.a")
        elif activation == "relu":
            h = node("Relu", [z], f"layers.{i}.a")
        else:
            h = z
    node("Clip", [h, constant("zero", np.array(0.0)), constant("one", np.array(1.0))], "colours")
    graph = helper.make_graph(
        nodes, "inr", [helper.make_tensor_value_info("coords", TensorProto.FLOAT, ["rows", 2])],
        [helper.make_tensor_value_info("colours", TensorProto.FLOAT, ["rows", spec.out_features])], initializers)
    # Opset 18 brought the bitwise operators the hash needs; the other networks keep 17.
    opset = 18 if spec.encoding == "hashgrid" else 17
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="inr")
    model.ir_version = min(model.ir_version, 9)  # readable by onnxruntime releases of the last years
    helper.set_model_props(model, {"spec": spec.to_json(), "channels": ",".join(channels), "convention": CONVENTION})
    onnx.checker.check_model(model)
    return model


def _hashgrid_nodes(grid, table_name: str, constant, integer, node) -> str:
    """The hash grid's lookup as ONNX nodes (encodings.HashGrid, numpy_ops.hashgrid_corners): per level,
    the point on the grid, its cell and place in it, the four corners' entries (dense, or hashed with
    BitwiseXor in int64 with the uint32 wrap made explicit), Gather from the table (table_name, [entries,
    F] float32) and the bilinear sum; the levels concatenated. Returns the encoding's name."""
    one, zero_i, one_i = constant("hash.one", np.array(1.0)), integer("hash.col0", 0), integer("hash.col1", 1)
    if any(hashed for *_, hashed in grid.levels_rows()):  # an unused initializer makes onnxruntime warn
        prime, low32 = integer("hash.prime", HASH_PRIME), integer("hash.low32", 0xFFFFFFFF)
    unsqueeze_axes = integer("hash.axes", [1])
    levels = []
    for index, (resolution, offset, size, hashed) in enumerate(grid.levels_rows()):
        p = f"hash.{index}."
        scaled = node("Mul", [node("Add", ["coords", one], p + "shifted"), constant(p + "half", resolution / 2)],
                      p + "scaled")
        position = node("Clip", [scaled, constant(p + "low", 0.0), constant(p + "high", float(resolution))],
                        p + "position")
        cell = node("Min", [node("Floor", [position], p + "floor"), constant(p + "last", resolution - 1.0)],
                    p + "cell")
        fraction = node("Sub", [position, cell], p + "fraction")
        cell_i = node("Cast", [cell], p + "cell_i", to=7)  # int64
        i, j = (node("Gather", [cell_i, c], p + name, axis=1) for c, name in ((zero_i, "i"), (one_i, "j")))
        fx, fy = (node("Unsqueeze", [node("Gather", [fraction, c], p + name, axis=1), unsqueeze_axes], p + name + "1")
                  for c, name in ((zero_i, "fx"), (one_i, "fy")))
        gx, gy = (node("Sub", [one, f], p + name) for f, name in ((fx, "gx"), (fy, "gy")))
        columns = (i, node("Add", [i, integer(p + "step_i", 1)], p + "i1"))
        rows = (j, node("Add", [j, integer(p + "step_j", 1)], p + "j1"))
        if hashed:
            rows = tuple(node("BitwiseAnd", [node("Mul", [b, prime], p + f"bp{k}"), low32], p + f"bh{k}")
                         for k, b in enumerate(rows))
        else:
            rows = tuple(node("Mul", [b, integer(p + f"stride{k}", resolution + 1)], p + f"bs{k}")
                         for k, b in enumerate(rows))
        terms = []
        for corner, (a, b, wa, wb) in enumerate(((0, 0, gx, gy), (1, 0, fx, gy), (0, 1, gx, fy), (1, 1, fx, fy))):
            c = f"{p}c{corner}"
            if hashed:
                entry = node("Mod", [node("BitwiseXor", [columns[a], rows[b]], c + ".xor"), integer(c + ".size", size)],
                             c + ".entry")
            else:
                entry = node("Add", [columns[a], rows[b]], c + ".entry")
            value = node("Gather", [table_name, node("Add", [entry, integer(c + ".offset", offset)], c + ".at")],
                         c + ".value", axis=0)
            terms.append(node("Mul", [value, node("Mul", [wa, wb], c + ".weight")], c + ".term"))
        levels.append(node("Add", [node("Add", [terms[0], terms[1]], p + "sum01"),
                                   node("Add", [terms[2], terms[3]], p + "sum23")], p + "features"))
    return node("Concat", levels, "encoded", axis=1)


def write_onnx(spec: NetworkSpec, params: np.ndarray, channels, path: Path, dtype: str = "float32") -> None:
    onnx = need_writer("onnx")
    model = onnx_model(spec, params, channels, dtype)
    with atomic_path(path, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))


def export(spec: NetworkSpec, params: np.ndarray, channels, path: Path, size: tuple[int, int] | None = None,
           dtype: str = "float32") -> None:
    """One network to .safetensors or .onnx, its parameters in dtype (float32 or float16); `size` (width,
    height it was trained at) in the safetensors metadata, so that it loads back as the network it was."""
    kind = FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise InrError(f"{path}: unknown export format '{Path(path).suffix}' (use .safetensors or .onnx)")
    finite_networks(np.asarray(params, dtype=np.float32).reshape(1, -1), ["the network"])
    if kind == "safetensors":
        write_safetensors(spec, params, channels, Path(path), size_metadata(size), dtype)
    else:
        write_onnx(spec, params, channels, Path(path), dtype)
