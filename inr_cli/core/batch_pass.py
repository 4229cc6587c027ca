"""A training step's forward pass, loss and backward pass over one batch, for N networks at once.

Backends hand the Trainer one of these (`backend.training_pass`): the whole batch in one go
(WholeBatchPass: the reference's way and the GPU's), or, on the CPU engine, the same on
cache-sized blocks (backends/cpu_backend.py, BlockedPass).
"""

from __future__ import annotations

from inr_cli.core.network import Network, NetworkSpec, layer_views
from inr_cli.core.workspace import Workspace


def forward_loss_backward(backend, network: Network, ws: Workspace, x, t, rows: int, grads, loss,
                          count: int | None = None, encoding_grads=None) -> None:
    """loss = each network's mean squared error on (x, t); grads = its layers' parameter gradients
    (and encoding_grads its trained encoding's). count: the elements per network the mean is over,
    when the rows are a block of a larger batch."""
    output = network.forward(backend, ws, x, rows)
    backend.mse_loss(output, t, ws.grad[-1], loss, count)
    network.backward(backend, ws, x, rows, grads, encoding_grads)


class WholeBatchPass:
    def __init__(self, backend, spec: NetworkSpec, params, grads, networks: int, batch: int):
        self.backend, self.batch = backend, batch
        self.network = Network(spec, params)
        self.grads = layer_views(spec, grads)
        self.encoding_grads = self.network.encoding.parameters(grads)
        self.workspace = Workspace(spec, networks, batch, backend, training=True)

    def __call__(self, x, t, loss) -> None:
        forward_loss_backward(self.backend, self.network, self.workspace, x, t, self.batch, self.grads, loss,
                              encoding_grads=self.encoding_grads)
