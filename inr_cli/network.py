"""The static description of a network and its parameters; nothing here knows about batches.

Layer i computes z_i = x_i W_iᵀ + b_i and a_i = act_i(z_i), with W_i of shape (out, in). All
parameters live in one flat float32 vector so that one fused kernel updates them all.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

MODELS = ("siren", "sigmoid")


@dataclass(frozen=True)
class NetworkSpec:
    model: str  # "siren" (sine hidden layers, linear output) or "sigmoid" (sigmoid everywhere)
    out_features: int
    hidden: int
    layers: int  # number of hidden layers
    omega0: float = 30.0
    in_features: int = 2

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of every linear layer, first to last."""
        sizes = [self.in_features] + [self.hidden] * self.layers + [self.out_features]
        return [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]

    def activations(self) -> list[str]:
        hidden = "sine" if self.model == "siren" else "sigmoid"
        output = "linear" if self.model == "siren" else "sigmoid"
        return [hidden] * self.layers + [output]

    def parameter_count(self) -> int:
        return sum(o * i + o for o, i in self.layer_shapes())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "NetworkSpec":
        return cls(**json.loads(text))


def parameter_views(spec: NetworkSpec, flat) -> list[tuple]:
    """(W, b) views into a flat parameter (or gradient, or moment) vector, layer by layer."""
    views, offset = [], 0
    for out_f, in_f in spec.layer_shapes():
        weight = flat[offset : offset + out_f * in_f].reshape(out_f, in_f)
        offset += out_f * in_f
        bias = flat[offset : offset + out_f]
        offset += out_f
        views.append((weight, bias))
    return views


def init_parameters(spec: NetworkSpec, seed: int) -> np.ndarray:
    """SIREN: the paper's init (first layer U(±1/in), later U(±sqrt(6/in)/omega0)); sigmoid: Glorot.
    SIREN biases follow PyTorch's nn.Linear default U(±1/sqrt(in)), as the paper's code does."""
    rng = np.random.default_rng(seed)
    flat = np.empty(spec.parameter_count(), dtype=np.float32)
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
