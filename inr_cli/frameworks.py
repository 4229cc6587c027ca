"""The networks as PyTorch modules and JAX functions, the same function as `inr render` draws.

Neither framework is a dependency: each is imported when asked for, and its absence is one line
naming the extra to install. Both follow the parameter layout of core/network.py: per layer
z = x Wᵀ + b with W [out, in], then the layer's activation (sin(omega0 z), sigmoid or ReLU; the
output layer of a SIREN is linear); a Fourier encoding first maps x to [cos(2 pi x Bᵀ), sin(2 pi x Bᵀ)],
a hash grid to its levels' interpolated features (encodings.HashGrid, numpy_ops.hashgrid_corners; its
table a trainable parameter); the colours are clipped to [0, 1] unless asked not to. For a set every
tensor gains a leading dimension N, one network per row of the set.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from inr_cli.core.encodings import HASH_PRIME, create_encoding
from inr_cli.core.network import NetworkSpec, layer_views
from inr_cli.errors import ArgumentValueError
from inr_cli.extras import require

TWO_PI = 2.0 * math.pi


def stacked(spec: NetworkSpec, params: np.ndarray) -> tuple[np.ndarray | None, list[tuple[np.ndarray, np.ndarray]]]:
    """(the encoding's parameters: frequencies [N, m, 2], a hash grid's table [N, entries, F], or None;
    [(W [N, out, in], b [N, out]) per layer]) of [N, P] parameters, as contiguous float32 arrays of
    their own."""
    flat = np.ascontiguousarray(params, dtype=np.float32)
    encoding = create_encoding(spec).export_view(flat)
    layers = [(np.array(w), np.array(b)) for w, b in layer_views(spec, flat)]
    return (None if encoding is None else np.array(encoding)), layers


def check_coords(coords) -> None:
    """The points a module or an apply function takes: [..., 2], (u, v) each. Any other last axis is
    one line, as net(coords) says it: a hash grid would read the first two columns of [rows, 3] and
    draw without a word, and fail inside on [rows, 1]; a layer would fail in the framework's words.
    Its shape alone is looked at, known when traced or jitted."""
    shape = tuple(coords.shape)
    if len(shape) < 1 or shape[-1] != 2:
        raise ArgumentValueError(f"coords of shape {list(shape)}: expected [rows, 2] (u, v) in [-1, 1]")


def hash_grid_lookup(xp, spec: NetworkSpec, coords, read, integers, prime):
    """The hash grid's encoding of coords [..., 2] in an array library xp (torch or jax.numpy) as
    numpy_ops.hashgrid_corners computes it. read(entries [..., rows]) gives the table's rows at those
    entries [..., rows, F]; integers(cells) turns whole floats into the library's indices, whose
    product with `prime` must wrap as uint32 arithmetic does (JAX: uint32; torch: int64 masked)."""
    levels = []
    for resolution, offset, size, hashed in create_encoding(spec).levels_rows():
        position = xp.clip((coords + 1.0) * (resolution / 2), min=0, max=resolution)
        cell = xp.clip(xp.floor(position), max=resolution - 1)
        fraction = position - cell
        cell = integers(cell)
        i, j = cell[..., 0], cell[..., 1]
        fx, fy = fraction[..., 0:1], fraction[..., 1:2]
        total = 0.0
        for a, b, weight in ((i, j, (1 - fx) * (1 - fy)), (i + 1, j, fx * (1 - fy)), (i, j + 1, (1 - fx) * fy),
                             (i + 1, j + 1, fx * fy)):
            entry = xp.bitwise_xor(a, prime(b)) % size if hashed else a + b * (resolution + 1)
            total = total + weight * read(entry + offset)
        levels.append(total)
    return xp.concatenate(levels, -1)


@lru_cache(maxsize=None)
def _torch_module_class():
    torch = require("torch", "to_torch()", "torch")

    class Linear(torch.nn.Module):
        """z = x Wᵀ + b, for one network (W [out, in]) or a stack of them (W [N, out, in])."""

        def __init__(self, weight: np.ndarray, bias: np.ndarray):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.from_numpy(weight))
            self.bias = torch.nn.Parameter(torch.from_numpy(bias))

        def forward(self, x):
            return torch.matmul(x, self.weight.transpose(-1, -2)) + self.bias.unsqueeze(-2)

    class FourierEncoding(torch.nn.Module):
        def __init__(self, frequencies: np.ndarray):
            super().__init__()
            self.register_buffer("frequencies", torch.from_numpy(frequencies))  # fixed, never trained

        def forward(self, x):
            angle = TWO_PI * torch.matmul(x, self.frequencies.transpose(-1, -2))
            return torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)

    class HashGridEncoding(torch.nn.Module):
        """The hash grid; its table [entries, F] (a set: [N, entries, F]) a trainable parameter."""

        def __init__(self, spec: NetworkSpec, table: np.ndarray):
            super().__init__()
            self.spec = spec
            self.table = torch.nn.Parameter(torch.from_numpy(table))

        def forward(self, x):
            table = self.table
            if table.ndim == 2:
                def read(entries):
                    return table[entries]
            else:
                def read(entries):  # a set: each network's rows of its own table
                    entries = entries.expand(table.shape[0], entries.shape[-1])
                    return torch.gather(table, 1, entries.unsqueeze(-1).expand(*entries.shape, table.shape[-1]))

            return hash_grid_lookup(torch, self.spec, x, read, lambda cells: cells.long(),
                                    lambda b: (b * HASH_PRIME) & 0xFFFFFFFF)

    class InrModule(torch.nn.Module):
        """coords [rows, 2] (a set: [N, rows, 2], or [rows, 2] shared by all) -> colours [rows, C]
        (a set: [N, rows, C]). Its state_dict names are those of `inr export`'s safetensors."""

        def __init__(self, spec: NetworkSpec, params: np.ndarray, single: bool, clip: bool):
            super().__init__()
            frequencies, layers = stacked(spec, params)
            pick = (lambda array: array[0]) if single else (lambda array: array)
            self.spec, self.clip = spec, clip
            self.activations = spec.activations()
            if frequencies is None:
                self.encoding = None
            elif spec.encoding == "hashgrid":
                self.encoding = HashGridEncoding(spec, pick(frequencies))
            else:
                self.encoding = FourierEncoding(pick(frequencies))
            self.layers = torch.nn.ModuleList(Linear(pick(w), pick(b)) for w, b in layers)

        def forward(self, coords):
            check_coords(coords)
            h = coords if self.encoding is None else self.encoding(coords)
            for layer, activation in zip(self.layers, self.activations):
                h = layer(h)
                if activation == "sine":
                    h = torch.sin(self.spec.omega0 * h)
                elif activation == "sigmoid":
                    h = torch.sigmoid(h)
                elif activation == "relu":
                    h = torch.relu(h)
            return torch.clamp(h, 0.0, 1.0) if self.clip else h

    return InrModule


