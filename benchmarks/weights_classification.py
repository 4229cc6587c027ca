"""Can a model learn from a set's weights? Random, shared and learned starts side by side.

Makes its own labelled images (drawn shapes of four classes: circle, square, triangle, cross, each
at a random place, size and colour on a random background), fits one network per image with each
start at equal steps (`inr fit-many --init random|shared|start.safetensors`, the learned start from
`inr meta-init` on other images of the same kind), then trains a linear classifier (multinomial
logistic regression in NumPy, on weights standardised with the training split's statistics) and
reports its accuracy on the held-out split, with the mean PSNR of each set.

    PYTHONPATH=. python benchmarks/weights_classification.py --per-class 40 --size 24 --steps 200
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

import inr_cli  # noqa: E402  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import environment  # noqa: E402
from inr_cli.sets.meta import MetaOptions  # noqa: E402

CLASSES = ("circle", "square", "triangle", "cross")
RESULTS = Path(__file__).resolve().parent / "results"


def draw_shapes(folder: Path, per_class: int, size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for label in CLASSES:
        (folder / label).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            background = tuple(int(v) for v in rng.integers(0, 120, 3))
            colour = tuple(int(v) for v in rng.integers(135, 256, 3))
            image = Image.new("RGB", (size, size), background)
            draw = ImageDraw.Draw(image)
            r = rng.uniform(0.22, 0.38) * size
            cx, cy = rng.uniform(r, size - r, 2)
            if label == "circle":
                draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
            elif label == "square":
                draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=colour)
            elif label == "triangle":
                draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
            else:
                w = r / 3
                draw.rectangle([cx - r, cy - w, cx + r, cy + w], fill=colour)
                draw.rectangle([cx - w, cy - r, cx + w, cy + r], fill=colour)
            image.save(folder / label / f"{i:03d}.png")


def logistic_regression(x: np.ndarray, y: np.ndarray, classes: int, epochs: int = 300, lr: float = 0.1,
                        l2: float = 1e-3) -> np.ndarray:
    """Softmax regression by full-batch gradient descent: [P + 1, classes] weights (the bias last)."""
    x = np.hstack([x, np.ones((len(x), 1))]).astype(np.float64)
    w = np.zeros((x.shape[1], classes))
    onehot = np.eye(classes)[y]
    for _ in range(epochs):
        logits = x @ w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        w -= lr * (x.T @ (p - onehot) / len(x) + l2 * w)
    return w


def accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    x = np.hstack([x, np.ones((len(x), 1))])
    return float(np.mean(np.argmax(x @ w, axis=1) == y))


def evaluate(set_folder: Path, seed: int) -> dict:
    nets = inr_cli.load(set_folder)
    train, test = nets.split(test=0.3, seed=seed)
    mean, std = train.statistics()
    w = logistic_regression(train.standardized(mean, std).weights, train.labels, len(nets.label_names))
    return {"train_accuracy": accuracy(w, train.standardized(mean, std).weights, train.labels),
            "test_accuracy": accuracy(w, test.standardized(mean, std).weights, test.labels),
            "mean_psnr": float(np.mean([row["psnr"] for row in nets.index])), "networks": len(nets),
            "test_networks": len(test)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--size", type=int, default=24)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--meta-images", type=int, default=25, help="per class, for meta-init (other images)")
    parser.add_argument("--outer-steps", type=int, default=100)
    parser.add_argument("--inner-steps", type=int, default=MetaOptions.inner_steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name", default=None, help="result file name (default: weights-classification-DEVICE-SIZE)")
    args = parser.parse_args()
    net = {"hidden": args.hidden, "layers": args.layers, "lr": args.lr, "omega0": 30.0, "device": args.device}
    results = {"environment": environment(), "settings": vars(args), "starts": {}}
    with tempfile.TemporaryDirectory(prefix="inr-weights-") as scratch:
        scratch = Path(scratch)
        draw_shapes(scratch / "images", args.per_class, args.size, args.seed)
        draw_shapes(scratch / "meta", args.meta_images, args.size, args.seed + 1)
        start = scratch / "start.safetensors"
        began = time.perf_counter()
        from inr_cli.sets.meta_command import meta_init

        learned = meta_init(str(scratch / "meta"), start, net, None, None,
                            dict(outer_steps=args.outer_steps, inner_steps=args.inner_steps, meta_batch=8,
                                 outer_lr=1.0, holdout=0.1, eval_every=max(1, args.outer_steps // 5)), quiet=True)
        results["meta_init"] = {"seconds": time.perf_counter() - began, "images": learned["images"],
                                "outer_steps": args.outer_steps, "inner_steps": args.inner_steps,
                                "heldout_psnr": [row["psnr"] for row in learned["log"]]}
        for init in ("random", "shared", str(start)):
            name = "learned" if init == str(start) else init
            out = scratch / f"set-{name}"
            began = time.perf_counter()
            inr_cli.fit_many(scratch / "images", out, init=init, steps=args.steps, quiet=True, **net)
            results["starts"][name] = {**evaluate(out, args.seed), "fit_seconds": time.perf_counter() - began}
    print(f"{len(CLASSES)} classes x {args.per_class} images of {args.size} px, SIREN {args.layers}x{args.hidden}, "
          f"{args.steps} steps; logistic regression on standardised weights, 30% held out (chance 25%)")
    print(f"{'start':<10}{'test acc':>10}{'train acc':>11}{'mean PSNR':>11}{'fit s':>8}")
    for name, row in results["starts"].items():
        print(f"{name:<10}{row['test_accuracy']:>10.1%}{row['train_accuracy']:>11.1%}{row['mean_psnr']:>10.2f} "
              f"{row['fit_seconds']:>7.1f}")
    meta = results["meta_init"]
    print(f"meta-init: {meta['images']} images, {meta['outer_steps']} outer steps of {meta['inner_steps']}, "
          f"{meta['seconds']:.1f} s; held-out PSNR after k steps {meta['heldout_psnr'][0]:.2f} -> "
          f"{meta['heldout_psnr'][-1]:.2f} dB")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name or f'weights-classification-{args.device}-{args.size}'}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
