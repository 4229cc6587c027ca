"""Steps to 30 / 35 dB from random, shared and learned starts, and what meta-learning costs.

Makes its own images (the drawn shapes of weights_classification.py), learns a start with `inr
meta-init` on a training split, then fits a held-out split of the same kind with `inr fit-many
--init random|shared|start.safetensors --until-psnr T` (each network's `steps` in index.csv: the
first loss reading, every training.log_every steps, that showed T; the step ceiling where none did).
With --fit-lrs, the random and learned starts are fitted again at each of those learning rates: a
learned start's gain is fair against a random start at its own best rate, not at one rate for both.
Then times meta-init's inner steps against fit-many's packs at the same network, pack size and
image size (network-steps per second, both in this process on the same backend): the machine may be
shared, so the ratio of the two, measured back to back, is the figure, not the seconds.

    PYTHONPATH=. python benchmarks/learned_start.py --size 32 --train-per-class 50 --test-per-class 10
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import inr_cli  # noqa: E402  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import environment, save_json  # noqa: E402
from benchmarks.emoji_faces import write_faces  # noqa: E402
from benchmarks.weights_classification import draw_shapes  # noqa: E402
from inr_cli.sets import meta as meta_module  # noqa: E402
from inr_cli.sets.meta import MetaOptions  # noqa: E402
from inr_cli.sets.meta_command import meta_init  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def steps_column(set_folder: Path) -> np.ndarray:
    with open(set_folder / "index.csv", newline="") as handle:
        return np.array([int(row["steps"]) for row in csv.DictReader(handle)])


def psnr_column(set_folder: Path) -> np.ndarray:
    with open(set_folder / "index.csv", newline="") as handle:
        return np.array([float(row["psnr"]) for row in csv.DictReader(handle)])


def steps_to(images: Path, out: Path, init: str, target: float, ceiling: int, net: dict, lr: float | None = None,
             log_every: int = 10) -> dict:
    began = time.perf_counter()
    net = {**net, "lr": lr} if lr is not None else net
    # training.log_every is a config file's setting for fit-many, not a flag's
    config = out.with_name(out.name + ".toml")
    config.write_text(f"[training]\nlog_every = {log_every}\n")
    inr_cli.fit_many(images, out, init=init, steps=ceiling, until_psnr=target, quiet=True, config=config, **net)
    steps = steps_column(out)
    reached = steps < ceiling
    return {"median_steps": float(np.median(steps)), "mean_steps": float(np.mean(steps)),
            "reached": int(reached.sum()), "networks": len(steps),
            "median_psnr_at_stop": float(np.median(psnr_column(out))), "seconds": time.perf_counter() - began}


def learn(images: Path, start: Path, net: dict, options: dict) -> dict:
    """meta-init, with the time spent in its inner fits (the outer loop's and the held-out measure's)
    counted apart: network-steps per second of the inner steps."""
    inner = {"seconds": 0.0, "network_steps": 0}
    original = meta_module.inner_fit

    def counted(backend, spec, config, start_params, imgs, seeds):
        began = time.perf_counter()
        result = original(backend, spec, config, start_params, imgs, seeds)
        inner["seconds"] += time.perf_counter() - began
        inner["network_steps"] += config.training.steps * len(imgs)
        return result

    meta_module.inner_fit = counted
    try:
        began = time.perf_counter()
        learned = meta_init(str(images), start, net, None, None, options, quiet=True)
        seconds = time.perf_counter() - began
    finally:
        meta_module.inner_fit = original
    return {"seconds": seconds, "images": learned["images"], "heldout": learned["heldout"], **options,
            "heldout_psnr_after_k": [round(row["psnr"], 3) for row in learned["log"]],
            "inner_seconds": inner["seconds"], "inner_network_steps": inner["network_steps"],
            "inner_network_steps_per_s": inner["network_steps"] / inner["seconds"]}


def fit_many_rate(images: Path, out: Path, net: dict, pack: int, steps: int) -> dict:
    """fit-many's network-steps per second over the whole call, in packs of `pack`."""
    began = time.perf_counter()
    inr_cli.fit_many(images, out, init="shared", steps=steps, pack=pack, quiet=True, **net)
    wall = time.perf_counter() - began
    count = len(steps_column(out))
    return {"networks": count, "steps": steps, "pack": pack, "seconds": wall,
            "network_steps_per_s": count * steps / wall}


