"""inr meta-init: a start learned with Reptile fits held-out images of its kind better in k inner
steps than a random start does (losses compared, not timings); it records its network, and a run
stopped by a signal resumes to the very start an uninterrupted one learns."""

from __future__ import annotations

import json
import re
import signal
import sys

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.cli import app
from inr_cli.config import build_config, flags_to_values, with_values
from inr_cli.core.network import NetworkSpec, init_networks, layer_views
from inr_cli.core.training_loop import Interrupted
from inr_cli.extras import install_hint
from inr_cli.formats.export import write_safetensors
from inr_cli.formats.start import read_start, resolved_start
from inr_cli.sets.meta import InProcess, MetaInterrupted, MetaOptions, first_start, inner_fit, learn_start, load_images

runner = CliRunner()
NET = ["--hidden", "12", "--layers", "2", "--omega0", "20", "--lr", "1e-3", "--device", "cpu"]
META = ["--outer-steps", "30", "--inner-steps", "5", "--meta-batch", "4", "--eval-every", "10"]


def kind(folder, count, seed):
    """Images of one kind: the same smooth pattern, shifted and tinted per image."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:10, 0:10] / 10
    for i in range(count):
        shift, tint = rng.uniform(-0.1, 0.1, 2)
        values = np.stack([np.sin(4 * (xx + shift)) * 0.3 + 0.5 + tint, np.cos(3 * (yy - shift)) * 0.3 + 0.4,
                           (xx + yy) / 2 * 0.6 + 0.2], -1).clip(0, 1)
        Image.fromarray((values * 255).astype(np.uint8)).save(folder / f"{i:02d}.png")
    return folder


def learned_on(backend, folder, tmp_path, hidden: int, options: MetaOptions) -> tuple[np.ndarray, list[float]]:
    """The start meta-init learns from `folder` with its inner fits on `backend`, and its held-out
    PSNRs: for comparing a backend's start with the CPU engine's."""
    config = build_config(None, flags_to_values({"source": str(folder), "hidden": hidden, "layers": 2,
                                                 "omega0": 20.0, "lr": 1e-3, "device": "cpu", "preview_every": 0}),
                          None)
    out = tmp_path / f"{backend.name}.safetensors"
    log = learn_start(InProcess(backend), str(folder), out, config, options)["log"]
    return read_start(str(out))[1], [row["psnr"] for row in log]


def heldout_loss(backend, spec, inner, start, images, seeds) -> float:
    """The mean loss of `images` after the inner steps from `start`."""
    return float(np.mean(inner_fit(backend, spec, inner, start, images, seeds)[1]))


def test_a_learned_start_fits_new_images_of_its_kind_better_in_k_steps(tmp_path):
    folder, unseen = kind(tmp_path / "kind", 16, 0), kind(tmp_path / "unseen", 4, 1)
    start = tmp_path / "start.safetensors"
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(start), *NET, *META])
    assert result.exit_code == 0, result.output
    assert "held-out PSNR after 5 inner steps" in result.output
    log = (tmp_path / "start.csv").read_text().splitlines()
    assert log[0] == "outer_step,heldout_loss,heldout_psnr,seconds" and len(log) == 1 + 4  # steps 0, 10, 20, 30
    assert (tmp_path / "start.svg").read_text().startswith("<svg")
    spec, learned = read_start(str(start))
    config = build_config(None, flags_to_values({"hidden": 12, "layers": 2, "omega0": 20.0, "lr": 1e-3,
                                                 "device": "cpu", "source": str(unseen)}))
    images, names, config = load_images(str(unseen), config)
    inner = with_values(config, {"training.steps": 5})
    backend, seeds = NumpyBackend(), list(range(len(images)))
    from_learned = heldout_loss(backend, spec, inner, learned, images, seeds)
    from_random = [heldout_loss(backend, spec, inner, init_networks(spec, [s])[0], images, seeds) for s in range(3)]
    assert from_learned < 0.5 * min(from_random)
    said = runner.invoke(app, ["info", str(start)])  # what the file is, with no image to weigh it against
    assert said.exit_code == 0, said.output
    assert re.search(rf"learned   a start, by meta-init for fits of 5 steps: outer step (0|10|20|30) of 30, from 14 "
                     rf"images; fit-many --init {re.escape(str(start))}\n", said.output), said.output
    assert "image " not in said.output  # no training image to weigh the start against
    assert "images    10x10, the size it was learned at" in said.output  # but its images' size, as an export's
    drawn = runner.invoke(app, ["render", str(start), "-o", str(tmp_path / "start.png")])
    assert drawn.exit_code == 0 and Image.open(tmp_path / "start.png").size == (10, 10), drawn.output
    # the start is what fit-many --init takes: a set fitted from it
    result = runner.invoke(app, ["fit-many", str(unseen), "-o", str(tmp_path / "set"), "--init", str(start),
                                 "--steps", "5", "-q", *NET])
    assert result.exit_code == 0, result.output
    # the checkpoint beside it: the same command again finds the work done and writes the same start
    start.unlink()
    assert runner.invoke(app, ["meta-init", str(folder), "-o", str(start), *NET, *META]).exit_code == 0
    assert np.array_equal(read_start(str(start))[1], learned)
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(start), *NET, *META[:-2], "--eval-every", "5"])
    assert result.exit_code == 2 and "was learned with --eval-every 10, not 5;" in result.output


def test_a_drawn_first_start_begins_at_the_mean_colour_of_its_images(tmp_path):
    """The siren preset starts a network's outputs at its image's mean colour; the start Reptile
    moves begins at the mean colour of the images it learns from (and at the plain draw without)."""
    folder = kind(tmp_path / "kind", 4, 0)
    config = build_config(None, flags_to_values({"source": str(folder), "hidden": 12, "layers": 2, "device": "cpu"}))
    images, _, config = load_images(str(folder), config)
    assert config.network.init_output_at_mean
    spec = NetworkSpec.from_config(config, images[0].n_channels)
    start = first_start(config, spec, images)
    set_mean = np.mean([image.values.reshape(-1, 3).mean(axis=0) for image in images], axis=0)
    np.testing.assert_allclose(layer_views(spec, start[None])[-1][1][0], set_mean, rtol=1e-6)
    plain = first_start(with_values(config, {"network.init_output_at_mean": False}), spec, images)
    assert np.array_equal(plain, init_networks(spec, [config.training.seed])[0])
    assert np.array_equal(plain[:-3], start[:-3])  # only the output biases differ


def test_the_start_written_is_the_best_measured_not_the_last(tmp_path, monkeypatch):
    """The last outer step made worse on purpose (its start moved far off): the start written is the
    one of the best held-out measure, recorded in the file, and the log still has every measure."""
    from inr_cli.sets import meta

    folder = kind(tmp_path / "kind", 10, 0)
    config = build_config(None, flags_to_values({"hidden": 8, "layers": 2, "omega0": 20.0, "lr": 1e-3,
                                                 "device": "cpu", "source": str(folder)}))
    options = MetaOptions(outer_steps=6, inner_steps=3, meta_batch=3, eval_every=2)
    moved: list[np.ndarray] = []
    reptile_step = meta.reptile_step

    def recorded(start, adapted, rate):
        result = reptile_step(start, adapted, rate)
        if len(moved) == options.outer_steps - 1:
            result = result + 5.0  # far from anything that fits
        moved.append(result)
        return result

    monkeypatch.setattr(meta, "reptile_step", recorded)
    result = learn_start(InProcess(NumpyBackend()), str(folder), tmp_path / "start.safetensors", config, options)
    psnr = {row["step"]: row["psnr"] for row in result["log"]}
    assert sorted(psnr) == [0, 2, 4, 6] and psnr[6] < max(psnr.values())
    best = max(psnr, key=psnr.get)
    assert result["best_step"] == best != 6
    written = read_start(str(tmp_path / "start.safetensors"))[1]
    assert np.array_equal(written, moved[best - 1].astype(np.float32))
    # resumed from the checkpoint of the last step, the same start is written again
    (tmp_path / "start.safetensors").unlink()
    learn_start(InProcess(NumpyBackend()), str(folder), tmp_path / "start.safetensors", config, options)
    assert np.array_equal(read_start(str(tmp_path / "start.safetensors"))[1], written)


class InterruptedAt(InProcess):
    """The in-process runner, with SIGINT landing in its `at`-th inner fit."""

    def __init__(self, at: int):
        super().__init__(NumpyBackend())
        self.calls, self.at = 0, at

    def fit(self, start, chosen):
        self.calls += 1
        if self.calls == self.at:
            raise Interrupted(signal.SIGINT)
        return super().fit(start, chosen)


def test_a_signal_checkpoints_the_last_outer_step_and_the_same_command_goes_on_to_the_same_start(tmp_path):
    folder = kind(tmp_path / "kind", 10, 0)
    config = build_config(None, flags_to_values({"hidden": 8, "layers": 2, "omega0": 20.0, "lr": 1e-3,
                                                 "device": "cpu", "source": str(folder)}))
    options = MetaOptions(outer_steps=7, inner_steps=3, meta_batch=3, eval_every=3)
    whole = learn_start(InProcess(NumpyBackend()), str(folder), tmp_path / "whole.safetensors", config, options)
    # calls: the measure at step 0, then outer steps 1, 2, 3 (and its measure), 4, 5; the signal lands in
    # outer step 5, after step 4 (no measure there): the checkpoint holds step 4, not the measure's step 3
    with pytest.raises(MetaInterrupted) as stopped:
        learn_start(InterruptedAt(7), str(folder), tmp_path / "cut.safetensors", config, options)
    assert stopped.value.step == 4 and stopped.value.saved == tmp_path / "cut.safetensors.meta.npz"
    assert not (tmp_path / "cut.safetensors").exists()
    again = learn_start(InProcess(NumpyBackend()), str(folder), tmp_path / "cut.safetensors", config, options)
    assert np.array_equal(read_start(str(tmp_path / "cut.safetensors"))[1],
                          read_start(str(tmp_path / "whole.safetensors"))[1])
    assert [row["loss"] for row in again["log"]] == [row["loss"] for row in whole["log"]]


def test_a_signal_on_the_command_says_where_the_start_is_kept(tmp_path, monkeypatch):
    folder = kind(tmp_path / "kind", 10, 0)
    monkeypatch.setattr("inr_cli.sets.meta_command.InProcess", lambda backend: InterruptedAt(3))
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "start.safetensors"), *NET, *META])
    assert result.exit_code == 128 + signal.SIGINT, result.output
    assert "SIGINT: the start is checkpointed at outer step 1 in" in result.output
    assert "run the same command again to go on" in result.output and "Traceback" not in result.output


def test_a_file_start_keeps_its_own_output_biases(tmp_path):
    """A file start keeps its own output biases (the same for every network): network.init_output_at_mean
    (on by default) applies to the draws only, and a run or set from a file
    records it off, as it was fitted. fit-many, train and meta-init alike."""
    folder = kind(tmp_path / "kind", 3, 0)
    spec = NetworkSpec("siren", 3, 12, 2, 20.0, "none", 0, 0.0)
    start = tmp_path / "start.safetensors"
    write_safetensors(spec, init_networks(spec, [1])[0], ("r", "g", "b"), start)
    net = [*NET, "-q"]
    for command in (["fit-many", str(folder), "-o", str(tmp_path / "set"), "--steps", "2"],
                    ["train", str(folder / "00.png"), "--run-dir", str(tmp_path / "run"), "--steps", "2"],
                    ["meta-init", str(folder), "-o", str(tmp_path / "learned.safetensors"), "--outer-steps", "1"]):
        result = runner.invoke(app, [*command, "--init", str(start), *net])
        assert result.exit_code == 0, result.output
    assert "init_output_at_mean = false" in (tmp_path / "run" / "config.toml").read_text()
    result = runner.invoke(app, [*command, "--init", str(start), "--init-output-at-mean", *net])
    assert result.exit_code == 2 and "--init-output-at-mean (network.init_output_at_mean) does nothing" in \
        result.output  # given where it does nothing: refused by name
    shared = build_config(None, flags_to_values({"init_output_at_mean": True, "init": "shared"}))
    from_file = with_values(shared, {"training.init": str(start)})
    assert resolved_start(shared).network.init_output_at_mean  # a draw starts at each image's mean
    assert not resolved_start(from_file).network.init_output_at_mean
    # unless network.start_output_at_mean sets a file start's outputs at each image's mean colour
    assert resolved_start(with_values(from_file, {"network.start_output_at_mean": True})).network.init_output_at_mean


def test_ray_options_without_ray_are_refused(tmp_path):
    folder = kind(tmp_path / "kind", 3, 0)
    for option, value in (("--workers", "2"), ("--gpus-per-worker", "0.5")):
        result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "s.safetensors"), option, value,
                                     *NET])
        assert result.exit_code == 2 and "needs --ray" in result.output, result.output


def test_without_the_safetensors_package_it_is_said_before_any_learning(tmp_path, monkeypatch):
    folder = kind(tmp_path / "kind", 4, 0)
    monkeypatch.setitem(sys.modules, "safetensors", None)  # what the import meets where it is not installed
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(tmp_path / "start.safetensors"), *NET, *META])
    assert result.exit_code == 1 and install_hint("export", "safetensors") in result.output
    assert not (tmp_path / "start.safetensors.meta.npz").exists() and "outer step" not in result.output


def test_settings_its_inner_fits_would_ignore_are_refused_not_listed(tmp_path):
    """The inner fits' length is --inner-steps and their rate is held at --lr: --steps, --until-psnr,
    --lr-min, --warmup and --checkpoint-seconds (as flags or --set) would be ignored, so meta-init refuses them."""
    folder = kind(tmp_path / "kind", 3, 0)
    out = ["-o", str(tmp_path / "s.safetensors")]
    for flag in ("--steps", "--until-psnr", "--lr-min", "--warmup", "--checkpoint-seconds"):
        result = runner.invoke(app, ["meta-init", str(folder), *out, flag, "5", *NET])
        assert result.exit_code == 2 and f"No such option: {flag}" in result.output, result.output
    for key in ("training.steps", "training.target_psnr", "optimizer.lr_min", "optimizer.warmup",
                "training.checkpoint_seconds"):
        result = runner.invoke(app, ["meta-init", str(folder), *out, "--set", f"{key}=5", *NET])
        assert result.exit_code == 2 and f"{key} is not a setting of meta-init" in result.output, result.output
    shown = runner.invoke(app, ["meta-init", "--help"], terminal_width=200).output
    assert "--inner-steps" in shown and "--lr " in shown and "--until-psnr" not in shown and "--lr-min" not in shown
    assert not (tmp_path / "s.safetensors").exists()


def test_inner_fits_at_each_images_mean_colour_start_as_a_fit_from_the_start_will(tmp_path):
    """network.start_output_at_mean: each inner fit (and held-out measure) starts from the start with its
    output biases at its own image's mean colour, as fit-many --init START --start-output-at-mean will:
    a pack's fits are each image's fit alone from the start with those biases set by hand (within
    rounding: other shapes); a run learned so records it, and resuming it without is refused, as is one
    with another start, seed, weight scale or batch (what the outer steps depend on beyond the network)."""
    folder = kind(tmp_path / "kind", 6, 0)
    config = build_config(None, flags_to_values({"source": str(folder), "hidden": 12, "layers": 2, "omega0": 20.0,
                                                 "lr": 1e-3, "device": "cpu", "steps": 4}))
    images, _, config = load_images(str(folder), config)
    spec = NetworkSpec.from_config(config, images[0].n_channels)
    start = init_networks(spec, [3])[0]
    at_mean = with_values(config, {"network.start_output_at_mean": True})
    backend, seeds = NumpyBackend(), [11, 12, 13]
    pack, losses = inner_fit(backend, spec, at_mean, start, images[:3], seeds)
    for i, image in enumerate(images[:3]):
        by_hand = start.copy()
        by_hand[-3:] = image.values.reshape(-1, 3).mean(axis=0)  # SIREN's linear output: the biases, the last three
        alone, loss = inner_fit(backend, spec, config, by_hand, [image], [seeds[i]])
        np.testing.assert_allclose(pack[i], alone[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(losses[i], loss[0], rtol=1e-4)
    plain = inner_fit(backend, spec, config, start, images[:3], seeds)[0]
    assert np.abs(plain[:, -3:] - pack[:, -3:]).max() > 0.02  # the two told apart
    out = str(tmp_path / "start.safetensors")
    short = ["--outer-steps", "2", "--inner-steps", "3", "--meta-batch", "2", "--eval-every", "1", "-q"]
    result = runner.invoke(app, ["meta-init", str(folder), "-o", out, "--start-output-at-mean", *NET, *short])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["meta-init", str(folder), "-o", out, *NET, *short])
    assert result.exit_code == 2 and "learned with --start-output-at-mean;" in result.output, result.output
    plain_out = str(tmp_path / "plain.safetensors")
    assert runner.invoke(app, ["meta-init", str(folder), "-o", plain_out, *NET, *short]).exit_code == 0
    result = runner.invoke(app, ["meta-init", str(folder), "-o", plain_out, "--start-output-at-mean", *NET, *short])
    assert result.exit_code == 2 and "learned with --no-start-output-at-mean;" in result.output, result.output
    write_safetensors(spec, init_networks(spec, [4])[0], images[0].channels, tmp_path / "other.safetensors")
    other_start = "another start (--init: another file, or a draw against a file)"
    for flags, said in ((["--init", tmp_path / "other.safetensors"], other_start),
                        (["--seed", "5"], "training.seed = 0, not 5"),
                        (["--weight-scale", "2"], "network.weight_scale = 1.0, not 2.0"),
                        (["--batch-size", "64"], "training.batch_size = 0, not 64")):
        result = runner.invoke(app, ["meta-init", str(folder), "-o", plain_out, *NET, *short, *map(str, flags)])
        assert result.exit_code == 2 and f"learned with {said};" in result.output, result.output


def test_force_starts_afresh_with_the_commands_own_settings(tmp_path):
    """A rerun goes on with what its checkpoint was learned with; with --force a checkpoint that does
    not fit (here: other --inner-steps) is started afresh with the command's own settings, not with
    the ones of the checkpoint it throws away. More --outer-steps learns longer from where it stopped;
    fewer than it reached are refused."""
    from inr_cli.sets.meta import MetaState

    folder = kind(tmp_path / "kind", 4, 0)
    out = tmp_path / "start.safetensors"
    net = ["--hidden", "8", "--layers", "2", "--device", "cpu", "-q", "--meta-batch", "2", "--eval-every", "1"]

    def learned_lr() -> float:
        return float(json.loads(str(MetaState(out).read()["settings"]))["config"]["lr"])

    assert runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--lr", "1e-3", "--outer-steps", "2",
                               "--inner-steps", "2", *net]).exit_code == 0
    assert learned_lr() == 1e-3
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--outer-steps", "3", "--inner-steps", "2",
                                 *net])
    assert result.exit_code == 0, result.output
    assert MetaState(out).read()["step"] == 3 and learned_lr() == 1e-3  # learned longer, with its own settings
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--outer-steps", "2", "--inner-steps", "2",
                                 *net])
    assert result.exit_code == 2 and "pass more than 3 to learn longer" in result.output, result.output
    result = runner.invoke(app, ["meta-init", str(folder), "-o", str(out), "--outer-steps", "3", "--inner-steps", "3",
                                 "--force", *net])
    assert result.exit_code == 0, result.output
    assert learned_lr() == 3e-3  # the sets preset's, as a first run of this command
