"""A base network with modulations: every image is a small latent vector over one shared SIREN
(functa: Dupont, Kim, Eslami, Rezende, Rosenbaum, ICML 2022).

Each hidden layer l of the base computes sin(omega0 (x W_lᵀ + b_l + s_l)), where the shift s_l is
a linear map of the image's latent z (shift modulations): s = M z, M [L * H, D] holding layer l's
rows at l * H .. (l + 1) * H. The output layer is the base's own. An image's network is therefore an
ordinary SIREN, the base with its hidden biases moved by M z (ModulatedBase.expand): it draws,
exports and loads as any network does. The latent is fitted from z = 0 by a few steps of gradient
descent with a rate per latent (meta-SGD, Li et al. 2017): z <- z - rates * dL/dz. The base, M and
the rates are meta-learned so that those few steps fit an image (sets/meta_base.py).

LatentPass runs N images' latents through one base on any backend with the operations every
engine has: the base's weights are one stack seen by every network (Backend.broadcast), the N
networks' hidden biases one [N, L * H] array, b + M z computed by linear_forward on a row of each
network, and so is the latent step (z + gradient @ (-rates * M)): on the GPU nothing of a step leaves
the device. Its backward pass stops at the hidden biases, whose gradient is the shifts' (a weight
gradient is only made, summed over the networks, for the meta-learning: base_gradients).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inr_cli import arguments
from inr_cli.core.coords import pixel_grid
from inr_cli.core.network import NetworkSpec, layer_views
from inr_cli.core.workspace import Workspace
from inr_cli.errors import ArgumentValueError, InrError

# What a base holds besides its network: the map's and the rates' names in its file (formats/modulated.py)
MAP, RATES = "modulation.map", "modulation.rates"


@dataclass
class ModulatedBase:
    """A base network (spec, params [P] float32), its modulation map [L * H, D] float32 and each
    latent's rate [D] float32, with the inner steps it was learned for."""

    spec: NetworkSpec
    params: np.ndarray
    shift_map: np.ndarray
    rates: np.ndarray
    inner_steps: int

    def __post_init__(self):
        refuse_unmodulable(self.spec)
        shifts = self.spec.layers * self.spec.hidden
        if self.params.shape != (self.spec.parameter_count(),) or self.shift_map.ndim != 2 or \
                self.shift_map.shape[0] != shifts or self.rates.shape != (self.shift_map.shape[1],):
            raise ValueError(f"a base of {self.params.shape} parameters, a map {self.shift_map.shape} and rates "
                             f"{self.rates.shape} for a network of {self.spec.parameter_count()} parameters and "
                             f"{shifts} shifts")

    @property
    def latent(self) -> int:
        """D: the numbers per image."""
        return self.shift_map.shape[1]

    def expand(self, latents: np.ndarray) -> np.ndarray:
        """[N, P] float32: each latent's network ([N, D] latents, or one [D]), the base with its hidden
        biases moved by M z. The latents are checked as every array the API takes (arguments.py): real
        and finite numbers, of that shape (what a user gives as `nets.base.expand(...)`)."""
        latents = arguments.float_array(latents, "latents")
        if latents.ndim not in (1, 2) or latents.shape[-1] != self.latent:
            raise ArgumentValueError(f"latents of shape {list(latents.shape)}: expected [N, {self.latent}] or "
                                     f"[{self.latent}]")
        latents = latents.reshape(-1, self.latent)
        params = np.array(np.broadcast_to(self.params, (len(latents), self.params.size)), dtype=np.float32)
        shifts = latents @ self.shift_map.T
        hidden = self.spec.hidden
        for layer, (_, bias) in enumerate(layer_views(self.spec, params)[:-1]):
            bias += shifts[:, layer * hidden:(layer + 1) * hidden]
        return params

    def flat(self) -> np.ndarray:
        """[P + L * H * D + D] float64: the base, the map and the rates, what meta-learning moves."""
        return np.concatenate([self.params, self.shift_map.ravel(), self.rates]).astype(np.float64)

    @classmethod
    def from_flat(cls, spec: NetworkSpec, theta: np.ndarray, latent: int, inner_steps: int) -> "ModulatedBase":
        count, shifts = spec.parameter_count(), spec.layers * spec.hidden
        theta = np.asarray(theta, dtype=np.float32)
        if theta.shape != (count + shifts * latent + latent,):
            raise ValueError(f"{theta.shape} numbers, not a base of {count} parameters with {latent} latents")
        return cls(spec, theta[:count].copy(), theta[count:-latent].reshape(shifts, latent).copy(),
                   theta[-latent:].copy(), inner_steps)


def refuse_unmodulable(spec: NetworkSpec) -> None:
    """Shift modulations are a SIREN's, on (u, v) itself: another network is refused in one line."""
    if spec.model != "siren" or spec.encoding != "none":
        raise InrError(f"a base with modulations is a SIREN without an encoding, not a {spec.model} network with "
                       f"the {spec.encoding} encoding")


