"""The CUDA kernels' own source, compiled as C++ and run on the CPU, against the NumPy reference.

This checks indexing, tiling, bounds checks, split-K, two-pass reductions, barrier placement and
the lane arithmetic of warp-level code (shuffles, tensor-core fragments) of every kernel, through
the same launch plans the GPU uses (see tests/emulation). It needs g++, not a GPU; GPU timing is
left to tests/test_gpu.py and the benchmarks.
"""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.backends.kernel_backend import LaunchError
from inr_cli.backends.launch import plan_column_reduce, plan_matmul
from tests.kernel_checks import (
    check_activations,
    check_column_reduce,
    check_fill,
    check_fourier_features,
    check_fused_layer,
    check_hashgrid,
    check_matmul,
    check_matmul_into_parameter_views,
    check_mse_loss,
    check_sample_batch,
    check_schedule_and_optimizers,
    check_tf32_keeps_the_coordinates,
)
from tests.test_networks import config_for, images, train_together

MATMUL_CASES = [  # (m, n, k): one row, width one, ragged edges, every tile choice, split-K
    (1, 1, 1), (1, 5, 3), (3, 1, 9), (37, 65, 70), (130, 129, 17), (200, 3, 33), (3, 140, 40),
    (70, 40, 9), (40, 70, 9), (64, 64, 1100), (5, 70, 1500),
]


@pytest.mark.parametrize("m,n,k", MATMUL_CASES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul(emulated, m, n, k, trans):
    check_matmul(emulated, m, n, k, trans)


@pytest.mark.parametrize("m,n,k", [(37, 65, 70), (3, 40, 9), (64, 64, 1100)])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_per_network(emulated, m, n, k, trans):
    check_matmul(emulated, m, n, k, trans, networks=3)
    check_matmul(emulated, m, n, k, trans, networks=2, shared_b=True)


@pytest.mark.parametrize("m,n,k", [(5, 7, 30), (64, 64, 1100)])
def test_matmul_into_parameter_views(emulated, m, n, k):
    check_matmul_into_parameter_views(emulated, m, n, k)


TF32_CASES = [(1, 5, 3), (37, 65, 70), (130, 129, 17), (200, 3, 33), (3, 140, 40), (70, 40, 9)]  # every tile


@pytest.mark.parametrize("m,n,k", TF32_CASES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_tf32(emulated_tf32, m, n, k, trans):
    """--precision tf32: tensor cores (mma.sync) on the wide tiles, rounded operands on the thin
    ones, against NumPy with the operands rounded to TF32 first."""
    check_matmul(emulated_tf32, m, n, k, trans)


def test_matmul_tf32_split_k_networks_and_views(emulated_tf32):
    assert plan_matmul(64, 64, 600, True, False, sm_count=4, precision="tf32").splits > 1
    check_matmul(emulated_tf32, 64, 64, 600, "tn", networks=2, shared_b=True)
    check_matmul_into_parameter_views(emulated_tf32, 5, 7, 30)
    check_matmul_into_parameter_views(emulated_tf32, 40, 36, 600)


def test_tf32_products_are_not_fp32(emulated_tf32):
    """The TF32 kernels do round: on every tile their products miss the FP32 ones by far more than
    FP32's own rounding (so the TF32 checks above could not pass on FP32 kernels)."""
    rng = np.random.default_rng(0)
    for m, n, k in TF32_CASES[1:]:
        a, b = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((1, n, k)).astype(np.float32)
        out = np.empty((1, m, n), np.float32)
        emulated_tf32.matmul(a, b, out, trans_b=True)
        fp32 = np.matmul(a.astype(np.float64), b.swapaxes(1, 2).astype(np.float64))
        assert np.abs(out - fp32).max() > 1e-4 * np.sqrt(k), (m, n, k)
        assert emulated_tf32.launched[-1].startswith("matmul_tf32_")


@pytest.mark.parametrize("rows,in_f,out_f", [(1, 2, 5), (150, 70, 3), (129, 33, 65)])
@pytest.mark.parametrize("activation", ["sine", "relu"])
def test_fused_layer_kernels_tf32(emulated_tf32, rows, in_f, out_f, activation):
    check_fused_layer(emulated_tf32, rows, in_f, out_f, activation, networks=2, shared_x=in_f == 2)


def test_training_in_tf32_follows_the_tf32_reference(emulated_tf32):
    """A few steps of two SIRENs with the layer products in TF32: the kernels' losses and weights
    follow the NumPy backend's with the same rounding."""
    from inr_cli.backends.numpy_backend import NumpyBackend

    config = config_for("siren", width=8, height=6, hidden=32, layers=2, lr=1e-3, omega0=30.0, steps=5)
    kernels, kernel_losses = train_together(emulated_tf32, config, images(2, 6, 8), [0, 1], 5)
    numpy, numpy_losses = train_together(NumpyBackend("tf32"), config, images(2, 6, 8), [0, 1], 5)
    np.testing.assert_allclose(kernel_losses, numpy_losses, rtol=1e-3)
    np.testing.assert_allclose(kernels.state().params, numpy.state().params, atol=1e-4)


def test_tf32_leaves_the_coordinates_as_they_are(emulated_tf32):
    check_tf32_keeps_the_coordinates(emulated_tf32)


def test_split_k_and_tiles_are_exercised():
    assert plan_matmul(64, 64, 1100, True, False, sm_count=4).splits > 1
    assert plan_matmul(5, 70, 1500, True, False, sm_count=4).tile.name == "8x256"
    assert plan_matmul(200, 3, 33, False, True, sm_count=4).tile.name == "256x8"
    assert {plan_matmul(m, n, k, False, False, 4).tile.name for m, n, k in MATMUL_CASES} >= {
        "128x128", "128x64", "64x128", "256x8", "8x256"}


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 40), (2000, 1), (1500, 33), (70000, 2)])
def test_column_reduce(emulated, rows, cols):
    check_column_reduce(emulated, rows, cols)
    check_column_reduce(emulated, rows, cols, networks=3)


