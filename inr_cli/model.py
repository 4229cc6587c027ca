"""Hand-written forward and backward passes over a backend and a workspace."""

from __future__ import annotations

from inr_cli.network import NetworkSpec
from inr_cli.workspace import Workspace


def encode_input(backend, spec: NetworkSpec, frequencies, ws: Workspace, x, rows: int):
    """The first layer's input: x itself, or its Fourier features [cos(2 pi x B^T), sin(2 pi x B^T)]."""
    if frequencies is None:
        return x[:rows]
    backend.matmul(x[:rows], frequencies, ws.projection[:rows], trans_b=True)
    backend.fourier_features(ws.projection[:rows], ws.encoded[:rows])
    return ws.encoded[:rows]


def first_layer_input(spec: NetworkSpec, ws: Workspace, x, rows: int):
    """What encode_input returned in the forward pass just run."""
    return ws.encoded[:rows] if spec.encoding == "fourier" else x[:rows]


def forward(backend, spec: NetworkSpec, params, ws: Workspace, x, rows: int, frequencies=None):
    """Network output for the first `rows` rows of x; returns a view into the workspace."""
    layer_input = encode_input(backend, spec, frequencies, ws, x, rows)
    for (weight, bias), z, a, act in zip(params, ws.z, ws.a, spec.activations()):
        z, a = z[:rows], a[:rows]
        backend.linear_forward(layer_input, weight, bias, z, a, act, spec.omega0)
        layer_input = a
    return layer_input


def loss_and_output_grad(backend, ws: Workspace, output, target, rows: int) -> None:
    """Mean squared error into ws.loss, its gradient w.r.t. the output into ws.grad[-1]."""
    backend.mse_loss(output, target[:rows], ws.grad[-1][:rows], ws.loss)


def backward(backend, spec: NetworkSpec, params, grads, ws: Workspace, x, rows: int) -> None:
    """Parameter gradients into `grads`, given dL/d(output) in ws.grad[-1] and a forward pass.

    ws.grad[i] holds dL/dz_i: the output layer's comes from the loss through its activation; each
    earlier one from linear_backward_input, which applies the activation's derivative as it goes."""
    activations = spec.activations()
    last = len(params) - 1
    backend.activation_backward(ws.grad[last][:rows], ws.z[last][:rows], ws.a[last][:rows], activations[last],
                                spec.omega0)
    for i in reversed(range(len(params))):
        grad = ws.grad[i][:rows]
        layer_input = first_layer_input(spec, ws, x, rows) if i == 0 else ws.a[i - 1][:rows]
        backend.matmul(grad, layer_input, grads[i][0], trans_a=True)
        backend.column_reduce(grad, grads[i][1])
        if i > 0:
            backend.linear_backward_input(grad, params[i][0], ws.z[i - 1][:rows], ws.a[i - 1][:rows],
                                          ws.grad[i - 1][:rows], activations[i - 1], spec.omega0)
