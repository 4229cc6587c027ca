"""The fused network kernels (kernels/fused_network.cu, backends/fused_pass.py) under the emulation,
against the layer-by-layer training pass on the NumPy backend with the same precision.

Both designs (launch.FUSED_VARIANTS): one kernel a step on every path (each width class, depths of
one to three hidden layers, each activation, a first layer too wide for the kernels, a trained
encoding whose gradient the kernel hands back, several networks with shared and with per-network
inputs, batches that end inside a tile, one and several gradient groups, FP32 and TF32, and training
for some steps); the two kernels, the engine's default, on a smaller set beside it. Tolerance: the
two add their products in other orders (and TF32 rounds the operands of both alike), so they agree
to FP32 rounding, scaled by the size of what is summed.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from inr_cli.backends.fused_pass import FusedPass, fused_plan
from inr_cli.backends.launch import CONSTANTS, FUSED_VARIANTS, SHARED_PER_BLOCK, plan_fused_network
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.core.batch_pass import WholeBatchPass
from inr_cli.core.network import NetworkSpec, init_networks
from tests.test_networks import config_for, images, train_together


def spec_for(model="siren", hidden=16, layers=2, out=3, encoding="none", features=0, omega0=30.0,
             linear_output=False, **grid):
    """features: Fourier features; grid: a hash grid's levels and level_features (and the rest as
    NetworkSpec's hash_ fields)."""
    if encoding == "hashgrid":
        grid = dict(hash_levels=grid.get("levels", 4), hash_features=grid.get("level_features", 2),
                    hash_log2_size=grid.get("log2_size", 7), hash_min_resolution=2,
                    hash_max_resolution=grid.get("max_resolution", 24))
    return NetworkSpec(model=model, out_features=out, hidden=hidden, layers=layers, omega0=omega0, encoding=encoding,
                       fourier_features=features, fourier_sigma=3.0 if features else 0.0,
                       linear_output=linear_output, **grid)


@pytest.fixture(scope="module")
def one_kernel(emulated):
    """The emulated kernels with the fused network in one kernel a step (network_train); `emulated` runs
    the engine's default, the two kernels (network_forward, network_backward)."""
    return variant_of(emulated, "one-kernel")


@pytest.fixture(scope="module")
def one_kernel_tf32(emulated_tf32):
    return variant_of(emulated_tf32, "one-kernel")


@pytest.fixture(scope="module")
def layer_by_layer(emulated):
    """The emulated kernels a layer at a time (--no-fused-network)."""
    return copy_of(emulated, fused=False)


def copy_of(backend, **settings):
    """Another backend on the same compiled kernels (building one runs the compiler's preprocessor for
    seconds), with these attributes set."""
    other = copy.copy(backend)
    other._scratch, other.launched = {}, []
    for name, value in settings.items():
        setattr(other, name, value)
    return other


def variant_of(backend, variant: str):
    return copy_of(backend, fused_variant=variant)


def one_pass(backend, spec, params, x, t, fused: bool):
    """Loss, gradients and output (None where the fused kernels keep it on the chip) of one training
    pass of the networks `params` on (x, t)."""
    networks, batch = params.shape[0], t.shape[1]
    params_d, grads_d = backend.to_device(params), backend.to_device(np.zeros_like(params))
    loss = backend.to_device(np.full(networks, np.nan, np.float32))
    if fused:
        plan = fused_plan(spec, batch, backend)
        training_pass = FusedPass(backend, spec, params_d, grads_d, networks, batch, plan)
    else:
        training_pass = WholeBatchPass(backend, spec, params_d, grads_d, networks, batch)
    training_pass(backend.to_device(x), backend.to_device(t), loss)
    output = getattr(training_pass, "oa", None) if fused else training_pass.workspace.a[-1]
    output = None if output is None else backend.to_host(output).copy()
    return backend.to_host(loss).copy(), backend.to_host(grads_d).copy(), output


