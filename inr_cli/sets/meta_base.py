"""Learning a base with modulations (`inr meta-init --modulations D`): the base network, its map
and each latent's rate meta-learned so that a few steps on a latent from 0 fit an image (functa,
Dupont et al. 2022: MAML, Finn et al. 2017, with the inner loop on the latents only, as CAVIA,
Zintgraf et al. 2019, and meta-SGD's learned rates, Li et al. 2017).

An outer step takes a batch of images, fits their latents for K steps (core/modulations.py's
LatentPass, the engine fit-many's latents are fitted on), and moves θ = (base, map, rates) by Adam
along the gradient of their mean loss after the K steps, taken through the K steps; Adam's rate
decays linearly to 0 over the outer steps, as Reptile's step does (held, a 3x128 base learned well
for a thousand outer steps and then fell apart: BENCHMARKS.md, "Sets of latents"). That gradient
needs, at each inner step k going back, the Hessian of the loss at z_k times a vector u in latent
space, for θ and for z: those are central differences of the engine's gradient along u,
(∇L(z_k + εu) - ∇L(z_k - εu)) / 2ε (Hessian-free MAML, Fallah et al. 2020), ε chosen so that the
largest shift it makes moves a sine's phase by PHASE_STEP: small enough that the difference is the
derivative to about 1e-4 of it, large enough that float32's rounding stays below that. The rest is
exact. tests/test_modulations.py holds it to finite differences of the loss after the K steps.
"""

from __future__ import annotations

import numpy as np

from inr_cli.core.modulations import LatentPass, ModulatedBase
from inr_cli.sets.meta_common import InnerFitsDiverged, first_start, outer_rate

PHASE_STEP = 1e-2  # radians: the largest change of a sine's argument a difference step makes


def _at(latent_pass: LatentPass, latents: np.ndarray, whole: bool):
    """(loss [N], dL/dz [N, D] float64, and where `whole` the base's gradient [P + L H D] summed
    over the networks) at these latents."""
    latent_pass.set_latents(latents)
    latent_pass.loss_and_shift_grads()
    latent_grads = latent_pass.latent_gradients().astype(np.float64)
    base = latent_pass.base_gradients() if whole else None
    return latent_pass.read_loss(), latent_grads, base


def outer_gradient(latent_pass: LatentPass, base: ModulatedBase) -> tuple[np.ndarray, np.ndarray]:
    """(d mean loss after K steps / dθ [ModulatedBase.flat's size] float64, each image's loss after
    the K steps) for the images loaded in latent_pass, the base loaded there too."""
    n, steps = latent_pass.networks, base.inner_steps
    rates = base.rates.astype(np.float64)
    latents, gradients = [np.zeros((n, base.latent))], []
    for _ in range(steps):  # the inner loop, as fit_latents runs it (here in float64 between passes)
        gradients.append(_at(latent_pass, latents[-1], whole=False)[1])
        latents.append(latents[-1] - rates * gradients[-1])
    losses, latent_bar, theta_bar = _at(latent_pass, latents[-1], whole=True)
    rates_bar = np.zeros(base.latent)
    shift_map = base.shift_map.astype(np.float64)
    for k in reversed(range(steps)):  # z_{k+1} = z_k - rates * g(θ, z_k), taken back
        rates_bar -= np.sum(gradients[k] * latent_bar, axis=0)
        u = rates * latent_bar
        largest = float(np.abs(u @ shift_map.T).max()) * base.spec.omega0
        if largest == 0.0:
            continue
        eps = PHASE_STEP / largest
        _, up_latents, up_base = _at(latent_pass, latents[k] + eps * u, whole=True)
        _, down_latents, down_base = _at(latent_pass, latents[k] - eps * u, whole=True)
        theta_bar -= (up_base - down_base) / (2 * eps)
        latent_bar = latent_bar - (up_latents - down_latents) / (2 * eps)
    return np.concatenate([theta_bar, rates_bar]) / n, losses


ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # the outer optimizer's (PyTorch's defaults, functa's)
MOST_RATE = 1.0  # the rates are held to [0, 1], as functa clips them


