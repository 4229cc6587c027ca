"""The encodings: what the first layer sees instead of the coordinates (u, v).

`create_encoding(spec)` builds the one a network spec names (spec.encoding); a new encoding is a
class here, registered in ENCODING_CLASSES (and named among the settings' choices), plus the
backend operations it launches. An encoding says how wide its output is, which parameters it keeps
at the front of each network's parameter vector (never trained: their gradient stays zero, and a
zero gradient leaves Adam and SGD updates at zero), how they start, which batch-sized buffers it
needs, and runs on a batch in the forward pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # annotations only: the backend itself is handed in
    from inr_cli.core.backend import Backend
    from inr_cli.core.network import NetworkSpec
    from inr_cli.core.workspace import Workspace


class Encoding(ABC):
    name: ClassVar[str]  # encoding.name in the configuration, NetworkSpec.encoding

    def __init__(self, spec: NetworkSpec):
        self.in_features = spec.in_features

    @property
    @abstractmethod
    def features(self) -> int:
        """The width of its output: the first layer's inputs."""

    @property
    def parameter_count(self) -> int:
        """Entries at the front of each network's parameter vector."""
        return 0

    def parameters(self, flat):
        """Optional hook: its parameters as views into [N, P] parameters (or gradients, moments); None: it has none."""
        return None

    def initialise(self, parameters, rng) -> None:
        """Optional hook: draw one network's parameters (parameters(flat)[0]) from rng; first, before any layer's."""
        return None

    def buffer_shapes(self, networks: int, batch: int) -> dict[str, tuple]:
        """The workspace buffers it needs, by the name it finds them under."""
        return {}

    @abstractmethod
    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        """The first layer's input for the first `rows` rows of x [N or 1, rows, in_features]."""

    @abstractmethod
    def output(self, ws: Workspace, x, rows: int):
        """What forward returned in the forward pass just run (the first layer's weight gradient needs it)."""


class Identity(Encoding):
    """The coordinates as they are."""

    name = "none"

    @property
    def features(self) -> int:
        return self.in_features

    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        return x[:, :rows]

    def output(self, ws: Workspace, x, rows: int):
        return x[:, :rows]


class Fourier(Encoding):
    """Gaussian Fourier features (Tancik et al. 2020): [cos(2 pi x Bᵀ), sin(2 pi x Bᵀ)], the
    frequencies B [m, in] ~ N(0, sigma^2) kept, frozen, in the parameters."""

    name = "fourier"

    def __init__(self, spec: NetworkSpec):
        super().__init__(spec)
        self.frequencies, self.sigma = spec.fourier_features, spec.fourier_sigma

    @property
    def features(self) -> int:
        return 2 * self.frequencies

    @property
    def parameter_count(self) -> int:
        return self.frequencies * self.in_features

    def parameters(self, flat):
        """B [N, m, in]."""
        return flat[:, : self.parameter_count].reshape(flat.shape[0], self.frequencies, self.in_features)

    def initialise(self, parameters, rng) -> None:
        parameters[...] = rng.normal(0.0, self.sigma, parameters.shape)

    def buffer_shapes(self, networks: int, batch: int) -> dict[str, tuple]:
        # x Bᵀ, then [cos, sin] of it: the first layer's input, kept for its weight gradient.
        return {"projection": (networks, batch, self.frequencies), "encoded": (networks, batch, self.features)}

    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        backend.matmul(x[:, :rows], parameters, ws.projection[:, :rows], trans_b=True)
        backend.fourier_features(ws.projection[:, :rows], ws.encoded[:, :rows])
        return ws.encoded[:, :rows]

    def output(self, ws: Workspace, x, rows: int):
        return ws.encoded[:, :rows]


ENCODING_CLASSES: dict[str, type[Encoding]] = {kind.name: kind for kind in (Identity, Fourier)}


def create_encoding(spec: NetworkSpec) -> Encoding:
    """The encoding the spec names, sized for it."""
    kind = ENCODING_CLASSES.get(spec.encoding)
    if kind is None:
        raise ValueError(f"encoding '{spec.encoding}' is not one of: {', '.join(ENCODING_CLASSES)}")
    return kind(spec)
