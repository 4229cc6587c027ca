"""The static description of a network and its parameters; nothing here knows about batches.

Layer i computes z_i = x_i W_iᵀ + b_i and a_i = act_i(z_i), with W_i of shape (out, in). All
parameters live in one flat float32 vector so that one fused kernel updates them all.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

MODELS = ("siren", "sigmoid", "relu")


@dataclass(frozen=True)
class NetworkSpec:
    model: str  # "siren" (sine hidden, linear output), "sigmoid" (sigmoid everywhere), "relu" (sigmoid output)
    out_features: int
    hidden: int
    layers: int  # number of hidden layers
    omega0: float = 30.0
    in_features: int = 2
    encoding: str = "none"  # "fourier": the first layer sees [cos(2 pi B x), sin(2 pi B x)]
    fourier_features: int = 0  # rows of B (m); the first layer then has 2m inputs
    fourier_sigma: float = 0.0

    @property
    def encoded_features(self) -> int:
        return 2 * self.fourier_features if self.encoding == "fourier" else self.in_features

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of every linear layer, first to last."""
        sizes = [self.encoded_features] + [self.hidden] * self.layers + [self.out_features]
        return [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]

    def activations(self) -> list[str]:
        hidden = {"siren": "sine", "sigmoid": "sigmoid", "relu": "relu"}[self.model]
        output = "linear" if self.model == "siren" else "sigmoid"
        return [hidden] * self.layers + [output]

    def encoding_size(self) -> int:
        """Entries of the fixed frequency matrix B at the front of the parameter vector."""
        return self.fourier_features * self.in_features if self.encoding == "fourier" else 0

    def parameter_count(self) -> int:
        return self.encoding_size() + sum(o * i + o for o, i in self.layer_shapes())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "NetworkSpec":
        return cls(**json.loads(text))


def encoding_view(spec: NetworkSpec, flat):
    """The Fourier frequency matrix B (m, in) at the front of the parameter vector, or None.

    B lives with the parameters so that checkpoints and renders carry it, but it is never
    trained: its gradient stays zero, and a zero gradient leaves Adam and SGD updates at zero."""
    if spec.encoding != "fourier":
        return None
    return flat[: spec.encoding_size()].reshape(spec.fourier_features, spec.in_features)


def parameter_views(spec: NetworkSpec, flat) -> list[tuple]:
    """(W, b) views into a flat parameter (or gradient, or moment) vector, layer by layer."""
    views, offset = [], spec.encoding_size()
    for out_f, in_f in spec.layer_shapes():
        weight = flat[offset : offset + out_f * in_f].reshape(out_f, in_f)
        offset += out_f * in_f
        bias = flat[offset : offset + out_f]
        offset += out_f
        views.append((weight, bias))
    return views


def init_parameters(spec: NetworkSpec, seed: int) -> np.ndarray:
    """SIREN: the paper's init (first layer U(±1/in), later U(±sqrt(6/in)/omega0)); sigmoid: Glorot.
    SIREN biases follow PyTorch's nn.Linear default U(±1/sqrt(in)), as the paper's code does.
    ReLU layers use Glorot too. Fourier frequencies B ~ N(0, sigma^2), as Tancik et al. draw them."""
    rng = np.random.default_rng(seed)
    flat = np.empty(spec.parameter_count(), dtype=np.float32)
    frequencies = encoding_view(spec, flat)
    if frequencies is not None:
        frequencies[...] = rng.normal(0.0, spec.fourier_sigma, frequencies.shape)
    for index, (weight, bias) in enumerate(parameter_views(spec, flat)):
        out_f, in_f = weight.shape
        if spec.model == "siren":
            bound = 1.0 / in_f if index == 0 else math.sqrt(6.0 / in_f) / spec.omega0
            weight[...] = rng.uniform(-bound, bound, weight.shape)
            bias_bound = 1.0 / math.sqrt(in_f)
            bias[...] = rng.uniform(-bias_bound, bias_bound, bias.shape)
        else:
            bound = math.sqrt(6.0 / (in_f + out_f))
            weight[...] = rng.uniform(-bound, bound, weight.shape)
            bias[...] = 0.0
    return flat
