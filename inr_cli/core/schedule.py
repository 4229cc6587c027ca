"""The learning-rate schedule and Adam's bias corrections: one definition, used by the NumPy backend,
the training loop's log, and as the reference the GPU's on-device schedule (kernels/optimizer.cu
advance_schedule) is tested against.

Cosine annealing from lr to lr_min over the whole step budget, a function of the global step only,
so a resumed run follows exactly the curve an uninterrupted one would.
"""

from __future__ import annotations

import math


def cosine_lr(step: int, total: int, lr_max: float, lr_min: float) -> float:
    """Learning rate of the update with 0-based index `step` of `total`: lr_max at 0, lr_min at the end."""
    progress = min(step, total) / max(total, 1)
    return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + math.cos(math.pi * progress))


def step_hyperparameters(step: int, total: int, lr_max: float, lr_min: float, beta1: float,
                         beta2: float) -> tuple[float, float, float]:
    """(lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)) for update t = step + 1: what the optimizer kernels read."""
    lr = cosine_lr(step, total, lr_max, lr_min)
    t = step + 1
    return lr, lr / (1.0 - beta1**t), math.sqrt(1.0 - beta2**t)
