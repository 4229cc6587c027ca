"""The GPU engine's goals (TF32, the fused network, our matmul against cuBLAS, TF32's fits), measured
one figure at a time: each is appended to OUT/goals.jsonl, one JSON line, the moment it is measured,
so that a run cut short keeps what it did. `--report OUT` turns what OUT holds (goals.jsonl and the
other benchmarks' result files that dev/gpu_checks.sh puts there) into a BENCHMARKS.md section,
each figure beside its goal.

    PYTHONPATH=. python benchmarks/gpu_goals.py tf32-step fused-sigmoid fused-pack matmul --out DIR
    PYTHONPATH=. python benchmarks/gpu_goals.py kernels hashgrid-step --out DIR
    PYTHONPATH=. python benchmarks/gpu_goals.py --report DIR --command "bash dev/gpu_checks.sh first"
    PYTHONPATH=. python benchmarks/gpu_goals.py --dry-run tf32-step ... --out DIR

Measurements (ms are per training step, full batch, from the same initial parameters, Adam and
schedule as ours for PyTorch; benchmarks/torch_reference.py):
  tf32-step      SIREN 3x256 on 512x512 RGB: ours in FP32 and TF32, PyTorch eager in FP32 and TF32
                 and torch.compile in TF32. Goal: ours TF32 at most 0.5x PyTorch TF32 eager, and
                 faster than torch.compile TF32.
  fused-sigmoid  the sigmoid 2x64 network on x, y at 200x200 grey (the original system): ours fused
                 (the two kernels a step, the engine's, and one kernel a step) and layer by layer,
                 PyTorch eager. Goal: fused at least 20x PyTorch eager, and faster than layer by layer.
  fused-pack     2048 SIREN 3x64 on 32x32 crops, a step of the whole pack: ours fused (FP32, TF32; two
                 kernels and one) and layer by layer, PyTorch batched (stacked weights, batched matmuls).
                 Goal: fused at least 3x PyTorch.
  matmul         our FP32 matmul against cuBLAS on each product of the tf32-step setting's step, and
                 our TF32 one. Goal: FP32 at least 0.9x cuBLAS on each.
  kernels        every kernel of each setting of BENCHMARKS.md's H200 baseline (benchmarks/kernel_costs.py:
                 the sigmoid 2x64, the pack of 2048 SIREN 3x64, SIREN 3x256 in FP32 and TF32, fit-many's
                 pack at 64 px, the hash grid; the fused ones in both designs) timed launch by launch (CUDA
                 events, eager steps), beside the cost model's floor and prediction for the same
                 launches: which kernels are furthest from it.
  hashgrid-step  the hash grid's step (2^18 random pixels of a 768x512 image, 16 levels, ReLU 2x64):
                 ours fused in each variant of the hash grid's kernels, fused TF32 and layer by layer,
                 the PyTorch hash grid. Goal: at most 1.0 ms.
  tf32-fit       the siren preset at 256 px on both sample photos, 1000 steps, at the preset's
                 settings and at stable ones (omega0 30, lr 1e-4): the fit's PSNR with our kernels
                 in FP32, with cuBLAS (FP32 rounded another way) and in TF32. Goal: TF32 within the
                 FP32 spread (BENCHMARKS.md, "TF32 before the kernel").

--dry-run runs the same measurements on the CPU at toy sizes: ours is the kernels compiled for the
CPU (tests/emulation: the fused and TF32 paths as they run on a GPU), PyTorch runs on the CPU. Its
figures mean nothing; the code paths, the files and the report are the real ones.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.bench_step import SETTINGS, bench_ours, bench_torch, setting_config, time_matmul  # noqa: E402
from benchmarks.common import configure, environment, make_trainer, photo, timed  # noqa: E402
from inr_cli.backends.launch import FUSED_VARIANTS  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402
from inr_cli.core.network import NetworkSpec  # noqa: E402

RESULTS = "goals.jsonl"


class Run:
    """Where the figures go and what they run on: the GPU, or (dry) the CPU at toy sizes."""

    def __init__(self, out: Path, dry: bool):
        self.out, self.dry = out, dry
        self.steps = 2 if dry else 100
        self.torch_device = "cpu" if dry else "cuda"
        out.mkdir(parents=True, exist_ok=True)

    def ours(self, precision="fp32", fused=True, matmul="kernel", fused_variant=FUSED_VARIANTS[0]):
        """Our kernels; fused_variant: the fused network's design (launch.FUSED_VARIANTS; the first is the
        engine's)."""
        if self.dry:
            from tests.emulation.emulated_backend import EmulatedBackend

            backend = EmulatedBackend(precision=precision, fused=fused)
        else:
            from inr_cli.backends.cuda_backend import CudaBackend

            backend = CudaBackend(matmul=matmul, precision=precision, fused=fused)
        backend.fused_variant = fused_variant
        return backend

    def cublas(self):
        """Our kernels with cuBLAS's products (dry: the NumPy backend, FP32 summed in another order too)."""
        if self.dry:
            from inr_cli.backends.numpy_backend import NumpyBackend

            return NumpyBackend()
        return self.ours(matmul="cublas")

    def setting(self, name: str) -> dict:
        """A bench_step setting; dry: 16 px and at most 32 neurons wide."""
        setting = dict(SETTINGS[name])
        if self.dry:
            setting["size"] = 16
            flags = dict(setting["flags"])
            flags["hidden"] = min(flags.get("hidden", 32), 32)
            setting["flags"] = flags
        return setting

    def record(self, measurement: str, **figures) -> dict:
        """Append one figure to the results, at once and durably: the next one may never come."""
        row = {"measurement": measurement, "dry_run": self.dry, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                     time.gmtime()), **figures}
        with open(self.out / RESULTS, "a") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        print(f"{measurement}: {figures}", flush=True)
        return row

    def torch(self):
        import torch

        return torch


