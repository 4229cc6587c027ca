"""Is a gap between our training curve and PyTorch's an implementation difference, or float rounding
amplified by training? Three runs from the same initial parameters and schedule, PSNR every step:
ours (our matmul kernels), ours with cuBLAS matmuls (same algorithm, other summation order), PyTorch
(and with --kinds ... torch-tf32, PyTorch with TF32 matmuls: what TF32 costs a training, issue 14).

    PYTHONPATH=. python benchmarks/agreement.py [--size 256] [--steps 3000] [--budgets 300 1000 3000] \
        [--presets siren fourier] [--set omega0=30 lr=1e-4]

For each budget it prints the PSNR at that step and the mean PSNR over the last 10% of the steps up
to it (a high learning rate makes the loss spike now and then, and one step can land on a spike).
If ours and ours-with-cuBLAS differ as much as ours and PyTorch, the gap is rounding, not a bug.
Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import PHOTOS, ROOT, configure, environment, save_json, worker_pool  # noqa: E402
from benchmarks.tune_presets import parse_grid  # noqa: E402
from inr_cli.formats.images import load_image  # noqa: E402

KINDS = ("kernel", "cublas", "torch", "torch-tf32")


def curve_job(kind: str, preset: str, photo: str, size: int, steps: int, overrides: dict) -> dict:
    from benchmarks.fidelity import train_ours, train_torch

    config = configure(preset, size, **{**overrides, "steps": steps, "preview_every": 0})
    image = load_image(PHOTOS[photo], size=size)
    every_step = set(range(1, steps + 1))
    if kind in ("torch", "torch-tf32"):
        import torch

        from benchmarks.torch_reference import use_tf32

        use_tf32(torch, kind == "torch-tf32")  # set either way: a pool's worker runs job after job
        curve = train_torch(torch, config, image, every_step, "cuda", steps)
    else:
        from inr_cli.backends.cuda_backend import CudaBackend

        curve, _ = train_ours(CudaBackend(matmul=kind), config, image, every_step)
    return {"kind": kind, "preset": preset, "photo": photo, "psnr": [curve[s] for s in range(1, steps + 1)]}


def at_budgets(psnr: list[float], budgets: list[int]) -> dict:
    values = np.array(psnr)
    return {b: {"step": round(float(values[b - 1]), 2), "window": round(float(values[b - b // 10:b].mean()), 2)}
            for b in budgets}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="*", default=["siren", "fourier"])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--budgets", type=int, nargs="*", default=[300, 1000, 3000])
    parser.add_argument("--set", nargs="*", default=[], help="FIELD=VALUE over the presets' settings")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kinds", nargs="*", default=["kernel", "cublas", "torch"], choices=KINDS,
                        help="runs to compare with ours (kernel); torch-tf32: PyTorch with TF32 matmuls")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "agreement.json")
    args = parser.parse_args()
    overrides = {name: values[0] for name, values in parse_grid(args.set).items()}
    kinds = ["kernel"] + [k for k in args.kinds if k != "kernel"]
    others = kinds[1:]
    gap_key = {k: "kernel_vs_" + k.replace("-", "_") for k in others}  # kernel_vs_cublas, kernel_vs_torch_tf32, ...
    jobs = [(kind, preset, photo, args.size, args.steps, overrides) for preset in args.presets for photo in PHOTOS
            for kind in kinds]
    with worker_pool(args.workers) as pool:
        runs = list(pool.map(curve_job, *zip(*jobs)))
    report = {"environment": environment(), "size": args.size, "steps": args.steps, "overrides": overrides,
              "rows": []}
    print(f"{'photo/preset':16s} {'budget':>6s}  " + "  ".join(f"{k:>15s}" for k in kinds)
          + "  " + "  ".join(f"|kernel-{k}|" for k in others) + "   (PSNR at the step / mean over the last 10%)")
    for preset in args.presets:
        for photo in PHOTOS:
            by_kind = {r["kind"]: at_budgets(r["psnr"], args.budgets) for r in runs
                       if r["preset"] == preset and r["photo"] == photo}
            for b in args.budgets:
                cells = {k: by_kind[k][b] for k in kinds}
                gaps = {gap_key[k]: round(abs(cells["kernel"]["step"] - cells[k]["step"]), 2) for k in others}
                gaps.update({gap_key[k] + "_window": round(abs(cells["kernel"]["window"] - cells[k]["window"]), 2)
                             for k in others})
                row = {"photo": photo, "preset": preset, "budget": b, **cells, **gaps}
                report["rows"].append(row)
                print(f"{photo + '/' + preset:16s} {b:6d}  "
                      + "  ".join(f"{cells[k]['step']:6.2f} / {cells[k]['window']:6.2f}" for k in kinds) + "  "
                      + "  ".join(f"{gaps[gap_key[k]]:{len(k) + 9}.2f}" for k in others),
                      flush=True)
    report["curves"] = {f"{r['photo']}/{r['preset']}/{r['kind']}": r["psnr"][::10] for r in runs}  # every 10th step
    save_json(report, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
