"""Fitting a shard of a set on a backend: its images loaded and checked against the plan, its
networks trained in packs through the core's networks dimension (the training loop of `inr train`),
then scored. A network trained in a pack gets the bits it would get alone: `inr train IMAGE --seed
SEED` with the same settings gives the same one.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from inr_cli.config import Config
from inr_cli.core.memory import check_training, training_estimates
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.pixels import PixelImage, fit_longer_side
from inr_cli.core.render import render_networks
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, DivergenceGuard, Interrupted, Signals, reached_target, run_steps
from inr_cli.errors import InrError
from inr_cli.formats.images import resize
from inr_cli.formats.start import initial_state, is_file_start, start_params, start_sha256
from inr_cli.hooks import hook
from inr_cli.sets import inputs
from inr_cli.sets.partial import PackState
from inr_cli.sets.plan import ImageEntry, Plan
from inr_cli.sets.set_folder import SetFolder


def default_pack(backend, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
    """As many networks per step as fill the device: one network's training (memory.py's estimate)
    against the backend's memory budget (half the GPU's free memory, a share of the host's)."""
    one, two = (training_estimates(spec, width, height, config.training.batch_size, n, backend, images_held=False)[-1]
                for n in (1, 2))  # the device's, where there is one
    per_network = two.needed - one.needed  # what each network adds to a pack
    budget = backend.memory_budget()
    return int(max(1, min(4096, budget // max(per_network, 1))))


class PackProgress(Protocol):
    """What follows a pack's steps (progress.ImageProgress)."""

    def pack_started(self, networks: int, step: int) -> None: ...

    def networks_finished(self, count: int) -> None: ...

    def took_up(self, saved: str, networks: int, step: int, finished: int) -> None: ...

    def step(self, step: int) -> None: ...

    def reading(self, step: int, losses: np.ndarray) -> None: ...


class PackInterrupted(Interrupted):
    """Interrupted while a pack was in flight, its state saved (`saved`: where, `step`: at which step)."""

    def __init__(self, signum: int, saved: PackState, step: int):
        super().__init__(signum)
        self.saved, self.step = saved, step


def start_means(plan: Plan, images: list[PixelImage]) -> list[np.ndarray] | None:
    """Where the networks' outputs start: the plan's colour for a shared start (one start for all),
    else each image's own mean where network.init_output_at_mean asks for it."""
    if plan.output_start is not None:
        return [np.asarray(plan.output_start, dtype=np.float64)] * len(images)
    return output_means(plan.config, images)


def fit_pack(backend, plan: Plan, images: list[PixelImage], names: list[str], signals: Signals | None = None,
             progress: PackProgress | None = None, saved: PackState | None = None, on_reading=None) -> dict:
    """Fit one pack: its networks trained together for the full budget (the training loop of `inr
    train`), then scored on their images. With a target PSNR each network stops at the reading where
    it reaches it, as it would alone, and leaves the pack (the trainer rebuilt on the rest: every
    network's steps are its own, so the rest get the bits they would get alone). A pack with a
    network that diverges stops, naming its images. With `saved`, the pack starts from the state
    saved there (if it is this pack's), and its state is saved there at the clock interval
    (training.checkpoint_seconds), when networks leave it, and when a signal interrupts it
    (PackInterrupted), so that the next run continues it to the same bits. on_reading(step, losses,
    steps_per_second) sees each loss reading of the networks still training (inr tune's pruning)."""
    if plan.latent:  # a set of latents over a base: a few steps each, nothing of a pack in flight saved
        from inr_cli.sets.latents import fit_latent_pack

        return fit_latent_pack(backend, plan, images, names, signals, progress)
    training = plan.config.training
    seeds = [plan.entry(name).seed for name in names]
    result = PackResult(plan, names)
    state = None
    if saved is not None:
        result.take_up(saved.load_finished(plan, names))
        state = saved.load(plan, result.active_names())
        if state is None and result.finished.any():  # the two files disagree: the pack starts again
            saved.remove()
            result = PackResult(plan, names)
    active = result.active_rows()
    if progress is not None and state is not None:  # taken up where an earlier run saved it
        progress.took_up(str(saved), len(active), saved.saved_step, int(result.finished.sum()))
    check_training(plan.spec, plan.config, images[0].width, images[0].height, len(active), backend,
                   doing=f"a pack of {len(active)} networks", value_bytes=images[0].pixels.itemsize)
    if state is None:
        state = initial_state(training.init, plan.spec, training.seed, [seeds[i] for i in active],
                              start_means(plan, [images[i] for i in active]), plan_start(plan),
                              plan.config.network.weight_scale)
    trainer = Trainer(backend, plan.spec, plan.config, [images[i] for i in active], state,
                      [seeds[i] for i in active])
    guard = DivergenceGuard(trainer)
    signals = signals or Signals()
    first = images[0]

    def save(step: int) -> None:
        saved.save(plan, result.active_names(), trainer.state(), (first.height, first.width, first.n_channels),
                   first.channels)

    def reading(step: int, losses: np.ndarray, rate: float) -> None:
        if progress is not None:
            progress.reading(step, losses)
        if on_reading is not None:
            on_reading(step, losses, rate)

    def on_step(step: int) -> None:
        hook("pack-step", step=step)
        if progress is not None:
            progress.step(step)

    try:
        while True:
            if progress is not None:
                progress.pack_started(len(active), trainer.step_done)
            try:
                loss = run_steps(trainer, signals, training.log_every, reading, on_step,
                                 save if saved is not None else None, checkpoint_seconds=training.checkpoint_seconds,
                                 target_psnr=training.target_psnr, guard=guard)
            except Diverged as exc:  # named by the pack's rows, not the remaining ones
                raise exc.spread(active, len(names)) from None
            now = trainer.state()
            done = (reached_target(loss, training.target_psnr) if trainer.step_done < trainer.total_steps
                    else np.ones(len(active), dtype=bool))
            if done.all():
                result.finish(active, now.params, now.loss, trainer.step_done)
                if progress is not None:
                    progress.networks_finished(len(active))
                break
            # The networks that are done leave the pack. A signal meanwhile waits, as inside a step,
            # until the trainer and what is saved describe the same networks.
            signals.in_step = True
            result.finish(active[done], now.params[done], now.loss[done], trainer.step_done)
            if progress is not None:
                progress.networks_finished(int(done.sum()))
            keep = ~done
            active = active[keep]
            guard.keep(keep)
            rest = TrainingState(now.params[keep], now.moment1[keep], now.moment2[keep], now.step, now.seconds,
                                 now.loss[keep])
            trainer = Trainer(backend, plan.spec, plan.config, [images[i] for i in active], rest,
                              [seeds[i] for i in active])
            if saved is not None:  # the finished networks first: a state of the rest alone means them
                saved.save_finished(plan, result)
                save(trainer.step_done)
            signals.in_step = False
            signals.check()
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
    trainer.release_training_memory()  # room for scoring: the networks are in result now
    rendered = render_networks(backend, plan.spec, backend.to_device(result.params), first.width, first.height)
    errors = [float(np.mean((rendered[i] - images[i].values) ** 2, dtype=np.float64)) for i in range(len(images))]
    return {"names": np.array(names), "params": result.params, "loss": result.loss, "steps": result.steps,
            "psnr": np.array([psnr_from_mse(e) for e in errors])}


def plan_start(plan: Plan) -> np.ndarray | None:
    """The weights of the plan's file start, checked to be the file it was planned with; None for
    the draws (random, shared)."""
    init = plan.config.training.init
    if not is_file_start(init):
        return None
    if plan.start_sha256 and start_sha256(init) != plan.start_sha256:
        raise InrError(f"--init {init}: the file changed since this set was started; restore it or use another -o")
    return start_params(init, plan.spec)


class PackResult:
    """A pack's networks as they finish: each one's final parameters, loss and step."""

    def __init__(self, plan: Plan, names: list[str]):
        self.names = names
        self.params = np.zeros((len(names), plan.spec.parameter_count()), dtype=np.float32)
        self.loss = np.full(len(names), np.nan)
        self.steps = np.full(len(names), plan.config.training.steps, dtype=np.int64)
        self.finished = np.zeros(len(names), dtype=bool)

    def finish(self, rows: np.ndarray, params: np.ndarray, loss: np.ndarray, step: int) -> None:
        self.params[rows], self.loss[rows], self.steps[rows], self.finished[rows] = params, loss, step, True

    def take_up(self, finished: dict | None) -> None:
        """Networks a saved pack had finished ({name: (params, loss, step)})."""
        row = {name: i for i, name in enumerate(self.names)}
        for name, (params, loss, step) in (finished or {}).items():
            self.finish(np.array([row[name]]), params[None], np.array([loss]), step)

    def active_rows(self) -> np.ndarray:
        return np.flatnonzero(~self.finished)

    def active_names(self) -> list[str]:
        return [self.names[i] for i in self.active_rows()]


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
    """An image of the plan, as `inr train FILE --size --gray` loads it but never enlarged (from its
    file's bytes `data` when the driver sent them), checked to be the file planned and to decode to
    the size and channels its header promised."""
    image = inputs.load(entry.location, entry.name, config, expected=entry.sha256, data=data)[0]
    size = config.data.size
    if max(image.width, image.height) < size and fit_longer_side(image.width, image.height, size) == (
            entry.width, entry.height):  # a set planned before --size stopped enlarging: fitted as planned
        image = resize(image, size)
    if (image.width, image.height, image.channels) != (entry.width, entry.height, entry.channels):
        raise InrError(f"{entry.name}: decodes to {image.width}x{image.height} {','.join(image.channels)}, but its "
                       f"header said {entry.width}x{entry.height} {','.join(entry.channels)}")
    return image


def shard_images(plan: Plan, index: int) -> list[PixelImage]:
    return [load_entry(plan.entry(name), plan.config) for name in plan.shards[index]]