@lru_cache(maxsize=None)
def _torch_modulated_class():
    torch = require("torch", "to_torch()", "torch")

    class ModulatedModule(torch.nn.Module):
        """A set of latents over one base (core/modulations.py): coords [rows, 2] or [N, rows, 2] ->
        colours [N, rows, C]; each hidden layer sin(omega0 (x Wᵀ + b + shift)), the shifts
        latents @ modulation.mapᵀ, layer l's the columns l * H .. (l + 1) * H. Its parameters: the
        base's layers (layers.I.weight [out, in], layers.I.bias [out]), modulation.map [L * H, D] and
        latents [N, D]; modulation.rates [D] a buffer (a latent's step size, to fit new ones)."""

        def __init__(self, base, latents: np.ndarray, clip: bool):
            super().__init__()
            self.spec, self.clip, self.inner_steps = base.spec, clip, base.inner_steps
            _, layers = stacked(base.spec, base.params[None])
            self.layers = torch.nn.ModuleList()
            for weight, bias in layers:
                layer = torch.nn.Module()
                layer.weight = torch.nn.Parameter(torch.from_numpy(weight[0]))
                layer.bias = torch.nn.Parameter(torch.from_numpy(bias[0]))
                self.layers.append(layer)
            self.modulation = torch.nn.Module()
            self.modulation.map = torch.nn.Parameter(torch.from_numpy(np.array(base.shift_map)))
            self.modulation.register_buffer("rates", torch.from_numpy(np.array(base.rates)))
            self.latents = torch.nn.Parameter(torch.from_numpy(np.array(latents, dtype=np.float32)))

        def forward(self, coords):
            check_coords(coords)
            shifts = torch.matmul(self.latents, self.modulation.map.transpose(0, 1))  # [N, L * H]
            hidden = self.spec.hidden
            h = coords if coords.ndim == 3 else coords.unsqueeze(0)
            for i, layer in enumerate(self.layers):
                h = torch.matmul(h, layer.weight.transpose(0, 1)) + layer.bias
                if i < self.spec.layers:
                    h = torch.sin(self.spec.omega0 * (h + shifts[:, None, i * hidden:(i + 1) * hidden]))
            return torch.clamp(h, 0.0, 1.0) if self.clip else h

    return ModulatedModule


