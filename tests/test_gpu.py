"""GPU tests: every kernel against the NumPy reference on awkward shapes, then whole runs.

Marked `gpu`: skipped with the reason when CuPy or a GPU is missing (see conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from inr_cli.core.network import NetworkSpec, init_parameters
from inr_cli.core.render import render_float
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
    cpu,
)
from tests.test_networks import config_for, images, train_together

pytestmark = pytest.mark.gpu

MATMUL_SHAPES = [  # (m, n, k): 1 row, width 1, not multiples of any tile, a big batch
    (1, 1, 1), (1, 256, 256), (256, 1, 3), (37, 65, 70), (130, 129, 17), (300, 3, 256), (3, 256, 300),
    (262144, 256, 256), (256, 256, 262144), (3, 256, 262144), (1 << 20, 3, 64), (40000, 64, 2),
]


@pytest.fixture(scope="module")
def gpu():
    from inr_cli.backends.cuda_backend import CudaBackend

    return CudaBackend()


@pytest.mark.parametrize("m,n,k", MATMUL_SHAPES)
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_matches_numpy(gpu, m, n, k, trans):
    check_matmul(gpu, m, n, k, trans)


@pytest.mark.parametrize("m,n,k", [(4096, 64, 64), (64, 64, 4096), (37, 65, 70), (3, 64, 4096)])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_per_network(gpu, m, n, k, trans):
    check_matmul(gpu, m, n, k, trans, networks=7)
    check_matmul(gpu, m, n, k, trans, networks=5, shared_b=True)


@pytest.mark.parametrize("m,n,k", [(5, 7, 30), (64, 64, 4096), (256, 256, 65536)])
def test_matmul_into_parameter_views(gpu, m, n, k):
    check_matmul_into_parameter_views(gpu, m, n, k)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 256), (1 << 20, 1), (1 << 20, 3), (262144, 256), (513, 33),
                                       (7, 1000)])
def test_column_reduce(gpu, rows, cols):
    check_column_reduce(gpu, rows, cols)
    if rows * cols < 1 << 22:
        check_column_reduce(gpu, rows, cols, networks=5)


@pytest.mark.parametrize("n", [1, 255, 257, 1 << 20])
def test_fill(gpu, n):
    check_fill(gpu, n)


@pytest.mark.parametrize("activation", ["linear", "sigmoid", "sine", "relu"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (1000, 3), (4097, 256)])
def test_activations(gpu, activation, rows, cols):
    check_activations(gpu, activation, rows, cols)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1000, 3), (1 << 20, 3)])
def test_mse_loss(gpu, rows, cols):
    check_mse_loss(gpu, rows, cols)


def test_optimizer_and_schedule(gpu):
    check_schedule_and_optimizers(gpu, 100003)


def test_sample_batch_identical_to_cpu(gpu):
    check_sample_batch(gpu, 9973, 7, 4096, [5, 2**63 + 1, 0], 17)


PRESETS = {"siren": "siren", "sigmoid": "sigmoid"}


def _train(backend, model, batch_size, steps=100, cuda_graph=True, networks=1):
    config = config_for(PRESETS[model], hidden=64, layers=3, omega0=30.0, lr=1e-4 if model == "siren" else 1e-3,
                        batch_size=batch_size, cuda_graph=cuda_graph, steps=steps)
    trainer, losses = train_together(backend, config, images(networks, 48, 64), list(range(networks)), steps)
    return losses, trainer


@pytest.mark.parametrize("model,batch_size", [("siren", 0), ("sigmoid", 0), ("siren", 1000)])
def test_training_run_matches_cpu(gpu, model, batch_size):
    cpu_losses, cpu_trainer = _train(cpu, model, batch_size)
    gpu_losses, gpu_trainer = _train(gpu, model, batch_size)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=2e-3)
    spec = cpu_trainer.spec
    cpu_render = render_float(cpu, spec, cpu_trainer.state().params[0], 100, 75)
    gpu_render = render_float(gpu, spec, gpu_trainer.params[:1], 100, 75)
    np.testing.assert_allclose(gpu_render, cpu_render, atol=2e-3)


@pytest.mark.parametrize("batch_size", [0, 500])
def test_networks_together_equal_networks_alone_on_the_gpu(gpu, batch_size):
    """One launch per operation for 5 networks gives each the bits it gets alone (the launch plans
    do not depend on the number of networks)."""
    _, together = _train(gpu, "siren", batch_size, steps=20, networks=5)
    for i in (0, 4):
        config = together.config
        alone, _ = train_together(gpu, config, images(5, 48, 64)[i:i + 1], [i], 20)
        assert np.array_equal(together.state().params[i], alone.state().params[0])


def test_render_ignores_work_on_other_streams(gpu):
    """A render stays on the backend's stream: a copy issued on the null stream, which the
    non-blocking stream does not wait for, would land after the kernels that read it."""
    import cupy

    spec = NetworkSpec.from_config(config_for("siren", hidden=64, layers=3, omega0=30.0), 3)
    params = init_parameters(spec, 0)
    # A first render of another height fills CuPy's pool, so the second allocates nothing (an
    # allocation could synchronise the device) and finds other coordinates in the reused buffers.
    np.testing.assert_allclose(render_float(gpu, spec, params, 300, 400), render_float(cpu, spec, params, 300, 400),
                               atol=2e-3)
    expected = render_float(cpu, spec, params, 300, 500)  # three chunks of the workspace
    busy = cupy.ones(1 << 26, dtype=cupy.float32)
    for _ in range(200):  # tens of milliseconds queued on the null stream
        cupy.sin(busy, out=busy)
    rendered = render_float(gpu, spec, params, 300, 500)
    np.testing.assert_allclose(rendered, expected, atol=2e-3)


def test_cuda_graph_equals_eager(gpu):
    graph_losses, graph_trainer = _train(gpu, "siren", 0, steps=20, cuda_graph=True)
    eager_losses, _ = _train(gpu, "siren", 0, steps=20, cuda_graph=False)
    assert graph_trainer._run_step.graph is not None, f"capture failed: {graph_trainer._run_step.failed}"
    np.testing.assert_array_equal(graph_losses, eager_losses)


def test_cublas_path_agrees(gpu):
    from inr_cli.backends.cuda_backend import CudaBackend

    ours, _ = _train(gpu, "siren", 0, steps=20)
    cublas, _ = _train(CudaBackend(matmul="cublas"), "siren", 0, steps=20)
    np.testing.assert_allclose(cublas, ours, rtol=2e-3)


@pytest.mark.parametrize("rows,in_f,out_f", [(1, 2, 256), (262144, 2, 256), (262144, 256, 256), (262144, 256, 3),
                                             (999, 64, 1)])
@pytest.mark.parametrize("activation", ["sine", "sigmoid", "linear"])
def test_fused_layer_kernels(gpu, rows, in_f, out_f, activation):
    check_fused_layer(gpu, rows, in_f, out_f, activation)


@pytest.mark.parametrize("rows,m", [(1, 1), (262144, 256), (999, 7)])
def test_fourier_features(gpu, rows, m):
    check_fourier_features(gpu, rows, m)


@pytest.mark.parametrize("grid", ["shared entries", "preset", "small image"])
def test_hashgrid(gpu, grid):
    """The hash grid's kernels at a training batch's size against the NumPy reference, 3 networks:
    four small levels whose few entries take tens of thousands of atomicAdds each (the emulation
    adds one at a time; only the hardware races), the hashgrid preset's 16 levels of 2^19, and the
    32 levels of a 128-px image (its finest just hashed); every variant of the kernels (the vector atomics run only on
    sm_90)."""
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    levels = {"shared entries": {}, "preset": dict(levels=16, log2_size=19, coarsest=16, finest=2048),
              "small image": dict(levels=32, log2_size=14, coarsest=16, finest=128)}[grid]
    check_hashgrid(gpu, 262144, networks=3, variants=HASHGRID_VARIANTS, **levels)
    check_hashgrid(gpu, 262144, networks=3, shared_x=False, variants=HASHGRID_VARIANTS, **levels)


@pytest.fixture(scope="module")
def gpu_tf32():
    from inr_cli.backends.cuda_backend import CudaBackend

    return CudaBackend(precision="tf32")


@pytest.mark.parametrize("m,n,k", [(1, 256, 256), (37, 65, 70), (300, 3, 256), (3, 256, 300), (262144, 256, 256),
                                   (256, 256, 262144), (4096, 64, 64), (64, 64, 40000)])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn"])
def test_matmul_tf32_matches_numpy(gpu_tf32, m, n, k, trans):
    """--precision tf32 on the tensor cores against NumPy with the operands rounded to TF32 first."""
    check_matmul(gpu_tf32, m, n, k, trans)
    if m * n * k < 1 << 24:
        check_matmul(gpu_tf32, m, n, k, trans, networks=3, shared_b=True)


@pytest.mark.parametrize("rows,in_f,out_f", [(262144, 2, 256), (262144, 256, 256), (262144, 256, 3), (999, 64, 1)])
@pytest.mark.parametrize("activation", ["sine", "relu"])
def test_fused_layer_kernels_tf32(gpu_tf32, rows, in_f, out_f, activation):
    check_fused_layer(gpu_tf32, rows, in_f, out_f, activation)


def test_tf32_leaves_the_coordinates_as_they_are(gpu_tf32):
    check_tf32_keeps_the_coordinates(gpu_tf32)


@pytest.mark.parametrize("hidden,layers,batch", [(16, 2, 40000), (32, 1, 4097), (64, 3, 40000), (48, 2, 1000),
                                                 (128, 2, 20000)])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("variant", ["one-kernel", "two-kernels"])
def test_fused_network_matches_the_layer_by_layer_pass(gpu, gpu_tf32, hidden, layers, batch, precision, variant):
    """The fused kernels, in both designs, on the GPU against the NumPy reference
    (tests/test_fused_network.py's check, at sizes that fill the device: many tiles, gradient groups and
    networks)."""
    from tests.test_fused_network import check_fused_pass, spec_for, variant_of

    backend = variant_of(gpu if precision == "fp32" else gpu_tf32, variant)
    check_fused_pass(backend, spec_for("siren", hidden, layers), networks=3, batch=batch)
    check_fused_pass(backend, spec_for("sigmoid", hidden, layers, out=1, encoding="fourier", features=128),
                     networks=2, batch=batch, shared_x=False)


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("variant", ["one-kernel", "two-kernels"])
def test_fused_network_on_a_hash_grid(gpu, gpu_tf32, precision, variant):
    """The hashgrid preset's network (ReLU 2x64 on 16 levels of 2 features) in the fused kernels, the
    table's gradient scattered from the gradient they hand back, against the NumPy reference."""
    from tests.test_fused_network import check_fused_pass, spec_for, variant_of

    backend = variant_of(gpu if precision == "fp32" else gpu_tf32, variant)
    spec = spec_for("relu", 64, 2, encoding="hashgrid", levels=16, level_features=2, log2_size=14,
                    max_resolution=512)
    check_fused_pass(backend, spec, networks=3, batch=40000, shared_x=False)