def rate_rounds(scratch: Path, train: Path, net: dict, options: dict, rounds: int, outer_steps: int) -> dict:
    """meta-init's inner steps against fit-many's packs, back to back in each round (the machine's
    load changes between rounds, less within one): a short meta-init on the training split, then
    fit-many on `meta_batch` images for as many network-steps as that meta-init's outer loop took."""
    pack = options["meta_batch"]
    draw_shapes(scratch / "rate-images", max(1, pack // 4), net["size"], 7)
    steps = outer_steps * options["inner_steps"] * pack // (4 * max(1, pack // 4))
    rows = []
    for i in range(rounds):
        meta = learn(train, scratch / f"rate-{i}.safetensors", net, {**options, "outer_steps": outer_steps})
        fit = fit_many_rate(scratch / "rate-images", scratch / f"rate-set-{i}", net, pack, steps)
        rows.append({"meta_inner_network_steps_per_s": meta["inner_network_steps_per_s"],
                     "meta_network_steps_per_s": meta["inner_network_steps"] / meta["seconds"],
                     "fit_many_network_steps_per_s": fit["network_steps_per_s"],
                     "inner_time_per_step_over_fit_many":
                         fit["network_steps_per_s"] / meta["inner_network_steps_per_s"],
                     "meta_time_per_step_over_fit_many": fit["network_steps_per_s"] * meta["seconds"]
                     / meta["inner_network_steps"]})
    return {"rounds": rows, "pack": pack, "outer_steps": outer_steps, "fit_many_steps": steps,
            "median_inner_over_fit_many": float(np.median([r["inner_time_per_step_over_fit_many"] for r in rows])),
            "median_meta_over_fit_many": float(np.median([r["meta_time_per_step_over_fit_many"] for r in rows]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--images", choices=("shapes", "faces"), default="shapes",
                        help="drawn shapes (four classes at random places) or the emoji font's faces (aligned, "
                        "one kind: emoji_faces.py)")
    parser.add_argument("--test-faces", type=int, default=20, help="faces held out and fitted (--images faces)")
    parser.add_argument("--train-per-class", type=int, default=50, help="images per class meta-init learns from")
    parser.add_argument("--test-per-class", type=int, default=10, help="held-out images per class, fitted")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=None, help="default: the preset's")
    parser.add_argument("--omega0", type=float, default=None, help="default: the preset's (from the size)")
    parser.add_argument("--targets", type=float, nargs="+", default=[30.0, 35.0])
    parser.add_argument("--ceiling", type=int, default=2000)
    parser.add_argument("--log-every", type=int, default=10, help="fit-many's steps between loss reads: the "
                        "resolution of the steps counted (1 where a network reaches the targets in tens of steps)")
    parser.add_argument("--outer-steps", type=int, default=MetaOptions.outer_steps)
    parser.add_argument("--inner-steps", type=int, default=MetaOptions.inner_steps)
    parser.add_argument("--meta-batch", type=int, default=MetaOptions.meta_batch)
    parser.add_argument("--outer-lr", type=float, default=MetaOptions.outer_lr)
    parser.add_argument("--fit-lrs", type=float, nargs="*", default=[], help="learning rates at which the random "
                        "and learned starts are fitted again (each start at its best rate)")
    parser.add_argument("--rate-rounds", type=int, default=3,
                        help="rounds of meta-init against fit-many timing (0: none)")
    parser.add_argument("--rate-outer-steps", type=int, default=50, help="outer steps of each timed meta-init")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name", default=None, help="result file name (default: learned-start-DEVICE-SIZE)")
    args = parser.parse_args()
    net = {"hidden": args.hidden, "layers": args.layers, "device": args.device, "size": args.size}
    if args.lr is not None:
        net["lr"] = args.lr
    if args.omega0 is not None:
        net["omega0"] = args.omega0
    options = dict(outer_steps=args.outer_steps, inner_steps=args.inner_steps, meta_batch=args.meta_batch,
                   outer_lr=args.outer_lr, holdout=MetaOptions.holdout, eval_every=MetaOptions.eval_every)
    results = {"environment": environment(), "settings": vars(args), "starts": {}}
    with tempfile.TemporaryDirectory(prefix="inr-learned-start-") as scratch:
        scratch = Path(scratch)
        if args.images == "faces":
            write_faces(scratch / "train", scratch / "test", args.size, args.test_faces, args.seed)
        else:
            draw_shapes(scratch / "train", args.train_per_class, args.size, args.seed)
            draw_shapes(scratch / "test", args.test_per_class, args.size, args.seed + 1)
        start = scratch / "start.safetensors"
        results["meta_init"] = learn(scratch / "train", start, net, options)
        for target in args.targets:
            for init in ("random", "shared", str(start)):
                name = "learned" if init == str(start) else init
                row = steps_to(scratch / "test", scratch / f"set-{name}-{target:g}", init, target, args.ceiling, net,
                               log_every=args.log_every)
                results["starts"].setdefault(name, {})[f"{target:g}"] = row
        for lr in args.fit_lrs:
            for target in args.targets:
                for init in ("random", str(start)):
                    name = "learned" if init == str(start) else init
                    row = steps_to(scratch / "test", scratch / f"set-{name}-{target:g}-lr{lr:g}", init, target,
                                   args.ceiling, net, lr, args.log_every)
                    results.setdefault("fit_lrs", {}).setdefault(f"{lr:g}", {}).setdefault(name, {})[
                        f"{target:g}"] = row
        if args.rate_rounds:
            results["rate"] = rate_rounds(scratch, scratch / "train", net, options, args.rate_rounds,
                                          args.rate_outer_steps)
    meta = results["meta_init"]
    for lr, starts in results.get("fit_lrs", {}).items():
        print(f"at lr {lr}: " + "; ".join(f"{name} {rows[f'{t:g}']['median_steps']:.0f} steps to {t:g} dB"
                                         for name, rows in starts.items() for t in args.targets))
    for target in args.targets:
        key = f"{target:g}"
        random_steps = results["starts"]["random"][key]["median_steps"]
        for name in results["starts"]:
            row = results["starts"][name][key]
            row["median_steps_over_random"] = row["median_steps"] / random_steps

    held_out = f"{args.test_faces} held-out faces" if args.images == "faces" else \
        f"{4 * args.test_per_class} held-out drawn shapes"
    print(f"{held_out} of {args.size} px, SIREN {args.layers}x{args.hidden}, "
          f"ceiling {args.ceiling} steps; median of index.csv's steps (reached / networks)")
    print(f"{'start':<10}" + "".join(f"{f'to {t:g} dB':>22}" for t in args.targets))
    for name, rows in results["starts"].items():
        cells = [f"{rows[f'{t:g}']['median_steps']:>8.0f} ({rows[f'{t:g}']['median_steps_over_random']:.3f}x) "
                 f"{rows[f'{t:g}']['reached']:>2}/{rows[f'{t:g}']['networks']}" for t in args.targets]
        print(f"{name:<10}" + "".join(f"{c:>22}" for c in cells))
    print(f"meta-init: {meta['images']} images, {meta['outer_steps']} outer steps of {meta['inner_steps']} x "
          f"{meta['meta_batch']}, {meta['seconds']:.1f} s (inner fits {meta['inner_seconds']:.1f} s); held-out PSNR "
          f"after k {meta['heldout_psnr_after_k'][0]:.2f} -> {meta['heldout_psnr_after_k'][-1]:.2f} dB")
    rate = results.get("rate", {"rounds": []})
    for row in rate["rounds"]:
        print(f"timing round: meta-init inner steps {row['meta_inner_network_steps_per_s']:.0f} network-steps/s "
              f"(whole meta-init {row['meta_network_steps_per_s']:.0f}), fit-many pack {rate['pack']} "
              f"{row['fit_many_network_steps_per_s']:.0f}")
    if rate["rounds"]:
        print(f"time per step against fit-many's (median of {len(rate['rounds'])} rounds): inner steps "
              f"{rate['median_inner_over_fit_many']:.2f}x, whole meta-init {rate['median_meta_over_fit_many']:.2f}x")
    path = RESULTS / f"{args.name or f'learned-start-{args.device}-{args.size}'}.json"
    save_json(results, path)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