class ModulatedLearning:
    """meta.py's learn_start with a base with modulations: θ = ModulatedBase.flat() (the base
    network, its map, the rates), moved by Adam along outer_gradient; the held-out measure is the loss
    after the inner steps of fit_latents, the very fit fit-many makes from the base. On the backend of
    an InProcess runner (one process: the outer gradient needs every image's passes in turn)."""

    extra = ("moment1", "moment2")  # Adam's, kept in the checkpoint beside θ

    def __init__(self, runner, spec, config, options, images, training):
        from inr_cli.core.modulations import refuse_unmodulable

        refuse_unmodulable(spec)
        self.backend = getattr(runner, "backend", None)
        if self.backend is None:
            raise ValueError("a base with modulations is learned in this process")
        self.where = self.backend.name
        self.spec, self.config, self.options, self.images, self.training = spec, config, options, images, training
        self.latent = options.modulations
        self.size = spec.parameter_count() + spec.layers * spec.hidden * self.latent + self.latent
        self.passes: dict[int, LatentPass] = {}  # by the images' count: the batch's and the held-out's

    def base(self, theta: np.ndarray) -> ModulatedBase:
        return ModulatedBase.from_flat(self.spec, theta, self.latent, self.options.inner_steps)

    def first(self) -> np.ndarray:
        """The first base: the start meta-init would begin a start from (the file's network, or the
        shared draw, its outputs at the training images' mean colour), a drawn map and every rate at
        inner_lr; a base file of this latent size gives its own map and rates too."""
        from inr_cli.core.modulations import first_base
        from inr_cli.sets.latents import base_of

        given = base_of(self.config.training.init)
        if given is not None and given.latent == self.latent:
            return ModulatedBase(self.spec, given.params, given.shift_map, given.rates,
                                 self.options.inner_steps).flat()
        params = first_start(self.config, self.spec, [self.images[i] for i in self.training])
        return first_base(self.spec, params, self.latent, self.options.inner_lr, self.options.inner_steps,
                          self.config.training.seed).flat()

    def prepare(self) -> None:
        pass

    def _pass(self, theta: np.ndarray, chosen) -> LatentPass:
        targets = np.stack([self.images[i].targets() for i in chosen])
        latent_pass = self.passes.get(len(chosen))
        if latent_pass is None:
            first = self.images[0]
            latent_pass = self.passes[len(chosen)] = LatentPass(self.backend, self.base(theta), targets, first.width,
                                                                first.height)
        else:
            latent_pass.load_base(self.base(theta))
            latent_pass.load_targets(targets)
        return latent_pass

    def step(self, theta: np.ndarray, kept: dict, step: int, chosen) -> tuple[np.ndarray, dict]:
        """Adam's step t = step + 1 along the outer gradient of the images `chosen`."""

        gradient, losses = outer_gradient(self._pass(theta, chosen), self.base(theta))
        if not (np.isfinite(gradient).all() and np.isfinite(losses).all()):
            raise InnerFitsDiverged("the loss after the inner steps became NaN or infinite")
        if not self.options.meta_sgd:
            gradient[-self.latent:] = 0.0
        (beta1, beta2), t = ADAM_BETAS, step + 1
        moment1 = beta1 * kept.get("moment1", np.zeros(self.size)) + (1 - beta1) * gradient
        moment2 = beta2 * kept.get("moment2", np.zeros(self.size)) + (1 - beta2) * gradient ** 2
        moved = theta - outer_rate(self.options, step) * (moment1 / (1 - beta1 ** t)) / (
            np.sqrt(moment2 / (1 - beta2 ** t)) + ADAM_EPS)
        moved[-self.latent:] = np.clip(moved[-self.latent:], 0.0, MOST_RATE)
        return moved, {"moment1": moment1, "moment2": moment2}

    def heldout_loss(self, theta: np.ndarray, heldout) -> float:
        from inr_cli.core.modulations import LatentsDiverged, fit_latents

        try:
            fitted = fit_latents(self._pass(theta, heldout), self.options.inner_steps)
        except LatentsDiverged as exc:
            raise InnerFitsDiverged(str(exc)) from None
        return float(np.mean(fitted["loss"]))

    def write(self, theta: np.ndarray, out, facts: dict) -> None:
        from inr_cli.formats.modulated import write_base

        first = self.images[0]
        write_base(self.base(theta), first.channels, out, {"method": "functa", **facts}, (first.width, first.height))

    def close(self) -> None:
        pass
