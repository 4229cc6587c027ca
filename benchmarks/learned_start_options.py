"""meta-init's options measured on the weights suite's held-out images: does a learned start reach,
in a third of the steps, the mean PSNR that the shared start reaches in all of them?

For each data set of benchmarks/weights_suite.py (letters split by font, photo tiles, digits; SIREN
2x32, 32 px, the sets preset) a start is learned by `inr meta-init` on the training split only, with
each variant's options (the outer rate, the inner steps, the outputs at each image's mean colour in
the inner fits), then the held-out images are fitted from it by `inr fit-many` for each number of
steps (a third of the budget, and the whole of it), their output biases kept or set to each image's
mean colour (network.start_output_at_mean). The shared start (fit-many's default) is fitted beside
them, and so is its draw with the outputs at each image's mean, to tell what the mean colour is worth
alone. Starts are kept in --keep by their options, so that variants sharing a start learn it once.
Accuracy from the weights is weights_suite.py's (this script measures PSNR only).

    PYTHONPATH=. python benchmarks/learned_start_options.py --data /tmp/suite --variants base after during \\
        --name learned-start-options-cpu-32
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inr_cli  # noqa: E402, F401  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import environment, save_json  # noqa: E402
from benchmarks.weights_suite import (  # noqa: E402
    DATASETS,
    GROUPED,
    RESULTS,
    fidelity,
    fit,
    index_rows,
    learn_start,
    made_or_kept,
    set_mean_start,
    split_names,
)

# meta-init's options (beyond the sets preset) and how the held-out images start from the start:
# outputs kept (the start's own) or at each image's mean colour. "shared": fit-many's default start,
# no learning; "shared-mean": its draw with each output at its image's mean.
BASE = {"outer_lr": 1.0, "inner_steps": 32, "outer_steps": 500, "at_mean": False, "lr": 0.0}  # lr 0: the preset's
VARIANTS = {
    "shared": {"meta": None, "fit_at_mean": False},
    "shared-mean": {"meta": None, "fit_at_mean": True},
    "base": {"meta": {}, "fit_at_mean": False},  # meta-init's defaults, outputs kept
    "after": {"meta": {}, "fit_at_mean": True},  # the same start, each held-out image from its mean
    "during": {"meta": {"at_mean": True}, "fit_at_mean": False},  # inner fits from each image's mean only
    "both": {"meta": {"at_mean": True}, "fit_at_mean": True},
    "outer0.3": {"meta": {"outer_lr": 0.3}, "fit_at_mean": False},
    "outer0.1": {"meta": {"outer_lr": 0.1}, "fit_at_mean": False},
    "both-outer0.3": {"meta": {"at_mean": True, "outer_lr": 0.3}, "fit_at_mean": True},
    "both-outer0.1": {"meta": {"at_mean": True, "outer_lr": 0.1}, "fit_at_mean": True},
    "k8": {"meta": {"inner_steps": 8}, "fit_at_mean": False},
    "k100": {"meta": {"inner_steps": 100}, "fit_at_mean": False},
    "both-k8": {"meta": {"at_mean": True, "inner_steps": 8}, "fit_at_mean": True},
    "both-k16": {"meta": {"at_mean": True, "inner_steps": 16}, "fit_at_mean": True},
    "both-k64": {"meta": {"at_mean": True, "inner_steps": 64}, "fit_at_mean": True},
    "both-k100": {"meta": {"at_mean": True, "inner_steps": 100}, "fit_at_mean": True},
    # the rate of the fits (and of meta-init's inner fits), where the others keep the preset's
    "shared-lr3e-3": {"meta": None, "fit_at_mean": False, "fit_lr": 3e-3},
    "both-fit3e-3": {"meta": {"at_mean": True}, "fit_at_mean": True, "fit_lr": 3e-3},
    "both-lr3e-3": {"meta": {"at_mean": True, "lr": 3e-3}, "fit_at_mean": True, "fit_lr": 3e-3},
}


def learned(images: Path, train: list[str], keep: Path, dataset: str, net: dict, recipe: dict,
            meta: dict) -> tuple[str, dict]:
    """The start learned with these options (BASE's, overridden by `meta`), from --keep if learned before."""
    options = {**BASE, **meta}
    key = "-".join(f"{k}{options[k]}" for k in sorted(options) if options[k] or k != "lr")
    folder = keep / dataset / key
    record = folder / "meta.json"
    if record.exists():
        return str(folder / "start.safetensors"), json.loads(record.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    flags = {**recipe, "start_output_at_mean": options["at_mean"], **({"lr": options["lr"]} if options["lr"] else {})}
    start, facts = learn_start(images, train, folder, net, flags,
                               dict(outer_steps=options["outer_steps"], inner_steps=options["inner_steps"],
                                    meta_batch=8, outer_lr=options["outer_lr"], holdout=0.1, eval_every=25))
    facts["at_mean"] = options["at_mean"]
    record.write_text(json.dumps(facts))
    return str(start), facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["shared", "base"])
    parser.add_argument("--fit-steps", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=40, help="as weights_suite.py's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, required=True, help="the suite's data sets (made here if absent)")
    parser.add_argument("--keep", type=Path, default=None, help="the learned starts (default: beside --data)")
    parser.add_argument("--name", default="learned-start-options-cpu-32")
    args = parser.parse_args()
    keep = args.keep or args.data.parent / f"{args.data.name}-starts"
    net = {"hidden": args.hidden, "layers": args.layers, "size": args.size, "device": "cpu", "seed": args.seed}
    path = RESULTS / f"{args.name}.json"
    results = json.loads(path.read_text()) if path.exists() else {"rows": []}
    results.update({"environment": environment(), "settings": {k: str(v) for k, v in vars(args).items()}})
    for dataset in args.datasets:
        images = args.data / dataset
        groups, gray = made_or_kept(dataset, args.data, args.size, args.limit)
        train, test = split_names(sorted(groups), groups, dataset in GROUPED, args.seed)
        recipe = {"gray": True} if gray else {}
        with tempfile.TemporaryDirectory(prefix=f"inr-options-{dataset}-") as scratch:
            listing = Path(scratch) / "test.txt"
            listing.write_text("\n".join(str(images / n) for n in test) + "\n")
            for name in args.variants:
                variant = VARIANTS[name]
                row = {"dataset": dataset, "variant": name, "train": len(train), "test": len(test),
                       "fit_at_mean": variant["fit_at_mean"], "fit_lr": variant.get("fit_lr")}
                fitting = {**recipe, "start_output_at_mean": variant["fit_at_mean"],
                           **({"lr": variant["fit_lr"]} if "fit_lr" in variant else {})}
                if variant["meta"] is None:
                    init = "shared" if not variant["fit_at_mean"] else \
                        str(set_mean_start(images, train, Path(scratch) / "shared.safetensors", net, recipe))
                else:
                    began = time.perf_counter()
                    init, row["meta_init"] = learned(images, train, keep, dataset, net, recipe, variant["meta"])
                    row["meta_init_wall_s"] = time.perf_counter() - began
                row["held_out_at"] = {}
                for steps in args.fit_steps:
                    out = Path(scratch) / f"{name}-{steps}"
                    fit(listing, out, net, fitting, init, steps)
                    row["held_out_at"][str(steps)] = fidelity(index_rows(out))
                print(f"{dataset} {name}: " + ", ".join(f"{k} steps {v['mean_psnr']:.2f} dB"
                                                      for k, v in row["held_out_at"].items()), flush=True)
                results["rows"] = [r for r in results["rows"] if (r["dataset"], r["variant"]) != (dataset, name)]
                results["rows"].append(row)
                save_json(results, path)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
