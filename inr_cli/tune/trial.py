"""One trial: the sample's networks fitted as one pack with the trial's settings (fit-many's batched
engine; for one image, the very network `inr train` trains with them), its progress reported at each
loss reading the training loop already makes, and the trial stopped there when the pruner says so.

The objectives, each with the value reported at a reading (compared by the pruner with other
trials' at the same step) and the trial's final value:
    psnr               the mean training PSNR after the steps (dB; the PSNR inr train reports)
    steps              the mean steps to the target PSNR (lower is better); an image that never
                       reaches it counts the steps plus a tenth of them per dB it fell short, so
                       a near miss ranks above a far one. At a reading: the mean dB still missing.
    psnr-per-second    the mean PSNR over the training seconds of the device; at a reading: the
                       PSNR over the seconds the whole budget would take at the pace so far
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inr_cli.config import Config, to_json
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec
from inr_cli.core.render import render_networks
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.training_loop import Diverged, Signals
from inr_cli.errors import InrError
from inr_cli.hooks import hook
from inr_cli.sets.packs import fit_pack
from inr_cli.sets.plan import ImageEntry, Plan
from inr_cli.tune.sample import Sample

OBJECTIVES = ("psnr", "steps", "psnr-per-second")
DIRECTIONS = {"psnr": "maximize", "steps": "minimize", "psnr-per-second": "maximize"}
UNITS = {"psnr": "dB", "steps": "steps", "psnr-per-second": "dB/s"}
MAX_PSNR = 200.0  # a perfect fit's PSNR is infinite; the study's arithmetic takes this instead
RENDERED = 4  # the sample's first images drawn by the trial's networks, for best.png


class Pruned(Exception):
    """Raised from a reading when the pruner stops the trial: out of the training loop at once."""

    def __init__(self, step: int, note: str):
        super().__init__(note)
        self.step, self.note = step, note


@dataclass
class Outcome:
    state: str  # "complete" or "pruned"
    value: float | None  # the objective (complete trials)
    psnr: float  # mean dB at the end, or at the reading that stopped it
    steps: int  # the steps it trained
    seconds: float  # training seconds on the device
    losses: list[float] = field(default_factory=list)  # each network's last training loss
    note: str = ""
    config: str = ""  # the trained configuration (config.to_json), with the size's choices made
    renders: list = field(default_factory=list)  # (H, W, C) arrays of the first images, complete trials


def capped(psnr: float) -> float:
    return MAX_PSNR if psnr > MAX_PSNR else psnr


def reading_value(objective: str, psnrs: np.ndarray, networks: int, step: int, seconds: float, total: int,
                  target: float) -> float:
    """What a trial reports at a reading; psnrs: the networks still training (all, but for a target)."""
    if objective == "steps":
        return float(np.sum(np.maximum(target - psnrs, 0.0)) / networks)
    mean = float(np.mean(psnrs))
    if objective == "psnr-per-second":
        return mean * step / (max(seconds, 1e-9) * total)
    return mean


def final_value(objective: str, psnrs: np.ndarray, steps: np.ndarray, seconds: float, total: int,
                target: float) -> float:
    if objective == "steps":
        missing = np.maximum(target - psnrs, 0.0)
        return float(np.mean(np.where(missing > 0, total + total / 10 * missing, steps)))
    if objective == "psnr-per-second":
        return float(np.mean(psnrs)) / max(seconds, 1e-9)
    return float(np.mean(psnrs))


def worst_value(objective: str, target: float) -> float:
    """What a diverged trial reports: below every trial that learned anything."""
    return target if objective == "steps" else 0.0


def trial_plan(config: Config, sample: Sample) -> Plan:
    """The trial's pack as fit-many plans one: the size's choices made, the sample's seeds."""
    fitted, _ = fit_to_image(config, sample.width, sample.height, sample.channels)
    spec = NetworkSpec.from_config(fitted, sample.channels)
    first = sample.images[0]
    entries = [ImageEntry(name, first.width, first.height, first.channels, "", seed)
               for name, seed in zip(sample.names, sample.seeds)]
    return Plan(sample.source, fitted, spec, entries, [list(sample.names)], len(sample.names))


def run_trial(backend, config: Config, sample: Sample, objective: str, number: int, reporter, out: str = "",
              signals: Signals | None = None) -> Outcome:
    """Fit the sample with config, reporting each reading to reporter (an Optuna trial: report,
    should_prune); a pruned or diverged trial ends as "pruned"."""
    plan = trial_plan(config, sample)
    total, target = plan.config.training.steps, plan.config.training.target_psnr
    networks = len(sample.names)
    so_far = {"step": 0, "seconds": 0.0, "psnr": math.nan}
    hook("tune-trial-start", number=number, out=out)

    def on_reading(step, losses, rate):
        so_far["seconds"] += (step - so_far["step"]) / max(rate, 1e-9)
        so_far["step"] = step
        psnrs = np.array([capped(psnr_from_mse(loss)) for loss in losses])
        so_far["psnr"] = float(np.mean(psnrs))
        reporter.report(reading_value(objective, psnrs, networks, step, so_far["seconds"], total, target), step)
        hook("tune-reading", number=number, step=step, out=out)
        if reporter.should_prune():
            raise Pruned(step, f"pruned at step {step}")

    try:
        result = fit_pack(backend, plan, sample.images, list(sample.names), signals, on_reading=on_reading)
    except Pruned as exc:
        return Outcome("pruned", None, so_far["psnr"], exc.step, so_far["seconds"], note=exc.note,
                       config=to_json(plan.config))
    except InrError as exc:
        if not isinstance(exc.__context__, Diverged):  # fit_pack says a divergence as an InrError
            raise
        step = exc.__context__.step
        # Reported at the step it blew up, below everything: the sampler ranks it last.
        reporter.report(worst_value(objective, target), max(step, so_far["step"] + 1))
        return Outcome("pruned", None, so_far["psnr"], step, so_far["seconds"], note=f"diverged at step {step}",
                       config=to_json(plan.config))
    losses = [float(loss) for loss in result["loss"]]
    psnrs = np.array([capped(psnr_from_mse(loss)) for loss in losses])
    value = final_value(objective, psnrs, np.asarray(result["steps"], dtype=np.float64), so_far["seconds"], total,
                        target)
    first = sample.images[0]
    shown = backend.to_device(np.ascontiguousarray(result["params"][:RENDERED]))
    renders = list(render_networks(backend, plan.spec, shown, first.width, first.height))
    return Outcome("complete", value, float(np.mean(psnrs)), int(np.max(result["steps"])), so_far["seconds"], losses,
                   config=to_json(plan.config), renders=renders)
