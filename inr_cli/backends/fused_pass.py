"""A narrow network's training pass on the GPU in fused kernels (kernels/fused_network.cu).

WholeBatchPass runs a kernel per layer and operation, each reading its input from device memory and
writing its output back. Where the hidden layers are at most FUSED_MAX_WIDTH wide, a block of the
fused kernels instead carries a tile of the batch's rows through every layer with the activations
in shared memory. Two designs (launch.FUSED_VARIANTS, backend.fused_variant): "two-kernels", the
default, runs network_forward, which writes each layer's z and a once, mse_loss, then
network_backward, which walks back from the loss's gradient computing the weight and bias gradients
on the way; "one-kernel" runs forward, loss and backward in one launch (network_train), the
activations never leaving the chip and each block's weight gradients summed in shared memory.
launch.plan_fused_network says how the work is split. A first layer wider than the kernels (Fourier
features, a hash grid of many features) runs before them as a layer of its own, and its gradients
after.

An encoding whose parameters learn (encoding.trainable: the hash grid) needs dL/d(its output): the
backward kernel hands back the gradient at the stack's input (network_backward's input_grad), or,
after a first layer of its own, that layer's dL/dz times its weights; the encoding's own backward
(the hash grid's scatter) runs after.

The same contract as WholeBatchPass (core/batch_pass.py), and the same arithmetic but for the order
of the sums: tests/test_fused_network.py holds one to the other under the emulation.
"""

from __future__ import annotations

from types import SimpleNamespace

from inr_cli.backends.launch import FusedPlan, plan_fused_network
from inr_cli.core.encodings import create_encoding
from inr_cli.core.network import NetworkSpec, layer_views


def fused_plan(spec: NetworkSpec, batch: int, backend) -> FusedPlan | None:
    """How the fused kernels would run this network on this backend (its precision, the variant it
    asks for, its device), or None where they do not apply."""
    return plan_fused_network(spec.layer_shapes(), spec.encoding_size(), batch, backend.precision,
                              backend.fused_variant, backend.sm_count, backend.shared_per_block)


class FusedPass:
    def __init__(self, backend, spec: NetworkSpec, params, grads, networks: int, batch: int, plan: FusedPlan):
        self.backend, self.spec, self.plan, self.batch = backend, spec, plan, batch
        self.params, self.grads = params, grads
        self.encoding = create_encoding(spec)
        self.encoding_parameters = self.encoding.parameters(params)
        self.encoding_grads = self.encoding.parameters(grads) if self.encoding.trainable else None
        self.buffers = SimpleNamespace(**self.encoding.buffers(backend, networks, batch, training=True))
        activations = spec.activations()
        self.hidden_activation, self.output_activation = activations[0], activations[-1]
        empty = backend.empty
        if plan.first:  # the first layer, too wide for the kernels, as a layer of its own
            self.first_layer, self.first_grads = layer_views(spec, params)[0], layer_views(spec, grads)[0]
            self.z0, self.a0, self.grad0 = (empty((networks, batch, plan.hidden)) for _ in range(3))
        if plan.variant == "two-kernels":  # each layer's z and a, kept for the backward kernel
            hidden_shape = (networks, plan.layers - 1, batch, plan.hidden)
            self.hz, self.ha = (empty(hidden_shape), empty(hidden_shape)) if plan.layers > 1 else (None, None)
            self.oz = empty((networks, batch, plan.out))
            self.oa = self.oz if self.output_activation == "linear" else empty((networks, batch, plan.out))
            self.grad_out = empty((networks, batch, plan.out))

    def __call__(self, x, t, loss) -> None:
        b, plan, omega0 = self.backend, self.plan, self.spec.omega0
        encoded = self.encoding.forward(b, self.buffers, self.encoding_parameters, x, self.batch)
        if plan.first:
            weight, bias = self.first_layer
            b.linear_forward(encoded, weight, bias, self.z0, self.a0, self.hidden_activation, omega0)
            stack_input = self.a0
        else:
            stack_input = encoded
        # The gradient at the stack's input: after a first layer of its own, that layer's dL/dz, from which
        # its gradients follow; else, for a trained encoding, dL/d(its output).
        encoded_grad = self.buffers.encoded_grad if self.encoding.trainable else None
        if plan.first:
            input_grad = dict(input_grad=self.grad0, z_in=self.z0, input_activation=self.hidden_activation)
        else:
            input_grad = {} if encoded_grad is None else dict(input_grad=encoded_grad)
        if plan.variant == "one-kernel":
            b.network_train(plan, stack_input, t, self.params, self.grads, loss, self.hidden_activation,
                            self.output_activation, omega0, **input_grad)
        else:
            b.network_forward(plan, stack_input, self.params, self.hz, self.ha, self.oz, self.oa,
                              self.hidden_activation, self.output_activation, omega0)
            b.mse_loss(self.oa, t, self.grad_out, loss)
            b.network_backward(plan, stack_input, self.params, self.hz, self.ha, self.oz, self.oa, self.grad_out,
                               self.grads, self.hidden_activation, self.output_activation, omega0, **input_grad)
        if plan.first:
            b.linear_backward_weights(self.grad0, encoded, *self.first_grads)
            if encoded_grad is not None:
                b.matmul(self.grad0, self.first_layer[0], encoded_grad)
        if encoded_grad is not None:
            self.encoding.backward(b, self.buffers, x, self.batch, encoded_grad, self.encoding_grads)
