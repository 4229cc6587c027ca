"""The optimizers: each holds its hyper-parameters and updates every network's parameters through its
backend operation (adam_update, sgd_update), at the learning rate of the schedule (warm-up, then cosine).

`create_optimizer(config.optimizer)` builds the one the configuration names; a new optimizer is a
class here, registered in OPTIMIZER_CLASSES, plus its backend operation (backend.py, numpy_ops.py,
the kernel) and its name among the settings' choices. Every optimizer is handed the trainer's two
[N, P] moment arrays, which the checkpoint keeps whichever the optimizer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from inr_cli.config import OptimizerConfig

if TYPE_CHECKING:  # annotations only: the backend itself is handed in
    from inr_cli.core.backend import Backend


class Optimizer(ABC):
    name: ClassVar[str]  # optimizer.name in the configuration

    def __init__(self, settings: OptimizerConfig):
        self.lr, self.lr_min, self.warmup = settings.lr, settings.lr_min, settings.warmup
        # The schedule's bias-correction terms are Adam's, worked out for every optimizer alike.
        self.beta1, self.beta2 = settings.beta1, settings.beta2

    def advance_schedule(self, backend: Backend, step_counter, hyper, total: int) -> None:
        """hyper = this update's learning rate (and Adam's bias corrections), on the device; step += 1."""
        backend.advance_schedule(step_counter, hyper, self.lr, self.lr_min, total, self.warmup, self.beta1,
                                 self.beta2)

    @abstractmethod
    def update(self, backend: Backend, params, grads, moment1, moment2, hyper) -> None:
        """params -= this optimizer's step from grads, for every network in one operation; moment1 and
        moment2 ([N, P], zeros at the start) carry its state from step to step."""


class Adam(Optimizer):
    name = "adam"

    def __init__(self, settings: OptimizerConfig):
        super().__init__(settings)
        self.eps = settings.eps

    def update(self, backend: Backend, params, grads, moment1, moment2, hyper) -> None:
        backend.adam_update(params, grads, moment1, moment2, hyper, self.beta1, self.beta2, self.eps)


class SGD(Optimizer):
    """With momentum; its buffer is moment1, and moment2 stays zero."""

    name = "sgd"

    def __init__(self, settings: OptimizerConfig):
        super().__init__(settings)
        self.momentum = settings.momentum

    def update(self, backend: Backend, params, grads, moment1, moment2, hyper) -> None:
        backend.sgd_update(params, grads, moment1, hyper, self.momentum)


OPTIMIZER_CLASSES: dict[str, type[Optimizer]] = {kind.name: kind for kind in (Adam, SGD)}


def create_optimizer(settings: OptimizerConfig) -> Optimizer:
    """The optimizer the configuration's [optimizer] section names, with its hyper-parameters."""
    kind = OPTIMIZER_CLASSES.get(settings.name)
    if kind is None:
        raise ValueError(f"optimizer '{settings.name}' is not one of: {', '.join(OPTIMIZER_CLASSES)}")
    return kind(settings)
