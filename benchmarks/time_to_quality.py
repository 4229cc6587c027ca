"""Time to quality: steps and seconds for each training recipe to reach 30, 35 and 40 dB, side by
side on a suite of photos and line drawings, with what each draws between the pixels.

    PYTHONPATH=. python benchmarks/time_to_quality.py                       # the CPU suite
    PYTHONPATH=. python benchmarks/time_to_quality.py --device gpu --sizes 64 128 256 512 --torch
    PYTHONPATH=. python benchmarks/time_to_quality.py --device gpu --images PHOTO.jpg --sizes 768 --recipes hashgrid \\
        default --torch hashgrid --targets 40 44 --budget 5000 --scale 0
    PYTHONPATH=. python benchmarks/time_to_quality.py --recipes default ws2-paper \\
        --define 'ws2-o45=siren:weight_scale=2,omega0=45,lr=1e-4,lr_min=1e-4'

For each recipe (benchmarks/recipes.py: SIREN as published, inr's default, weight scaling at
several factors on the paper's constant learning rate and on inr's cosine, Fourier features, the
sigmoid preset, learning-rate schedules, random batches of a quarter of the pixels), each image of
the suite (--images; photos in colour and grey, the drawing fixtures in grey) and each size (the
longer side, --sizes):

- time to quality: train on the image at that size through inr's own training loop (run_steps)
  with the step budget as the schedule's total; read the training PSNR at every reading (every
  --check steps, as `inr train --log-every`); record the step and the training seconds at which
  it first reaches each target, and the best PSNR seen. A run stops once it has reached the last
  target (--full: it goes on to the budget). With random batches the PSNR is the whole image's,
  rendered at each reading (outside the timed seconds), not the batch's loss.
- what it draws between the pixels: train the recipe as `inr train --size N/2` would (the
  preset's own step count unless the recipe sets one), render at N and score PSNR / SSIM against
  the image at N, beside Lanczos and bicubic upscales of the very image it trained on
  (benchmarks/upscaling.py's scores).

Steps are the main figure: they do not depend on the machine. Seconds do, and on a shared machine
they also depend on what else runs. Results: a JSON (--out; written after every run, so that
--resume can go on after an interruption) and tables on stdout. --torch also races PyTorch
(benchmarks/torch_reference.py) from the same initial parameters with the same recipe.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    ROOT,
    configure,
    default_workers,
    environment,
    job_backend,
    make_trainer,
    save_json,
    warm_trainer,
    worker_pool,
)
from benchmarks.recipes import GROUPS, Recipe, parse_definition, select  # noqa: E402
from benchmarks.upscaling import upscale_scores  # noqa: E402
from inr_cli.backends import get_backend  # noqa: E402
from inr_cli.core.metrics import psnr, psnr_from_mse  # noqa: E402
from inr_cli.core.network import init_parameters, output_means  # noqa: E402
from inr_cli.core.render import render_float  # noqa: E402
from inr_cli.core.training_loop import Diverged, Signals, run_steps  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SUITE = {  # name: (file, grey)
    "coffee": (FIXTURES / "coffee.png", False),
    "rocket": (FIXTURES / "rocket.jpg", False),
    "coffee-grey": (FIXTURES / "coffee.png", True),
    "rocket-grey": (FIXTURES / "rocket.jpg", True),
    "cub": (FIXTURES / "drawing-cub.png", True),
    "house": (FIXTURES / "drawing-house.png", True),
    "text": (FIXTURES / "drawing-text.png", True),  # lines of text: strokes under 2 px at 224 px wide
}
DRAWINGS = ("cub", "house", "text")
DEFAULT_IMAGES = ["coffee", "rocket-grey", "cub", "house"]
TARGETS = (30.0, 35.0, 40.0)  # the goals' targets; --targets for fewer (a run stops at its last)
# The CPU suite: 64 px with the goals' 2,000-step budget, the "suite" recipes ("all" less the slowest
# repeats; nineteen recipes took 55 minutes on two shared cores). A 128-px run costs four times as
# much per step: --sizes 128 --budget 1000 --recipes core adds that size.
CPU_SIZES, CPU_BUDGETS = [64], ["2000", "128=1000"]
GPU_SIZES, GPU_BUDGETS = [64, 128, 256, 512], ["2000"]


class _Done(Exception):
    """Every target reached: the run need not go on."""


def target_key(target: float) -> str:
    return f"{target:g}dB"


def suite_image(name: str, size: int):
    """An image of the suite, or a photo file named by its path (kept out of the repository: the large
    photos of BENCHMARKS.md), in colour."""
    path, grey = SUITE[name] if name in SUITE else (Path(name), False)
    return load_image(path, size=size, gray=grey)


def recipe_config(recipe: Recipe, image, **overrides):
    """The recipe's configuration for this image, as `inr train` decides it (size-following
    settings from the image's longer side)."""
    flags = dict(recipe.flags)
    omega0 = recipe.omega0_for(max(image.width, image.height))
    if omega0 is not None:
        flags["omega0"] = omega0
    if recipe.batch_fraction:
        flags["batch_size"] = max(1, int(image.width * image.height * recipe.batch_fraction))
    return configure(recipe.preset, max(image.width, image.height), preview_every=0, **{**flags, **overrides})


