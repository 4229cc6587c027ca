"""The models (network.model): each one's activations and how its layers start.

`create_model(spec)` builds the one a network spec names; a new model, with its own activation or
initialisation, is a class here registered in MODEL_CLASSES and named among the settings' choices
(a new activation is also a name in ACTIVATIONS that the backends and kernels implement).
network.init_parameters draws a network's parameters with it: the encoding's first, then each
layer's weight and bias in turn from one generator, so the order of the draws is fixed.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from inr_cli.core.network import NetworkSpec

# Every activation a layer can have: the backends implement these, the kernels number them.
ACTIVATIONS = ("linear", "sigmoid", "sine", "relu")


class Model(ABC):
    name: ClassVar[str]  # network.model in the configuration, NetworkSpec.model
    hidden_activation: ClassVar[str]  # one of ACTIVATIONS
    output_activation: ClassVar[str]

    def __init__(self, weight_scale: float = 1.0):
        # network.weight_scale: every weight bound but the output layer's multiplied by it (weight
        # scaling, Yeom et al. 2024); 1 draws exactly the unscaled initialisation.
        self.weight_scale = weight_scale

    @classmethod
    def from_spec(cls, spec: NetworkSpec, weight_scale: float = 1.0) -> Model:
        """The model set up to initialise the spec's network."""
        return cls(weight_scale)

    @abstractmethod
    def init_layer(self, index: int, last: bool, weight, bias, rng) -> None:
        """Draw layer `index`'s weight [out, in] and bias [out] (float32 views) from rng."""


class Siren(Model):
    """Sine hidden layers, a linear output, and the SIREN paper's initialisation (Sitzmann et al. 2020):
    the first layer's weights U(±1/in), later ones U(±sqrt(6/in)/omega0), biases U(±1/sqrt(in)) as
    PyTorch's nn.Linear and the paper's code. weight_scale multiplies the bounds of every layer's
    weights but the last (weight scaling, Yeom et al. 2024)."""

    name, hidden_activation, output_activation = "siren", "sine", "linear"

    def __init__(self, omega0: float, weight_scale: float = 1.0):
        super().__init__(weight_scale)
        self.omega0 = omega0

    @classmethod
    def from_spec(cls, spec: NetworkSpec, weight_scale: float = 1.0) -> Model:
        return cls(spec.omega0, weight_scale)

    def init_layer(self, index: int, last: bool, weight, bias, rng) -> None:
        in_f = weight.shape[1]
        bound = 1.0 / in_f if index == 0 else math.sqrt(6.0 / in_f) / self.omega0
        if not last:
            bound *= self.weight_scale
        weight[...] = rng.uniform(-bound, bound, weight.shape)
        bias_bound = 1.0 / math.sqrt(in_f)
        bias[...] = rng.uniform(-bias_bound, bias_bound, bias.shape)


class GlorotSigmoidOutput(Model):
    """A sigmoid output, and Glorot uniform weights U(±sqrt(6/(in+out))) with zero biases (the
    bounds of all but the output layer's times weight_scale)."""

    output_activation = "sigmoid"

    def init_layer(self, index: int, last: bool, weight, bias, rng) -> None:
        out_f, in_f = weight.shape
        bound = math.sqrt(6.0 / (in_f + out_f))
        if not last:
            bound *= self.weight_scale
        weight[...] = rng.uniform(-bound, bound, weight.shape)
        bias[...] = 0.0


class Sigmoid(GlorotSigmoidOutput):
    name, hidden_activation = "sigmoid", "sigmoid"


class Relu(GlorotSigmoidOutput):
    name, hidden_activation = "relu", "relu"


def output_bias(activation: str, mean: np.ndarray) -> np.ndarray:
    """The output biases that start a network whose output layer has this activation at the colour
    `mean` (per channel): the mean itself for a linear output, its logit for a sigmoid one. A mostly
    white drawing otherwise starts a sigmoid at 0.5 and drives every output, and with it the hidden
    layers, into saturation before any stroke is learnt (a blank page)."""
    if activation == "linear":
        return mean
    mean = np.clip(mean, 0.01, 0.99)
    return np.log(mean / (1.0 - mean))


MODEL_CLASSES: dict[str, type[Model]] = {kind.name: kind for kind in (Siren, Sigmoid, Relu)}


def model_class(name: str) -> type[Model]:
    kind = MODEL_CLASSES.get(name)
    if kind is None:
        raise ValueError(f"model '{name}' is not one of: {', '.join(MODEL_CLASSES)}")
    return kind


def create_model(spec: NetworkSpec, weight_scale: float = 1.0) -> Model:
    """The model the spec names, set up to initialise it (its hidden weights scaled by weight_scale)."""
    return model_class(spec.model).from_spec(spec, weight_scale)
