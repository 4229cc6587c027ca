"""The encodings: what the first layer sees instead of the coordinates (u, v).

`create_encoding(spec)` builds the one a network spec names (spec.encoding); a new encoding is a
class here, registered in ENCODING_CLASSES (and named among the settings' choices), plus the
backend operations it launches. An encoding says how wide its output is, which parameters it keeps
at the front of each network's parameter vector, how they start, whether they are trained (the hash
grid's tables, through its backward pass; frozen ones, as the Fourier frequencies, keep a zero
gradient, and a zero gradient leaves Adam and SGD updates at zero), how the exports name and shape
them, which batch-sized buffers it needs, and runs on a batch in the forward pass.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:  # annotations only: the backend itself is handed in
    from inr_cli.core.backend import Backend
    from inr_cli.core.network import NetworkSpec
    from inr_cli.core.workspace import Workspace


class Encoding(ABC):
    name: ClassVar[str]  # encoding.name in the configuration, NetworkSpec.encoding
    trainable: ClassVar[bool] = False  # its parameters get a gradient (backward) and are trained
    # Its parameters' name in the exports (safetensors' encoding.<name>, to_jax()'s params[<name>]);
    # None: it has none.
    export_name: ClassVar[str | None] = None

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

    def export_view(self, flat):
        """Its parameters as the exports hold them, a view into [N, P] parameters (export_name's tensor,
        stacked over the networks); by default as parameters() gives them."""
        return self.parameters(flat)

    def initialise(self, parameters, rng) -> None:
        """Optional hook: draw one network's parameters (parameters(flat)[0]) from rng; first, before any layer's."""
        return None

    def buffers(self, backend: Backend, networks: int, batch: int, training: bool, dtype=np.float32) -> dict:
        """The workspace buffers it needs, made on the backend, by the name it finds them under
        (training: for a backward pass too)."""
        return {}

    @abstractmethod
    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        """The first layer's input for the first `rows` rows of x [N or 1, rows, in_features]."""

    @abstractmethod
    def output(self, ws: Workspace, x, rows: int):
        """What forward returned in the forward pass just run (the first layer's weight gradient needs it)."""

    def backward(self, backend: Backend, ws: Workspace, x, rows: int, output_grad, parameter_grads) -> None:
        """A trainable encoding's parameter gradients (parameters(grads)) from dL/d(its output)
        [N, rows, features], after the forward pass on the same rows."""
        raise NotImplementedError(f"the {self.name} encoding is not trained")


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
    export_name = "frequencies"

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

    def buffers(self, backend: Backend, networks: int, batch: int, training: bool, dtype=np.float32) -> dict:
        # x Bᵀ, then [cos, sin] of it: the first layer's input, kept for its weight gradient.
        return {"projection": backend.empty((networks, batch, self.frequencies), dtype),
                "encoded": backend.empty((networks, batch, self.features), dtype)}

    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        backend.matmul(x[:, :rows], parameters, ws.projection[:, :rows], trans_b=True)
        backend.fourier_features(ws.projection[:, :rows], ws.encoded[:, :rows])
        return ws.encoded[:, :rows]

    def output(self, ws: Workspace, x, rows: int):
        return ws.encoded[:, :rows]


# The spatial hash of Müller et al. 2022: the vertex (i, j) of a level too fine to store densely
# goes to entry (i * 1 XOR j * HASH_PRIME) mod T. The kernels and the exports are handed it from here.
HASH_PRIME = 2654435761
# Columns of HashGrid.level_table: what every implementation of the lookup reads per level.
LEVEL_RESOLUTION, LEVEL_OFFSET, LEVEL_SIZE, LEVEL_HASHED = range(4)


def table_entries(log2_size: float) -> int:
    """Entries of a level's table for log2_table_size: 2^N, N a whole number when set by hand, any
    number when the byte budget chose it (sizing.table_for_image)."""
    return int(round(2.0 ** log2_size))


def level_resolutions(levels: int, coarsest: int, finest: int) -> list[int]:
    """Cells across each level: coarsest * b^l rounded down, b growing the coarsest to the finest
    in equal ratios (Müller et al. 2022, eq. 2-3)."""
    if levels == 1:
        return [finest]
    growth = math.exp((math.log(finest) - math.log(coarsest)) / (levels - 1))
    # The small addition keeps b^(L-1) * coarsest, a whole number in exact arithmetic, from rounding down.
    return [max(1, int(math.floor(coarsest * growth**level + 1e-6))) for level in range(levels)]