def step_times(run: Run, measurement: str, name: str, ours: dict, peers: list[str]) -> None:
    """ms per step of bench_step's setting `name` for each of our backends and PyTorch peers."""
    setting = run.setting(name)
    image = photo("coffee", setting["size"], setting["size"], gray=setting["gray"])
    for who, backend in ours.items():
        seconds, trainer = bench_ours(backend, setting, image, run.steps)
        run.record(measurement, who=who, ms=round(seconds * 1e3, 4), setting=name, **training_pass(trainer))
    torch = run.torch()
    for peer in peers:
        try:
            seconds = bench_torch(torch, setting, image, run.steps, peer, device=run.torch_device)
            run.record(measurement, who=f"torch-{peer}", ms=round(seconds * 1e3, 4), setting=name)
        except Exception as error:  # a peer's failure (the compiler's, say) must not cost the other figures
            run.record(measurement, who=f"torch-{peer}", error=f"{type(error).__name__}: {error}"[:300], setting=name)


def tf32_step(run: Run) -> None:
    # 3x256 runs layer by layer; said outright so that the dry run's narrower network does too.
    step_times(run, "tf32-step", "siren-512", {"ours-fp32": run.ours("fp32", fused=False),
                                               "ours-tf32": run.ours("tf32", fused=False)},
               ["eager", "eager-tf32", "compile-tf32"])


def training_pass(trainer) -> dict:
    """What a trainer's step runs: its training pass, and the fused network's design where fused."""
    plan = getattr(trainer.training_pass, "plan", None)
    return {"training_pass": type(trainer.training_pass).__name__, **({"fused": plan.variant} if plan else {})}


def fused_sigmoid(run: Run) -> None:
    step_times(run, "fused-sigmoid", "sigmoid-200",
               {"ours-fused": run.ours(), "ours-fused-one-kernel": run.ours(fused_variant="one-kernel"),
                "ours-layers": run.ours(fused=False)}, ["eager"])