def test_column_reduce_two_pass_happens():
    assert plan_column_reduce(70000, 2).row_blocks > 1
    assert plan_column_reduce(100, 2).row_blocks == 1


@pytest.mark.parametrize("n", [1, 255, 257, 5000])
def test_fill(emulated, n):
    check_fill(emulated, n)


@pytest.mark.parametrize("activation", ["linear", "sigmoid", "sine", "relu"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (300, 3), (33, 70)])
def test_activations(emulated, activation, rows, cols):
    check_activations(emulated, activation, rows, cols)


@pytest.mark.parametrize("rows,cols", [(1, 1), (700, 3), (100000, 1)])
def test_mse_loss(emulated, rows, cols):
    check_mse_loss(emulated, rows, cols)


def test_schedule_and_optimizers(emulated):
    check_schedule_and_optimizers(emulated, 1001)


def test_sample_batch_bit_identical(emulated):
    check_sample_batch(emulated, 997, 3, 300, [2**40 + 3, 0, 17], 123456789)


@pytest.mark.parametrize("rows,in_f,out_f", [(1, 2, 5), (300, 2, 70), (150, 70, 3), (129, 33, 65), (40, 8, 16)])
@pytest.mark.parametrize("activation", ["sine", "sigmoid", "linear"])
def test_fused_layer_kernels(emulated, rows, in_f, out_f, activation):
    check_fused_layer(emulated, rows, in_f, out_f, activation, networks=1)
    check_fused_layer(emulated, rows, in_f, out_f, activation, networks=3, shared_x=in_f == 2)


@pytest.mark.parametrize("rows,m", [(1, 1), (70, 5), (33, 256)])
def test_fourier_features(emulated, rows, m):
    check_fourier_features(emulated, rows, m)


@pytest.mark.parametrize("rows,features", [(1, 2), (3, 1), (300, 2), (130, 4), (70, 3)])
def test_hashgrid(emulated, rows, features):
    """Every variant of the kernels (F = 3 has none but _any, which each falls back to)."""
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    check_hashgrid(emulated, rows, networks=1, features=features, variants=HASHGRID_VARIANTS)
    check_hashgrid(emulated, rows, networks=3, features=features, variants=HASHGRID_VARIANTS)
    check_hashgrid(emulated, rows, networks=2, shared_x=False, features=features, variants=HASHGRID_VARIANTS)


def test_hashgrid_on_tables_sized_to_a_budget(emulated):
    """A table sized to the image's bytes holds any number of entries (here 91, 2^6.5): its hashed
    levels take the remainder where a power of two takes a mask."""
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    check_hashgrid(emulated, 200, networks=2, features=2, variants=HASHGRID_VARIANTS, log2_size=6.5)


def test_hashgrid_of_32_levels(emulated):
    """As many levels as an image under 256 px gets: the rows kernels' blocks then hold fewer points,
    a thread for each of their 32 levels."""
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    check_hashgrid(emulated, 50, networks=2, features=2, variants=HASHGRID_VARIANTS, levels=32, finest=40)


def test_hash_grid_trains_alike_on_the_kernels_and_the_reference(emulated):
    """A few steps of the hash grid on mini-batches, table trained, through the kernels and through
    the NumPy reference: the same losses and parameters (atomics add in another order: to rounding)."""
    from inr_cli.backends.numpy_backend import NumpyBackend

    config = config_for("hashgrid", width=12, height=10, hidden=8, layers=2, hash_levels=3, hash_log2_size=6,
                        hash_min_res=2, batch_size=50)
    trainer, losses = train_together(emulated, config, images(2, 10, 12), [0, 1], 4)
    reference, reference_losses = train_together(NumpyBackend(), config, images(2, 10, 12), [0, 1], 4)
    size = trainer.spec.encoding_size()
    start = train_together(emulated, config, images(2, 10, 12), [0, 1], 0)[0].state().params
    assert not (trainer.state().params[:, :size] == start[:, :size]).all(), "the table is trained"
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
    np.testing.assert_allclose(trainer.state().params, reference.state().params, rtol=1e-3, atol=1e-5)
    assert "hashgrid_backward_f2_rows" in emulated.launched


