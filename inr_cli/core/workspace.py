"""Every batch-sized buffer of one invocation, for N networks at once, allocated once and reused.

Every buffer is [N, batch, width]; passes work on the first `rows` rows of them.
"""

from __future__ import annotations

import numpy as np

from inr_cli.core.encodings import create_encoding
from inr_cli.core.network import NetworkSpec


class Workspace:
    def __init__(self, spec: NetworkSpec, networks: int, batch: int, backend, training: bool, dtype=np.float32):
        """training: keep every layer's z and a for the backward pass (inference keeps two buffers)."""
        self.batch = batch
        n = networks
        shapes = spec.layer_shapes()
        # The encoding's own (Fourier: ws.projection and ws.encoded), under the names it reads them by.
        for name, buffer in create_encoding(spec).buffers(backend, n, batch, training, dtype).items():
            setattr(self, name, buffer)
        if training:
            # z (pre-activation) feeds the activations' derivatives, a the next layer's weight gradient.
            self.z = [backend.empty((n, batch, out_f), dtype) for out_f, _ in shapes]
            self.a = [z if act == "linear" else backend.empty(z.shape, dtype)
                      for z, act in zip(self.z, spec.activations())]
            self.grad = [backend.empty((n, batch, out_f), dtype) for out_f, _ in shapes]
        else:
            # Inference: activations in place, hidden layers ping-pong between two buffers, and one
            # table of coordinates for every network.
            hidden = [backend.empty((n, batch, spec.hidden), dtype) for _ in range(min(2, spec.layers))]
            self.z = [hidden[i % 2] for i in range(spec.layers)] + [backend.empty((n, batch, spec.out_features), dtype)]
            self.a = self.z
            self.x = backend.empty((1, batch, spec.in_features), dtype)
