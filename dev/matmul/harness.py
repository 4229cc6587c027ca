"""Matmul experiments (issue 14): numbered variants, each checked against NumPy before it is timed.

    PYTHONPATH=. python dev/matmul/harness.py                  # every variant, on the GPU
    PYTHONPATH=. python dev/matmul/harness.py --variants 0 2   # some of them
    PYTHONPATH=. python dev/matmul/harness.py --emulate        # the checks alone, on the CPU

A variant is the shipped kernel (kernels/matmul.cu, through the backend's launch plans) under
compile-time defines, or a file of this folder, NN_name.cu, written to this contract:

    extern "C" __global__ void matmul_nt / matmul_nn / matmul_tn
        (const float* A, const float* B, float* C, int M, int N, int K)
    C (M x N) = op(A) op(B), row-major float32, one matrix: A is M x K (K x M for tn), B is N x K
    for nt and K x N for nn and tn. A file defines the ops it has, and
    #define VARIANT_BM / VARIANT_BN (the tile of C a block computes) and VARIANT_THREADS (its
    threads), and VARIANT_SMEM (bytes of dynamic shared memory) if it uses any: the grid is
    (ceil(N / BN), ceil(M / BM)).
Networks, split-K and the fused epilogues stay with the shipped kernel until a variant wins; then
it moves into kernels/matmul.cu and tests/test_kernels_emulated.py checks it as it runs.

Each variant is first checked on awkward shapes (ragged edges, K of 1, tiles that do not divide)
for every op it defines, against float64 NumPy (tests/kernel_checks.check_matmul, the check the
shipped kernel passes); on the GPU it is checked on the timed shapes too. A variant that fails is
reported and not timed. Then each op is timed on the SIREN 3x256 512x512 step's big shapes with
CUDA events, beside cuBLAS in the same run, and the shipped variants time the whole step as well.
--emulate runs the checks on the CPU (tests/emulation: the kernel compiled as C++), as CI does
for every file variant (tests/test_matmul_variants.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from inr_cli.backends.launch import ceil_div, read_defines  # noqa: E402
from tests.kernel_checks import check_matmul  # noqa: E402

OPS = ("nt", "nn", "tn")
CHECK_SHAPES = [(1, 1, 1), (1, 5, 3), (37, 65, 70), (130, 129, 17), (200, 3, 33), (3, 140, 40), (64, 64, 1100)]
# The SIREN 3x256 step on 512x512 pixels: forward, input gradient, weight gradient.
TIMED_SHAPES = [(262144, 256, 256, "nt"), (262144, 256, 256, "nn"), (256, 256, 262144, "tn")]
COMPILE_OPTIONS = ("-std=c++17",)


@dataclass(frozen=True)
class Variant:
    name: str
    defines: dict = field(default_factory=dict)
    source: str | None = None  # a file of dev/matmul/; None: kernels/matmul.cu through the backend
    precision: str = "fp32"  # the shipped kernel's --precision (checked against NumPy with its rounding)


VARIANTS = {
    0: Variant("shipped (128x128 tiles, 8x8 per thread, 2 blocks per SM)"),
    1: Variant("shipped with 1 block per SM", {"MATMUL_MIN_BLOCKS": 1}),
    2: Variant("naive: one thread per element of C", source="02_naive.cu"),
    3: Variant("shipped in TF32 (mma.sync m16n8k8, 8 warps of 64x32 per 128x128 tile)", precision="tf32"),
}


class FileVariant:
    """A variant file's kernels behind the backend's matmul signature (stacks of one network), on
    the GPU through CuPy or on the CPU through the emulation."""

    def __init__(self, path: Path, defines: dict, emulate: bool):
        text = path.read_text()
        knobs = read_defines(text)
        self.bm, self.bn, self.threads = knobs["VARIANT_BM"], knobs["VARIANT_BN"], knobs["VARIANT_THREADS"]
        self.smem = knobs.get("VARIANT_SMEM", 0)
        self.ops = tuple(op for op in OPS if f"matmul_{op}(" in text)
        self.emulate = emulate
        if emulate:
            from tests.emulation.emulated_backend import EmulatedModule

            self.module = EmulatedModule([path], defines)
        else:
            import cupy

            self.cupy = cupy
            self.stream = cupy.cuda.Stream(non_blocking=True)
            options = COMPILE_OPTIONS + tuple(f"-D{k}={v}" for k, v in defines.items())
            self.module = cupy.RawModule(code=text, options=options)

    def to_device(self, array):
        if self.emulate:
            return np.ascontiguousarray(array)
        with self.stream:  # on the launches' stream: a non-blocking stream does not wait for the null one
            return self.cupy.asarray(np.ascontiguousarray(array))

    def to_host(self, array):
        return array if self.emulate else self.cupy.asnumpy(array, stream=self.stream)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        op = f"{'t' if trans_a else 'n'}{'t' if trans_b else 'n'}"
        if op not in self.ops:
            raise NotImplementedError(f"the variant has no matmul_{op}")
        if out.shape[0] != 1 or a.shape[0] != 1 or b.shape[0] != 1:
            raise NotImplementedError("a variant multiplies one matrix; networks stay with the shipped kernel")
        m, n = out.shape[1:]
        k = a.shape[1] if trans_a else a.shape[2]
        grid, block = (ceil_div(n, self.bn), ceil_div(m, self.bm), 1), (self.threads, 1, 1)
        args = (a, b, out, np.int32(m), np.int32(n), np.int32(k))
        if self.emulate:
            self.module.launch(f"matmul_{op}", grid, block, args)
        else:
            self.module.get_function(f"matmul_{op}")(grid, block, args, stream=self.stream, shared_mem=self.smem)


def make_runner(variant: Variant, emulate: bool):
    """Something with the backend's matmul, to_device, to_host (and on the GPU, stream)."""
    if variant.source is not None:
        return FileVariant(HERE / variant.source, variant.defines, emulate)
    if emulate:
        from tests.emulation.emulated_backend import EmulatedBackend

        return EmulatedBackend(defines=variant.defines, precision=variant.precision)
    from inr_cli.backends.cuda_backend import CudaBackend

    return CudaBackend(defines=variant.defines, precision=variant.precision)


