#!/usr/bin/env bash
# The GPU checks the project owes, in parts that each fit one device call (10 minutes at most),
# their output under $OUT (or bench-results/gpu-checks) for BENCHMARKS.md:
#
#   bash dev/gpu_checks.sh tests      # every GPU test; the sigmoid preset's minute on the cub (issue 16)
#   bash dev/gpu_checks.sh many64     # fit-many: 10,000 64x64 images, ours against PyTorch batched (issues 13, 14.4)
#   bash dev/gpu_checks.sh many32     # the same at 32x32
#   bash dev/gpu_checks.sh steps      # step times of the wide settings against PyTorch eager / TF32 / torch.compile,
#                                     # matmul against cuBLAS, the 8192 render, the matmul variants (issue 14's baseline)
#   bash dev/gpu_checks.sh narrow     # the same for the narrow networks (the fused kernel's targets, issue 14.3)
#
# Run from the repository root on the GPU machine (its Python has cupy, torch and pytest). The device
# tool copies the tree without its git history: name the commit, INR_COMMIT=$(git rev-parse --short
# HEAD) in front of the command, so that the result files say which code they measured.
set -euo pipefail
case "${1:-}" in
  tests | many64 | many32 | steps | narrow) ;;
  *) echo "usage: bash dev/gpu_checks.sh tests|many64|many32|steps|narrow" >&2; exit 2 ;;
esac
out="${OUT:-bench-results/gpu-checks}"
mkdir -p "$out"
export PYTHONPATH=.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
echo "commit ${INR_COMMIT:-unknown}" | tee -a "$out/device.txt"

case "${1:-}" in
  tests)
    python3 -m pytest tests/test_gpu.py tests/test_torch_reference.py -q -rs 2>&1 | tee "$out/test-gpu.log" || true  # the figures below run either way
    python3 benchmarks/sigmoid_drawing.py --device gpu '[{"name": "gpu-60s", "seconds": 60}]' 2>&1 \
      | tee "$out/sigmoid-gpu-60s.log"
    cp bench-results/sigmoid-drawing/gpu-60s.png "$out/"
    ;;
  many64 | many32)
    size="${1#many}"
    python3 benchmarks/fit_many_speed.py --device gpu --size "$size" --pack 2048 --images 10000 --steps 500 \
      --lr 1e-3 --rounds 1 --out "$out/fit-many-gpu-$size.json" 2>&1 | tee "$out/fit-many-gpu-$size.log"
    ;;
  steps)  # each torch.compile peer compiles for about a minute: three settings fit one call
    python3 benchmarks/bench_step.py --no-numpy --settings sigmoid-200 siren-512 siren-1024 --out "$out/step.json" 2>&1 \
      | tee "$out/step.log"
    python3 benchmarks/render_large.py --out "$out/render.json" 2>&1 | tee "$out/render.log"
    python3 dev/matmul/harness.py --out "$out/matmul-variants.json" 2>&1 | tee "$out/matmul-variants.log"
    ;;
  narrow)
    python3 benchmarks/bench_step.py --no-numpy --settings sigmoid-preset-200 sigmoid-preset-512 siren64-200 siren64-512 \
      --out "$out/step-narrow.json" 2>&1 | tee "$out/step-narrow.log"
    ;;
esac