def first_base(spec: NetworkSpec, params: np.ndarray, latent: int, rate: float, inner_steps: int,
               seed: int) -> ModulatedBase:
    """The base meta-learning starts from: the network `params`, a map drawn as a linear layer of D
    inputs is (a normal of deviation 1/sqrt(D), cut at two, functa's), every rate at `rate`."""
    rng = np.random.default_rng([seed, 0x4D4F44])  # "MOD": not the draws of the network's own seed
    shift_map = np.clip(rng.standard_normal((spec.layers * spec.hidden, latent)), -2.0, 2.0) / np.sqrt(latent)
    return ModulatedBase(spec, np.asarray(params, dtype=np.float32), shift_map.astype(np.float32),
                         np.full(latent, rate, dtype=np.float32), inner_steps)


class LatentPass:
    """N images' latents through one base on a backend, full batch: their losses, the gradients of
    their latents, a latent step, and for meta-learning the base's gradients summed over them. Every
    buffer is made here, once; `targets` [N, rows, C] (host) are the images' pixels."""

    def __init__(self, backend, base: ModulatedBase, targets: np.ndarray, width: int, height: int):
        b, spec = backend, base.spec
        self.backend, self.spec = b, spec
        self.networks, self.rows = targets.shape[0], width * height
        n, hidden, shifts, latent = self.networks, spec.hidden, spec.layers * spec.hidden, base.latent
        self.coords = b.to_device(pixel_grid(width, height)[None])
        self.targets = b.to_device(np.ascontiguousarray(targets, dtype=np.float32))
        # The base on the device (one stack each), loaded by load_base; the networks see broadcasts
        self.params = b.empty((1, spec.parameter_count()))
        self.hidden_biases = b.empty((1, shifts))
        self.map = b.empty((1, shifts, latent))
        self.rate_map = b.empty((1, latent, shifts))
        self.load_base(base)
        self.biases = b.empty((n, 1, shifts))  # each network's hidden biases: the base's moved by M z
        self.layers = []
        for layer, (weight, bias) in enumerate(layer_views(spec, self.params)):
            own = self.biases[:, 0, layer * hidden:(layer + 1) * hidden] if layer < spec.layers else \
                b.broadcast(bias, n)
            self.layers.append((b.broadcast(weight, n), own))
        self.base_biases = b.broadcast(self.hidden_biases, n)
        self.shift_map = b.broadcast(self.map, n)
        self.step_map = b.broadcast(self.rate_map, n)
        self.shift_grads = b.empty((n, 1, shifts))
        self.latents = [b.empty((n, 1, latent)), b.empty((n, 1, latent))]  # the latent and the next, in turn
        self.current = 0
        self.latent_grads = b.empty((1, n, latent))
        self.ws = Workspace(spec, n, self.rows, b, training=True)
        self.loss = b.empty((n,))
        self.weight_grads = b.empty((1, spec.parameter_count()))
        self.summed = b.empty((1, self.rows * spec.hidden))
        self.map_grad = b.empty((1, shifts, latent))

    def load_base(self, base: ModulatedBase) -> None:
        """The base the networks are drawn through (meta-learning moves it between passes)."""
        if base.spec != self.spec or base.shift_map.shape != tuple(self.map.shape[1:]):
            raise ValueError("a base of another network or latent size than this pass's")
        b = self.backend
        self.base = base
        b.copy_from_host(self.params, base.params[None])
        b.copy_from_host(self.hidden_biases, np.concatenate(
            [bias[0] for _, bias in layer_views(self.spec, base.params[None])[:-1]])[None])
        b.copy_from_host(self.map, base.shift_map[None])
        # The latent step z - rates * (dL/ds @ M) as one product: dL/ds @ (-(M * rates)) plus z
        b.copy_from_host(self.rate_map, np.ascontiguousarray((-(base.shift_map * base.rates)).T)[None])

    def load_targets(self, targets: np.ndarray) -> None:
        """Other images of the same size and count (meta-learning's next batch)."""
        self.backend.copy_from_host(self.targets, np.ascontiguousarray(targets, dtype=np.float32))

    # --- the latents ----------------------------------------------------------------------------
    def set_latents(self, latents: np.ndarray) -> None:
        self.backend.copy_from_host(self.latents[self.current], np.asarray(latents, np.float32).reshape(
            self.networks, 1, self.base.latent))

    def zero_latents(self) -> None:
        self.backend.fill(self.latents[self.current], 0.0)

    def get_latents(self) -> np.ndarray:
        """[N, D] float32 on the host."""
        return np.array(self.backend.to_host(self.latents[self.current])).reshape(self.networks, self.base.latent)

    # --- a pass ---------------------------------------------------------------------------------
    def loss_and_shift_grads(self, gradients: bool = True) -> None:
        """Each network's loss (self.loss) and, unless gradients is False (a last reading, which no
        step follows), dL/ds (self.shift_grads) at the current latents."""
        b, spec, ws = self.backend, self.spec, self.ws
        b.linear_forward(self.latents[self.current], self.shift_map, self.base_biases, self.biases, self.biases,
                         "linear")
        layer_input = self.coords
        for (weight, bias), z, a, activation in zip(self.layers, ws.z, ws.a, spec.activations()):
            b.linear_forward(layer_input, weight, bias, z, a, activation, spec.omega0)
            layer_input = a
        b.mse_loss(layer_input, self.targets, ws.grad[-1], self.loss)
        if not gradients:
            return
        hidden = spec.hidden
        for i in range(spec.layers, 0, -1):  # dL/dz of each hidden layer is its shift's gradient, summed
            b.linear_backward_input(ws.grad[i], self.layers[i][0], ws.z[i - 1], ws.a[i - 1], ws.grad[i - 1],
                                    "sine", spec.omega0)
            b.column_reduce(ws.grad[i - 1], self.shift_grads[:, 0, (i - 1) * hidden:i * hidden])

    def step(self) -> None:
        """z <- z - rates * dL/dz (dL/dz = dL/ds @ M), after loss_and_shift_grads: the next latents
        become the current ones."""
        following = 1 - self.current
        current = self.latents[self.current]
        self.backend.linear_forward(self.shift_grads, self.step_map, current[:, 0], self.latents[following],
                                    self.latents[following], "linear")
        self.current = following

    def read_loss(self) -> np.ndarray:
        return np.array(self.backend.to_host(self.loss), dtype=np.float64)

    def latent_gradients(self) -> np.ndarray:
        """[N, D] float32: dL/dz after loss_and_shift_grads."""
        n = self.networks
        self.backend.matmul(self.shift_grads.reshape(1, n, -1), self.map, self.latent_grads)
        return np.array(self.backend.to_host(self.latent_grads))[0]

    def base_gradients(self) -> np.ndarray:
        """[P + L * H * D] float64: dL/dθ of the base network then dL/dM, each summed over the networks,
        after loss_and_shift_grads: what moves the base in meta-learning (ModulatedBase.flat's order)."""
        b, spec, ws, n, rows = self.backend, self.spec, self.ws, self.networks, self.rows
        for i, (weight_grad, bias_grad) in enumerate(layer_views(spec, self.weight_grads)):
            grad = ws.grad[i]
            if i == 0:  # the coordinates are one table: sum dL/dz over the networks first
                b.column_reduce(grad.reshape(1, n, -1), self.summed)
                b.matmul(self.summed.reshape(1, rows, -1), self.coords, weight_grad, trans_a=True)
            else:
                b.matmul(grad.reshape(1, n * rows, -1), ws.a[i - 1].reshape(1, n * rows, -1), weight_grad,
                         trans_a=True)
            b.column_reduce(grad.reshape(1, n * rows, -1), bias_grad)
        b.matmul(self.shift_grads.reshape(1, n, -1), self.latents[self.current].reshape(1, n, -1), self.map_grad,
                 trans_a=True)
        return np.concatenate([np.asarray(b.to_host(self.weight_grads), dtype=np.float64)[0],
                               np.asarray(b.to_host(self.map_grad), dtype=np.float64).ravel()])


