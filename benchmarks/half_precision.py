"""What rounding the layer products' operands to a narrower float would cost a fit: the question before a
half-precision tensor-core path for the fused network (tiny-cuda-nn multiplies in FP16). Measured on the
CPU with the NumPy reference, whose products under --precision tf32 round both operands of every
product over more than the coordinates (numpy_ops.matmul) and sum in FP32, as the tensor cores do: the
rounding is swapped for each format's, everything else (activations, loss, Adam) stays FP32.

  fp32   no rounding (the reference)
  tf32   the engine's --precision tf32: 10 mantissa bits, FP32's range
  fp16   IEEE half as converted: 10 mantissa bits, values past 65504 infinite, below 6.1e-5 subnormal
         (fewer bits), below 6e-8 zero; no loss scaling (with it, fp16 is tf32's rounding)
  bf16   bfloat16: FP32's range, 7 mantissa bits

    PYTHONPATH=. python benchmarks/half_precision.py [--steps 500] [--out benchmarks/results/half-precision-cpu.json]

The settings: the fused pack's (SIREN 3x64, omega0 30, lr 1e-4) on 32x32 crops, and fit-many's pack's
(the sets preset at 3x64) on 64x64 crops, full batches: the output's dL/dz is 2 (a - t) / (rows x
channels), 1.6e-4 times the error at 64x64 RGB, in FP16's subnormals for every error under 0.38. Each
prints the networks' mean PSNR at the last step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import configure, environment, make_trainer  # noqa: E402
from inr_cli.backends import numpy_ops  # noqa: E402
from inr_cli.backends.numpy_backend import NumpyBackend  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402


def round_fp16(x) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def round_bf16(x) -> np.ndarray:
    """To nearest, ties to even, on the top 16 bits (NaN and infinity kept)."""
    bits = np.array(x, dtype=np.float32, order="C").view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    bias = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    bits = np.where(finite, bits + bias, bits) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


ROUNDINGS = {"fp32": None, "tf32": numpy_ops.round_to_tf32, "fp16": round_fp16, "bf16": round_bf16}


def fit(config, images, rounding, steps: int) -> float:
    """PSNR (dB, the mean of the networks') after `steps` steps with the products' operands rounded so."""
    original = numpy_ops.round_to_tf32
    numpy_ops.round_to_tf32 = rounding or original
    try:
        trainer = make_trainer(NumpyBackend("fp32" if rounding is None else "tf32"), config, images,
                               seeds=range(len(images)))
        for _ in range(steps):
            trainer.step()
        return float(np.mean([psnr_from_mse(loss) for loss in trainer.read_loss()]))
    finally:
        numpy_ops.round_to_tf32 = original


def main() -> int:
    from benchmarks.fit_many_speed import crops

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    settings = {
        "SIREN 3x64, 4 crops of 32x32": (configure("siren", 32, hidden=64, layers=3, omega0=30.0, lr=1e-4,
                                                   steps=args.steps), crops(4, 32)),
        "sets 3x64, 2 crops of 64x64": (configure("sets", 64, hidden=64, layers=3, lr=1e-3, steps=args.steps),
                                        crops(2, 64)),
    }
    results = []
    for name, (config, images) in settings.items():
        row = {"setting": name, "steps": args.steps}
        for mode, rounding in ROUNDINGS.items():
            row[mode] = round(fit(config, images, rounding, args.steps), 3)
            print(f"{name}: {mode} {row[mode]} dB", flush=True)
        results.append(row)
    print("| setting | steps | " + " | ".join(f"{m} (dB)" for m in ROUNDINGS) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in ROUNDINGS) + " |")
    for r in results:
        print(f"| {r['setting']} | {r['steps']} | " + " | ".join(f"{r[m]:.2f}" for m in ROUNDINGS) + " |")
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
