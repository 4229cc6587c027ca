"""The network: its static description (NetworkSpec), its parameters, and its forward and backward passes.

Layer i computes z_i = x_i W_iᵀ + b_i and a_i = act_i(z_i), with W_i of shape (out, in). A Network
holds N same-shaped networks at once (one per image when fitting a folder; N = 1 for `inr train`):
their parameters are one [N, P] float32 array, so one fused kernel updates them all, and every
operation of a pass covers all N in one call. The backend (NumPy or our kernels) and the workspace
(the batch-sized buffers) are passed into each pass and belong to the caller, not to the network.

The first layer sees the coordinates through the spec's encoding (encodings.py: none, Fourier
features [cos(2 pi x Bᵀ), sin(2 pi x Bᵀ)], or a multiresolution hash grid). An encoding's parameters
(B, or the hash grid's tables) sit at the front of each network's parameter vector so that
checkpoints and renders carry them. Fourier frequencies are never trained: their gradient stays
zero, and a zero gradient leaves Adam and SGD updates at zero; the hash grid's tables are, their
gradient scattered by the encoding's backward pass. The model (models.py) gives the layers'
activations and how they start.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from inr_cli.config import BY_KEY, Config
from inr_cli.core.encodings import create_encoding
from inr_cli.core.models import ACTIVATIONS, create_model, model_class, output_bias  # noqa: F401 (ACTIVATIONS: said here too)
from inr_cli.errors import UsageError
from inr_cli.limits import MAX_PARAMETERS

if TYPE_CHECKING:  # annotations only: the backend itself is handed in
    from inr_cli.core.backend import Backend
    from inr_cli.core.workspace import Workspace

IN_FEATURES = 2  # (u, v): the network's input is a point of the image plane
# The setting each of NetworkSpec's fields comes from (from_config); the Fourier features' and the
# hash grid's only with that encoding (0 without it).
SETTING_OF = {"model": "network.model", "hidden": "network.hidden", "layers": "network.layers",
              "omega0": "network.omega0", "linear_output": "network.linear_output",
              "encoding": "encoding.name", "fourier_features": "encoding.features",
              "fourier_sigma": "encoding.sigma", "hash_levels": "encoding.levels",
              "hash_features": "encoding.level_features", "hash_log2_size": "encoding.log2_table_size",
              "hash_min_resolution": "encoding.min_resolution", "hash_max_resolution": "encoding.max_resolution"}


def _used(field: str, encoding: str) -> bool:
    """Whether a network with this encoding has the field: fourier_* with Fourier features, hash_* with a hash grid."""
    return not ((field.startswith("fourier_") and encoding != "fourier")
                or (field.startswith("hash_") and encoding != "hashgrid"))


@dataclass(frozen=True)
class NetworkSpec:
    model: str  # one of config.MODELS (models.MODEL_CLASSES)
    out_features: int
    hidden: int
    layers: int  # number of hidden layers
    omega0: float
    encoding: str  # one of config.ENCODINGS (encodings.ENCODING_CLASSES): "none", "fourier" or "hashgrid"
    fourier_features: int = 0  # rows of B (m); the first layer then has 2m inputs; 0 without Fourier features
    fourier_sigma: float = 0.0
    in_features: int = IN_FEATURES
    # The hash grid's (encodings.HashGrid); 0 without one (and in specs saved before it).
    hash_levels: int = 0
    hash_features: int = 0  # per level
    hash_log2_size: float = 0  # log2 of the entries of a level's table (encodings.table_entries)
    hash_min_resolution: int = 0  # cells across the coarsest level
    hash_max_resolution: int = 0  # and the finest
    linear_output: bool = False  # the output layer linear whatever the model's own (False in specs saved before it)

    @classmethod
    def from_config(cls, config: Config, out_features: int) -> "NetworkSpec":
        """The network the settings give; refused (a UsageError) where it is larger than inr handles."""
        encoding = config.encoding
        if config.network.omega0 == 0 or (encoding.name == "fourier" and encoding.sigma == 0) or (
                encoding.name == "hashgrid" and 0 in (encoding.max_resolution, encoding.levels,
                                                      encoding.log2_table_size)):
            raise ValueError("omega0 / sigma / the hash grid's sizes still 0: decide them for the image first "
                             "(sizing.fit_to_image)")
        spec = cls(out_features=out_features, **{field: config.get(key) for field, key in SETTING_OF.items()
                                                 if _used(field, encoding.name)})
        fault = beyond_limits(asdict(spec))
        if fault:
            raise UsageError(f"the settings give {fault}: fewer or narrower layers, or a smaller hash grid")
        return spec

    def settings(self) -> dict:
        """{key: value} of the settings that give this network (from_config's inverse), but the Fourier
        features' and the hash grid's where it has none."""
        return {key: getattr(self, field) for field, key in SETTING_OF.items() if _used(field, self.encoding)}

    @property
    def encoded_features(self) -> int:
        """The first layer's inputs: the encoding's outputs."""
        return create_encoding(self).features

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of every linear layer, first to last."""
        sizes = [self.encoded_features] + [self.hidden] * self.layers + [self.out_features]
        return [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]

    def activations(self) -> list[str]:
        """Each layer's activation, one of ACTIVATIONS."""
        model = model_class(self.model)
        return [model.hidden_activation] * self.layers + ["linear" if self.linear_output else model.output_activation]

    def encoding_size(self) -> int:
        """Entries of the encoding's parameters (Fourier: B; the hash grid: its tables) at the front of the
        parameter vector."""
        return create_encoding(self).parameter_count

    def parameter_count(self) -> int:
        return self.encoding_size() + sum(o * i + o for o, i in self.layer_shapes())

    def to_json(self) -> str:
        """Its fields; the hash grid's only with a hash grid, so that other networks' descriptions read
        as they did before it."""
        fields = asdict(self)
        if self.encoding != "hashgrid":
            fields = {name: value for name, value in fields.items() if not name.startswith("hash_")}
        if not self.linear_output:  # as networks were described before it
            del fields["linear_output"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "NetworkSpec":
        spec = cls(**json.loads(text))
        model_class(spec.model)  # an unknown model or encoding is refused here, naming the choices
        create_encoding(spec)
        return spec


def beyond_limits(fields: dict) -> str | None:
    """What in a network's description ({NetworkSpec field: value}, each of its type and at least 1
    where a network has it) lies beyond what inr handles, in words, or None: a size above its
    setting's limit (settings.py's `most`, from limits.py, which config.validate holds the settings
    to), then the parameter count above MAX_PARAMETERS. The readers call such a description damaged;
    from_config refuses the settings that give one before anything is sized from it."""
    for field, value in fields.items():
        most = BY_KEY[SETTING_OF[field]].most if field in SETTING_OF else None
        if most is not None and value > most:
            return f"'{field}' is {value}, above inr's limit of {most}"
    count = NetworkSpec(**fields).parameter_count()
    if count > MAX_PARAMETERS:
        return f"a network of {count:,} parameters, above inr's limit of {MAX_PARAMETERS:,}"
    return None


def layer_views(spec: NetworkSpec, flat) -> list[tuple]:
    """(W [N, out, in], b [N, out]) views into [N, P] parameters (or gradients, or moments), layer by layer."""
    views, offset, n = [], spec.encoding_size(), flat.shape[0]
    for out_f, in_f in spec.layer_shapes():
        weight = flat[:, offset : offset + out_f * in_f].reshape(n, out_f, in_f)
        if n > 1 and weight.strides[0] != flat.strides[0]:  # reshape fell back to a copy: writes would be lost
            raise ValueError("parameters must be a C-contiguous [N, P] array")
        offset += out_f * in_f
        bias = flat[:, offset : offset + out_f]
        offset += out_f
        views.append((weight, bias))
    return views


def frequency_view(spec: NetworkSpec, flat):
    """The encoding's parameters at the front of [N, P] parameters (the Fourier frequencies B
    [N, m, in], the hash grid's tables [N, entries * F]), or None."""
    return create_encoding(spec).parameters(flat)


def init_parameters(spec: NetworkSpec, seed: int, output_mean=None, weight_scale: float = 1.0) -> np.ndarray:
    """One network's [P] parameters, drawn from one generator in a fixed order: the encoding's first
    (Fourier frequencies B ~ N(0, sigma^2), as Tancik et al. draw them), then each layer's weight and
    bias as the model says (models.py: SIREN's paper init, scaled by weight_scale; Glorot uniform
    for sigmoid and ReLU). With output_mean (the image's mean per channel), the output biases start
    the network at that colour: its logit for a sigmoid output, itself for a linear one."""
    rng = np.random.default_rng(seed)
    flat = np.empty((1, spec.parameter_count()), dtype=np.float32)
    encoding, model = create_encoding(spec), create_model(spec, weight_scale)
    encoding_parameters = encoding.parameters(flat)
    if encoding_parameters is not None:
        encoding.initialise(encoding_parameters[0], rng)
    layers = layer_views(spec, flat)
    for index, (weight, bias) in enumerate(layers):
        model.init_layer(index, index == len(layers) - 1, weight[0], bias[0], rng)
    if output_mean is not None:
        set_output_means(spec, flat, [output_mean])
    return flat[0]


def set_output_means(spec: NetworkSpec, params: np.ndarray, means) -> None:
    """The output biases of [N, P] parameters set, in place, so that network i starts at the colour
    means[i] (per channel): its logit for a sigmoid output, itself for a linear one."""
    activation = spec.activations()[-1]
    bias = layer_views(spec, params)[-1][1]
    for row, mean in zip(bias, means, strict=True):
        row[...] = output_bias(activation, np.asarray(mean, dtype=np.float64))


def init_networks(spec: NetworkSpec, seeds, output_means=None, weight_scale: float = 1.0) -> np.ndarray:
    """[N, P] parameters, network i initialised from seeds[i] (and output_means[i]) exactly as it
    would be alone."""
    means = [None] * len(seeds) if output_means is None else output_means
    return np.stack([init_parameters(spec, int(seed), mean, weight_scale)
                     for seed, mean in zip(seeds, means, strict=True)])


def output_means(config, images) -> list[np.ndarray] | None:
    """Each image's mean colour, where the configuration starts the outputs there
    (network.init_output_at_mean), else None."""
    if not config.network.init_output_at_mean:
        return None
    return [image.mean_colour() for image in images]


class Network:
    """N same-shaped networks: the spec, their [N, P] parameters (on any backend) and views of them."""

    def __init__(self, spec: NetworkSpec, params):
        if params.ndim != 2 or params.shape[1] != spec.parameter_count():
            raise ValueError(f"parameters of shape {params.shape}, expected [N, {spec.parameter_count()}]")
        self.spec = spec
        self.params = params
        self.count = params.shape[0]
        self.layers = layer_views(spec, params)
        self.encoding = create_encoding(spec)
        self.encoding_parameters = self.encoding.parameters(params)

    def forward(self, backend: Backend, ws: Workspace, x, rows: int):
        """The outputs [N, rows, out] for the first `rows` rows of x ([N or 1, rows, in]: one table of
        coordinates may serve every network); a view into the workspace."""
        layer_input = self.encoding.forward(backend, ws, self.encoding_parameters, x, rows)
        for (weight, bias), z, a, act in zip(self.layers, ws.z, ws.a, self.spec.activations()):
            z, a = z[:, :rows], a[:, :rows]
            backend.linear_forward(layer_input, weight, bias, z, a, act, self.spec.omega0)
            layer_input = a
        return layer_input

    def backward(self, backend: Backend, ws: Workspace, x, rows: int, grads: list[tuple],
                 encoding_grads=None) -> None:
        """Parameter gradients into `grads` (layer_views of an [N, P] gradient array) and, for a trained
        encoding, into encoding_grads (its parameters' view of the same array), given dL/d(output) in
        ws.grad[-1] and the forward pass just run on the same rows.

        ws.grad[i] holds dL/dz_i: the output layer's comes from the loss through its activation; each
        earlier one from linear_backward_input, which applies the activation's derivative as it goes.
        A trained encoding then gets dL/d(its output) = dL/dz_0 W_0 and scatters it into its table."""
        activations, omega0 = self.spec.activations(), self.spec.omega0
        last = len(self.layers) - 1
        backend.activation_backward(ws.grad[last][:, :rows], ws.z[last][:, :rows], ws.a[last][:, :rows],
                                    activations[last], omega0)
        for i in reversed(range(len(self.layers))):
            grad = ws.grad[i][:, :rows]
            layer_input = self.encoding.output(ws, x, rows) if i == 0 else ws.a[i - 1][:, :rows]
            backend.linear_backward_weights(grad, layer_input, grads[i][0], grads[i][1])
            if i > 0:
                backend.linear_backward_input(grad, self.layers[i][0], ws.z[i - 1][:, :rows], ws.a[i - 1][:, :rows],
                                              ws.grad[i - 1][:, :rows], activations[i - 1], omega0)
        if self.encoding.trainable:
            if encoding_grads is None:
                raise ValueError(f"the {self.spec.encoding} encoding is trained: pass its gradients (encoding_grads)")
            encoded_grad = ws.encoded_grad[:, :rows]
            backend.matmul(ws.grad[0][:, :rows], self.layers[0][0], encoded_grad)
            self.encoding.backward(backend, ws, x, rows, encoded_grad, encoding_grads)
