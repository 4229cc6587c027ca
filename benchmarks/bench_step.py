"""Milliseconds per training step, render throughput, and our matmul against cuBLAS.

    PYTHONPATH=. python benchmarks/bench_step.py [--out bench-results/step.json] [--quick]
        [--settings sigmoid-200 siren-512 ...] [--peers eager eager-tf32 compile compile-tf32]

Settings (one image, full batch unless said):
  sigmoid-200        sigmoid MLP 2x64 on x, y as they are, 200x200 grey      (the original system)
  siren-512          SIREN 3x256, 512x512 RGB
  siren-1024         SIREN 3x256, 1024x1024 RGB, random batches of 2^18 pixels
  sigmoid-preset-200 the sigmoid preset as it runs: 4x128 on 256 Fourier features, 200x200 RGB
  sigmoid-preset-512 the same at 512x512                        (the fused narrow kernel's targets,
  siren64-200        SIREN 3x64, 200x200 RGB                     issue 14: at least 3x our current
  siren64-512        SIREN 3x64, 512x512 RGB                     path)
Ours: numpy (CPU reference), kernel (our CUDA kernels: the fused network's where the hidden layers are
at most 128 wide), kernel_tf32 (the same with --precision tf32), kernel_layers (a kernel per layer,
--no-fused-network), cublas (our kernels layer by layer, cuBLAS matmul).
Peers, PyTorch on the GPU (same network, initial parameters, Adam and schedule; benchmarks/
torch_reference.py, checked against ours in tests/test_torch_reference.py): eager (FP32), eager-tf32
(TF32 tensor cores in the matmuls), compile and compile-tf32 (torch.compile of the loss and the
optimizer step, --compile-mode). A peer that fails is recorded with its error, not fatal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, configure, environment, make_trainer, photo, save_json, timed  # noqa: E402
from inr_cli.backends.cpu_backend import CpuBackend  # noqa: E402
from inr_cli.core.coords import pixel_grid  # noqa: E402
from inr_cli.core.network import NetworkSpec, init_networks, output_means  # noqa: E402
from inr_cli.core.render import render_uint8  # noqa: E402

SIREN_PAPER = dict(omega0=30.0, lr=1e-4)  # the SIREN paper's omega0, a learning rate stable at every size
SETTINGS = {
    # The encoding is named: the sigmoid preset feeds Fourier features since issue 16, the original x, y.
    "sigmoid-200": dict(preset="sigmoid", size=200, gray=True, batch=0,
                        flags=dict(hidden=64, layers=2, encoding="none", lr=1e-3)),
    "siren-512": dict(preset="siren", size=512, gray=False, batch=0, flags=dict(hidden=256, layers=3, **SIREN_PAPER)),
    "siren-1024": dict(preset="siren", size=1024, gray=False, batch=1 << 18,
                       flags=dict(hidden=256, layers=3, **SIREN_PAPER)),
    "sigmoid-preset-200": dict(preset="sigmoid", size=200, gray=False, batch=0, flags={}),
    "sigmoid-preset-512": dict(preset="sigmoid", size=512, gray=False, batch=0, flags={}),
    "siren64-200": dict(preset="siren", size=200, gray=False, batch=0, flags=dict(hidden=64, layers=3, **SIREN_PAPER)),
    "siren64-512": dict(preset="siren", size=512, gray=False, batch=0, flags=dict(hidden=64, layers=3, **SIREN_PAPER)),
}
PEERS = {"eager": (None, False), "eager-tf32": (None, True), "compile": ("compile", False),
         "compile-tf32": ("compile", True)}


def setting_config(setting, **flags):
    """The setting's network as the command line would build it, for an image of the setting's size."""
    return configure(setting["preset"], setting["size"], batch_size=setting["batch"], steps=100000, lr_min=1e-6,
                     **setting["flags"], **flags)


def gpu_backends():
    try:
        from inr_cli.backends.cuda_backend import CudaBackend
        from inr_cli.backends.gpu_probe import gpu_unavailable_reason
    except ImportError:
        return {}
    if gpu_unavailable_reason() is not None:
        return {}
    return {"kernel": CudaBackend(matmul="kernel"), "cublas": CudaBackend(matmul="cublas"),
            "kernel_tf32": CudaBackend(precision="tf32"), "kernel_layers": CudaBackend(fused=False)}


def bench_ours(backend, setting, image, steps, cuda_graph=True):
    trainer = make_trainer(backend, setting_config(setting, cuda_graph=cuda_graph), [image])
    for _ in range(3):  # warm-up: compile, allocate scratch, capture the graph
        trainer.step()
    seconds = timed(trainer.step, steps, backend.synchronize)
    trainer.read_loss()
    return seconds, trainer


def bench_torch(torch, setting, image, steps, peer="eager", compile_mode="default", device="cuda"):
    """Seconds per PyTorch step on the device (the GPU unless said), from the parameters ours start from."""
    from benchmarks.torch_reference import TorchTrainer, optimizer_settings, use_tf32

    compiled, tf32 = PEERS[peer]
    config = setting_config(setting)
    spec = NetworkSpec.from_config(config, image.n_channels)
    params = init_networks(spec, [config.training.seed], output_means(config, [image]))[0]  # ours start here too
    use_tf32(torch, tf32)
    try:
        trainer = TorchTrainer(torch, spec, params, pixel_grid(image.width, image.height), image.targets(),
                               config.optimizer.lr, config.optimizer.lr_min, config.training.steps, setting["batch"],
                               0, device, compile_mode=compile_mode if compiled else None,
                               **optimizer_settings(config.optimizer))
        for _ in range(3):  # warm-up; a compiled peer compiles here
            trainer.step()
        return timed(trainer.step, steps, torch.cuda.synchronize if device == "cuda" else lambda: None)
    finally:
        use_tf32(torch, False)


def bench_render(backend, trainer, size):
    render_uint8(backend, trainer.spec, trainer.params[:1], 256, 256)  # warm-up
    backend.synchronize()
    start = time.perf_counter()
    render_uint8(backend, trainer.spec, trainer.params[:1], size, size)
    return size * size / (time.perf_counter() - start)


def time_matmul(backend, m, n, k, trans: str, repeats: int = 20) -> float:
    """Milliseconds per backend.matmul on random operands of that shape, timed with CUDA events."""
    import cupy

    ta, tb = trans[0] == "t", trans[1] == "t"
    a = cupy.random.standard_normal((1, k, m) if ta else (1, m, k), dtype=cupy.float32)
    b = cupy.random.standard_normal((1, n, k) if tb else (1, k, n), dtype=cupy.float32)
    out = cupy.empty((1, m, n), dtype=cupy.float32)
    # The operands come from the null stream, which the backend's non-blocking stream does not wait
    # for: finish them first, or their generation overlaps (and slows) the timed products.
    cupy.cuda.Device().synchronize()
    backend.matmul(a, b, out, ta, tb)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(backend.stream)
    for _ in range(repeats):
        backend.matmul(a, b, out, ta, tb)
    stop.record(backend.stream)
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / repeats


def bench_matmul_shapes(kernel_backend, cublas_backend, setting, image, repeats):
    """Our matmul against cuBLAS on the exact (m, n, k, transposes) of the setting's step."""
    s = setting
    rows = s["batch"] or image.width * image.height
    spec = NetworkSpec.from_config(setting_config(s), image.n_channels)
    shapes = set()
    for index, (out_f, in_f) in enumerate(spec.layer_shapes()):
        shapes.add((rows, out_f, in_f, "nt"))  # forward
        shapes.add((out_f, in_f, rows, "tn"))  # weight gradient
        if index > 0:  # the first layer's input (coordinates or their Fourier features) needs no gradient
            shapes.add((rows, in_f, out_f, "nn"))  # input gradient
    results = []
    for m, n, k, trans in sorted(shapes):
        times = {name: time_matmul(backend, m, n, k, trans, repeats)
                 for name, backend in (("kernel", kernel_backend), ("cublas", cublas_backend))}
        flops = 2.0 * m * n * k
        results.append({
            "m": m, "n": n, "k": k, "op": trans,
            "kernel_ms": round(times["kernel"], 4), "cublas_ms": round(times["cublas"], 4),
            "kernel_tflops": round(flops / times["kernel"] / 1e9, 2),
            "cublas_tflops": round(flops / times["cublas"] / 1e9, 2),
            "kernel_vs_cublas": round(times["cublas"] / times["kernel"], 3),
        })
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "step.json")
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    parser.add_argument("--no-numpy", action="store_true", help="skip the slow CPU reference")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS),
                        help="PyTorch peers to time beside ours (none: --peers with no name)")
    parser.add_argument("--compile-mode", default="default",
                        help="torch.compile's mode for the compile peers: default, reduce-overhead, max-autotune")
    args = parser.parse_args()
    unknown = [name for name in args.settings if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting {unknown[0]!r}; one of: {', '.join(SETTINGS)}")

    steps_gpu = 20 if args.quick else 100
    backends = gpu_backends()
    try:
        import torch

        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch, torch_ok = None, False
    report = {"environment": environment(), "settings": {}}
    for name in args.settings:
        setting = SETTINGS[name]
        image = photo("coffee", setting["size"], setting["size"], gray=setting["gray"])
        row = {"config": setting}
        if not args.no_numpy:
            seconds, _ = bench_ours(CpuBackend(), setting, image, 2 if setting["size"] > 256 else 5)
            row["numpy_ms"] = round(seconds * 1e3, 3)
        trainer = None
        for backend_name, backend in backends.items():
            seconds, trainer_b = bench_ours(backend, setting, image, steps_gpu)
            row[f"{backend_name}_ms"] = round(seconds * 1e3, 4)
            if backend_name == "kernel":
                trainer = trainer_b
                eager, _ = bench_ours(backend, setting, image, steps_gpu, cuda_graph=False)
                row["kernel_no_graph_ms"] = round(eager * 1e3, 4)
        for peer in args.peers if torch_ok else []:
            key = "torch" if peer == "eager" else f"torch_{peer.replace('-', '_')}"  # torch_compile_tf32, ...
            try:
                seconds = bench_torch(torch, setting, image, steps_gpu, peer, args.compile_mode)
                row[f"{key}_ms"] = round(seconds * 1e3, 4)
            except Exception as error:  # one peer's failure (a compiler's, say) must not cost the other figures
                row[f"{key}_error"] = f"{type(error).__name__}: {error}"[:300]
                continue
            if "kernel_ms" in row:
                row[f"speedup_vs_{key}"] = round(row[f"{key}_ms"] / row["kernel_ms"], 2)
        if trainer is not None:
            row["render_mpix_per_s"] = round(bench_render(backends["kernel"], trainer, 2048) / 1e6, 2)
            row["matmul"] = bench_matmul_shapes(backends["kernel"], backends["cublas"], setting, image,
                                                5 if args.quick else 20)
        report["settings"][name] = row
        summary = {k: v for k, v in row.items() if k not in ("config", "matmul")}
        print(f"{name}: {summary}", flush=True)
        for mm in row.get("matmul", []):
            print(f"  matmul {mm['op']} m={mm['m']} n={mm['n']} k={mm['k']}: ours {mm['kernel_ms']} ms "
                  f"({mm['kernel_tflops']} TFLOP/s), cuBLAS {mm['cublas_ms']} ms ({mm['cublas_tflops']} TFLOP/s), "
                  f"ratio {mm['kernel_vs_cublas']}", flush=True)
    save_json(report, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
