"""The trainer: N networks, one per image, trained together by one step on one backend.

Everything a step touches is uploaded or allocated here, once. A step then launches a fixed
sequence of operations, each covering all N networks, whose changing inputs (the step counter, the
learning rate) live in device memory: it allocates nothing, copies nothing to or from the host and
never synchronises, so on the GPU the whole step can be captured once as a CUDA graph and replayed.
N = 1 is `inr train`; each network's result is the bits it would get trained alone.

The step, in order:
    sample_batch (mini-batches only)    each network draws its pixels from its own seed, their
                                        coordinates computed from the pixel index and their colours
                                        read from the image as stored (8-bit: a quarter of the floats)
    training pass                       forward, mse_loss, backward (core/batch_pass.py; the CPU
                                        engine runs it on cache-sized blocks)
    advance_schedule                    step += 1; the learning rate (schedule.py) on the device
    the optimizer's update              adam_update / sgd_update (optimizers.py): every parameter of
                                        every network in one launch
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from inr_cli.config import Config
from inr_cli.core.coords import pixel_grid
from inr_cli.core.network import NetworkSpec
from inr_cli.core.optimizers import create_optimizer
from inr_cli.core.pixels import PixelImage
from inr_cli.core.state import TrainingState

if TYPE_CHECKING:  # annotations only: the backend itself is handed in
    from inr_cli.core.backend import Backend


class Trainer:
    def __init__(self, backend: Backend, spec: NetworkSpec, config: Config, images: list[PixelImage],
                 state: TrainingState, seeds):
        """images: one per network, all of one size; seeds: network i's mini-batches come from seeds[i]
        (its initialisation already did, in TrainingState.fresh)."""
        if len(images) != state.networks or len(seeds) != state.networks:
            raise ValueError(f"{len(images)} images and {len(seeds)} seeds for {state.networks} networks")
        first = images[0]
        if any((im.width, im.height, im.n_channels) != (first.width, first.height, first.n_channels) for im in images):
            raise ValueError("the images of one trainer must share one size and channel count")
        self.backend = backend
        self.spec = spec
        self.config = config
        self.optimizer = create_optimizer(config.optimizer)
        self.networks = state.networks
        self.total_steps = config.training.steps
        self.step_done = state.step
        self.seconds = state.seconds
        self.loss = np.array(state.loss, dtype=np.float64)
        self.width, self.height, self.channels = first.width, first.height, first.channels
        n_pixels = first.width * first.height
        batch_size = config.training.batch_size
        self.full_batch = batch_size == 0 or batch_size >= n_pixels
        self.batch = n_pixels if self.full_batch else batch_size
        # What drawing each image's mean colour scores: the floor a network that learned anything beats.
        self.mean_colour_loss = np.array([float(np.mean(im.colour_variance())) for im in images])

        if self.full_batch:  # one table of coordinates serves every network (same size); the targets are per image
            self.coords = backend.to_device(pixel_grid(first.width, first.height)[None])
            self.targets = backend.to_device(np.stack([im.targets() for im in images]))
        else:  # the pixels as stored, read by sample_batch alone: no float copy, no table of coordinates
            self.coords = None
            self.targets = backend.constant(stored_targets(images))
        self.seeds = backend.to_device(np.asarray(seeds, dtype=np.uint64))
        self.params = self._upload(state.params)
        # Nothing writes the gradient of the frozen Fourier frequencies, so it must start at zero.
        self.flat_grads = backend.empty(self.params.shape)
        backend.fill(self.flat_grads, 0.0)
        self.moment1 = self._moment(state.moment1)
        self.moment2 = self._moment(state.moment2)
        if not self.full_batch:  # each network draws its own pixels into these
            self.batch_x = backend.empty((self.networks, self.batch, spec.in_features))
            self.batch_t = backend.empty((self.networks, self.batch, spec.out_features))
        self.step_loss = backend.empty((self.networks,))
        self.training_pass = backend.training_pass(spec, self.params, self.flat_grads, self.networks, self.batch)
        self.step_counter = backend.to_device(np.array([state.step], dtype=np.int64))
        self.hyper = backend.empty((3,))  # [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)], set on the device
        self._run_step = backend.compile_step(self._step) if config.training.cuda_graph else self._step
        self._clock = time.perf_counter()

    def _moment(self, host):
        if host is not None:
            return self._upload(host)
        moment = self.backend.empty(self.params.shape)  # a fresh run: zeros made on the device
        self.backend.fill(moment, 0.0)
        return moment

    def _upload(self, values):
        """A state's [N, P] array on the device: a host array copied, or one left in its checkpoint
        (formats/checkpoint.StoredArray) read into place a chunk at a time."""
        if isinstance(values, np.ndarray):
            return self.backend.to_device(values)
        array = self.backend.empty(values.shape)
        values.copy_to(self.backend, array)
        return array

    def _step(self) -> None:
        b = self.backend
        if self.full_batch:
            x, t = self.coords, self.targets
        else:
            b.sample_batch(self.targets, self.width, self.batch_x, self.batch_t, self.seeds, self.step_counter)
            x, t = self.batch_x, self.batch_t
        self.training_pass(x, t, self.step_loss)
        self.optimizer.advance_schedule(b, self.step_counter, self.hyper, self.total_steps)
        self.optimizer.update(b, self.params, self.flat_grads, self.moment1, self.moment2, self.hyper)

    def step(self) -> None:
        self._run_step()
        self.step_done += 1

    def read_loss(self) -> np.ndarray:
        """Each network's loss in the latest step's forward pass: the one host read, at logging time.
        It waits for the device, so the training time is counted here."""
        self.loss = np.array(self.backend.to_host(self.step_loss), dtype=np.float64)
        self._count()
        return self.loss

    def count_time(self) -> None:
        """Wait for the steps launched since the last reading and count their time as training: before
        work that is not (a preview), whose pause_clock would otherwise drop it."""
        self.backend.synchronize()
        self._count()

    def _count(self) -> None:
        now = time.perf_counter()
        self.seconds += now - self._clock
        self._clock = now

    def pause_clock(self) -> None:
        """Restart the clock: what happened since the last reading (a checkpoint, a preview) is not
        training time."""
        self._clock = time.perf_counter()

    def release_training_memory(self) -> None:
        """Let go of the training data, batches, workspace, gradients and moments, keeping the
        parameters: after the last checkpoint, before the final render. The trainer no longer steps
        nor gives its state."""
        self.coords = self.targets = self.flat_grads = self.moment1 = self.moment2 = None
        self.batch_x = self.batch_t = self.training_pass = self._run_step = None

    def copy_state(self, params, moment1, moment2) -> None:
        """The parameters and moments now copied into these arrays of the backend (a checkpoint's
        snapshot of the step, taken on the device)."""
        for out, array in ((params, self.params), (moment1, self.moment1), (moment2, self.moment2)):
            self.backend.copy(out, array)

    def device_state(self, arrays=None) -> TrainingState:
        """The state with its [N, P] arrays left on the device: the trainer's own, or (params, moment1,
        moment2) copied from them by copy_state (what a checkpoint written from the device holds)."""
        params, moment1, moment2 = arrays or (self.params, self.moment1, self.moment2)
        return TrainingState(params, moment1, moment2, self.step_done, self.seconds, self.loss.copy())

    def state(self) -> TrainingState:
        to_host = self.backend.to_host
        return TrainingState(np.array(to_host(self.params)), np.array(to_host(self.moment1)),
                             np.array(to_host(self.moment2)), self.step_done, self.seconds, self.loss.copy())


def stored_targets(images: list[PixelImage]) -> np.ndarray:
    """[N, H*W, C] pixels as the images keep them: uint8 where every one is 8-bit, else float32 in
    [0, 1]; one image's is a view of its pixels, not a copy."""
    if all(im.pixels.dtype == np.uint8 for im in images):
        tables = [im.table() for im in images]
    else:
        tables = [im.targets() for im in images]
    return tables[0][None] if len(tables) == 1 else np.stack(tables)