def race(trainer, backend, image, check: int, stop_when_done: bool, targets=TARGETS, on_score=None) -> dict:
    """Train through run_steps; the step and training seconds at which each target is first
    reached, the best PSNR seen and the curve of readings (each also handed to on_score(step, psnr))."""
    reached = {target_key(t): None for t in targets}
    curve, best = [], float("-inf")

    def on_reading(step: int, losses, _rate: float) -> None:
        nonlocal best
        if trainer.full_batch:
            quality = psnr_from_mse(float(losses[0]))
        else:  # the batch's loss is a noisy sample: score the whole image, off the clock
            quality = psnr(render_float(backend, trainer.spec, trainer.params[:1], image.width, image.height),
                           image.values)
            trainer.pause_clock()
        best = max(best, quality)
        curve.append([step, round(quality, 2)])
        if on_score is not None:
            on_score(step, quality)
        for target in targets:
            if reached[target_key(target)] is None and quality >= target:
                reached[target_key(target)] = {"step": step, "seconds": round(trainer.seconds, 3)}
        if stop_when_done and all(reached.values()):
            raise _Done

    stopped = "budget"
    with Signals() as signals:
        try:
            run_steps(trainer, signals, check, on_reading=on_reading)
        except _Done:
            stopped = "targets"
        except Diverged as exc:
            stopped = f"diverged at step {exc.step}"
    return {"reached": reached, "best_psnr": round(best, 3), "steps_run": trainer.step_done,
            "seconds_run": round(trainer.seconds, 3), "stopped": stopped, "curve": curve}