def test_fourier_frequencies_stay_frozen_through_the_kernels(emulated):
    config = config_for("fourier", hidden=8, layers=2, fourier_features=4, steps=3)
    trainer, losses = train_together(emulated, config, images(2, 5, 6), [0, 1], 3)
    before = train_together(emulated, config, images(2, 5, 6), [0, 1], 0)[0].state().params
    size = trainer.spec.encoding_size()
    assert (trainer.state().params[:, :size] == before[:, :size]).all()
    assert not (trainer.state().params[:, size:] == before[:, size:]).all()
    assert (losses[-1] < losses[0]).all()


def test_launches_check_their_arguments(emulated):
    """A wrong shape, dtype or layout is refused before the kernel runs."""
    a = np.zeros((2, 4, 3), np.float32)
    with pytest.raises(LaunchError, match="shape"):
        emulated.matmul(a, np.zeros((2, 5, 6), np.float32), np.zeros((2, 4, 6), np.float32))
    with pytest.raises(LaunchError, match="dtype"):
        emulated.matmul(a.astype(np.float64), np.zeros((2, 3, 6), np.float32), np.zeros((2, 4, 6), np.float32))
    with pytest.raises(LaunchError, match="contiguous"):
        emulated.matmul(np.zeros((2, 3, 4), np.float32).swapaxes(1, 2), np.zeros((2, 3, 6), np.float32),
                        np.zeros((2, 4, 6), np.float32))
    with pytest.raises(LaunchError, match="networks"):
        emulated.matmul(np.zeros((3, 4, 3), np.float32), np.zeros((2, 3, 6), np.float32),
                        np.zeros((2, 4, 6), np.float32))
    with pytest.raises(LaunchError, match="shape"):
        emulated.mse_loss(*(np.zeros((2, 5, 3), np.float32),) * 3, np.zeros(3, np.float32))
    assert not emulated.launched or emulated.launched[-1] != "mse_loss"


def test_networks_leave_a_pack_at_their_target_on_the_kernel_path(emulated):
    """fit-many --until-psnr on the kernels: each network leaves its pack at the reading where it
    reaches the target and the trainer is rebuilt on the rest (on a GPU, its CUDA graph captured
    again), with the steps the CPU engine gives each network and, near enough, its weights."""
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.config import with_values
    from inr_cli.sets.packs import fit_pack
    from inr_cli.sets.plan import ImageEntry, image_seed, make_plan

    pictures, names = images(4, 6, 8), [f"image-{i}" for i in range(4)]
    config = config_for("siren", width=8, height=6, hidden=16, layers=2, lr=1e-2, omega0=30.0, steps=80,
                        until_psnr=25.0)
    config = with_values(config, {"training.log_every": 5})
    plan = make_plan("images", config, [ImageEntry(n, 8, 6, ("r", "g", "b"), "0", image_seed(0, n)) for n in names],
                     pack=4)
    cpu_pack, kernel_pack = fit_pack(CpuBackend(), plan, pictures, names), fit_pack(emulated, plan, pictures, names)
    assert len(set(cpu_pack["steps"])) > 1 and (cpu_pack["steps"] < 80).all()  # networks left at several readings
    assert list(kernel_pack["steps"]) == list(cpu_pack["steps"])
    np.testing.assert_allclose(kernel_pack["params"], cpu_pack["params"], atol=2e-3)
    np.testing.assert_allclose(kernel_pack["psnr"], cpu_pack["psnr"], atol=0.05)


def test_meta_init_learns_the_same_start_on_the_kernel_path(emulated, tmp_path):
    """meta-init --device gpu runs its inner fits as fit-many's packs on the kernels: the start and
    the held-out measures follow the CPU engine's."""
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.sets.meta import MetaOptions
    from tests.test_meta_init import kind, learned_on

    folder = kind(tmp_path / "kind", 5, 0)
    options = MetaOptions(outer_steps=4, inner_steps=3, meta_batch=2, eval_every=2)
    cpu_start, cpu_log = learned_on(CpuBackend(), folder, tmp_path, 10, options)
    kernel_start, kernel_log = learned_on(emulated, folder, tmp_path, 10, options)
    np.testing.assert_allclose(kernel_start, cpu_start, atol=1e-4)
    np.testing.assert_allclose(kernel_log, cpu_log, atol=0.01)
    assert cpu_log[-1] > cpu_log[0]  # it learned something to agree on
