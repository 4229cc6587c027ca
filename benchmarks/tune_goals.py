"""The goals of `inr tune` (issue "inr tune"), measured in steps, not seconds (a shared machine):

    PYTHONPATH=. python benchmarks/tune_goals.py pruning --size 64 --seeds 0 1 --pruners median halving
    PYTHONPATH=. python benchmarks/tune_goals.py presets [--images coffee rocket-grey cub house] [--pruners ...]

pruning: 20-trial studies of 300 steps on small images (--size, 32 px; --max-params 20000; the
    built-in sample and the rocket photo), each seed run with no pruning and with each pruner
    (--pruners: the study's kinds or the candidates below). For each: the total steps the study
    trained (the goal: half of 20 full trials or less) and its best PSNR beside the no-pruning
    study's with the same seed (a pruner should not stop the good trials). --keep DIR keeps each
    study's folder (its journal holds every trial's readings).
presets: the suite of benchmarks/time_to_quality.py as the recipe work defines it (a photo in
    colour, a photo in grey, the two line drawings in grey) at --size 64: the training PSNR at 300
    steps of each preset (`inr train IMAGE --preset P --steps 300`), beside the best value of a
    20-trial study per pruner (`inr tune IMAGE --trials 20 --steps 300 --seed 0` run in this
    process; default: the study's default pruner) held to the siren preset's parameter count
    (--max-params), so that it cannot win by size alone. Met: the study's best at least the best
    preset's, in half of 20 full trials' steps or less.

Both write into --out (one JSON, the part's entries added to what it holds) and print a line per
study. Training PSNR rewards memorising the pixels: a setting that wins here may draw worse between
them (upscaling.py).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, environment, save_json  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
# time_to_quality.py's suite (its default images): name -> (file, grey); "sample" is inr's built-in.
IMAGES = {
    "sample": ("", False),
    "coffee": (FIXTURES / "coffee.png", False),
    "rocket": (FIXTURES / "rocket.jpg", False),
    "rocket-grey": (FIXTURES / "rocket.jpg", True),
    "cub": (FIXTURES / "drawing-cub.png", True),
    "house": (FIXTURES / "drawing-house.png", True),
}
SUITE = ["coffee", "rocket-grey", "cub", "house"]
PRESETS = ("siren", "fourier", "sigmoid")
TRIALS, STEPS = 20, 300


def candidate_pruners(optuna, steps: int) -> dict:
    """Pruners tried beside the study's own kinds (search.py's make_pruner)."""
    return {
        "percentile25": lambda: optuna.pruners.PercentilePruner(25.0, n_startup_trials=5, n_warmup_steps=steps // 10),
        "median-s3-w5": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=steps // 20),
        "hyperband-rf4": lambda: optuna.pruners.HyperbandPruner(min_resource=max(1, steps // 30), max_resource=steps,
                                                                reduction_factor=4),
        "percentile33": lambda: optuna.pruners.PercentilePruner(100 / 3, n_startup_trials=4,
                                                                n_warmup_steps=steps // 10),
        "asha-rf4": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=steps // 10, reduction_factor=4),
        "asha-rf2": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=steps // 10, reduction_factor=2),
    }


def study_figures(out: Path) -> dict:
    """From trials.csv: the counted trials, their total steps and the best complete value."""
    rows = list(csv.DictReader((out / "trials.csv").open()))
    counted = [r for r in rows if r["state"] in ("complete", "pruned") and r["steps"]]
    values = [float(r["value"]) for r in counted if r["state"] == "complete" and r["value"]]
    return {"trials": len(counted), "pruned": sum(r["state"] == "pruned" for r in counted),
            "steps": sum(int(r["steps"]) for r in counted), "best": round(max(values), 3) if values else None}


def run_study(image: str, out: Path, seed: int, size: int, max_params: int, pruner: str) -> dict:
    """One study in this process; pruner: one of the study's kinds or a candidate's name."""
    import optuna

    from inr_cli.tune import study as study_module
    from inr_cli.tune.study import TuneOptions, tune

    own = study_module.make_pruner
    candidates = candidate_pruners(optuna, STEPS)
    if pruner in candidates:
        study_module.make_pruner = lambda _optuna, _settings: candidates[pruner]()
    path, grey = IMAGES[image]
    flags = {"steps": STEPS, "size": size, "device": "cpu", "seed": seed, "gray": grey or None}
    try:
        tune(str(path), out, {k: v for k, v in flags.items() if v is not None}, options=TuneOptions(
            trials=TRIALS, pruner=pruner if pruner not in candidates else "median", max_params=max_params,
            quiet=True))
    finally:
        study_module.make_pruner = own
    return study_figures(out)


def pruning(args, report: dict) -> None:
    part = report.setdefault("pruning", {"size": args.size, "max_params": args.max_params, "trials": TRIALS,
                                         "steps": STEPS, "runs": []})
    for pruner in ["none", *args.pruners]:  # each pruner on every seed before the next pruner
        for seed in args.seeds:
            for image in args.images:
                if any(r["image"] == image and r["seed"] == seed and r["pruner"] == pruner for r in part["runs"]):
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    out = args.keep / f"{image}-{args.size}-s{seed}-{pruner}" if args.keep else Path(tmp) / "study"
                    shutil.rmtree(out, ignore_errors=True)
                    figures = run_study(image, out, seed, args.size, args.max_params, pruner)
                row = {"image": image, "seed": seed, "pruner": pruner, **figures,
                       "share": round(figures["steps"] / (TRIALS * STEPS), 3)}
                part["runs"].append(row)
                save_json(report, args.out)
                print(json.dumps(row), flush=True)


def inr(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "inr_cli", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"inr {' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def siren_parameters(image: str, size: int) -> int:
    from benchmarks.common import configure
    from inr_cli.core.network import NetworkSpec
    from inr_cli.core.sizing import fit_to_image

    _, grey = IMAGES[image]
    config = configure("siren", size, steps=STEPS)
    config, _ = fit_to_image(config, size, size, 1 if grey else 3)
    return NetworkSpec.from_config(config, 1 if grey else 3).parameter_count()


def presets(args, report: dict) -> None:
    """Each preset's PSNR at 300 steps (`inr train`), then a study per pruner in args.pruners, in this
    process (run_study), so that a candidate pruner can be measured on the suite too."""
    part = report.setdefault("presets", {"size": args.size, "trials": TRIALS, "steps": STEPS, "images": {}})
    for image in args.images:
        path, grey = IMAGES[image]
        common = [str(path), "--steps", str(STEPS), "--size", str(args.size), "--device", "cpu", "--seed", "0"]
        common += ["--gray"] if grey else []
        row = part["images"].setdefault(image, {})
        studies = row.setdefault("tune", {})
        if "trials" in studies:  # written when a row held one study, the default median pruner's
            row.pop("met", None)
            studies = row["tune"] = {"median": studies}
        with tempfile.TemporaryDirectory() as tmp:
            for preset in PRESETS:
                if preset in row:
                    continue
                done = inr("train", *common, "--preset", preset, "-q", "--json", "--run-dir", f"{tmp}/{preset}")
                row[preset] = round(json.loads(done.stdout.strip().splitlines()[-1])["psnr"], 3)
                save_json(report, args.out)
            row["max_params"] = siren_parameters(image, args.size)
            row["best_preset"] = max(PRESETS, key=lambda p: row[p])
            for pruner in args.pruners:
                if pruner not in studies:
                    figures = run_study(image, Path(tmp) / pruner, 0, args.size, row["max_params"], pruner)
                    figures["best_toml"] = (Path(tmp) / pruner / "best.toml").read_text()
                    studies[pruner] = figures
                figures = studies[pruner]
                figures["share"] = round(figures["steps"] / (TRIALS * STEPS), 3)
                figures["met"] = figures["best"] is not None and figures["best"] >= row[row["best_preset"]] \
                    and figures["steps"] <= TRIALS * STEPS / 2
                save_json(report, args.out)
                print(json.dumps({"image": image, "pruner": pruner, "best_preset": row["best_preset"],
                                  "preset_psnr": row[row["best_preset"]],
                                  **{k: v for k, v in figures.items() if k != "best_toml"}}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("pruning", "presets"))
    parser.add_argument("--images", nargs="+", choices=sorted(IMAGES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--pruners", nargs="+",
                        help="the study's kinds (median, hyperband) or candidates: percentile25, median-s3-w5, "
                             "hyperband-rf4, percentile33, asha-rf4, asha-rf2 (default: median hyperband for "
                             "pruning, the study's default for presets)")
    parser.add_argument("--size", type=int)
    parser.add_argument("--max-params", type=int, default=20000)
    parser.add_argument("--keep", type=Path, help="pruning: keep each study's folder in KEEP (its journal holds "
                        "every trial's readings, to replay a pruner on)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/tune-goals-cpu-64.json (presets), "
                        "tune-pruning-cpu-32.json (pruning)")
    args = parser.parse_args()
    if args.part == "pruning":
        args.images = args.images or ["sample", "rocket"]
        args.pruners = args.pruners or ["median", "hyperband"]
        args.size = args.size or 32
        args.out = args.out or ROOT / "benchmarks" / "results" / f"tune-pruning-cpu-{args.size}.json"
    else:
        args.images = args.images or SUITE
        from inr_cli.tune.study import TuneOptions

        args.pruners = args.pruners or [TuneOptions().pruner]
        args.size = args.size or 64
        args.out = args.out or ROOT / "benchmarks" / "results" / f"tune-goals-cpu-{args.size}.json"
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    report["environment"] = environment()
    (pruning if args.part == "pruning" else presets)(args, report)
    save_json(report, args.out)


if __name__ == "__main__":
    main()