class HashGrid(Encoding):
    """A multiresolution hash encoding (Müller, Evans, Schied, Keller 2022, "Instant Neural Graphics
    Primitives"): L grids from `min_resolution` to `max_resolution` cells across the image; each
    level's vertices hold F trained features in a table of its own, stored densely where the
    (N + 1)^2 vertices fit in T = 2^log2_table_size entries (table_entries), hashed into T entries (HASH_PRIME)
    beyond. A point (u, v) in [-1, 1]^2 lies at ((u + 1) N / 2, (v + 1) N / 2) on level N's grid
    (clamped to it); its F features there are the bilinear interpolation of its cell's four corners.
    The encoding is the L levels' features side by side, [level 0's F, level 1's F, ...].

    The tables sit at the front of each network's parameter vector, level after level, each entry's
    F features together: entry e of level l is at (offset_l + e) * F. They start uniform in
    ±1e-4, as tiny-cuda-nn starts them, and are trained with the network."""

    name = "hashgrid"
    trainable = True
    export_name = "table"
    INIT_BOUND = 1e-4

    def __init__(self, spec: NetworkSpec):
        super().__init__(spec)
        if spec.in_features != 2:
            raise ValueError("the hash grid encodes points of the image plane (two coordinates)")
        self.level_features = spec.hash_features
        self.resolutions = level_resolutions(spec.hash_levels, spec.hash_min_resolution, spec.hash_max_resolution)
        table_size = table_entries(spec.hash_log2_size)
        table = np.zeros((spec.hash_levels, 4), dtype=np.int64)
        offset = 0
        for level, resolution in enumerate(self.resolutions):
            vertices = (resolution + 1) ** 2
            size = min(vertices, table_size)
            table[level] = (resolution, offset, size, vertices > table_size)
            offset += size
        self.level_table = table  # [L, 4]: LEVEL_RESOLUTION, LEVEL_OFFSET, LEVEL_SIZE, LEVEL_HASHED
        self.entries = offset

    @property
    def levels(self) -> int:
        return len(self.resolutions)

    @property
    def features(self) -> int:
        return self.levels * self.level_features

    @property
    def parameter_count(self) -> int:
        return self.entries * self.level_features

    def parameters(self, flat):
        """The tables [N, entries * F] (a view)."""
        return flat[:, : self.parameter_count]

    def export_view(self, flat):
        """The tables as [N, entries, F]: each entry's features in a row (what the exports name
        encoding.table)."""
        return self.parameters(flat).reshape(len(flat), self.entries, self.level_features)

    def initialise(self, parameters, rng) -> None:
        parameters[...] = rng.uniform(-self.INIT_BOUND, self.INIT_BOUND, parameters.shape)

    def buffers(self, backend: Backend, networks: int, batch: int, training: bool, dtype=np.float32) -> dict:
        # The encoding (the first layer's input) and, to train, dL/d(encoding) for the scatter and
        # whatever the backend keeps of the forward's lookups for it.
        made = {"encoded": backend.empty((networks, batch, self.features), dtype), "corners": None}
        if training:
            made["encoded_grad"] = backend.empty((networks, batch, self.features), dtype)
            made["corners"] = backend.hashgrid_corner_buffers(self.levels, networks, batch)
        return made

    def forward(self, backend: Backend, ws: Workspace, parameters, x, rows: int):
        backend.hashgrid_encode(x[:, :rows], parameters, ws.encoded[:, :rows], self.level_table, ws.corners)
        return ws.encoded[:, :rows]

    def output(self, ws: Workspace, x, rows: int):
        return ws.encoded[:, :rows]

    def backward(self, backend: Backend, ws: Workspace, x, rows: int, output_grad, parameter_grads) -> None:
        backend.hashgrid_backward(x[:, :rows], output_grad, parameter_grads, self.level_table, ws.corners)

    def levels_rows(self) -> list[tuple[int, int, int, bool]]:
        """(resolution, offset, size, hashed) per level, as plain numbers: what the exports loop over."""
        return [(int(n), int(offset), int(size), bool(hashed)) for n, offset, size, hashed in self.level_table]

    def description(self) -> dict:
        """What another tool needs to read the tables (the exports' metadata): the level table's rows,
        the hash's prime and the features per entry."""
        return {"levels": [list(row) for row in self.levels_rows()], "columns": ["resolution", "offset", "size",
                "hashed"], "prime": HASH_PRIME, "features": self.level_features}


ENCODING_CLASSES: dict[str, type[Encoding]] = {kind.name: kind for kind in (Identity, Fourier, HashGrid)}


def create_encoding(spec: NetworkSpec) -> Encoding:
    """The encoding the spec names, sized for it."""
    kind = ENCODING_CLASSES.get(spec.encoding)
    if kind is None:
        raise ValueError(f"encoding '{spec.encoding}' is not one of: {', '.join(ENCODING_CLASSES)}")
    return kind(spec)