def variant_ops(runner) -> tuple[str, ...]:
    return getattr(runner, "ops", OPS)


def check_variant(runner, shapes=CHECK_SHAPES) -> list[str]:
    """What the variant got wrong ('nt 37x65x70: ...'), checked on each shape for each op it has;
    empty when it is right everywhere."""
    failures = []
    for op in variant_ops(runner):
        for m, n, k in shapes:
            try:
                check_matmul(runner, m, n, k, op)
            except AssertionError as error:
                detail = next((line.strip() for line in str(error).splitlines() if "Max absolute" in line), "")
                failures.append(f"{op} {m}x{n}x{k}: wrong values {detail}".strip())
            except Exception as error:  # a launch that fails is a failed check, not a crash of the harness
                failures.append(f"{op} {m}x{n}x{k}: {type(error).__name__}: {error}")
    return failures


def time_variants(numbers: list[int], repeats: int) -> dict:
    from benchmarks.bench_step import SETTINGS, bench_ours, time_matmul
    from benchmarks.common import photo
    from inr_cli.backends.cuda_backend import CudaBackend

    cublas = CudaBackend(matmul="cublas")
    results = {"cublas": {op: round(time_matmul(cublas, m, n, k, op, repeats), 4) for m, n, k, op in TIMED_SHAPES}}
    print(f"cublas: {results['cublas']} ms", flush=True)
    image = photo("coffee", 512, 512)
    for number in numbers:
        variant = VARIANTS[number]
        runner = make_runner(variant, emulate=False)
        failures = check_variant(runner, CHECK_SHAPES + [(m, n, k) for m, n, k, _ in TIMED_SHAPES])
        row = {"name": variant.name}
        if failures:
            row["failed"] = failures[:5]
            print(f"{number:02d} {variant.name}: FAILED the check, not timed: {failures[0]}", flush=True)
        else:
            for m, n, k, op in TIMED_SHAPES:
                if op in variant_ops(runner):
                    ms = time_matmul(runner, m, n, k, op, repeats)
                    row[op] = {"ms": round(ms, 4), "tflops": round(2.0 * m * n * k / ms / 1e9, 2),
                               "vs_cublas": round(results["cublas"][op] / ms, 3)}
            if variant.source is None:
                seconds, _ = bench_ours(runner, SETTINGS["siren-512"], image, 50)
                row["siren_512_step_ms"] = round(seconds * 1e3, 3)
            print(f"{number:02d} {variant.name}: {({k: v for k, v in row.items() if k != 'name'})}", flush=True)
        results[f"{number:02d}"] = row
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", type=int, nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--emulate", action="store_true", help="check on the CPU only (no GPU, no timing)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=HERE.parent.parent / "bench-results" / "matmul-variants.json")
    args = parser.parse_args()
    if args.emulate:
        failed = 0
        for number in args.variants:
            failures = check_variant(make_runner(VARIANTS[number], emulate=True))
            failed += bool(failures)
            print(f"{number:02d} {VARIANTS[number].name}: " + ("ok" if not failures else f"FAILED {failures[0]}"))
        return 1 if failed else 0
    from benchmarks.common import environment, save_json

    results = time_variants(args.variants, args.repeats)
    save_json({"environment": environment(), "shapes": TIMED_SHAPES, "variants": results}, args.out)
    print(f"saved {args.out}")
    return 1 if any("failed" in row for row in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
