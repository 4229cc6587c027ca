"""The trainer owns the optimizer state and the schedule, and runs one training step.

Everything a step touches is uploaded or allocated here, once. A step then launches a fixed
sequence of operations whose changing inputs (the step counter, the learning rate) live in device
memory: it allocates nothing, copies nothing to or from the host and never synchronises, so on
the GPU the whole step can be captured once as a CUDA graph and replayed.
"""

from __future__ import annotations

import numpy as np

from inr_cli.config import Config
from inr_cli.coords import pixel_grid
from inr_cli.model import backward, forward, loss_and_output_grad
from inr_cli.network import NetworkSpec, encoding_view, parameter_views
from inr_cli.pixels import PixelImage
from inr_cli.workspace import Workspace


class Trainer:
    def __init__(self, backend, spec: NetworkSpec, config: Config, image: PixelImage,
                 params: np.ndarray, moment1: np.ndarray, moment2: np.ndarray, step: int, total_steps: int):
        self.backend = backend
        self.spec = spec
        self.config = config
        self.total_steps = total_steps
        self.step_done = step
        self.width, self.height, self.channels = image.width, image.height, image.channels
        self.n_pixels = image.width * image.height
        self.full_batch = config.batch_size == 0 or config.batch_size >= self.n_pixels
        self.batch = self.n_pixels if self.full_batch else config.batch_size

        self.coords = backend.to_device(pixel_grid(image.width, image.height))
        self.targets = backend.to_device(image.targets())
        self.flat_params = backend.to_device(params)
        self.flat_grads = backend.zeros(params.shape)
        self.moment1 = backend.to_device(moment1)
        self.moment2 = backend.to_device(moment2)
        self.params = parameter_views(spec, self.flat_params)
        self.frequencies = encoding_view(spec, self.flat_params)
        self.grads = parameter_views(spec, self.flat_grads)
        self.workspace = Workspace(spec, self.batch, backend, training=True, sampled=not self.full_batch)
        self.step_counter = backend.to_device(np.array([step], dtype=np.int64))
        self.hyper = backend.zeros((4,))
        self._run_step = backend.compile_step(self._step) if config.cuda_graph else self._step

    def _step(self) -> None:
        b, ws, cfg = self.backend, self.workspace, self.config
        if self.full_batch:
            x, t = self.coords, self.targets
        else:
            b.sample_batch(self.coords, self.targets, ws.x, ws.t, cfg.seed, self.step_counter)
            x, t = ws.x, ws.t
        output = forward(b, self.spec, self.params, ws, x, self.batch, self.frequencies)
        loss_and_output_grad(b, ws, output, t, self.batch)
        backward(b, self.spec, self.params, self.grads, ws, x, self.batch)
        b.advance_schedule(self.step_counter, self.hyper, cfg.lr, cfg.lr_min, self.total_steps, cfg.beta1, cfg.beta2)
        if cfg.optimizer == "adam":
            b.adam_update(self.flat_params, self.flat_grads, self.moment1, self.moment2, self.hyper,
                          cfg.beta1, cfg.beta2, cfg.eps)
        else:
            b.sgd_update(self.flat_params, self.flat_grads, self.moment1, self.hyper, cfg.momentum)

    def step(self) -> None:
        self._run_step()
        self.step_done += 1

    def read_loss(self) -> float:
        """The loss of the latest step's forward pass: the one host read, at logging time."""
        return float(self.backend.to_host(self.workspace.loss)[0])

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        to_host = self.backend.to_host
        return (np.array(to_host(self.flat_params)), np.array(to_host(self.moment1)), np.array(to_host(self.moment2)))
