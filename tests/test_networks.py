"""The core's networks dimension: N networks trained together are, network by network and bit for
bit, N networks trained alone; and the core reproduces checkpoints written before it existed."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.cli import app
from inr_cli.config import build_config, flags_to_values
from inr_cli.core.batch_pass import WholeBatchPass
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.core.render import CHUNK_PIXELS, render_float, render_networks
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.formats import checkpoint as ckpt
from tests.tolerances import REPRODUCED_SHARE, assert_reproduced

V1 = Path(__file__).parent / "fixtures" / "v1"
# As in fixtures/v1/README.md: the commands that wrote the format-1 checkpoints at commit 33d50db.
V1_COMMON = "--device cpu --preview-every 0 --steps 30 --checkpoint-every 1000 --log-every 10"
V1_RUNS = {
    "siren": "--preset siren --hidden 16 --layers 2 --lr 1e-3",
    "sigmoid": "--preset sigmoid --hidden 12 --layers 2 --batch-size 100 --optimizer sgd --lr 0.05 --seed 3",
    "fourier": "--preset fourier --hidden 16 --layers 2 --fourier-features 8 --batch-size 200 --seed 5",
}
# What a preset said then and says no longer, given to the same command as a --config file.
V1_PRESET_THEN = {
    "siren": "[network]\nomega0 = 60.0\ninit_output_at_mean = false\n[optimizer]\nbeta2 = 0.999\n",
    "sigmoid": '[network]\ninit_output_at_mean = false\n[encoding]\nname = "none"\n',
    "fourier": "[network]\ninit_output_at_mean = false\n",
}


def retrain_v1(folder: Path, name: str) -> ckpt.Checkpoint:
    """The command that wrote fixtures/v1/NAME.npz, run again into folder/NAME."""
    folder.mkdir()
    args = ["train", str(V1 / "tiny.png"), "-q", "--run-dir", str(folder / name),
            *shlex.split(V1_COMMON), *shlex.split(V1_RUNS[name])]
    if name in V1_PRESET_THEN:
        (folder / "then.toml").write_text(V1_PRESET_THEN[name])
        args += ["--config", str(folder / "then.toml")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return ckpt.load(folder / name)


@pytest.mark.numerics
@pytest.mark.parametrize("name", sorted(V1_RUNS))
def test_format_1_checkpoint_is_reproduced(tmp_path, name):
    """A format-1 checkpoint loads, and its command run today reproduces it: within rounding, since it
    was written on another machine (tolerances.py); bit for bit, a second run of it here."""
    old = ckpt.load(V1 / f"{name}.npz")  # format 1 still loads
    assert old.state.params.shape == (1, old.spec.parameter_count()) and old.step == 30
    new = retrain_v1(tmp_path / "first", name)
    assert new.spec == old.spec
    assert new.config.network == old.config.network and new.config.optimizer == old.config.optimizer
    for field in ("params", "moment1", "moment2"):
        assert_reproduced(getattr(new.state, field), getattr(old.state, field), f"{name} {field}")
    assert new.last_loss == pytest.approx(old.last_loss, rel=REPRODUCED_SHARE)
    again = retrain_v1(tmp_path / "again", name)
    for field in ("params", "moment1", "moment2"):
        assert np.array_equal(getattr(again.state, field), getattr(new.state, field)), field
    assert again.last_loss == new.last_loss


def test_format_1_checkpoint_resumes(tmp_path):
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(V1 / "siren.npz", run / ckpt.FILENAME)
    result = CliRunner().invoke(app, ["train", str(run), "--resume", "--steps", "33", "-q", "--allow-data-change"])
    assert result.exit_code == 0, result.output
    assert ckpt.load(run).step == 33


def images(count: int, height: int = 7, width: int = 9, channels: int = 3) -> list[PixelImage]:
    rng = np.random.default_rng(count)
    names = ("l",) if channels == 1 else ("r", "g", "b")
    return [PixelImage(rng.random((height, width, channels), dtype=np.float32), names) for _ in range(count)]


def config_for(preset: str, width: int = 9, height: int = 7, **flags):
    """A configuration built as the command line builds one, for a width x height image."""
    return fit_to_image(build_config(None, flags_to_values({"device": "cpu", **flags}), preset), width, height, 3)[0]


def train_together(backend, config, pictures, seeds, steps):
    spec = NetworkSpec.from_config(config, pictures[0].n_channels)
    trainer = Trainer(backend, spec, config, pictures, TrainingState.fresh(spec, seeds), seeds)
    losses = []
    for _ in range(steps):
        trainer.step()
        losses.append(trainer.read_loss())
    return trainer, np.array(losses)


CASES = {  # preset and flags: every activation, both optimizers, full and mini-batches, the encoding
    "siren-full": ("siren", dict(hidden=12, layers=2, lr=1e-3)),
    "sigmoid-sampled-sgd": ("sigmoid", dict(hidden=10, layers=2, batch_size=30, optimizer="sgd", lr=0.05)),
    "fourier-sampled": ("fourier", dict(hidden=8, layers=2, fourier_features=5, batch_size=40)),
    "hashgrid-sampled": ("hashgrid", dict(hidden=8, layers=2, hash_levels=3, hash_log2_size=5, hash_min_res=2,
                                          batch_size=40)),
}


@pytest.mark.numerics
@pytest.mark.parametrize("case", sorted(CASES))
def test_networks_together_equal_networks_alone_bit_for_bit(case):
    preset, flags = CASES[case]
    config = config_for(preset, steps=6, **flags)
    pictures, seeds = images(3), [11, 0, 2**40 + 7]
    together, losses = train_together(CpuBackend(), config, pictures, seeds, 6)
    state = together.state()
    for i, (picture, seed) in enumerate(zip(pictures, seeds)):
        alone, alone_losses = train_together(CpuBackend(), config, [picture], [seed], 6)
        assert np.array_equal(state.params[i], alone.state().params[0]), f"network {i} differs"
        assert np.array_equal(state.moment2[i], alone.state().moment2[0])
        assert np.array_equal(losses[:, i], alone_losses[:, 0])
    assert not np.array_equal(state.params[0], state.params[1])  # they really are different networks
    assert (losses[-1] < losses[0]).all()


@pytest.mark.parametrize("case", sorted(CASES))
def test_networks_together_through_the_kernels(emulated, case):
    """The same through the kernels' batched launches (one launch covers every network): bit for bit
    against the kernels on one network, and close to the NumPy reference. The hash grid's scatter adds
    with atomics, in the order they land, so its bits vary from run to run: to rounding there."""
    preset, flags = CASES[case]
    config = config_for(preset, steps=4, cuda_graph=False, **flags)
    pictures, seeds = images(3, 6, 7), [5, 6, 7]
    together, losses = train_together(emulated, config, pictures, seeds, 4)
    reference, reference_losses = train_together(CpuBackend(), config, pictures, seeds, 4)
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
    np.testing.assert_allclose(together.state().params, reference.state().params, rtol=1e-3, atol=1e-5)
    for i in (0, 2):
        alone, _ = train_together(emulated, config, [pictures[i]], [seeds[i]], 4)
        if preset == "hashgrid":
            np.testing.assert_allclose(together.state().params[i], alone.state().params[0], rtol=1e-4, atol=1e-6)
        else:
            assert np.array_equal(together.state().params[i], alone.state().params[0]), f"network {i} differs"
    spec = together.spec
    np.testing.assert_allclose(render_float(emulated, spec, together.state().params[1], 5, 4),
                               render_float(CpuBackend(), spec, reference.state().params[1], 5, 4), atol=1e-4)


@pytest.mark.numerics
@pytest.mark.parametrize("chunk_pixels", [CHUNK_PIXELS, 50, 7])
def test_networks_are_drawn_in_a_pack_as_alone(chunk_pixels):
    """A set's scores come from its networks drawn together: each network's values are its values
    drawn alone, bit for bit, however many share the chunks (their rows per chunk never depend on it)."""
    config = config_for("siren", hidden=12, layers=2)
    spec = NetworkSpec.from_config(config, 3)
    params = TrainingState.fresh(spec, [1, 2, 3, 4, 5]).params
    together = render_networks(CpuBackend(), spec, params, 9, 7, chunk_pixels=chunk_pixels)
    for i in range(len(params)):
        alone = render_networks(CpuBackend(), spec, params[i:i + 1], 9, 7, chunk_pixels=chunk_pixels)
        assert np.array_equal(together[i], alone[0]), i
    assert not np.array_equal(together[0], together[1])
    np.testing.assert_allclose(together[2], render_float(CpuBackend(), spec, params[2], 9, 7), atol=1e-5)


def test_one_launch_covers_every_network(emulated):
    config = config_for("siren", steps=2, hidden=8, layers=1, cuda_graph=False)
    pictures = images(4, 5, 5)
    emulated.launched.clear()
    train_together(emulated, config, pictures, [1, 2, 3, 4], 1)
    launches_for_four = len(emulated.launched)
    emulated.launched.clear()
    train_together(emulated, config, pictures[:1], [1], 1)
    assert launches_for_four == len(emulated.launched)


def test_trainer_refuses_images_of_different_sizes():
    config = config_for("siren", hidden=4, layers=1)
    spec = NetworkSpec.from_config(config, 3)
    with pytest.raises(ValueError, match="one size"):
        Trainer(CpuBackend(), spec, config, images(1, 5, 5) + images(1, 6, 5), TrainingState.fresh(spec, [0, 1]),
                [0, 1])


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["siren-full", "fourier-sampled"])
def test_cpu_row_blocks(monkeypatch, case):
    """On the CPU a big batch runs in row blocks whose gradients are added in order: networks
    together still equal networks alone bit for bit, the result matches one whole-batch pass to
    rounding, and the frozen frequencies stay frozen."""
    from inr_cli.backends import cpu_backend

    preset, flags = CASES[case]
    flags = {**flags, "batch_size": 0} if case == "siren-full" else {**flags, "batch_size": 5000}
    config = config_for(preset, steps=3, **flags)
    pictures, seeds = images(2, 64, 80), [3, 4]  # 5120 rows: blocks of 2048, 2048 and 1024
    together, losses = train_together(CpuBackend(), config, pictures, seeds, 3)
    assert len(together.training_pass.row_blocks) == 3
    alone, alone_losses = train_together(CpuBackend(), config, pictures[1:], seeds[1:], 3)
    assert np.array_equal(together.state().params[1], alone.state().params[0])
    assert np.array_equal(losses[:, 1], alone_losses[:, 0])
    monkeypatch.setattr(cpu_backend, "STEP_BLOCK_ROWS", 1 << 20)
    whole, whole_losses = train_together(CpuBackend(), config, pictures, seeds, 3)
    assert isinstance(whole.training_pass, WholeBatchPass)
    np.testing.assert_allclose(losses, whole_losses, rtol=1e-5)
    np.testing.assert_allclose(together.state().params, whole.state().params, rtol=1e-4, atol=1e-6)
    size = together.spec.encoding_size()
    start = TrainingState.fresh(together.spec, seeds).params
    assert np.array_equal(together.state().params[:, :size], start[:, :size])


@pytest.mark.numerics
def test_cpu_network_groups_change_no_bit(monkeypatch):
    """Networks are spread over the CPU's threads in groups: the very bits of one block of all."""
    config = config_for("siren", hidden=128, layers=2, lr=1e-3, steps=2)
    pictures, seeds = images(3, 50, 60), [7, 8, 9]
    grouped, grouped_losses = train_together(CpuBackend(), config, pictures, seeds, 2)
    assert len(grouped.training_pass.groups) == 3 and len(grouped.training_pass.row_blocks) == 1
    monkeypatch.setattr(CpuBackend, "step_blocks", lambda self, n, rows, width: ([(0, n)], [(0, rows)]))
    whole, whole_losses = train_together(CpuBackend(), config, pictures, seeds, 2)
    assert isinstance(whole.training_pass, WholeBatchPass)
    assert np.array_equal(grouped.state().params, whole.state().params)
    assert np.array_equal(grouped_losses, whole_losses)


