"""The learning-rate schedule and Adam's bias corrections: one definition, used by the NumPy backend,
the training loop's log, and as the reference the GPU's on-device schedule (kernels/optimizer.cu
advance_schedule) is tested against.

An optional linear warm-up from lr/warmup to lr over the first `warmup` steps, then cosine annealing
from lr to lr_min over the rest of the step budget: a function of the global step only, so a resumed
run follows exactly the curve an uninterrupted one would.
"""

from __future__ import annotations

import math


def learning_rate(step: int, total: int, lr_max: float, lr_min: float, warmup: int) -> float:
    """Learning rate of the update with 0-based index `step` of `total`: rising linearly to lr_max over
    the first `warmup` updates, lr_max at update `warmup`, then on the cosine down to lr_min at the end."""
    if step < warmup:
        return lr_max * (step + 1) / warmup
    progress = (min(step, total) - warmup) / max(total - warmup, 1)
    return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + math.cos(math.pi * progress))


def step_hyperparameters(step: int, total: int, lr_max: float, lr_min: float, warmup: int, beta1: float,
                         beta2: float) -> tuple[float, float, float]:
    """(lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)) for update t = step + 1: what the optimizer kernels read."""
    lr = learning_rate(step, total, lr_max, lr_min, warmup)
    t = step + 1
    return lr, lr / (1.0 - beta1**t), math.sqrt(1.0 - beta2**t)