def upscale(backend, recipe: Recipe, name: str, size: int, scale: int, steps: int | None = None) -> dict:
    """Trained at size / scale as `inr train --size` would (for the recipe's own step count, or
    `steps`), rendered at size, scored against the image at size beside Lanczos and bicubic."""
    small, original = suite_image(name, size // scale), suite_image(name, size)
    config = recipe_config(recipe, small, **({"steps": steps} if steps else {}))
    trainer = make_trainer(backend, config, [small])
    outcome = "trained"
    with Signals() as signals:
        try:
            run_steps(trainer, signals, config.training.steps)
        except Diverged as exc:
            outcome = f"diverged at step {exc.step}"
    params = trainer.params[:1]
    fit = psnr(render_float(backend, trainer.spec, params, small.width, small.height), small.values)
    rendered = render_float(backend, trainer.spec, params, original.width, original.height)
    return {"trained": [small.width, small.height], "steps": config.training.steps, "outcome": outcome,
            "fit_psnr": round(fit, 3), **upscale_scores(rendered, small, original)}


def torch_race(config, image, spec, check: int, stop_when_done: bool, device: str, targets=TARGETS) -> dict:
    """PyTorch from the same initial parameters with the same recipe (full batch or the same batch
    size; its own random batches; the hash grid's peer draws inr's)."""
    import torch

    from benchmarks.torch_hashgrid import TorchHashGridTrainer
    from benchmarks.torch_reference import TorchTrainer, optimizer_settings
    from inr_cli.core.coords import pixel_grid

    if device == "cpu":  # as many threads as the CPU engine runs (the benchmark's BLAS is held to one)
        torch.set_num_threads(os.cpu_count() or 1)
    start = init_parameters(spec, config.training.seed, (output_means(config, [image]) or [None])[0],
                            config.network.weight_scale)
    opt, train = config.optimizer, config.training
    coords = pixel_grid(image.width, image.height)
    if spec.encoding == "hashgrid":
        trainer = TorchHashGridTrainer(torch, spec, start, coords, image.targets(), config, train.seed, device)
    else:
        trainer = TorchTrainer(torch, spec, start, coords, image.targets(), opt.lr, opt.lr_min, train.steps,
                               train.batch_size, train.seed, device, **optimizer_settings(opt))
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    reached = {target_key(t): None for t in targets}
    best, step = float("-inf"), 0
    synchronize()
    begin = time.perf_counter()
    while step < train.steps:
        trainer.step()
        step += 1
        if step == 1 or step % check == 0 or step == train.steps:
            quality = psnr_from_mse(trainer.read_loss())
            best = max(best, quality)
            for target in targets:
                if reached[target_key(target)] is None and quality >= target:
                    reached[target_key(target)] = {"step": step, "seconds": round(time.perf_counter() - begin, 3)}
            if stop_when_done and all(reached.values()):
                break
    return {"reached": reached, "best_psnr": round(best, 3), "steps_run": step,
            "seconds_run": round(time.perf_counter() - begin, 3)}


def peak_rss_mb() -> float:
    """The job's process's peak resident memory so far, in MiB (its worker is fresh for each job)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def job(device: str, workers: int, recipe_name: str, recipe: Recipe, name: str, size: int, budget: int, check: int,
        full: bool, scale: int, upscale_steps: tuple, with_race: bool, with_torch: bool,
        targets: tuple = TARGETS) -> dict:
    backend = job_backend(device, workers)
    image = suite_image(name, size)
    config = recipe_config(recipe, image, steps=budget, log_every=check)
    result = {}
    if with_race:
        trainer = warm_trainer(backend, config, [image])
        result = race(trainer, backend, image, check, not full, targets)
        result["peak_rss_mb"] = peak_rss_mb()
    net, enc, opt = config.network, config.encoding, config.optimizer
    settings = {"preset": recipe.preset, "model": net.model, "hidden": net.hidden, "layers": net.layers,
                "omega0": net.omega0, "weight_scale": net.weight_scale, "encoding": enc.name,
                "sigma": enc.sigma if enc.name == "fourier" else None, "lr": opt.lr, "lr_min": opt.lr_min,
                "batch_size": config.training.batch_size}
    report = {"recipe": recipe_name, "image": name, "size": size, "width": image.width, "height": image.height,
              "channels": image.n_channels, "budget": budget, "full": full, "backend": backend.name,
              "settings": settings, **result}
    if scale:
        report["upscale"] = upscale(backend, recipe, name, size, scale)
        # Shorter (or longer) runs: a recipe that reaches the targets sooner may draw better
        # between the pixels when it stops sooner, before it memorises them.
        report["upscale_at"] = {str(steps): upscale(backend, recipe, name, size, scale, steps)
                                for steps in upscale_steps}
    if with_torch and with_race:
        torch_device = "cuda" if backend.name == "gpu" else "cpu"
        report["torch"] = torch_race(config, image, trainer.spec, check, not full, torch_device, targets)
        report["torch"]["peak_rss_mb"] = peak_rss_mb()  # the job's whole peak: the torch race's where it is higher
    return report


# ---- tables ----------------------------------------------------------------------------------------

def steps_to(result: dict, target: float) -> int | None:
    """The step at which a run reached the target; its budget when it never did (as the goals count)."""
    if target_key(target) not in result["reached"]:  # a run asked for other --targets
        return None
    hit = result["reached"][target_key(target)]
    return hit["step"] if hit else result["budget"]


def seconds_to(result: dict, target: float) -> float | None:
    hit = result["reached"].get(target_key(target))
    return hit["seconds"] if hit else None


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _cell(value, width: int, digits: int = 0) -> str:
    if value is None:
        return "-".rjust(width)
    return f"{value:{width}.{digits}f}"


def targets_of(results: list[dict]) -> list[float]:
    """The targets the runs asked for (--targets), in order."""
    keys = {key for r in results for key in r.get("reached", {})}
    return sorted(float(key.removesuffix("dB")) for key in keys)


def summary_rows(results: list[dict]) -> dict:
    """Per size and recipe: medians over the images (a target not reached counts as the budget)."""
    table: dict = {}
    for size in sorted({r["size"] for r in results}):
        at_size = [r for r in results if r["size"] == size and "reached" in r]
        for recipe in dict.fromkeys(r["recipe"] for r in at_size):
            runs = [r for r in at_size if r["recipe"] == recipe]
            row = {"images": len(runs)}
            for target in targets_of(runs):
                key = target_key(target)
                row[f"steps_{key}"] = _median([steps_to(r, target) for r in runs])
                row[f"unreached_{key}"] = sum(1 for r in runs if key in r["reached"] and not r["reached"][key])
                row[f"seconds_{key}"] = _median([seconds_to(r, target) for r in runs])
            row["best_psnr"] = _median([r["best_psnr"] for r in runs])
            ups = [r["upscale"] for r in runs if "upscale" in r]
            if ups:
                gaps = [u["inr"]["psnr"] - u["lanczos"]["psnr"] for u in ups]
                row["upscale_psnr"] = statistics.mean(u["inr"]["psnr"] for u in ups)
                row["upscale_gap_mean"] = statistics.mean(gaps)
                row["upscale_gap_worst"] = min(gaps)
                row["upscale_ssim_gap_mean"] = statistics.mean(u["inr"]["ssim"] - u["lanczos"]["ssim"] for u in ups)
            table.setdefault(size, {})[recipe] = row
    return table


def upscale_rows(results: list[dict]) -> dict:
    """Per size and recipe: the mean and worst 2x PSNR gap to Lanczos for each training length."""
    table: dict = {}
    for r in results:
        for u in {"own": r.get("upscale"), **r.get("upscale_at", {})}.values():
            if u:
                key = f"{u['steps']}"
                cell = table.setdefault(r["size"], {}).setdefault(r["recipe"], {}).setdefault(key, [])
                cell.append(u["inr"]["psnr"] - u["lanczos"]["psnr"])
    return {size: {recipe: {steps: {"mean": statistics.mean(gaps), "worst": min(gaps), "images": len(gaps)}
                            for steps, gaps in sorted(by_steps.items(), key=lambda item: int(item[0]))}
                   for recipe, by_steps in rows.items()}
            for size, rows in table.items()}


def print_tables(results: list[dict]) -> None:
    summary = summary_rows(results)
    targets = list(map(target_key, targets_of(results)))
    for size, rows in summary.items():
        budgets = sorted({r["budget"] for r in results if r["size"] == size})
        print(f"\n== {size} px: medians over the images (a target not reached counts as the budget, "
              f"{'/'.join(map(str, budgets))} steps; [n] = images that did not reach it)")
        steps_head = "steps to " + "".join(f"{t:>11s}" for t in targets)
        seconds_head = "".join(f"{'s to ' + t:>10s}" for t in targets)
        print(f"{'recipe':11s} {steps_head}  {seconds_head}  "
              f"{'best dB':>7s}  {'2x dB':>6s} {'vs Lanczos':>10s} {'worst':>6s} {'SSIM vs L':>9s}")
        for recipe, row in rows.items():
            steps = ""
            for target in targets:
                missed = row.get(f"unreached_{target}")
                steps += f"{_cell(row.get(f'steps_{target}'), 7)}{f'[{missed}]' if missed else '':<4s}"
            seconds = "".join(_cell(row.get(f"seconds_{target}"), 10, 1) for target in targets)
            upscale_cells = (f"{_cell(row.get('upscale_psnr'), 6, 2)} {_cell(row.get('upscale_gap_mean'), 10, 2)} "
                             f"{_cell(row.get('upscale_gap_worst'), 6, 2)} "
                             f"{_cell(row.get('upscale_ssim_gap_mean'), 9, 4)}")
            print(f"{recipe:20s} {steps}  {seconds}  {_cell(row['best_psnr'], 7, 1)}  {upscale_cells}")
    for size, rows in upscale_rows(results).items():
        print(f"\n== {size} px: 2x render (trained at {size // 2} px) against Lanczos, mean / worst gap in dB over the "
              f"images, by training steps")
        for recipe, by_steps in rows.items():
            cells = "  ".join(f"{steps:>5s}: {g['mean']:+6.2f} / {g['worst']:+6.2f}" for steps, g in by_steps.items())
            print(f"{recipe:24s} {cells}")
    print(f"\n== each run: steps to {' / '.join(targets)} (- = not within the budget), best PSNR, 2x gap to Lanczos")
    for r in results:
        if "reached" not in r:
            continue
        steps = " / ".join(str(hit["step"]) if hit else "-" for hit in r["reached"].values())
        gap = ""
        if "upscale" in r:
            u = r["upscale"]
            gap = f"  2x {u['inr']['psnr']:6.2f} dB ({u['inr']['psnr'] - u['lanczos']['psnr']:+.2f})"
        torch_part = ""
        if "torch" in r:
            torch_steps = (str(hit["step"]) if hit else "-" for hit in r["torch"]["reached"].values())
            torch_part = "  torch " + " / ".join(torch_steps)
        print(f"{r['size']:4d} {r['image']:12s} {r['recipe']:20s} {steps:>18s}  best {r['best_psnr']:6.2f}  "
              f"({r['stopped']}, {r['seconds_run']:.0f} s){gap}{torch_part}")


# ---- the command -----------------------------------------------------------------------------------

def budgets_by_size(items: list[str], sizes: list[int]) -> dict[int, int]:
    """`2000` (every size) and `128=1000` (one size) as {size: steps}."""
    default, per_size = None, {}
    for item in items:
        if "=" in item:
            size, _, steps = item.partition("=")
            per_size[int(size)] = int(steps)
        else:
            default = int(item)
    if default is None and any(size not in per_size for size in sizes):
        raise SystemExit("--budget: give a step count for every size (e.g. --budget 2000 128=1000)")
    return {size: per_size.get(size, default) for size in sizes}


def job_key(args_tuple) -> str:
    """What a run is, for --resume: the recipe and every setting it trains with (a preset's default
    that changed since a run was saved makes it a new run), the image, the size and the options."""
    (_, _, recipe_name, recipe, name, size, budget, check, full, scale, upscale_steps, with_race, with_torch,
     targets) = args_tuple
    trains_with = asdict(configure(recipe.preset, size, **recipe.flags))
    key = [recipe_name, asdict(recipe), trains_with, name, size, budget, check, full, scale, list(upscale_steps),
           with_race, with_torch, list(targets)]
    return json.dumps(key, sort_keys=True, default=str)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu", "auto"))
    parser.add_argument("--sizes", type=int, nargs="*", help=f"longer sides (CPU {CPU_SIZES}, GPU {GPU_SIZES})")
    parser.add_argument("--budget", nargs="*", help=f"steps: N for every size, SIZE=N for one (CPU {CPU_BUDGETS}, "
                                                    f"GPU {GPU_BUDGETS})")
    parser.add_argument("--images", nargs="*", default=DEFAULT_IMAGES,
                        help=f"suite images ({', '.join(SUITE)}) or paths of photos")
    parser.add_argument("--recipes", nargs="*", default=["suite"],
                        help=f"recipe names or groups ({', '.join(GROUPS)}); see benchmarks/recipes.py")
    parser.add_argument("--define", nargs="*", default=[], metavar="NAME=PRESET:key=value,...",
                        help="more recipes, e.g. 'ws2-o45=siren:weight_scale=2,omega0=45,lr=1e-4,lr_min=1e-4'")
    parser.add_argument("--check", type=int, default=10, help="steps between PSNR readings")
    parser.add_argument("--targets", type=float, nargs="+", default=list(TARGETS),
                        help="PSNR targets in dB (a run stops once it reaches the last, unless --full)")
    parser.add_argument("--full", action="store_true", help="train to the budget even once every target is reached")
    parser.add_argument("--scale", type=int, default=2, help="upscale factor of the between-the-pixels score; 0: none")
    parser.add_argument("--upscale-steps", type=int, nargs="*", default=[],
                        help="also score 2x renders of runs this long (besides the recipe's own step count)")
    parser.add_argument("--no-race", dest="race", action="store_false",
                        help="only the 2x renders, not the steps to the targets")
    parser.add_argument("--torch", nargs="*", metavar="RECIPE", help="also race PyTorch with the same recipe (every "
                        "recipe, or the ones named)")
    parser.add_argument("--workers", type=int, default=0, help="parallel runs (default: 1 on a GPU, else cores)")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --out, run the rest")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "time-to-quality.json")
    args = parser.parse_args()

    unknown = [name for name in args.images if name not in SUITE and not Path(name).is_file()]
    if unknown:
        raise SystemExit(f"time_to_quality: {unknown[0]} is neither an image of the suite ({', '.join(SUITE)}) "
                         f"nor a file")
    backend_name = get_backend(args.device).name
    on_gpu = backend_name == "gpu"
    sizes = args.sizes or (GPU_SIZES if on_gpu else CPU_SIZES)
    budgets = budgets_by_size(args.budget or (GPU_BUDGETS if on_gpu else CPU_BUDGETS), sizes)
    try:
        recipes = select(args.recipes, dict(parse_definition(text) for text in args.define))
    except ValueError as exc:
        raise SystemExit(f"time_to_quality: {exc}") from None
    workers = args.workers or default_workers(backend_name)
    jobs = [(args.device, workers, recipe_name, recipe, name, size, budgets[size], args.check, args.full, args.scale,
             tuple(args.upscale_steps), args.race,
             args.torch is not None and (not args.torch or recipe_name in args.torch), tuple(sorted(args.targets)))
            for size in sizes for name in args.images for recipe_name, recipe in recipes.items()]
    done: dict[str, dict] = {}
    if args.resume and args.out.is_file():
        for result in json.loads(args.out.read_text()).get("results", []):
            done[result.get("key", "")] = result
    order = {job_key(j): i for i, j in enumerate(jobs)}  # each job's key, once (it builds the job's config)
    todo = [(j, key) for j, key in zip(jobs, order) if key not in done]
    # Runs in --out that this command does not ask for stay in the file (out of its tables).
    kept = [r for key, r in done.items() if key not in order]
    header = {"environment": environment(), "backend": backend_name, "workers": workers, "sizes": sizes,
              "budgets": budgets, "images": args.images, "targets": sorted(args.targets), "check": args.check,
              "full": args.full, "scale": args.scale, "upscale_steps": args.upscale_steps, "race": args.race,
              "recipes": {name: asdict(recipe) for name, recipe in recipes.items()},
              "note": "steps are the main figure; seconds are training time on this machine as it was then"}
    print(f"{len(jobs)} runs ({len(jobs) - len(todo)} already in {args.out}), {workers} at a time on {backend_name}",
          flush=True)
    results = [done[key] for key in order if key in done]
    started = time.perf_counter()
    with worker_pool(workers, jobs_per_worker=1) as pool:
        futures = [(key, pool.submit(job, *j)) for j, key in todo]
        for key, future in futures:
            result = {"key": key, **future.result()}
            results.append(result)
            if "reached" in result:
                steps = " / ".join(str(hit["step"]) if hit else "-" for hit in result["reached"].values())
                said = (f"steps to {'/'.join(result['reached'])} {steps:>16s}, best {result['best_psnr']:.2f} "
                        f"({result['stopped']})")
            else:
                said = "2x " + ", ".join(f"{u['steps']} steps {u['inr']['psnr'] - u['lanczos']['psnr']:+.2f} dB"
                                         for u in [result["upscale"], *result["upscale_at"].values()])
            print(f"[{len(results)}/{len(jobs)} {time.perf_counter() - started:5.0f} s] {result['size']} px "
                  f"{result['image']:12s} {result['recipe']:20s} {said}", flush=True)
            save_json({**header, "results": results + kept}, args.out)
    results.sort(key=lambda r: order.get(r["key"], len(order)))
    summary = {str(size): rows for size, rows in summary_rows(results).items()}
    upscales = {str(size): rows for size, rows in upscale_rows(results).items()}
    save_json({**header, "summary": summary, "upscale_by_steps": upscales, "results": results + kept}, args.out)
    print_tables(results)
    print(f"\nsaved {args.out}")


if __name__ == "__main__":
    main()