def check_fused_pass(backend, spec, networks, batch, shared_x=True, seed=0):
    rng = np.random.default_rng(seed)
    params = init_networks(spec, list(range(networks)))
    params += rng.normal(0, 0.02, params.shape).astype(np.float32)  # biases away from their start too
    if spec.encoding == "hashgrid":  # tables far from their start's 1e-4, so that the network sees them
        size = spec.encoding_size()
        params[:, :size] = rng.uniform(-1, 1, (networks, size))
    x = rng.uniform(-1, 1, (1 if shared_x else networks, batch, spec.in_features)).astype(np.float32)
    t = rng.random((networks, batch, spec.out_features), dtype=np.float32)
    fused = one_pass(backend, spec, params, x, t, fused=True)
    reference = one_pass(NumpyBackend(backend.precision), spec, params, x, t, fused=False)
    loss, grads, output = fused
    if output is not None:
        np.testing.assert_allclose(output, reference[2], rtol=1e-3, atol=2e-4 * spec.hidden ** 0.5)
    np.testing.assert_allclose(loss, reference[0], rtol=2e-4)
    for network, (ours, theirs) in enumerate(zip(grads, reference[1])):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=3e-4 * np.abs(theirs).max() * np.sqrt(batch / 64),
                                   err_msg=f"network {network}'s gradients")
    assert np.abs(grads).max() > 0 and not np.allclose(grads[0], grads[-1])  # every network its own
    plan = fused_plan(spec, batch, backend)
    assert plan.variant == backend.fused_variant
    return plan


