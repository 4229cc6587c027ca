"""Every batch-sized buffer of one invocation, allocated once and reused each step.

The batch size is explicit: forward and backward work on the first `rows` rows of these
buffers, so the last, shorter render chunk needs no new allocation.
"""

from __future__ import annotations

import numpy as np

from inr_cli.network import NetworkSpec


class Workspace:
    def __init__(self, spec: NetworkSpec, batch: int, backend, training: bool, dtype=np.float32,
                 sampled: bool = False):
        """sampled: training draws mini-batches, so it needs buffers for the drawn inputs and targets;
        a full-batch step reads the uploaded data directly."""
        self.batch = batch
        self.training = training
        shapes = spec.layer_shapes()
        activations = spec.activations()
        if spec.encoding == "fourier":
            # x B^T, then [cos, sin] of it: the first layer's input, kept for its weight gradient.
            self.projection = backend.empty((batch, spec.fourier_features), dtype)
            self.encoded = backend.empty((batch, spec.encoded_features), dtype)
        if training:
            # z (pre-activation) feeds the sine derivative, a feeds the next layer's weight gradient.
            self.z = [backend.empty((batch, out_f), dtype) for out_f, _ in shapes]
            self.a = [z if act == "linear" else backend.empty(z.shape, dtype) for z, act in zip(self.z, activations)]
            self.grad = [backend.empty((batch, out_f), dtype) for out_f, _ in shapes]
            self.loss = backend.empty((1,), dtype)
            if sampled:
                self.x = backend.empty((batch, spec.in_features), dtype)
                self.t = backend.empty((batch, spec.out_features), dtype)
        else:
            # Inference: activations in place, hidden layers ping-pong between two buffers.
            hidden = [backend.empty((batch, spec.hidden), dtype) for _ in range(min(2, spec.layers))]
            self.z = [hidden[i % 2] for i in range(spec.layers)] + [backend.empty((batch, spec.out_features), dtype)]
            self.a = self.z
            self.x = backend.empty((batch, spec.in_features), dtype)
