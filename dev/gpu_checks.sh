#!/usr/bin/env bash
# The GPU checks the project owes, in parts, their output under $OUT (or bench-results/gpu-checks)
# for BENCHMARKS.md. Name several parts to run them in one device call (10 minutes at most a call):
#
#   bash dev/gpu_checks.sh tests      # every GPU test (and the PyTorch peer's): the kernels, then the commands' GPU paths
#                                     # (fit-many --until-psnr, meta-init, view's tiles, to_torch().cuda(), tune, a Ray
#                                     # worker on the GPU); the sigmoid preset's minute on the cub (issue 16)
#   bash dev/gpu_checks.sh tf32       # what TF32 matmuls cost a training, through PyTorch, before our kernel (issue 14.2)
#   bash dev/gpu_checks.sh many64     # fit-many: 10,000 64x64 images, ours against PyTorch batched (issues 13, 14.4)
#   bash dev/gpu_checks.sh many32     # the same at 32x32
#   bash dev/gpu_checks.sh steps      # step times of the wide settings against PyTorch eager / TF32 / torch.compile,
#                                     # matmul against cuBLAS, the 8192 render, the matmul variants (issue 14's baseline)
#   bash dev/gpu_checks.sh narrow     # step times of the narrow networks (the fused kernel's targets, issue 14.3)
#
# Minutes each, roughly (not yet run on a GPU): tests 3, tf32 2, many64 3, many32 2, steps 6, narrow 5.
# Run from the repository root on the GPU machine (its python3 has cupy, torch and pytest). The device
# tool copies the tree without its git history: name the commit, INR_COMMIT=$(git rev-parse --short
# HEAD) in front of the command, so that the result files say which code they measured.
set -euo pipefail
usage="usage: bash dev/gpu_checks.sh PART... (PART: tests tf32 many64 many32 steps narrow)"
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
for part in "$@"; do
  case "$part" in
    tests | tf32 | many64 | many32 | steps | narrow) ;;
    *) echo "unknown part '$part'; $usage" >&2; exit 2 ;;
  esac
done
out="${OUT:-bench-results/gpu-checks}"
mkdir -p "$out"
export PYTHONPATH=.
# One log for every part (the device tool brings back 8 files at most): output goes there and to stdout.
log="$out/log.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$log"
echo "commit ${INR_COMMIT:-unknown}" | tee -a "$log"

# Each command of a part runs even where one before it failed; a failure is said in the log, and
# the script's exit status says whether any command failed.
failed=0
run() {
  "$@" 2>&1 | tee -a "$log" || { echo "=== FAILED (exit $?): $*" | tee -a "$log"; failed=1; }
}
for part in "$@"; do
  echo "=== $part $(date -u +%FT%TZ)" | tee -a "$log"
  case "$part" in
    tests)
      run python3 -m pytest tests/test_gpu.py tests/test_torch_reference.py -q -rs
      run python3 benchmarks/sigmoid_drawing.py --device gpu '[{"name": "gpu-60s", "seconds": 60}]'
      run cp bench-results/sigmoid-drawing/gpu-60s.png "$out/"
      ;;
    tf32)  # the preset's settings (chaotic: FP32 against FP32 differs too), then stable ones
      run python3 benchmarks/agreement.py --presets siren --size 256 --steps 1000 --budgets 1000 \
        --kinds cublas torch torch-tf32 --out "$out/tf32.json"
      run python3 benchmarks/agreement.py --presets siren --size 256 --steps 1000 --budgets 1000 \
        --kinds cublas torch torch-tf32 --set omega0=30 lr=1e-4 --out "$out/tf32-stable.json"
      ;;
    many64 | many32)
      run python3 benchmarks/fit_many_speed.py --device gpu --size "${part#many}" --pack 2048 --images 10000 \
        --steps 500 --lr 1e-3 --rounds 1 --out "$out/fit-many-gpu-${part#many}.json"
      ;;
    steps)  # each torch.compile peer compiles for about a minute: three settings fit one call
      run python3 benchmarks/bench_step.py --no-numpy --settings sigmoid-200 siren-512 siren-1024 --out "$out/step.json"
      run python3 benchmarks/render_large.py --out "$out/render.json"
      run python3 dev/matmul/harness.py --out "$out/matmul-variants.json"
      ;;
    narrow)
      run python3 benchmarks/bench_step.py --no-numpy --settings sigmoid-preset-200 sigmoid-preset-512 siren64-200 \
        siren64-512 --out "$out/step-narrow.json"
      ;;
  esac
done
exit "$failed"