def fused_pack(run: Run) -> None:
    from benchmarks.fit_many_speed import crops
    from benchmarks.torch_reference import BatchedTorchTrainer, optimizer_settings
    from inr_cli.core.coords import pixel_grid
    from inr_cli.core.network import init_networks

    networks, size = (4, 8) if run.dry else (2048, 32)
    config = configure("siren", size, hidden=64, layers=3, omega0=30.0, lr=1e-4, lr_min=1e-5, steps=100000)
    images = crops(networks, size)
    setting = {"networks": networks, "size": size, "network": "siren 3x64"}
    for who, backend in (("ours-fused", run.ours()), ("ours-fused-tf32", run.ours("tf32")),
                         ("ours-fused-one-kernel", run.ours(fused_variant="one-kernel")),
                         ("ours-fused-tf32-one-kernel", run.ours("tf32", fused_variant="one-kernel")),
                         ("ours-layers", run.ours(fused=False))):
        trainer = make_trainer(backend, config, images, seeds=range(networks))
        for _ in range(3):
            trainer.step()
        seconds = timed(trainer.step, run.steps, backend.synchronize)
        run.record("fused-pack", who=who, ms=round(seconds * 1e3, 4), **setting, **training_pass(trainer))
        del trainer
    torch = run.torch()
    spec = NetworkSpec.from_config(config, 3)
    opt = config.optimizer
    trainer = BatchedTorchTrainer(torch, spec, init_networks(spec, range(networks)), pixel_grid(size, size),
                                  np.stack([im.targets() for im in images]), opt.lr, opt.lr_min, config.training.steps,
                                  run.torch_device, **optimizer_settings(opt))
    for _ in range(3):
        trainer.step()
    sync = torch.cuda.synchronize if run.torch_device == "cuda" else (lambda: None)
    run.record("fused-pack", who="torch-batched", ms=round(timed(trainer.step, run.steps, sync) * 1e3, 4), **setting)


def matmul(run: Run) -> None:
    """Each product of the tf32-step setting's training step, ours against cuBLAS (dry: against
    NumPy, the figures meaningless)."""
    setting = run.setting("siren-512")
    spec = NetworkSpec.from_config(setting_config(setting), 3)
    rows = setting["size"] ** 2
    shapes = set()
    for index, (out_f, in_f) in enumerate(spec.layer_shapes()):
        shapes |= {(rows, out_f, in_f, "nt"), (out_f, in_f, rows, "tn")}
        if index > 0:
            shapes.add((rows, in_f, out_f, "nn"))
    contestants = {"ours_fp32": run.ours(), "ours_tf32": run.ours("tf32"), "cublas": run.cublas()}
    for m, n, k, op in sorted(shapes):
        times = {name: round(product_ms(run, backend, m, n, k, op), 4) for name, backend in contestants.items()}
        peer = times["cublas"]
        run.record("matmul", m=m, n=n, k=k, op=op, **{f"{name}_ms": ms for name, ms in times.items()},
                   fp32_vs_cublas=round(peer / times["ours_fp32"], 3),
                   tf32_vs_cublas=round(peer / times["ours_tf32"], 3))


def product_ms(run: Run, backend, m, n, k, op, repeats=20) -> float:
    if not run.dry:
        return time_matmul(backend, m, n, k, op, repeats)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, k, m) if op[0] == "t" else (1, m, k)).astype(np.float32)
    b = rng.standard_normal((1, n, k) if op[1] == "t" else (1, k, n)).astype(np.float32)
    out = np.empty((1, m, n), np.float32)
    return 1e3 * timed(lambda: backend.matmul(a, b, out, op[0] == "t", op[1] == "t"), 2, lambda: None)