def to_torch_modulated(base, latents: np.ndarray, clip: bool = True):
    """A torch.nn.Module of a set of latents over a base (ModulatedModule); float32, on the CPU until
    moved."""
    return _torch_modulated_class()(base, latents, clip)


def to_jax_modulated(base, latents: np.ndarray, clip: bool = True):
    """(params, apply): {"layers": [{"weight", "bias"}...] of the base, "map" [L * H, D], "rates" [D],
    "latents" [N, D]}, and apply(params, coords [rows, 2] or [N, rows, 2]) -> [N, rows, C], jittable."""
    require("jax", "to_jax()", "jax")
    import jax.numpy as jnp

    _, layers = stacked(base.spec, base.params[None])
    tree = {"layers": [{"weight": jnp.asarray(w[0]), "bias": jnp.asarray(b[0])} for w, b in layers],
            "map": jnp.asarray(base.shift_map), "rates": jnp.asarray(base.rates),
            "latents": jnp.asarray(np.asarray(latents, dtype=np.float32))}
    spec = base.spec

    def apply(params, coords):
        check_coords(coords)
        shifts = params["latents"] @ params["map"].T
        h = coords if coords.ndim == 3 else coords[None]
        for i, layer in enumerate(params["layers"]):
            h = h @ layer["weight"].T + layer["bias"]
            if i < spec.layers:
                h = jnp.sin(spec.omega0 * (h + shifts[:, None, i * spec.hidden:(i + 1) * spec.hidden]))
        return jnp.clip(h, 0.0, 1.0) if clip else h

    return tree, apply


def to_torch(spec: NetworkSpec, params: np.ndarray, single: bool, clip: bool = True):
    """A torch.nn.Module of [N, P] parameters (single: the one network of [1, P], without the N
    dimension); its parameters are trainable, float32, on the CPU until moved."""
    return _torch_module_class()(spec, params, single, clip)


def to_jax(spec: NetworkSpec, params: np.ndarray, single: bool, clip: bool = True):
    """(params, apply): a pytree {"layers": [{"weight", "bias"}...], "frequencies" (with Fourier
    features) or "table" (with a hash grid)} and apply(params, coords) -> colours, jittable and
    vmappable. single: one network,
    coords [rows, 2]; else the leaves have a leading N and apply maps the one-network function over
    it (coords [N, rows, 2], or [rows, 2] shared by all)."""
    require("jax", "to_jax()", "jax")
    import jax
    import jax.numpy as jnp

    encoding, layers = stacked(spec, params)
    pick = (lambda array: array[0]) if single else (lambda array: array)
    tree = {"layers": [{"weight": jnp.asarray(pick(w)), "bias": jnp.asarray(pick(b))} for w, b in layers]}
    if encoding is not None:
        tree[create_encoding(spec).export_name] = jnp.asarray(pick(encoding))
    activations, omega0 = spec.activations(), spec.omega0

    def apply_one(params, coords):
        check_coords(coords)
        h = coords
        if "table" in params:
            h = hash_grid_lookup(jnp, spec, h, lambda entries: jnp.take(params["table"], entries, axis=0),
                                 lambda cells: cells.astype(jnp.uint32), lambda b: b * jnp.uint32(HASH_PRIME))
        if "frequencies" in params:
            angle = TWO_PI * (h @ params["frequencies"].T)
            h = jnp.concatenate([jnp.cos(angle), jnp.sin(angle)], axis=-1)
        for layer, activation in zip(params["layers"], activations):
            h = h @ layer["weight"].T + layer["bias"]
            if activation == "sine":
                h = jnp.sin(omega0 * h)
            elif activation == "sigmoid":
                h = jax.nn.sigmoid(h)
            elif activation == "relu":
                h = jax.nn.relu(h)
        return jnp.clip(h, 0.0, 1.0) if clip else h

    if single:
        return tree, apply_one

    def apply_set(params, coords):
        coords_axis = 0 if coords.ndim == 3 else None
        return jax.vmap(apply_one, in_axes=(0, coords_axis))(params, coords)

    return tree, apply_set
