"""The trainer: N networks, one per image, trained together by one step on one backend.

Everything a step touches is uploaded or allocated here, once. A step then launches a fixed
sequence of operations, each covering all N networks, whose changing inputs (the step counter, the
learning rate) live in device memory: it allocates nothing, copies nothing to or from the host and
never synchronises, so on the GPU the whole step can be captured once as a CUDA graph and replayed.
N = 1 is `inr train`; each network's result is the bits it would get trained alone.

On the CPU the forward and backward passes run on blocks (backend.step_blocks): groups of networks
and, for big images, blocks of rows, one block per thread at a time, the blocks of one thread
sharing one workspace, so that a block's activations stay in its core's cache. A network's
gradients from its row blocks are added in order before the update; grouping networks changes no
bit. On the GPU there is one block.

The step, in order:
    sample_batch (mini-batches only)    each network draws its pixels from its own seed
    forward                             Network.forward: every layer, fused bias and activation
    mse_loss                            each network's loss, and dL/d(output)
    backward                            Network.backward: parameter gradients
    advance_schedule                    step += 1; the cosine learning rate (schedule.py) on the device
    adam_update / sgd_update            every parameter of every network in one launch
"""

from __future__ import annotations

import numpy as np

from inr_cli.formats.checkpoint import TrainingState
from inr_cli.config import Config
from inr_cli.core.coords import pixel_grid
from inr_cli.formats.images import PixelImage
from inr_cli.core.network import Network, NetworkSpec, layer_views
from inr_cli.core.workspace import Workspace


class BatchBuffers:
    """A step in blocks keeps, for the whole batch, only the drawn mini-batch and each network's loss."""

    def __init__(self, spec: NetworkSpec, networks: int, batch: int, backend, sampled: bool):
        self.loss = backend.empty((networks,))
        if sampled:
            self.x = backend.empty((networks, batch, spec.in_features))
            self.t = backend.empty((networks, batch, spec.out_features))


