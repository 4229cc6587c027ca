"""Sets of latents: `inr fit-many FOLDER --init base.safetensors`, where the start is a base with
modulations (formats/modulated.py), fits each image's latent only, in the steps the base was learned
for unless --steps says otherwise (and stops each at --until-psnr), and writes a set whose rows are
the latents (the plan's `latent`), the base copied beside them (network_set.BASE), so that the set
draws and loads without the file it was fitted from.

The settings a base fixes are taken from it: its network (given flags must agree, as for any file
start) and its inner steps as --steps; the latents are fitted on every pixel with the base's rates,
so a mini-batch, the optimizer and its rate do not apply (a mini-batch is refused).
"""

from __future__ import annotations

import numpy as np

from inr_cli.config import Config, with_values
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.modulations import LatentPass, LatentsDiverged, ModulatedBase, fit_latents
from inr_cli.core.pixels import PixelImage
from inr_cli.core.render import render_networks
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.modulated import is_base_file, read_base
from inr_cli.formats.start import is_file_start, start_file, start_sha256
from inr_cli.hooks import hook


def base_of(init: str) -> ModulatedBase | None:
    """The base a start names, or None where it is a draw or a file of one network."""
    if not is_file_start(init) or not is_base_file(start_file(init)):
        return None
    return read_base(start_file(init))[0]


def latent_settings(config: Config, base: ModulatedBase, given: set[str] | None,
                    said: set[str] = frozenset()) -> Config:
    """fit-many's settings over a base: the network and --steps the command does not give are the
    base's; a mini-batch, outputs at the mean (which the latents draw) or an optimizer setting the
    command says itself (`said`: its flags and --set keys; the latents step with the base's rates)
    are refused."""
    optimizer = sorted(key for key in said if key.startswith("optimizer."))
    if optimizer:
        raise UsageError(f"{optimizer[0]}: the latents over a base step with the rates learned with it, not an "
                         f"optimizer's; leave it out (or learn another base)")
    if config.training.batch_size:
        raise UsageError(f"--batch-size {config.training.batch_size}: the latents over a base are fitted on every "
                         f"pixel; leave it at 0")
    if config.network.start_output_at_mean:
        raise UsageError("--start-output-at-mean: a base keeps its own output biases; each latent draws its colour")
    taken = {key: value for key, value in {**base.spec.settings(), "training.steps": base.inner_steps}.items()
             if given is None or key not in given}
    return with_values(config, taken)


def plan_base(plan) -> ModulatedBase:
    """The base of a plan of latents, checked to be the file it was planned with."""
    init = plan.config.training.init
    if plan.start_sha256 and start_sha256(init) != plan.start_sha256:
        raise InrError(f"--init {init}: the base changed since this set was started; restore it or use another -o")
    base = read_base(start_file(init))[0]
    if base.spec != plan.spec or base.latent != plan.latent:
        raise InrError(f"--init {init}: not the base this set was planned with (its network or latent size differ)")
    return base


def fit_latent_pack(backend, plan, images: list[PixelImage], names: list[str], signals=None, progress=None) -> dict:
    """One pack's latents fitted through the plan's base (core/modulations.fit_latents), then each
    image drawn through the base and scored: fit_pack's result with the latents as `params`."""
    base = plan_base(plan)
    first = images[0]
    training = plan.config.training
    latent_pass = LatentPass(backend, base, np.stack([image.targets() for image in images]), first.width,
                             first.height)
    if progress is not None:
        progress.pack_started(len(images), 0)

    def on_step(step: int, losses: np.ndarray) -> None:
        hook("pack-step", step=step)
        if progress is not None:
            progress.reading(step, losses)
            progress.step(step)

    try:
        fitted = fit_latents(latent_pass, training.steps, training.target_psnr, signals, on_step)
    except LatentsDiverged as exc:
        raise InrError(f"{names[exc.row]}: {exc}; the pack stopped, the shards finished before it are kept. The "
                       f"base's rates are too large for it: fit with fewer --steps") from None
    expanded = base.expand(fitted["latents"])
    rendered = render_networks(backend, plan.spec, backend.to_device(expanded), first.width, first.height)
    errors = [float(np.mean((rendered[i] - images[i].values) ** 2, dtype=np.float64)) for i in range(len(images))]
    return {"names": np.array(names), "params": fitted["latents"], "loss": fitted["loss"], "steps": fitted["steps"],
            "psnr": np.array([psnr_from_mse(e) for e in errors])}
