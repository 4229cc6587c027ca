"""What both of meta-init's outer loops use (Reptile's in meta.py, the modulated base's in
meta_base.py): the first start, the outer rate's schedule, and the error of inner fits that blew up."""

from __future__ import annotations

import numpy as np

from inr_cli.config import Config
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError
from inr_cli.formats.start import initial_params


class InnerFitsDiverged(InrError):
    """The inner fits of an outer step blew up (a rate too large for the network)."""


def outer_rate(options, step: int) -> float:
    """The outer rate at outer step `step` (from 0): --outer-lr (Reptile's step, or a base's Adam
    rate) decaying linearly to 0 over the outer steps."""
    return options.outer_lr * (1 - step / options.outer_steps)


def first_start(config: Config, spec: NetworkSpec, images: list[PixelImage]) -> np.ndarray:
    """The outer loop's first start [P]: the file's weights, or the draw of the run's seed (a random
    start is the shared one here: there is one start), its outputs at the mean colour of `images`
    where network.init_output_at_mean asks for it."""
    init = config.training.init if config.training.init != "random" else "shared"
    means = output_means(config, images)
    return initial_params(init, spec, config.training.seed, [config.training.seed],
                          None if means is None else [np.mean(means, axis=0)],
                          weight_scale=config.network.weight_scale)[0].astype(np.float64)
