"""`inr tune`: a small study in-process, on a real local Ray (two trials at once, one lost with its
worker), killed mid-trial and resumed, best.toml trained again to the very PSNR the study recorded,
the pruner against a learning rate that cannot work, a parameter budget, a folder's sample, and
bad spaces refused in one line. Tiny images and networks, a few dozen steps, on the CPU."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from inr_cli.cli import app, main
from inr_cli.config import read_toml
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.extras import install_hint
from inr_cli.formats import checkpoint as ckpt
from inr_cli.sets.plan import image_seed

optuna = pytest.importorskip("optuna", reason="Optuna is the optional extra inr[tune]")

from inr_cli.tune.outputs import counted  # noqa: E402 (needs Optuna's objects, not its module)
from inr_cli.tune.storage import STUDY_NAME, open_storage  # noqa: E402
from inr_cli.tune.study import TuneOptions, tune  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FLAGS = {"hidden": 16, "layers": 2, "steps": 40, "device": "cpu"}
NET = ["--hidden", "16", "--layers", "2", "--steps", "40", "--device", "cpu"]
State = optuna.trial.TrialState


def smooth_image(path: Path, size=(16, 16), seed: int = 0) -> Path:
    """Gradients and a soft stripe: an image a small SIREN learns within a few dozen steps."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w] / max(w, h)
    phase = np.random.default_rng(seed).uniform(0, np.pi)
    rgb = np.stack([x, 1 - y, 0.5 + 0.5 * np.sin(6 * (x + y) + phase)], axis=-1)
    Image.fromarray((rgb * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def picture(tmp_path_factory) -> Path:
    return smooth_image(tmp_path_factory.mktemp("picture") / "picture.png")


@pytest.fixture(scope="module")
def study(picture, tmp_path_factory):
    """One study of five trials, in this process."""
    out = tmp_path_factory.mktemp("study") / "study"
    result = tune(str(picture), out, FLAGS, options=TuneOptions(trials=5, quiet=True))
    return out, result


def load(out: Path):
    return optuna.load_study(study_name=STUDY_NAME, storage=open_storage(out))


def inr(*args, failpoint: str = "") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if failpoint:
        env.update({"INR_HOOKS": "tests.tune_hooks", "INR_FAILPOINT": failpoint})
    return subprocess.Popen([sys.executable, "-m", "inr_cli", *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=600)
    return process.returncode, stderr


def test_a_small_study_in_process(study):
    out, result = study
    trials = load(out).trials
    assert result.finished == 5 == sum(map(counted, trials))
    # The first trial is the configuration's own settings: the siren preset's, omega0 from the size.
    first = trials[0].user_attrs["settings"]
    assert first["network.omega0"] == 15.0 and first["optimizer.lr"] == 4e-4
    assert first["optimizer.lr_min"] == pytest.approx(1e-5)
    complete = [t for t in trials if t.state == State.COMPLETE]
    assert result.value == max(t.value for t in complete)
    assert result.best == max(complete, key=lambda t: t.value).number
    # trials.csv: a row per trial, as the study holds it.
    with open(out / "trials.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["number"]) for r in rows] == [t.number for t in trials]
    assert [r["state"] for r in rows] == [t.state.name.lower() for t in trials]
    for row, trial in zip(rows, trials):
        objective = trial.value if trial.state == State.COMPLETE else None  # a pruned one's is a reading's
        assert (float(row["value"]) if row["value"] else None) == objective
        assert float(row["optimizer.lr"]) == trial.user_attrs["settings"]["optimizer.lr"]
        assert int(row["steps"]) == trial.user_attrs["steps"]
    # best.toml: a configuration inr train reads, with the best trial's settings.
    values = read_toml(out / "best.toml")
    for key, value in result.settings.items():
        assert values[key] == value
    # The pictures: SVG that parses, one dot per finished trial; the best render beside the image.
    history = ET.parse(out / "history.svg").getroot()
    assert len([c for c in history.iter() if c.get("class") == "complete"]) == len(complete)
    ET.parse(out / "curves.svg")
    ET.parse(out / "importances.svg")
    assert Image.open(out / "best.png").size == (3 * 16 + 2 * 4, 16)  # image | render | error


def test_best_toml_trains_to_the_psnr_the_study_recorded(study, tmp_path):
    """inr train --config best.toml (same seed, CPU) gives the best trial's network, bit for bit."""
    out, result = study
    assert main(["train", "--config", str(out / "best.toml"), "--run-dir", str(tmp_path / "run"), "-q"]) == 0
    loss = float(ckpt.load(tmp_path / "run").state.loss[0])
    best = load(out).best_trial
    assert loss == best.user_attrs["losses"][0]
    assert psnr_from_mse(loss) == best.value == result.value


def test_the_steps_objective_counts_the_steps_inr_train_stops_at(picture, tmp_path):
    out = tmp_path / "study"
    result = tune(str(picture), out, {**FLAGS, "steps": 60},
                  options=TuneOptions(trials=4, objective="steps", target_psnr=10.0, quiet=True))
    assert result.value <= 60 and result.value == int(result.value)  # reached: the steps themselves
    assert read_toml(out / "best.toml")["training.target_psnr"] == 10.0
    assert main(["train", "--config", str(out / "best.toml"), "--run-dir", str(tmp_path / "run"), "-q"]) == 0
    saved = ckpt.load(tmp_path / "run")
    assert saved.step == result.value and psnr_from_mse(float(saved.state.loss[0])) >= 10.0


@pytest.mark.parametrize("pruner", ["halving", "median"])
def test_the_pruner_stops_a_learning_rate_that_cannot_work(picture, tmp_path, pruner):
    """Three trials, then two forced ones: lr 1e-9 learns nothing and the pruner stops it; lr 10
    blows up (or lags): neither finishes, neither is the best."""
    out = tmp_path / "study"
    flags = {**FLAGS, "omega0": 20.0}  # every trial starts from one network: only the schedule differs
    tune(str(picture), out, flags, options=TuneOptions(trials=3, pruner=pruner, quiet=True))
    study = load(out)
    study.enqueue_trial({"optimizer.lr": 1e-9})
    study.enqueue_trial({"optimizer.lr": 10.0})
    tune(str(picture), out, flags, options=TuneOptions(trials=5, pruner=pruner, resume=True, quiet=True))
    study = load(out)
    stalled, wild = study.trials[3], study.trials[4]
    assert stalled.params["optimizer.lr"] == 1e-9 and wild.params["optimizer.lr"] == 10.0
    assert stalled.state == State.PRUNED and stalled.user_attrs["note"].startswith("pruned at step")
    assert stalled.user_attrs["steps"] < 40
    assert wild.state in (State.PRUNED, State.FAIL)
    assert study.best_trial.number < 3


def test_halving_keeps_a_trial_only_while_it_is_in_the_better_half_at_each_rung(picture, tmp_path):
    """The default pruner, checked against the rule written out: with 80 steps the rungs are at 8,
    16, 32 and 64 steps, each judged at the first reading (every 10 steps) at or past it; there a
    trial goes on only if its reading is among the better half (at least the best one) of the
    readings at that step of every trial so far that got there, itself included."""
    out = tmp_path / "study"
    tune(str(picture), out, {**FLAGS, "steps": 80}, options=TuneOptions(trials=10, quiet=True))
    trials = [t for t in load(out).trials if t.intermediate_values]  # those that trained
    checks = [10, 20, 40, 70]
    stopped = 0
    for index, trial in enumerate(trials):
        expected = None
        for step in checks:
            field = [t.intermediate_values[step] for t in trials[:index + 1] if step in t.intermediate_values]
            cut = sorted(field, reverse=True)[max(0, len(field) // 2 - 1)]
            if trial.intermediate_values[step] < cut:
                expected = step
                break
        if expected is None:
            assert trial.state == State.COMPLETE and trial.user_attrs["steps"] == 80
        else:
            stopped += 1
            assert trial.state == State.PRUNED and max(trial.intermediate_values) == expected
    assert 0 < stopped < len(trials)


def test_width_and_depth_stay_under_the_parameter_budget(picture, tmp_path):
    budget = 1500
    tune(str(picture), tmp_path / "study", {"steps": 10, "device": "cpu"},
         options=TuneOptions(trials=6, max_params=budget, quiet=True))
    trials = load(tmp_path / "study").trials
    assert sum(map(counted, trials)) == 6

    def siren_parameters(hidden: int, layers: int, channels: int = 3) -> int:
        return 3 * hidden + (layers - 1) * (hidden * hidden + hidden) + (hidden * channels + channels)

    for trial in trials:
        settings = trial.user_attrs["settings"]
        size = siren_parameters(settings["network.hidden"], settings["network.layers"])
        if trial.user_attrs.get("rejected"):
            assert size > budget and not counted(trial) and "over --max-params" in trial.user_attrs["note"]
        else:
            assert size <= budget
    assert any(t.user_attrs.get("rejected") for t in trials)  # the budget was met by refusing draws
    # The first trial is the preset's 3 layers, as wide as the budget allows.
    first = trials[0].user_attrs["settings"]
    widest = max(h for h in range(16, 257) if siren_parameters(h, 3) <= budget)
    assert counted(trials[0]) and (first["network.layers"], first["network.hidden"]) == (3, widest)


def test_a_study_killed_mid_trial_resumes_with_every_finished_trial(picture, tmp_path):
    """SIGKILLed at trial 2's first reading; resumed, it keeps trials 0 and 1 as they were, marks 2
    failed and runs its settings again as a new trial, counted once."""
    out = tmp_path / "study"
    args = ["tune", picture, "-o", out, "--trials", "4", *NET]
    code, stderr = finish(inr(*args, failpoint="kill-at-trial=2"))
    assert code == -signal.SIGKILL, stderr
    before = load(out).trials
    finished = {t.number: (t.state, t.value, t.params) for t in before if counted(t)}
    assert set(finished) == {0, 1}
    assert before[2].state == State.RUNNING and before[2].intermediate_values  # it had begun
    code, stderr = finish(inr(*args, "--resume"))
    assert code == 0, stderr
    assert "trial 2 was running when the study stopped" in stderr
    after = load(out).trials
    assert {n: (after[n].state, after[n].value, after[n].params) for n in finished} == finished
    assert after[2].state == State.FAIL
    again = [t for t in after if t.user_attrs.get("retry_of") == 2]
    assert len(again) == 1 and again[0].params == after[2].params and counted(again[0])
    done = [t for t in after if counted(t)]
    assert len(done) == 4 and len({tuple(sorted(t.params.items())) for t in done}) == 4


def test_ctrl_c_keeps_the_finished_trials_and_queues_the_one_it_cut(picture, tmp_path):
    out = tmp_path / "study"
    args = ["tune", picture, "-o", out, "--trials", "3", *NET]
    code, stderr = finish(inr(*args, failpoint="interrupt-at-trial=1"))
    assert code == 130, stderr
    assert "SIGINT: 1 of 3 trials are finished and kept in" in stderr and "--resume" in stderr
    trials = load(out).trials
    assert trials[1].state == State.FAIL and trials[2].state == State.WAITING
    assert trials[2].user_attrs["retry_of"] == 1
    code, stderr = finish(inr(*args, "--resume"))
    assert code == 0, stderr
    trials = load(out).trials
    assert [t.number for t in trials if counted(t)] == [0, 2, 3]
    assert trials[2].params == trials[1].params


def test_a_folder_is_tuned_on_a_seeded_sample_fitted_as_one_pack(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(4):
        smooth_image(folder / f"square-{i}.png", (12, 12), seed=i)
    for i in range(2):
        smooth_image(folder / f"wide-{i}.png", (14, 9), seed=i)
    out = tmp_path / "study"
    result = CliRunner().invoke(app, ["tune", str(folder), "-o", str(out), "--sample", "3", "--trials", "3",
                                      "--init", "random",  # each network its own draw, as inr train --seed alone
                                      "--hidden", "12", "--layers", "2", "--steps", "20", "--device", "cpu"])
    assert result.exit_code == 0, result.stderr
    study = load(out)
    names = study.user_attrs["inr-tune"]["images"]
    assert len(names) == 3 and f"sample (seed 0): {', '.join(names)}" in result.stderr
    assert len({name.split("-")[0] for name in names}) == 1  # one size: one pack
    # Each network of the best trial's pack is the one inr train fits alone with the image's seed.
    best = study.best_trial
    for name, loss in zip(names, best.user_attrs["losses"], strict=True):
        run = tmp_path / f"run-{name}"
        code = main(["train", str(folder / name), "--config", str(out / "best.toml"), "--seed",
                     str(image_seed(0, name)), "--run-dir", str(run), "-q"])
        assert code == 0
        assert float(ckpt.load(run).state.loss[0]) == loss
    assert best.value == pytest.approx(np.mean([psnr_from_mse(x) for x in best.user_attrs["losses"]]), abs=0)


@pytest.mark.parametrize("args, message", [
    (["--search", "network.omega0=90:10"], "LOW must be below HIGH"),
    (["--search", "optimizer.lr=0:1:log"], "a log scale needs LOW above 0"),
    (["--search", "training.seed=0:5"], "training.seed cannot be searched"),
    (["--search", "network.omega0"], "expected KEY=LOW:HIGH"),
    (["--search", "network.omega0=10:90", "--omega0", "30"], "is also fixed on the command line"),
    (["--search", "optimizer.beta1=0.5:1.5"], "optimizer.beta1 and optimizer.beta2 must be below 1"),
    (["--lr-min", "1e-4"], "the default range of optimizer.lr (1e-05..0.03; --search optimizer.lr=LOW:HIGH sets "
                           "another): at 1e-05, --lr-min (optimizer.lr_min) must not exceed --lr (optimizer.lr), "
                           "1e-05; got 0.0001"),
    (["--max-params", "50"], "the smallest network of the space"),
    (["--max-params", "0"], "--max-params must be a positive"),
    (["--objective", "steps"], "give it with --target-psnr"),
    (["--target-psnr", "30"], "it goes with --objective steps"),
    (["--trials", "0"], "--trials must be a positive"),
    (["--workers", "2"], "they need --ray"),
    (["--gpus-per-trial", "-1", "--ray", "local"], "--gpus-per-trial must be a share of one GPU"),
    (["--sample", "0"], "--sample must be a positive"),
    (["--resume"], "there is no study in"),
])
def test_bad_spaces_and_budgets_are_refused_in_one_line(picture, tmp_path, args, message):
    result = CliRunner().invoke(app, ["tune", str(picture), "-o", str(tmp_path / "study"), *NET, *args])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_study_is_resumed_with_its_own_options_only(study):
    out, _ = study
    again = CliRunner().invoke(app, ["tune", str(load(out).user_attrs["inr-tune"]["source"]), "-o", str(out), *NET])
    assert again.exit_code == 2 and "holds a study already: continue it with --resume" in again.stderr
    other = CliRunner().invoke(app, ["tune", str(load(out).user_attrs["inr-tune"]["source"]), "-o", str(out),
                                     *NET[:-4], "--steps", "50", "--device", "cpu", "--resume"])
    assert other.exit_code == 2 and "was started with training.steps = 40, not 50" in other.stderr


def test_without_optuna_one_line_names_the_extra(picture, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # what `import optuna` meets where it is not installed
    result = CliRunner().invoke(app, ["tune", str(picture), "-o", str(tmp_path / "study"), *NET])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: inr tune needs optuna, which is not installed: {install_hint('tune')}"
    assert "'optuna>=" in install_hint("tune") or "'.[tune]'" in install_hint("tune")


def test_the_command_line_does_not_import_optuna_until_tune_runs():
    code = ("import sys; from inr_cli.cli import main; main(['--help']); main(['tune', '--help']); "
            "sys.exit(3 if 'optuna' in sys.modules else 0)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--max-params" in done.stdout


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of one node with two CPUs on this machine: two trials at once."""
    pytest.importorskip("ray", reason="Ray is the optional extra inr[cluster]")
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


@pytest.mark.slow
@pytest.mark.cluster
def test_on_ray_two_trials_run_at_once_and_a_lost_one_runs_again(cluster, picture, tmp_path):
    """Each trial waits at its start until two have started (it fails otherwise), so the study
    finishes only if two ran at once; trial 1's worker is SIGKILLed at its first reading and its
    settings run again as a new trial, counted once."""
    out = tmp_path / "study"
    code, stderr = finish(inr("tune", picture, "-o", out, "--trials", "4", *NET, "--ray", cluster.address,
                              "--workers", "2", failpoint="together=2,kill-at-trial=1"))
    assert code == 0, stderr
    assert "2 trials at once" in stderr and "trial 1 was lost" in stderr
    trials = load(out).trials
    assert trials[1].state == State.FAIL
    again = [t for t in trials if t.user_attrs.get("retry_of") == 1]
    assert len(again) == 1 and again[0].params == trials[1].params and counted(again[0])
    assert sum(map(counted, trials)) == 4
    assert all(t.intermediate_values for t in trials if counted(t))  # the workers reported to the journal


def test_a_hash_grid_study_searches_its_table_and_levels(picture, tmp_path):
    """For a hash grid the default space adds the table's size and the levels (not omega0 or sigma)."""
    tune(str(picture), tmp_path / "study", {"steps": 6, "device": "cpu", "hidden": 8, "layers": 1}, preset="hashgrid",
         options=TuneOptions(trials=4, quiet=True))
    trials = load(tmp_path / "study").trials
    assert sum(map(counted, trials)) == 4
    drawn = [trial.params for trial in trials]
    assert all(10 <= p["encoding.log2_table_size"] <= 22 and 4 <= p["encoding.levels"] <= 24 for p in drawn)
    assert not any("network.omega0" in p or "encoding.sigma" in p for p in drawn)
    assert len({(p["encoding.log2_table_size"], p["encoding.levels"]) for p in drawn}) > 1