def test_hash_grid_training_fused_layered_and_on_the_cpu(gpu):
    """Whole runs of a pack of hash grids on mini-batches: the fused kernels (the preset's path), the
    kernels layer by layer and the CPU engine end at the same losses, as near as the orders of
    addition allow: Adam's epsilon of 1e-15 turns a rounding-sized gradient of a rarely reached
    entry into a whole step, so two CPU orders already drift 1e-3 apart in these 30 steps; a table
    left untrained ends twice as high."""
    from inr_cli.backends.cpu_backend import CpuBackend
    from inr_cli.backends.cuda_backend import CudaBackend

    config = config_for("hashgrid", width=64, height=48, hash_levels=8, hash_log2_size=12, batch_size=1000, steps=30)
    runs = [train_together(backend, config, images(3, 48, 64), [0, 1, 2], 30)
            for backend in (gpu, CudaBackend(fused=False), CpuBackend())]
    (fused_trainer, fused), (_, layered), (_, on_cpu) = runs
    assert type(fused_trainer.training_pass).__name__ == "FusedPass"
    np.testing.assert_allclose(fused, layered, rtol=1e-2)
    np.testing.assert_allclose(fused, on_cpu, rtol=1e-2)
    assert (fused[-1] < fused[0]).all()


def test_fused_and_tf32_training_agree_with_fp32_layer_by_layer(gpu, gpu_tf32):
    """Whole runs: the fused kernels (the default for this 3x64 SIREN) against the kernels layer by
    layer, and TF32 against FP32, on the same GPU."""
    from inr_cli.backends.cuda_backend import CudaBackend

    fused, trainer = _train(gpu, "siren", 0, steps=50)
    layered, _ = _train(CudaBackend(fused=False), "siren", 0, steps=50)
    tf32, _ = _train(gpu_tf32, "siren", 0, steps=50)
    assert type(trainer.training_pass).__name__ == "FusedPass"
    np.testing.assert_allclose(fused, layered, rtol=2e-3)
    np.testing.assert_allclose(tf32, layered, rtol=2e-2)


