"""Fitting a shard of a set on a backend: its images loaded and checked against the plan, its
networks trained in packs through the core's networks dimension (the training loop of `inr train`),
then scored. A network trained in a pack gets the bits it would get alone: `inr train IMAGE --seed
SEED` with the same settings gives the same one.
"""

from __future__ import annotations

import numpy as np

from inr_cli.config import Config
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.pixels import PixelImage
from inr_cli.core.state import TrainingState
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.render import render_networks
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, DivergenceGuard, Signals, reached_target, run_steps
from inr_cli.errors import InrError
from inr_cli.sets import inputs
from inr_cli.sets.plan import ImageEntry, Plan


def default_pack(backend, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
    """As many networks per step as fill the device: the training workspace and parameters of a
    network against the backend's memory budget (half the GPU's free memory, a share of the host's)."""
    rows = width * height if config.training.batch_size == 0 else min(config.training.batch_size, width * height)
    widths = sum(out_f for out_f, _ in spec.layer_shapes())
    per_network = 4 * (rows * (3 * widths + 2 * spec.encoded_features + 2 * spec.out_features + 4)
                       + 5 * spec.parameter_count())
    budget = backend.memory_budget()
    return int(max(1, min(4096, budget // max(per_network, 1))))


def fit_pack(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
             on_reading=None) -> dict:
    """Fit one pack: its networks trained together for the full budget (the training loop of `inr
    train`, without checkpoints: a shard is written whole or not at all), then scored on their
    images. With a target PSNR each network stops at the reading where it reaches it, as it would
    alone, and leaves the pack, so that it costs no more work. A pack with a network that diverges
    stops, naming its images. on_reading(step, losses, steps_per_second) sees each loss reading of
    the networks still training (run_steps'; inr tune reports and prunes from it)."""
    seeds = [plan.entry(name).seed for name in names]
    state = TrainingState.fresh(plan.spec, seeds, output_means(plan.config, images))
    try:
        state, steps = _train_until_done(backend, plan, images, state, seeds, signals or Signals(), on_reading)
    except Diverged as exc:
        bad = [names[i] for i in np.flatnonzero(exc.which)]
        listed = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InrError(f"{listed}: {exc.describe(int(np.flatnonzero(exc.which)[0]))}; the pack stopped, the shards "
                       f"finished before it are kept. Try a smaller learning rate, e.g. "
                       f"--lr {plan.config.optimizer.lr / 10:g}") from None
    first = images[0]
    rendered = render_networks(backend, plan.spec, backend.to_device(state.params), first.width, first.height)
    errors = [float(np.mean((rendered[i] - images[i].values) ** 2, dtype=np.float64)) for i in range(len(images))]
    return {"names": np.array(names), "params": state.params, "loss": state.loss, "steps": steps,
            "psnr": np.array([psnr_from_mse(e) for e in errors])}


def _train_until_done(backend, plan: Plan, images: list[PixelImage], state: TrainingState, seeds: list[int],
                      signals: Signals, on_reading=None) -> tuple[TrainingState, np.ndarray]:
    """The pack trained to its step budget, or each network to its target PSNR: the final state of
    every network (in the pack's order) and the step at which each stopped. A network that reaches
    the target is kept as it is, and the trainer goes on with the others (the Trainer rebuilt on the
    remaining rows: every network's steps are its own, so the rest get the bits they would get alone)."""
    training = plan.config.training
    final = TrainingState(state.params.copy(), None, None, 0, 0.0, np.full(len(seeds), np.nan))
    steps = np.full(len(seeds), training.steps, dtype=np.int64)
    active = np.arange(len(seeds))
    trainer = Trainer(backend, plan.spec, plan.config, images, state, seeds)
    guard = DivergenceGuard(trainer)
    while True:
        try:
            loss = run_steps(trainer, signals, training.log_every, on_reading, target_psnr=training.target_psnr,
                             guard=guard)
        except Diverged as exc:  # named by the pack's rows, not the remaining ones
            raise exc.spread(active, len(seeds)) from None
        now = trainer.state()
        done = (reached_target(loss, training.target_psnr) if trainer.step_done < trainer.total_steps
                else np.ones(len(active), dtype=bool))
        final.params[active[done]] = now.params[done]
        final.loss[active[done]] = now.loss[done]
        steps[active[done]] = trainer.step_done
        if done.all():
            return final, steps
        keep = ~done
        active = active[keep]
        guard.keep(keep)
        rest = TrainingState(now.params[keep], now.moment1[keep], now.moment2[keep], now.step, now.seconds,
                             now.loss[keep])
        trainer = Trainer(backend, plan.spec, plan.config, [images[i] for i in active], rest,
                          [seeds[i] for i in active])


def fit_shard(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
              pack: int | None = None) -> dict:
    """A shard (images of one size) in packs of at most `pack` networks: a worker's own device may
    hold fewer than the plan's shard. The networks are the same whatever the packs."""
    pack = pack or len(names)
    parts = [fit_pack(backend, plan, images[i:i + pack], names[i:i + pack], signals)
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