class Trainer:
    def __init__(self, backend, spec: NetworkSpec, config: Config, images: list[PixelImage], state: TrainingState,
                 seeds):
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

        # One table of coordinates serves every network (same size); the targets are per image.
        self.coords = backend.to_device(pixel_grid(first.width, first.height)[None])
        self.targets = backend.to_device(np.stack([im.targets() for im in images]))
        self.seeds = backend.to_device(np.asarray(seeds, dtype=np.uint64))
        self.params = backend.to_device(state.params)
        self.network = Network(spec, self.params)
        # Nothing writes the gradient of the frozen Fourier frequencies, so it must start at zero.
        self.flat_grads = backend.empty(self.params.shape)
        backend.fill(self.flat_grads, 0.0)
        self.grads = layer_views(spec, self.flat_grads)
        self.moment1 = self._moment(state.moment1)
        self.moment2 = self._moment(state.moment2)
        widest = max(max(out_f, in_f) for out_f, in_f in spec.layer_shapes())
        self.groups, self.row_blocks = backend.step_blocks(self.networks, self.batch, widest)
        self.blocks = [(g, r) for r in range(len(self.row_blocks)) for g in range(len(self.groups))]
        if len(self.blocks) == 1:
            self.workspace = Workspace(spec, self.networks, self.batch, backend, training=True,
                                       sampled=not self.full_batch)
        else:  # the blocks hold the activations; the whole batch keeps only its inputs and losses
            self.workspace = BatchBuffers(spec, self.networks, self.batch, backend, sampled=not self.full_batch)
            # One workspace per thread and block shape, not per block: a thread's blocks then reuse
            # memory that is still in its core's cache.
            shared, self.block_workspaces = {}, []
            for (g, r), slot in zip(self.blocks, backend.block_slots(len(self.blocks)), strict=True):
                key = (slot, self.groups[g][1] - self.groups[g][0], self.row_blocks[r][1] - self.row_blocks[r][0])
                if key not in shared:
                    shared[key] = Workspace(spec, key[1], key[2], backend, training=True)
                self.block_workspaces.append(shared[key])
            self.block_networks = [Network(spec, self.params[start:stop]) for start, stop in self.groups]
            self.block_grads = backend.empty((len(self.row_blocks), *self.params.shape))
            backend.fill(self.block_grads, 0.0)  # the frozen frequencies' part is never written
            self.block_losses = backend.empty((len(self.row_blocks), self.networks))
        self.step_counter = backend.to_device(np.array([state.step], dtype=np.int64))
        self.hyper = backend.empty((3,))  # [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)], set on the device
        self._run_step = backend.compile_step(self._step) if config.training.cuda_graph else self._step

    def _moment(self, host):
        if host is not None:
            return self.backend.to_device(host)
        moment = self.backend.empty(self.params.shape)  # a fresh run: zeros made on the device
        self.backend.fill(moment, 0.0)
        return moment

    def _step(self) -> None:
        b, ws, opt = self.backend, self.workspace, self.config.optimizer
        if self.full_batch:
            x, t = self.coords, self.targets
        else:
            b.sample_batch(self.coords, self.targets, ws.x, ws.t, self.seeds, self.step_counter)
            x, t = ws.x, ws.t
        if len(self.blocks) == 1:
            output = self.network.forward(b, ws, x, self.batch)
            b.mse_loss(output, t, ws.grad[-1], ws.loss)
            self.network.backward(b, ws, x, self.batch, self.grads)
        else:
            self._blocks_forward_backward(x, t)
        b.advance_schedule(self.step_counter, self.hyper, opt.lr, opt.lr_min, self.total_steps, opt.beta1, opt.beta2)
        if opt.name == "adam":
            b.adam_update(self.params, self.flat_grads, self.moment1, self.moment2, self.hyper, opt.beta1, opt.beta2,
                          opt.eps)
        else:
            b.sgd_update(self.params, self.flat_grads, self.moment1, self.hyper, opt.momentum)

    def _blocks_forward_backward(self, x, t) -> None:
        """Forward, loss and backward on each block (a group of networks, a block of rows); then each
        network's gradients and loss added over its row blocks in order (the CPU's way: see the top)."""
        count = self.batch * self.spec.out_features  # the loss is the mean over the whole batch
        shared = x.shape[0] == 1

        def block(i, backend):
            g, r = self.blocks[i]
            (n0, n1), (start, stop) = self.groups[g], self.row_blocks[r]
            ws, grads = self.block_workspaces[i], self.block_grads[r, n0:n1]
            xb = x[:, start:stop] if shared else x[n0:n1, start:stop]
            network = self.block_networks[g]
            output = network.forward(backend, ws, xb, stop - start)
            backend.mse_loss(output, t[n0:n1, start:stop], ws.grad[-1], ws.loss, count)
            network.backward(backend, ws, xb, stop - start, layer_views(self.spec, grads))
            self.block_losses[r, n0:n1] = ws.loss

        self.backend.run_blocks(block, len(self.blocks))
        blocks = len(self.row_blocks)
        self.backend.column_reduce(self.block_grads.reshape(blocks, -1)[None], self.flat_grads.reshape(1, -1))
        self.backend.column_reduce(self.block_losses[None], self.workspace.loss[None])

    def step(self) -> None:
        self._run_step()
        self.step_done += 1

    def read_loss(self) -> np.ndarray:
        """Each network's loss in the latest step's forward pass: the one host read, at logging time."""
        self.loss = np.array(self.backend.to_host(self.workspace.loss), dtype=np.float64)
        return self.loss

    def state(self) -> TrainingState:
        to_host = self.backend.to_host
        return TrainingState(np.array(to_host(self.params)), np.array(to_host(self.moment1)),
                             np.array(to_host(self.moment2)), self.step_done, self.seconds, self.loss.copy())