class GpuModule:
    """A kernel file on the GPU behind the emulation's EmulatedModule.launch: NumPy arguments go to
    the device and come back, so tests/test_emulation.py's checks run unchanged on the hardware."""

    def __init__(self, path):
        import cupy

        from inr_cli.resources import kernels_dir

        self.cupy = cupy
        self.module = cupy.RawModule(code=path.read_text(), options=("-std=c++17", f"-I{kernels_dir()}"))

    def launch(self, name, grid, block, args) -> None:
        device = [self.cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        self.module.get_function(name)(tuple(grid), tuple(block), device)
        for host, on_device in zip(args, device):
            if isinstance(host, np.ndarray):
                host[...] = self.cupy.asnumpy(on_device)


@pytest.fixture(scope="module")
def warp_checks():
    from tests.test_emulation import WARP_CHECKS

    return GpuModule(WARP_CHECKS)


# The emulation's own checks, on the hardware it imitates (the warp_checks fixture above): where the
# emulation misreads the hardware (a shuffle's edge, a fragment's layout, cvt.rna's rounding), these fail.
from tests.test_emulation import (  # noqa: E402, F401
    test_bare_cvt_rna_tf32_makes_a_low_payload_nan_an_infinity,
    test_emulated_cvt_rna_tf32_is_the_numpy_rounding_bit_for_bit,
    test_mma_fragments_pick_the_right_elements,
    test_mma_is_a_matrix_product_per_warp,
    test_returned_threads_do_not_hold_back_a_barrier,
    test_shuffles_follow_the_programming_guide,
    test_votes,
    test_warp_butterfly_sums_each_warp,
)


def test_checkpoints_move_between_gpu_and_cpu(tmp_path, rgb_png):
    """Train on the GPU, resume on the CPU, and the reverse: both land near a CPU-only run."""
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from inr_cli.formats import checkpoint as ckpt

    runner = CliRunner()
    net = ["--hidden", "32", "--layers", "2", "-q", "--preview-every", "0"]
    for first, second, name in (("gpu", "cpu", "g2c"), ("cpu", "gpu", "c2g"), ("cpu", "cpu", "ref")):
        run_dir = tmp_path / name
        result = runner.invoke(app, ["train", str(rgb_png), "--steps", "10", "--device", first, "--run-dir",
                                     str(run_dir), *net])
        assert result.exit_code == 0, result.output
        result = runner.invoke(app, ["train", str(run_dir), "--resume", "--steps", "20", "--device", second, "-q"])
        assert result.exit_code == 0, result.output
    reference = ckpt.load(tmp_path / "ref").params
    for name in ("g2c", "c2g"):
        np.testing.assert_allclose(ckpt.load(tmp_path / name).params, reference, rtol=1e-3, atol=1e-4)
        result = runner.invoke(app, ["render", str(tmp_path / name), "--size", "32", "--device", "gpu", "-q"])
        assert result.exit_code == 0, result.output


# The commands' GPU paths, end to end, each against the same work on the CPU.

def _csv_rows(path) -> list[dict]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_fit_many_until_psnr_on_the_gpu(tmp_path):
    """Networks leave their pack at the target and the pack's trainer (its CUDA graph) is built
    again on the rest: each network stops within a reading of where it stops on the CPU."""
    import inr_cli
    from tests.test_meta_init import kind

    folder = kind(tmp_path / "kind", 6, 0)
    net = dict(hidden=16, layers=2, lr=1e-2, omega0=30.0, steps=300, until_psnr=32.0, pack=6, quiet=True)
    inr_cli.fit_many(folder, tmp_path / "cpu", device="cpu", **net)
    inr_cli.fit_many(folder, tmp_path / "gpu", device="gpu", **net)
    cpu_rows, gpu_rows = _csv_rows(tmp_path / "cpu" / "index.csv"), _csv_rows(tmp_path / "gpu" / "index.csv")
    assert [r["name"] for r in gpu_rows] == [r["name"] for r in cpu_rows]
    cpu_steps = np.array([int(r["steps"]) for r in cpu_rows])
    gpu_steps = np.array([int(r["steps"]) for r in gpu_rows])
    assert (cpu_steps < 300).all() and len(set(cpu_steps)) > 1, cpu_steps  # several readings, none at the ceiling
    assert np.abs(gpu_steps - cpu_steps).max() <= 10, (gpu_steps, cpu_steps)
    assert min(float(r["psnr"]) for r in gpu_rows) >= 31.9


def test_meta_init_on_the_gpu(gpu, tmp_path):
    """meta-init's inner fits as packs on the GPU learn the start the CPU engine learns."""
    from inr_cli.sets.meta import MetaOptions
    from tests.test_meta_init import kind, learned_on

    folder = kind(tmp_path / "kind", 6, 0)
    options = MetaOptions(outer_steps=6, inner_steps=4, meta_batch=3, eval_every=3)
    cpu_start, cpu_log = learned_on(cpu, folder, tmp_path, 16, options)
    gpu_start, gpu_log = learned_on(gpu, folder, tmp_path, 16, options)
    np.testing.assert_allclose(gpu_start, cpu_start, atol=1e-3)
    np.testing.assert_allclose(gpu_log, cpu_log, atol=0.05)


def test_view_tiles_on_the_gpu(gpu):
    """inr view --device gpu: the tiles of several canvases drawn in one pass, as on the CPU."""
    from inr_cli.viewer.tiles import TileJob, draw_tiles

    spec = NetworkSpec.from_config(config_for("siren", hidden=32, layers=2, omega0=30.0), 3)
    params = init_parameters(spec, 3)
    jobs = [TileJob(("a", 0), 256, 256, (0, 0, 256, 256)), TileJob(("b", 1), 700, 500, (256, 0, 512, 200)),
            TileJob(("c", 2), 3000, 2000, (2900, 1900, 3000, 2000))]
    on_cpu = dict(draw_tiles(cpu, spec, params, jobs, chunk_pixels=40000))
    on_gpu = dict(draw_tiles(gpu, spec, params, jobs, chunk_pixels=40000))
    for i, job in enumerate(jobs):
        assert on_gpu[i].shape == (*job.shape, 3)
        assert np.abs(on_gpu[i].astype(int) - on_cpu[i].astype(int)).max() <= 1  # a rounding apart at most


def test_to_torch_on_cuda(tmp_path):
    """A fitted network as a PyTorch module moved to the GPU computes the colours inr computes."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    import inr_cli

    values = np.random.default_rng(0).random((12, 16, 3)).astype(np.float32)
    net = inr_cli.fit(values, run_dir=tmp_path / "run", hidden=16, layers=2, steps=20, device="gpu", quiet=True)
    coords = np.random.default_rng(1).uniform(-1, 1, (500, 2)).astype(np.float32)
    module = net.to_torch().cuda()
    drawn = module(torch.from_numpy(coords).cuda()).detach().cpu().numpy()
    assert np.abs(drawn - net(coords)).max() < 1e-4


def test_tune_on_the_gpu(tmp_path):
    """inr tune --device gpu: the trials fit on the GPU and the study keeps what they found."""
    pytest.importorskip("optuna")
    from typer.testing import CliRunner

    from inr_cli.cli import app
    from tests.test_tune import smooth_image

    picture = smooth_image(tmp_path / "picture.png")
    result = CliRunner().invoke(app, ["tune", str(picture), "-o", str(tmp_path / "study"), "--trials", "3",
                                      "--hidden", "16", "--layers", "2", "--steps", "40", "--device", "gpu"])
    assert result.exit_code == 0, result.output
    rows = _csv_rows(tmp_path / "study" / "trials.csv")
    assert len(rows) == 3 and any(r["state"] == "complete" for r in rows)
    assert (tmp_path / "study" / "best.toml").exists()



@pytest.mark.cluster
def test_fit_many_on_a_local_ray_with_a_gpu_worker(tmp_path):
    """fit-many --ray local --device gpu: a Ray worker given the GPU fits the shards there (it says
    where), and the set is the one fitted on the GPU in this process."""
    pytest.importorskip("ray")
    import os
    import subprocess
    import sys
    from pathlib import Path

    import inr_cli
    from tests.test_meta_init import kind

    folder = kind(tmp_path / "kind", 4, 0)
    net = ["--hidden", "16", "--layers", "2", "--steps", "30", "--pack", "2", "--device", "gpu"]
    inr_cli.fit_many(folder, tmp_path / "here", hidden=16, layers=2, steps=30, pack=2, device="gpu", quiet=True)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "inr_cli", "fit-many", str(folder), "-o", str(tmp_path / "ray"),
                           *net, "--ray", "local", "--workers", "1"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert "(1 on GPUs, 0 on CPUs)" in done.stderr and "fit on the CPU" not in done.stderr, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "ray" / "weights.npy"), np.load(tmp_path / "here" / "weights.npy"),
                               atol=1e-5)
