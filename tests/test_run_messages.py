"""What `inr train` and `inr_cli.fit` say about where a run went and what a resume does to the
learning rate: a second run of the same command gets a new, numbered directory, said on stderr and
returned to Python; a resume past the run's total says that the cosine curve rises again."""

from __future__ import annotations

import math
from pathlib import Path

from typer.testing import CliRunner

from inr_cli.cli import app

runner = CliRunner()
SMALL = ["--hidden", "8", "--layers", "1", "--device", "cpu", "--preview-every", "0", "--lr", "3e-3",
         "--lr-min", "1e-5"]


def train(*args):
    return runner.invoke(app, ["train", *map(str, args)])


def cosine(step: int, total: int, lr: float = 3e-3, lr_min: float = 1e-5) -> float:
    """The learning rate of update `step` (0-based) of `total`, written out from its definition."""
    return lr_min + (lr - lr_min) * (1 + math.cos(math.pi * min(step, total) / total)) / 2


def test_a_second_run_of_the_same_image_is_numbered_and_says_so(tmp_path, rgb_png, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = train(rgb_png, "--steps", "2", *SMALL)
    assert first.exit_code == 0 and "-> runs/rgb\n" in first.output and "earlier run" not in first.output
    second = train(rgb_png, "--steps", "2", *SMALL)
    assert second.exit_code == 0, second.output
    assert "-> runs/rgb-2 (runs/rgb holds an earlier run)" in second.output
    assert second.stdout.splitlines()[-1] == "runs/rgb-2"  # the run directory, on stdout even with -q


def test_fit_returns_where_it_wrote(tmp_path, rgb_png, monkeypatch, capsys):
    import inr_cli

    monkeypatch.chdir(tmp_path)
    nets = [inr_cli.fit(rgb_png, steps=2, hidden=8, layers=1, device="cpu", quiet=True) for _ in range(2)]
    assert [net.run_dir for net in nets] == [Path("runs/rgb"), Path("runs/rgb-2")]
    assert inr_cli.load(nets[1].run_dir).run_dir == Path("runs/rgb-2")
    assert capsys.readouterr().err == ""  # quiet: the returned run_dir is the only word of it
    loud = inr_cli.fit(rgb_png, steps=2, hidden=8, layers=1, device="cpu")
    assert (loud.run_dir == Path("runs/rgb-3")
            and "-> runs/rgb-3 (runs/rgb holds an earlier run)" in capsys.readouterr().err)
    import numpy as np

    array_net = inr_cli.fit(np.zeros((6, 8, 3)) + 0.5, steps=2, hidden=8, layers=1, device="cpu", quiet=True)
    assert array_net.run_dir == Path("runs/array") and (array_net.run_dir / "image.npy").is_file()


def test_resume_past_the_total_says_the_learning_rate_rises_again(tmp_path, rgb_png):
    run = tmp_path / "run"
    assert train(rgb_png, "--steps", "10", "--run-dir", run, *SMALL, "-q").exit_code == 0
    finished = train("--resume", run)
    assert finished.exit_code == 0
    rises = f"(with --steps 20: {cosine(10, 10):.3g} -> {cosine(10, 20):.3g})"
    assert (f"{run} already finished 10 of 10 steps; --steps N (> 10) trains further on the cosine curve of N steps: "
            f"the learning rate rises again {rises} and anneals by step N") in finished.output, finished.output
    extended = train("--resume", run, "--steps", "15")
    assert extended.exit_code == 0, extended.output
    assert (f"--steps 15: the learning rate follows the cosine curve of 15 steps, {cosine(10, 15):.3g} at step 11 "
            f"({cosine(10, 10):.3g} on the curve of 10), down to 1e-05 by step 15") in extended.output, extended.output
    assert cosine(10, 15) > 10 * cosine(10, 10)
