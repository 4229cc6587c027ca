"""Fitting a shard of a set on a backend: its images loaded and checked against the plan, its
networks trained in packs through the core's networks dimension (the training loop of `inr train`),
then scored. A network trained in a pack gets the bits it would get alone: `inr train IMAGE --seed
SEED` with the same settings gives the same one.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from inr_cli.config import Config
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.pixels import PixelImage
from inr_cli.core.state import TrainingState
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Interrupted, Signals, run_steps
from inr_cli.errors import InrError
from inr_cli.hooks import hook
from inr_cli.sets import inputs
from inr_cli.sets.partial import PackState
from inr_cli.sets.plan import ImageEntry, Plan
from inr_cli.sets.set_folder import SetFolder


def default_pack(backend, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
    """As many networks per step as fill the device: the training workspace and parameters of a
    network against the backend's memory budget (half the GPU's free memory, a share of the host's)."""
    rows = width * height if config.training.batch_size == 0 else min(config.training.batch_size, width * height)
    widths = sum(out_f for out_f, _ in spec.layer_shapes())
    per_network = 4 * (rows * (3 * widths + 2 * spec.encoded_features + 2 * spec.out_features + 4)
                       + 5 * spec.parameter_count())
    budget = backend.memory_budget()
    return int(max(1, min(4096, budget // max(per_network, 1))))


class PackProgress(Protocol):
    """What follows a pack's steps (progress.ImageProgress)."""

    def pack_started(self, networks: int, step: int) -> None: ...

    def step(self, step: int) -> None: ...

    def reading(self, step: int, losses: np.ndarray) -> None: ...


class PackInterrupted(Interrupted):
    """Interrupted while a pack was in flight, its state saved (`saved`: where, `step`: at which step)."""

    def __init__(self, signum: int, saved: PackState, step: int):
        super().__init__(signum)
        self.saved, self.step = saved, step


def fit_pack(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
             progress: PackProgress | None = None, saved: PackState | None = None) -> dict:
    """Fit one pack: its networks trained together for the full budget (the training loop of `inr
    train`), then scored on their images. A pack with a network that diverges stops, naming its
    images. With `saved`, the pack starts from the state saved there (if it is this pack's), and
    its state is saved there at the clock interval (training.checkpoint_seconds) and when a signal
    interrupts it (PackInterrupted), so that the next run continues it to the same bits."""
    seeds = [plan.entry(name).seed for name in names]
    state = saved.load(plan, names) if saved is not None else None
    if state is None:
        state = TrainingState.fresh(plan.spec, seeds, output_means(plan.config, images))
    trainer = Trainer(backend, plan.spec, plan.config, images, state, seeds)
    signals = signals or Signals()
    first = images[0]

    def save(step: int) -> None:
        saved.save(plan, names, trainer.state(), (first.height, first.width, first.n_channels),
                   first.channels)

    def on_reading(step: int, losses: np.ndarray, rate: float) -> None:
        if progress is not None:
            progress.reading(step, losses)

    def on_step(step: int) -> None:
        hook("pack-step", step=step)
        if progress is not None:
            progress.step(step)

    if progress is not None:
        progress.pack_started(len(names), trainer.step_done)
    try:
        loss = run_steps(trainer, signals, plan.config.training.log_every, on_reading, on_step,
                         save if saved is not None else None,
                         checkpoint_seconds=plan.config.training.checkpoint_seconds)
        rendered = render_networks(backend, plan.spec, trainer.params, first.width, first.height)
    except Interrupted as exc:
        if saved is None:
            raise
        signals.ignore()  # a second Ctrl-C must not cut the save short
        save(trainer.step_done)
        raise PackInterrupted(exc.signum, saved, trainer.step_done) from None
    except Diverged as exc:
        bad = [names[i] for i in np.flatnonzero(exc.which)]
        listed = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InrError(f"{listed}: {exc.describe(int(np.flatnonzero(exc.which)[0]))}; the pack stopped, the shards "
                       f"finished before it are kept. Try a smaller learning rate, e.g. "
                       f"--lr {plan.config.optimizer.lr / 10:g}") from None
    errors = [float(np.mean((rendered[i] - images[i].values) ** 2, dtype=np.float64)) for i in range(len(images))]
    return {"names": np.array(names), "params": np.array(backend.to_host(trainer.params)),
            "loss": np.asarray(loss, dtype=np.float64).reshape(-1), "psnr": np.array([psnr_from_mse(e) for e in errors])}


def fit_shard(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
              pack: int | None = None, progress: PackProgress | None = None, saved_in: SetFolder | None = None,
              shard: int = 0) -> dict:
    """A shard (images of one size) in packs of at most `pack` networks: a worker's own device may
    hold fewer than the plan's shard. The networks are the same whatever the packs. With
    `saved_in` (the set folder), each pack in flight is saved there (fit_pack) as pack K of shard
    `shard`; the caller removes the saved packs once the shard is written (partial.remove_partials)."""
    pack = pack or len(names)
    parts = [fit_pack(backend, plan, images[i:i + pack], names[i:i + pack], signals, progress,
                      PackState(saved_in, shard, i // pack) if saved_in is not None else None)
             for i in range(0, len(names), pack)]
    if len(parts) == 1:
        return parts[0]
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def load_entry(entry: ImageEntry, config: Config, data: bytes | None = None) -> PixelImage:
    """An image of the plan, as `inr train FILE --size --gray` loads it (from its file's bytes `data`
    when the driver sent them), checked to be the file planned and to decode to the size and
    channels its header promised."""
    image = inputs.load(entry.location, entry.name, config, expected=entry.sha256, data=data)[0]
    if (image.width, image.height, image.channels) != (entry.width, entry.height, entry.channels):
        raise InrError(f"{entry.name}: decodes to {image.width}x{image.height} {','.join(image.channels)}, but its "
                       f"header said {entry.width}x{entry.height} {','.join(entry.channels)}")
    return image


def shard_images(plan: Plan, index: int) -> list[PixelImage]:
    return [load_entry(plan.entry(name), plan.config) for name in plan.shards[index]]