def tf32_fit(run: Run) -> None:
    from benchmarks.common import PHOTOS
    from inr_cli.formats.images import load_image

    size, steps = (16, 20) if run.dry else (256, 1000)
    # The preset's 3x256 runs layer by layer; said outright so that the dry run's 3x32 does too.
    variants = {"fp32": run.ours(fused=False), "fp32-cublas": run.cublas(), "tf32": run.ours("tf32", fused=False)}
    narrower = {"hidden": 32} if run.dry else {}
    for settings_name, settings in (("preset", {}), ("stable", {"omega0": 30.0, "lr": 1e-4})):
        for photo_name, path in PHOTOS.items():
            image = load_image(path, size=size)
            config = configure("siren", size, steps=steps, preview_every=0, **settings, **narrower)
            for who, backend in variants.items():
                trainer = make_trainer(backend, config, [image])
                tail = []
                for step in range(1, steps + 1):
                    trainer.step()
                    if step > steps - max(1, steps // 10) and step % 10 == 0:  # the last 10%: less at one spike's mercy
                        tail.append(psnr_from_mse(float(trainer.read_loss()[0])))
                run.record("tf32-fit", who=who, settings=settings_name, photo=photo_name, size=size, steps=steps,
                           psnr=round(float(statistics.mean(tail)), 3))


class LaunchTimer:
    """Times each launch of a backend: CUDA events around it on the GPU; in a dry run the clock, the
    emulated launch being synchronous. `laps` holds (name, grid, block, args, start, end)."""

    def __init__(self, backend, dry: bool):
        self.backend, self.dry, self.laps = backend, dry, []
        self.launch = backend.launch
        backend.launch = self

    def __call__(self, name, grid, block, args, shared=0):
        if self.dry:
            start = time.perf_counter()
            self.launch(name, grid, block, args, shared)
            self.laps.append((name, grid, block, args, start, time.perf_counter()))
            return
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(self.backend.stream)
        self.launch(name, grid, block, args, shared)
        end.record(self.backend.stream)
        self.laps.append((name, grid, block, args, start, end))

    def ms(self, lap) -> float:
        if self.dry:
            return (lap[5] - lap[4]) * 1e3
        import cupy

        return float(cupy.cuda.get_elapsed_time(lap[4], lap[5]))


def dry_setting(setting):
    """A kernel_costs setting at toy size for the dry run: 16 px, 2 networks, at most 32 wide."""
    from dataclasses import replace

    flags = dict(setting.flags)
    if "hidden" in flags:
        flags["hidden"] = min(flags["hidden"], 32)
    return replace(setting, size=min(setting.size, 16), networks=min(setting.networks, 2), flags=flags)


def kernels(run: Run) -> None:
    """Each kernel of each baseline setting, its ms per step (eager launches, CUDA events) beside the cost
    model's floor for the very launches timed."""
    from benchmarks.kernel_costs import DEVICES, SETTINGS, blank_image, cost_of

    device = DEVICES["H200"]
    steps = 2 if run.dry else 20
    chosen = os.environ.get("INR_DRY_SETTINGS", "") if run.dry else ""
    pattern = re.compile(os.environ.get("INR_KERNEL_SETTINGS", ""))  # a part that times some settings only
    for setting in [s for s in SETTINGS if chosen in s.name and pattern.search(s.name)]:
        setting = dry_setting(setting) if run.dry else setting
        config = configure(setting.preset, setting.size, steps=100000, cuda_graph=False, **setting.flags)
        backend = run.ours(setting.precision, setting.fused, fused_variant=setting.fused_variant)
        backend.hashgrid_variant = setting.hashgrid
        trainer = make_trainer(backend, config, [blank_image(setting.size, setting.channels)] * setting.networks,
                               seeds=range(setting.networks))
        for _ in range(3):
            trainer.step()
        timer = LaunchTimer(backend, run.dry)
        for _ in range(steps):
            trainer.step()
        backend.synchronize()
        by_kernel: dict = {}
        for lap in timer.laps:
            name, grid, block, args = lap[:4]
            ms, floor, predicted = by_kernel.get(name, (0.0, 0.0, 0.0))
            cost = cost_of(name, grid, block, args)
            by_kernel[name] = (ms + timer.ms(lap) / steps, floor + cost.floor(device)[0] * 1e3 / steps,
                               predicted + cost.predicted(device) * 1e3 / steps)
        for name, (ms, floor, predicted) in sorted(by_kernel.items(), key=lambda item: -item[1][0]):
            run.record("kernels", setting=setting.name, kernel=name, kernel_ms=float(f"{ms:.4g}"),
                       floor_ms=float(f"{floor:.4g}"), times_floor=float(f"{ms / floor:.3g}"),
                       predicted_ms=float(f"{predicted:.4g}"))
        del trainer, backend


def hashgrid_step(run: Run) -> None:
    """The hash grid preset's step on a 768x512 image (2^18 random pixels a step): ours fused in each
    variant of the hash grid's kernels (launch.HASHGRID_VARIANTS: "ours-fused" is the engine's, "rows";
    "any" the baseline's), the fused network in one kernel a step, fused TF32 and layer by layer, and the
    PyTorch hash grid (benchmarks/torch_hashgrid.py)."""
    from benchmarks.torch_hashgrid import TorchHashGridTrainer
    from inr_cli.backends.launch import HASHGRID_VARIANTS

    width, height = (16, 12) if run.dry else (768, 512)
    image = photo("coffee", width, height)
    config = configure("hashgrid", max(width, height), steps=100000)
    setting = {"size": f"{width}x{height}", "batch": config.training.batch_size}
    contestants = [("ours-fused", run.ours(), "rows"),
                   ("ours-fused-one-kernel", run.ours(fused_variant="one-kernel"), "rows"),
                   *((f"ours-fused-{v}", run.ours(), v) for v in HASHGRID_VARIANTS if v != "rows"),
                   ("ours-fused-tf32", run.ours("tf32"), "rows"), ("ours-layers", run.ours(fused=False), "rows")]
    for who, backend, variant in contestants:
        backend.hashgrid_variant = variant
        trainer = make_trainer(backend, config, [image])
        for _ in range(3):
            trainer.step()
        seconds = timed(trainer.step, run.steps, backend.synchronize)
        run.record("hashgrid-step", who=who, ms=round(seconds * 1e3, 4), **setting, hashgrid=variant,
                   **training_pass(trainer))
        del trainer
    from inr_cli.core.coords import pixel_grid
    from inr_cli.core.network import init_networks

    torch = run.torch()
    spec = NetworkSpec.from_config(config, 3)
    trainer = TorchHashGridTrainer(torch, spec, init_networks(spec, [config.training.seed])[0],
                                   pixel_grid(width, height), image.targets(), config, config.training.seed,
                                   run.torch_device)
    for _ in range(3):
        trainer.step()
    sync = torch.cuda.synchronize if run.torch_device == "cuda" else (lambda: None)
    run.record("hashgrid-step", who="torch-hashgrid", ms=round(timed(trainer.step, run.steps, sync) * 1e3, 4),
               **setting)


MEASUREMENTS = {"tf32-step": tf32_step, "fused-sigmoid": fused_sigmoid, "fused-pack": fused_pack, "matmul": matmul,
                "tf32-fit": tf32_fit, "kernels": kernels, "hashgrid-step": hashgrid_step}


# ---- the report ----------------------------------------------------------------------------------

def read_results(out: Path) -> list[dict]:
    path = out / RESULTS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by the call's end
            continue
    return rows


def times_of(rows: list[dict], measurement: str) -> dict:
    """{who: ms} of a step measurement, the last figure of each."""
    return {r["who"]: r["ms"] for r in rows if r["measurement"] == measurement and "ms" in r}


def ratio(times: dict, numerator: str, denominator: str) -> float | None:
    return times[numerator] / times[denominator] if numerator in times and denominator in times else None


def tf32_fit_gap(rows: list[dict]) -> float | None:
    """The largest distance, over photos and settings, by which TF32's fit falls outside the spread of
    FP32's (ours against cuBLAS, or 0.2 dB where they agree closer): <= 0 where TF32 stays within."""
    fits = [r for r in rows if r["measurement"] == "tf32-fit" and "psnr" in r]
    gaps = []
    for key in {(r["settings"], r["photo"]) for r in fits}:
        psnr = {r["who"]: r["psnr"] for r in fits if (r["settings"], r["photo"]) == key}
        if {"fp32", "fp32-cublas", "tf32"} <= psnr.keys():
            spread = max(abs(psnr["fp32"] - psnr["fp32-cublas"]), 0.2)
            gaps.append(abs(psnr["tf32"] - psnr["fp32"]) - spread)
    return max(gaps) if gaps else None


def goal_rows(rows: list[dict]) -> list[tuple[str, str, str, str]]:
    """(goal, measured, target, met) for each goal, from what was measured."""
    step, sigmoid, pack, hashgrid = (times_of(rows, name)
                                     for name in ("tf32-step", "fused-sigmoid", "fused-pack", "hashgrid-step"))
    products = [r["fp32_vs_cublas"] for r in rows if r["measurement"] == "matmul" and "fp32_vs_cublas" in r]
    goals = [  # (goal, value, target, met)
        ("TF32 step, SIREN 3x256 512x512: ours / PyTorch TF32 eager", ratio(step, "ours-tf32", "torch-eager-tf32"),
         "<= 0.5", lambda v: v <= 0.5),
        ("TF32 step: ours / torch.compile TF32", ratio(step, "ours-tf32", "torch-compile-tf32"), "< 1",
         lambda v: v < 1),
        ("Fused sigmoid 2x64 200x200: PyTorch eager / ours", ratio(sigmoid, "torch-eager", "ours-fused"), ">= 20",
         lambda v: v >= 20),
        ("Fused pack, 2048 SIREN 3x64 32x32: PyTorch bmm / ours", ratio(pack, "torch-batched", "ours-fused"), ">= 3",
         lambda v: v >= 3),
        ("FP32 matmul / cuBLAS, the worst SIREN 512 product", min(products, default=None), ">= 0.9",
         lambda v: v >= 0.9),
        ("TF32 fit: dB outside FP32's spread (ours vs cuBLAS, at least 0.2 dB)", tf32_fit_gap(rows), "<= 0",
         lambda v: v <= 0),
        ("Fused sigmoid 2x64: fused / layer by layer (ms)", ratio(sigmoid, "ours-fused", "ours-layers"), "< 1",
         lambda v: v < 1),
        ("Fused sigmoid 2x64: one kernel / two kernels (ms)", ratio(sigmoid, "ours-fused-one-kernel", "ours-fused"),
         "< 1", lambda v: v < 1),
        ("Fused sigmoid 2x64: PyTorch eager / ours in one kernel",
         ratio(sigmoid, "torch-eager", "ours-fused-one-kernel"), ">= 20", lambda v: v >= 20),
        ("Fused pack: one kernel / two kernels (ms)", ratio(pack, "ours-fused-one-kernel", "ours-fused"), "< 1",
         lambda v: v < 1),
        ("Fused pack TF32: one kernel / two kernels (ms)",
         ratio(pack, "ours-fused-tf32-one-kernel", "ours-fused-tf32"), "< 1", lambda v: v < 1),
        ("Fused pack: PyTorch bmm / ours in one kernel", ratio(pack, "torch-batched", "ours-fused-one-kernel"), ">= 3",
         lambda v: v >= 3),
        ("Hash grid step, 2^18 samples, 16 levels, ReLU 2x64: ours fused (ms)", hashgrid.get("ours-fused"),
         "<= 1.0", lambda v: v <= 1.0),
        ("Hash grid step: ours in one kernel (ms)", hashgrid.get("ours-fused-one-kernel"), "<= 1.0",
         lambda v: v <= 1.0),
        ("Hash grid step: PyTorch hash grid / ours", ratio(hashgrid, "torch-hashgrid", "ours-fused"), "> 1",
         lambda v: v > 1),
    ]
    return [(goal, "not measured", target, "-") if value is None else
            (goal, f"{value:.3g}", target, "yes" if met(value) else "**no**") for goal, value, target, met in goals]


def gigapixel_line(r: dict, name: str) -> str:
    """benchmarks/gigapixel_run.py's figures against the goal: 35 dB within 5 minutes of wall time, read
    to render, in host memory at most the image's 8-bit bytes plus the model plus 2 GB."""
    commands = [r[key] for key in ("train", "resume", "render_region") if key in r]
    wall = sum(c["seconds"] for c in commands)
    peak = max((c.get("peak_rss_gb", 0) for c in commands), default=0)
    budget = r.get("image_8bit_gb", 0) + r.get("model_gb", 0) + 2
    psnr = r.get("psnr", {})
    subset, whole = psnr.get("subsets", {}).get(str(1 << 20), {}).get("psnr"), psnr.get("whole", {}).get("psnr")
    said = [f"{r.get('size')}, {r.get('parameters', 0):,} parameters", f"read to render {wall:.0f} s (goal: 300)",
            f"PSNR {subset} dB on the run's subset, {whole} dB on every pixel (goal: 35)",
            f"peak host memory {peak:.2f} GB against {budget:.2f} GB (image + model + 2 GB)"]
    said += [f"{c['command'].split()[0]} exit {c['exit']}" for c in commands if c["exit"] not in (0, 130)]
    return f"- a gigapixel mosaic of photos (`{name}`): " + "; ".join(said)


def kodak_lines(r: dict, name: str) -> list[str]:
    """benchmarks/kodak.py's means, each contestant at each budget; the preset at the image's bytes
    against the goal: a mean of 43.9 dB in at most 5 s a photo."""
    groups: dict[tuple, list[dict]] = {}
    for row in r.get("rows", []):
        groups.setdefault((row["contestant"], row["budget"]), []).append(row)
    lines = []
    for (contestant, budget), rows in groups.items():
        psnr, seconds = (sum(row[key] for row in rows) / len(rows) for key in ("psnr", "seconds_run"))
        goal = ""
        if (contestant, budget) == ("hashgrid", "image"):
            met = psnr >= 43.9 and max(row["seconds_run"] for row in rows) <= 5
            goal = f" (goal: 43.9 dB in at most 5 s a photo: {'met' if met else '**not met**'})"
        lines.append(f"- Kodak, {contestant} at {budget} bytes, {len(rows)} photos (`{name}`): mean {psnr:.2f} dB, "
                     f"SSIM {sum(row['ssim'] for row in rows) / len(rows):.4f}, {seconds:.2f} s a photo, "
                     f"{rows[0]['steps_run']} steps{goal}")
    return lines


def other_results(out: Path) -> list[str]:
    """Lines for the other benchmarks' results that dev/gpu_checks.sh leaves in OUT."""
    lines = []
    for path in sorted(out.glob("fit-many-*.json")):
        r = json.loads(path.read_text())
        s = r.get("setting", {})
        said = [f"{name} {min(r[f'{who}_s']):.1f} s, mean {r[f'{who}_mean_psnr']} dB"
                for who, name in (("ours", "ours"), ("torch", "PyTorch batched")) if f"{who}_s" in r]
        lines.append(f"- fit-many, {s.get('images')} images of {s.get('size')} px, {s.get('steps')} steps "
                     f"(`{path.name}`): {'; '.join(said)} (goal: ours to a mean of 30 dB in under 120 s)")
    for path in sorted(out.glob("quality-*.json")):
        for r in json.loads(path.read_text()).get("results", []):
            def said(reached):
                return ", ".join(f"{t}: " + (f"{hit['seconds']} s (step {hit['step']})" if hit else "not reached")
                                 for t, hit in reached.items())
            torch_part = f"; PyTorch {said(r['torch']['reached'])}" if "torch" in r else ""
            lines.append(f"- seconds to quality, {r['recipe']} preset, {r['image']} at {r['size']} px "
                         f"(`{path.name}`): ours {said(r.get('reached', {}))}{torch_part}")
    gigapixel = out / "gigapixel.json"
    if gigapixel.is_file():
        lines.append(gigapixel_line(json.loads(gigapixel.read_text()), gigapixel.name))
    for path in sorted(out.glob("wall-time-*.json")):
        r = json.loads(path.read_text())
        for run in r.get("runs", []):
            if run.get("exit"):
                lines.append(f"- wall time, {run['name']} (`{path.name}`): failed, {run.get('error')}")
                continue
            split, met = run["split"], run["wall"] <= 2 * run["split"]["training"] + 5
            parts = ", ".join(f"{part} {seconds} s" for part, seconds in split.items())
            lines.append(f"- wall time of `inr train {Path(r['photo']).name} {' '.join(r['flags'])}`, {run['name']} "
                         f"(`{path.name}`): {run['wall']} s to step {run['steps']} ({run['psnr']} dB): {parts} (goal: "
                         f"at most 2x the training plus 5 s: {'met' if met else '**not met**'})")
    for path in sorted(out.glob("kodak-*.json")):
        lines += kodak_lines(json.loads(path.read_text()), path.name)
    drawing = out / "drawing.txt"
    if drawing.is_file():
        lines.append(f"- the seed's drawing for 60 s: {drawing.read_text().strip()}")
    return lines


def report(out: Path, command: str) -> str:
    rows = read_results(out)
    env = environment()
    dry = any(r.get("dry_run") for r in rows)
    dry_note = " (a DRY RUN on the CPU: its figures mean nothing)" if dry else ""
    lines = [f"## The GPU engine's goals — `benchmarks/results/gpu-goals-{env['date'][:10]}.jsonl`", "",
             f"{env['device']}, {env['date'][:10]}, commit {env['commit']}, CuPy {env.get('cupy', '-')}, PyTorch "
             f"{env.get('torch', '-')}: `{command}`{dry_note}",
             "", "| goal | measured | target | met |", "| --- | ---: | --- | --- |"]
    lines += [f"| {goal} | {measured} | {target} | {met} |" for goal, measured, target, met in goal_rows(rows)]
    lines += ["", "| measurement | who | ms per step |", "| --- | --- | ---: |"]
    for r in rows:
        if "ms" in r or "error" in r:
            lines.append(f"| {r['measurement']} | {r.get('who', '-')} | {r.get('ms', r.get('error', ''))} |")
    matmuls = [r for r in rows if r["measurement"] == "matmul" and "fp32_vs_cublas" in r]
    if matmuls:
        lines += ["", "| product (m, n, k, op) | ours FP32 / cuBLAS | ours TF32 / cuBLAS |", "| --- | ---: | ---: |"]
        lines += [f"| {r['m']}, {r['n']}, {r['k']}, {r['op']} | {r['fp32_vs_cublas']} | {r['tf32_vs_cublas']} |"
                  for r in matmuls]
    timed_kernels = [r for r in rows if r["measurement"] == "kernels" and "kernel_ms" in r]
    if timed_kernels:
        lines += ["", "Each kernel against its floor (benchmarks/kernel_costs.py), furthest first:", "",
                  "| setting | kernel | ms per step | floor (ms) | times the floor | predicted (ms) |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['setting']} | {r['kernel']} | {r['kernel_ms']} | {r['floor_ms']} | {r['times_floor']} | "
                  f"{r.get('predicted_ms', '-')} |"
                  for r in sorted(timed_kernels, key=lambda r: -(r["times_floor"] or 0))]
    fits = [r for r in rows if r["measurement"] == "tf32-fit" and "psnr" in r]
    if fits:
        lines += ["", "| TF32 fit: settings, photo | who | PSNR (dB, mean of the last 10% of readings) |",
                  "| --- | --- | ---: |"]
        lines += [f"| {r['settings']}, {r['photo']}, {r['size']} px, {r['steps']} steps | {r['who']} | {r['psnr']} |"
                  for r in fits]
    others = other_results(out)
    if others:
        lines += ["", *others]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurements", nargs="*", metavar="MEASUREMENT", help=f"any of: {', '.join(MEASUREMENTS)}")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="the same on the CPU at toy sizes")
    parser.add_argument("--report", action="store_true", help="print the BENCHMARKS.md section of what OUT holds")
    parser.add_argument("--command", default="bash dev/gpu_checks.sh", help="the command the report names")
    args = parser.parse_args()
    unknown = [name for name in args.measurements if name not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement {unknown[0]!r}; one of: {', '.join(MEASUREMENTS)}")
    run = Run(args.out, args.dry_run)
    failed = 0
    for name in args.measurements:
        try:
            MEASUREMENTS[name](run)
        except Exception as error:  # the next measurement still runs; the failure is a figure too
            run.record(name, error=f"{type(error).__name__}: {error}"[:500])
            failed = 1
    if args.report:
        text = report(args.out, args.command)
        (args.out / "benchmarks-block.md").write_text(text)
        print(text)
    return failed


if __name__ == "__main__":
    sys.exit(main())