@pytest.mark.numerics
def test_cpu_threads_change_no_bit():
    """The blocks of a step share one workspace per thread (block_slots): one, two or four threads,
    blocks of two shapes, the very same bits."""
    config = config_for("siren", hidden=128, layers=2, lr=1e-3, steps=2, batch_size=0)
    pictures, seeds = images(3, 64, 80), [7, 8, 9]  # 5120 rows: row blocks of 2048, 2048 and 1024
    runs = [train_together(CpuBackend(threads), config, pictures, seeds, 2) for threads in (1, 2, 4)]
    assert len(runs[0][0].training_pass.blocks) == 9 and len(set(map(id, runs[2][0].training_pass.workspaces))) > 2
    for trainer, losses in runs[1:]:
        assert np.array_equal(trainer.state().params, runs[0][0].state().params)
        assert np.array_equal(losses, runs[0][1])


@pytest.mark.numerics
def test_cpu_threads_change_no_bit_of_a_hash_grid():
    """The hashgrid preset's steps on the CPU engine (its levels on the threads, each level's corners
    kept from the forward for the backward's scatter): one, two or four threads, the very same bits;
    the NumPy reference's within REPRODUCED_SHARE (the layers' products run in other shapes)."""
    from inr_cli.backends.numpy_backend import NumpyBackend

    config = config_for("hashgrid", width=80, height=64, steps=3, hash_log2_size=10)
    pictures, seeds = images(2, 64, 80), [3, 4]
    runs = [train_together(CpuBackend(threads), config, pictures, seeds, 3) for threads in (1, 2, 4)]
    assert runs[0][0].training_pass.workspace.corners is not None
    for trainer, losses in runs[1:]:
        assert np.array_equal(trainer.state().params, runs[0][0].state().params)
        assert np.array_equal(losses, runs[0][1])
    reference, reference_losses = train_together(NumpyBackend(), config, pictures, seeds, 3)
    assert_reproduced(runs[0][0].state().params, reference.state().params, "parameters")
    np.testing.assert_allclose(runs[0][1], reference_losses, rtol=REPRODUCED_SHARE)


def test_cpu_workspaces_do_not_grow_with_the_image():
    """A 1024 x 1024 image is 512 row blocks; a workspace each was 9 GiB for SIREN 3x256. Blocks
    share one per thread and block shape, so the step's memory no longer grows with the image."""
    config = config_for("siren", width=1024, height=512, hidden=256, layers=3, batch_size=0)
    spec = NetworkSpec.from_config(config, 3)
    picture = PixelImage(np.zeros((512, 1024, 3), np.float32), ("r", "g", "b"))
    trainer = Trainer(CpuBackend(2), spec, config, [picture], TrainingState.fresh(spec, [0]), [0])
    assert len(trainer.training_pass.blocks) == 256
    assert len({id(ws) for ws in trainer.training_pass.workspaces}) <= 2 * 2  # threads x (full and last block shapes)