SHAPES = {  # (hidden, layers, batch)
    "16x1": (16, 1, 70),  # no hidden-to-hidden layer; a tile and a nearly empty one
    "12x2": (12, 2, 300),  # a narrower network in a width of 16: padded columns
    "32x2": (32, 2, 200),
    "48x3": (48, 3, 130),  # two hidden-to-hidden layers; a width no power of two
    "64x1": (64, 1, 150),
    "128x2": (128, 2, 40),  # the widest: tiles of 16 rows (all its shared memory allows)
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_siren_matches_the_layer_by_layer_pass(one_kernel, one_kernel_tf32, shape, precision):
    hidden, layers, batch = SHAPES[shape]
    backend = one_kernel if precision == "fp32" else one_kernel_tf32
    plan = check_fused_pass(backend, spec_for("siren", hidden, layers), networks=2, batch=batch)
    assert plan.width == -(-hidden // 16) * 16 and plan.first == 0 and plan.train.endswith(precision)


@pytest.mark.parametrize("shape", ["12x2", "48x3", "128x2"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_two_kernels_match_the_layer_by_layer_pass(emulated, emulated_tf32, shape, precision):
    hidden, layers, batch = SHAPES[shape]
    backend = emulated if precision == "fp32" else emulated_tf32
    plan = check_fused_pass(backend, spec_for("siren", hidden, layers), networks=2, batch=batch)
    assert plan.width == next(w for w in (16, 32, 64, 128) if w >= hidden) and plan.first == 0


@pytest.mark.parametrize("model", ["sigmoid", "relu"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_sigmoid_and_relu_networks(one_kernel, one_kernel_tf32, model, precision):
    backend = one_kernel if precision == "fp32" else one_kernel_tf32
    check_fused_pass(backend, spec_for(model, 32, 2, out=1), networks=3, batch=150, shared_x=False)


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_first_layer_wider_than_the_kernels_runs_on_its_own(emulated, emulated_tf32, variant, precision):
    """Fourier features (40 inputs) into 16 neurons: the first layer runs as a layer, the rest fused,
    and its gradients come from the gradient at the stack's input; with one hidden layer the stack is
    the output layer alone."""
    backend = variant_of(emulated if precision == "fp32" else emulated_tf32, variant)
    plan = check_fused_pass(backend, spec_for("sigmoid", 16, 2, encoding="fourier", features=20), networks=2,
                            batch=100)
    assert plan.first == 1 and plan.layers == 2
    plan = check_fused_pass(backend, spec_for("sigmoid", 16, 1, encoding="fourier", features=20), networks=2,
                            batch=40)
    assert plan.first == 1 and plan.layers == 1


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_hash_grid_gets_its_gradient_from_the_kernels(emulated, emulated_tf32, variant, precision):
    """The hashgrid preset's shape (a ReLU network with a linear output on a hash grid's features): the
    kernels hand back dL/d(encoding) and the table's gradient is scattered from it, for a pack of networks
    on their own mini-batches and on one table of coordinates; the tables' gradients are held with the
    layers'."""
    backend = variant_of(emulated if precision == "fp32" else emulated_tf32, variant)
    spec = spec_for("relu", 32, 2, encoding="hashgrid", levels=4, level_features=2, linear_output=True)
    assert spec.activations()[-1] == "linear"
    plan = check_fused_pass(backend, spec, networks=3, batch=150, shared_x=False)
    assert plan.first == 0 and plan.in0 == 8
    check_fused_pass(backend, spec, networks=2, batch=70, shared_x=True)


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_the_hashgrid_preset_of_a_small_image_in_the_kernels(emulated, variant):
    """32 levels of 2 features (64 inputs) into the preset's 2x64 ReLU head with its linear output: the
    first layer in the kernels too, the gradients the reference's."""
    spec = spec_for("relu", 64, 2, encoding="hashgrid", levels=32, level_features=2, linear_output=True)
    plan = check_fused_pass(variant_of(emulated, variant), spec, networks=2, batch=40, shared_x=False)
    assert plan.first == 0 and plan.in0 == 64


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_a_hash_grid_wider_than_the_kernels_runs_its_first_layer_on_its_own(emulated, variant):
    """8 levels of 4 features (32 inputs) into 16 neurons: the first layer runs as a layer, and the
    table's gradient comes from that layer's dL/dz times its weights."""
    spec = spec_for("relu", 16, 2, encoding="hashgrid", levels=8, level_features=4)
    plan = check_fused_pass(variant_of(emulated, variant), spec, networks=2, batch=100, shared_x=False)
    assert plan.first == 1 and plan.layers == 2


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_many_gradient_groups_and_one(emulated, variant):
    """A network's blocks add their tiles' gradients into slots summed after (groups > 1), or, with
    one group, straight into the gradients: both give the reference's gradients (and loss)."""
    backend = variant_of(emulated, variant)
    spec = spec_for("siren", 16, 1)
    assert fused_plan(spec, 1500, backend).groups > 1
    assert fused_plan(spec, 60, backend).groups == 1
    check_fused_pass(backend, spec, networks=2, batch=1500)
    check_fused_pass(backend, spec, networks=2, batch=60)


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_gradient_at_the_input(emulated, variant):
    """The kernels' input_grad, for an encoding that learns (a hash grid): dL/dx = G_0 W_0 for each
    network's own inputs, against the reference's linear_backward_input."""
    backend = variant_of(emulated, variant)
    spec = spec_for("relu", 32, 2, out=3)
    networks, batch = 2, 90
    rng = np.random.default_rng(1)
    params = init_networks(spec, [3, 4])
    x = rng.uniform(-1, 1, (networks, batch, 2)).astype(np.float32)
    t = rng.random((networks, batch, 3), dtype=np.float32)
    plan = fused_plan(spec, batch, backend)
    input_grad = np.full((networks, batch, 2), np.nan, np.float32)
    grads, loss = np.zeros_like(params), np.zeros(networks, np.float32)
    if variant == "one-kernel":
        backend.network_train(plan, x, t, params, grads, loss, "relu", "sigmoid", spec.omega0, input_grad=input_grad)
    else:
        fused = FusedPass(backend, spec, params.copy(), grads, networks, batch, plan)
        fused(x, t, loss)
        backend.network_backward(plan, x, fused.params, fused.hz, fused.ha, fused.oz, fused.oa, fused.grad_out,
                                 np.zeros_like(params), "relu", "sigmoid", spec.omega0, input_grad=input_grad)

    reference = NumpyBackend()
    whole = WholeBatchPass(reference, spec, params.copy(), np.zeros_like(params), networks, batch)
    whole(x, t, np.zeros(networks, np.float32))
    expected = np.empty_like(input_grad)
    weight = whole.network.layers[0][0]
    reference.linear_backward_input(whole.workspace.grad[0], weight, x, x, expected, "linear")
    np.testing.assert_allclose(input_grad, expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())


def test_one_kernel_plans():
    """network_train's plans: tiles of a multiple of 32 rows (or 16) of at most 16 values a thread, so
    that a product that overwrites its operand takes one pass (fused_network.cu's in_place); the
    tile halved until the shared memory fits, the two kernels where even 16 rows do not; a network's
    groups by its rows and the device alone, one network filling the SMs."""
    def plan_of(shapes, batch, **device):
        return plan_fused_network(shapes, 0, batch, variant="one-kernel", **device)

    elements, limit = CONSTANTS["FUSED_TRAIN_TILE_ELEMENTS"], SHARED_PER_BLOCK
    for hidden in (1, 12, 16, 48, 64, 100, 128):
        for layers in (2, 3, 4, 5):
            shapes = [(hidden, 2)] + [(hidden, hidden)] * (layers - 2) + [(3, hidden)]
            plan = plan_of(shapes, 5000, sm_count=132)
            assert plan.shared <= limit or plan.variant == "two-kernels"
            if plan.variant == "one-kernel":
                tile = plan.rows_per_chunk
                assert (tile % 32 == 0 or tile == 16) and tile * plan.width <= elements
                smaller = plan_of(shapes, 5000, shared_per_block=plan.shared - 1)
                assert smaller.variant == "two-kernels" or smaller.rows_per_chunk < tile
    sigmoid = [(64, 2), (64, 64), (1, 64)]
    assert plan_of(sigmoid, 40000, sm_count=132).groups == 132  # one network fills an H200
    assert plan_of(sigmoid, 1024, sm_count=132).groups == 4
    deep = [(128, 2)] + [(128, 128)] * 3 + [(3, 128)]
    assert plan_of(deep, 5000, sm_count=132).variant == "two-kernels"


def test_the_backend_picks_the_fused_pass_where_it_applies(emulated, layer_by_layer):
    def pass_for(backend, hidden, **flags):
        spec = spec_for(hidden=hidden, **flags)
        params = init_networks(spec, [0])
        return backend.training_pass(spec, params, np.zeros_like(params), 1, 64)

    assert isinstance(pass_for(emulated, 64), FusedPass)
    assert pass_for(emulated, 64).plan.variant == "two-kernels"  # the default until a GPU has timed the one kernel
    assert isinstance(pass_for(emulated, 128, encoding="fourier", features=256), FusedPass)
    assert isinstance(pass_for(emulated, 64, encoding="hashgrid", levels=16, level_features=2), FusedPass)
    assert isinstance(pass_for(emulated, 256), WholeBatchPass)  # wider than the kernels go
    assert isinstance(pass_for(layer_by_layer, 64), WholeBatchPass)  # --no-fused-network


@pytest.mark.parametrize("batch_size", [0, 40])
def test_training_fused_follows_training_layer_by_layer(emulated, one_kernel, layer_by_layer, batch_size):
    """A pack of three SIRENs trained for some steps, full batch in the two kernels and on mini-batches
    drawn per network in one kernel a step: the fused pass and the kernels layer by layer end at the
    same losses and weights, as near as their different orders of summation allow."""
    fused_backend = emulated if batch_size == 0 else one_kernel
    config = config_for("siren", width=10, height=8, hidden=32, layers=2, lr=1e-3, omega0=30.0, steps=8,
                        batch_size=batch_size)
    fused, fused_losses = train_together(fused_backend, config, images(3, 8, 10), [0, 1, 2], 8)
    layered, layered_losses = train_together(layer_by_layer, config, images(3, 8, 10), [0, 1, 2], 8)
    assert isinstance(fused.training_pass, FusedPass) and isinstance(layered.training_pass, WholeBatchPass)
    assert fused.training_pass.plan.variant == fused_backend.fused_variant
    np.testing.assert_allclose(fused_losses, layered_losses, rtol=1e-4)
    np.testing.assert_allclose(fused.state().params, layered.state().params, atol=2e-5)
    assert fused_losses[-1].mean() < fused_losses[0].mean()


def test_a_hash_grid_trains_alike_fused_and_layer_by_layer(one_kernel, layer_by_layer):
    """A pack of three ReLU networks on hash grids, trained on mini-batches drawn per network: fused
    (one kernel a step) and layer by layer end at the same losses and parameters, tables included.
    Tolerance: besides the order of the sums, the scatter adds in the order the points come (an
    atomicAdd on the GPU), so a few steps apart they agree to float32 rounding of the lr-scaled
    updates (atol 2e-5, as the SIREN above)."""
    config = config_for("hashgrid", width=12, height=10, hidden=16, layers=2, hash_levels=3, hash_log2_size=6,
                        hash_min_res=2, batch_size=50, lr=1e-2, steps=6)
    fused, fused_losses = train_together(one_kernel, config, images(3, 10, 12), [0, 1, 2], 6)
    layered, layered_losses = train_together(layer_by_layer, config, images(3, 10, 12), [0, 1, 2], 6)
    assert isinstance(fused.training_pass, FusedPass) and isinstance(layered.training_pass, WholeBatchPass)
    assert fused.training_pass.plan.variant == "one-kernel"
    size = fused.spec.encoding_size()
    start = train_together(one_kernel, config, images(3, 10, 12), [0, 1, 2], 0)[0].state().params
    assert (np.abs(fused.state().params[:, :size] - start[:, :size]) > 1e-3).any(), "the tables are trained"
    np.testing.assert_allclose(fused_losses, layered_losses, rtol=1e-4)
    np.testing.assert_allclose(fused.state().params, layered.state().params, atol=2e-5)
    assert fused_losses[-1].mean() < fused_losses[0].mean()