def fit_latents(latent_pass: LatentPass, steps: int, target_psnr: float = 0.0, signals=None,
                on_step=None) -> dict:
    """Every image's latent fitted from 0 for `steps` steps, each stopped at the first step whose loss
    reaches target_psnr dB where given, with the latent that scored it. Returns {latents [N, D], loss
    [N] (of the latents returned), steps [N]}. on_step(step, losses) sees each step's losses; a signal
    pending in `signals` (training_loop.Signals) ends it as Interrupted; a loss that is not finite is
    LatentsDiverged, naming the network's row."""
    from inr_cli.core.training_loop import reached_target

    n = latent_pass.networks
    done = np.zeros(n, dtype=bool)
    latents = np.zeros((n, latent_pass.base.latent), dtype=np.float32)
    losses, taken = np.full(n, np.nan), np.full(n, steps, dtype=np.int64)
    latent_pass.zero_latents()
    for step in range(steps + 1):
        latent_pass.loss_and_shift_grads(gradients=step < steps)
        loss = latent_pass.read_loss()
        if not np.isfinite(loss).all():
            raise LatentsDiverged(int(np.flatnonzero(~np.isfinite(loss))[0]), step)
        if on_step is not None:
            on_step(step, loss)
        reached = ~done & ((step == steps) | reached_target(loss, target_psnr))
        if reached.any():
            latents[reached] = latent_pass.get_latents()[reached]
            losses[reached], taken[reached] = loss[reached], step
            done |= reached
        if done.all():
            break
        if signals is not None:
            signals.check()
        latent_pass.step()
    return {"latents": latents, "loss": losses, "steps": taken}


class LatentsDiverged(InrError):
    def __init__(self, row: int, step: int):
        super().__init__(f"the loss became NaN or infinite at step {step}")
        self.row, self.step = row, step
