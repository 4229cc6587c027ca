"""The emulation itself (tests/emulation): warps whose lanes exchange values as the CUDA C++
Programming Guide defines, the tensor-core instructions of kernels/tensor_core.cuh as the PTX ISA
defines them, and misuse reported instead of hanging.

The kernels are tests/emulation/warp_checks.cu; tests/test_gpu.py runs the same kernels against the
same expectations on a GPU, which checks the emulation's reading of the hardware.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from inr_cli.backends.numpy_ops import round_to_tf32

WARP_CHECKS = Path(__file__).parent / "emulation" / "warp_checks.cu"


@pytest.fixture(scope="module")
def warp_checks(emulated):  # the fixture skips without g++
    from tests.emulation.emulated_backend import EmulatedModule

    return EmulatedModule([WARP_CHECKS])


def expected_shuffles(values, src, delta, width):
    """What warp_checks.cu's `shuffles` gives each thread, from the Programming Guide's definitions."""
    out = np.empty((len(values), 4), np.float32)
    for t in range(len(values)):
        warp, lane = divmod(t, 32)
        base, source = lane // width * width, lane ^ delta
        sources = [base + (7 * t + src) % width, lane if lane % width < delta else lane - delta,
                   lane if lane % width + delta >= width else lane + delta,
                   lane if source >= (lane // width + 1) * width else source]
        out[t] = [values[warp * 32 + s] for s in sources]
    return out


def run_shuffles(module, src, delta, width, threads=64):
    values = np.arange(threads, dtype=np.float32) * 10 + 1
    out = np.full((threads, 4), np.nan, np.float32)
    module.launch("shuffles", (1, 1, 1), (threads, 1, 1),
                  (values, out, np.int32(src), np.int32(delta), np.int32(width)))
    return out, expected_shuffles(values, src, delta, width)


@pytest.mark.parametrize("width", [32, 16, 8, 4, 2])
@pytest.mark.parametrize("src,delta", [(0, 1), (5, 3), (13, 2)])
def test_shuffles_follow_the_programming_guide(warp_checks, src, delta, width):
    out, expected = run_shuffles(warp_checks, src, delta % width, width)
    np.testing.assert_array_equal(out, expected)


def test_warp_butterfly_sums_each_warp(warp_checks):
    values = np.arange(96, dtype=np.float32) ** 2  # integers: every order of additions gives the same sum
    out = np.empty(96, np.float32)
    warp_checks.launch("warp_sums", (1, 1, 1), (96, 1, 1), (values, out))
    np.testing.assert_array_equal(out, np.repeat(values.reshape(3, 32).sum(axis=1), 32))


def test_votes(warp_checks):
    predicate = np.zeros(96, np.int32)
    predicate[[3, 17, 31]] = 1  # warp 0: some; warp 1: none; warp 2: all
    predicate[64:] = 7
    out = np.empty((96, 3), np.uint32)
    warp_checks.launch("votes", (1, 1, 1), (96, 1, 1), (predicate, out))
    expected = [(1 << 3 | 1 << 17 | 1 << 31, 1, 0), (0, 0, 0), (0xFFFFFFFF, 1, 1)]
    for warp, row in enumerate(expected):
        assert (out[32 * warp: 32 * warp + 32] == np.array(row, np.uint32)).all(), (warp, out[32 * warp])


def test_returned_threads_do_not_hold_back_a_barrier(warp_checks):
    written = np.arange(64, dtype=np.float32) + 0.5
    out = np.full(64, np.nan, np.float32)
    warp_checks.launch("barrier_after_returns", (1, 1, 1), (64, 1, 1), (written, out, np.int32(40)))
    np.testing.assert_array_equal(out[:40], written[np.arange(1, 41) % 40])
    assert np.isnan(out[40:]).all()


def exact_tf32(x: float) -> float:
    """x rounded to 10 mantissa bits, to nearest with ties away from zero, in exact arithmetic: an
    implementation independent of round_to_tf32's bit arithmetic."""
    if not math.isfinite(x) or x == 0:
        return x
    _, exponent = math.frexp(x)  # |x| = m 2^exponent, m in [0.5, 1): its TF32 unit is 2^(exponent - 11)
    unit = 2.0 ** max(exponent - 11, -136)  # below the normal range TF32 keeps FP32's exponent floor
    rounded = math.copysign(math.floor(abs(x) / unit + 0.5) * unit, x)
    largest = (2 - 2**-10) * 2.0**127
    return math.copysign(math.inf, x) if abs(rounded) > largest else rounded


def as_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


SPECIAL_BITS = [
    0x00000000, 0x80000000, 0x3F800000,  # 0, -0, 1
    0x3F801000, 0x3F800FFF, 0x3F803000, 0xBF801000,  # ties (away from zero) and just below one
    0x7F7FFFFF, 0x7F7FEFFF, 0x7F7FF000, 0xFF7FFFFF,  # past the largest TF32: infinity; just below: finite
    0x00000001, 0x00001000, 0x00000FFF, 0x00003000, 0x807FFFFF,  # subnormals
    0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF,  # infinities and NaNs (a NaN stays a NaN,
    0xFF801FFF, 0x7F800FFF, 0x7FA00000,  # its payload in the 13 low bits alone or not; signalling)
]


def tf32_inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    special = np.array(SPECIAL_BITS, np.uint32).view(np.float32)
    spread = rng.standard_normal(2000) * 10.0 ** rng.uniform(-40, 38, 2000)
    return np.concatenate([special, spread.astype(np.float32)])


def test_round_to_tf32_agrees_with_exact_rounding():
    x = tf32_inputs()
    ours = round_to_tf32(x)
    for value, rounded in zip(x.tolist(), ours.tolist()):
        if math.isnan(value):
            assert math.isnan(rounded)
        else:
            assert rounded == exact_tf32(value), (value, rounded, exact_tf32(value))
    assert (ours.view(np.uint32) & 0x1FFF == 0).all()


def rounded_bits(module, x, raw: bool) -> np.ndarray:
    out = np.zeros(x.size, np.uint32)
    module.launch("round_tf32", (3, 1, 1), (256, 1, 1), (x, out, np.int32(x.size), np.int32(raw)))
    return out


def test_emulated_cvt_rna_tf32_is_the_numpy_rounding_bit_for_bit(warp_checks):
    """The kernels' to_tf32 against numpy_ops.round_to_tf32, NaNs whose payload lies only in the bits
    that rounding drops among the inputs: both keep them NaNs."""
    x = tf32_inputs()
    out = rounded_bits(warp_checks, x, raw=False)
    np.testing.assert_array_equal(out, round_to_tf32(x).view(np.uint32))
    assert np.isnan(out[np.isnan(x)].view(np.float32)).all()


def test_bare_cvt_rna_tf32_makes_a_low_payload_nan_an_infinity(warp_checks):
    """The instruction itself, as ptxas writes it for sm_80 and sm_90 (half a unit added to a finite
    value's bits, then the 13 low bits cleared of every value): a NaN whose payload lies only in those
    bits comes out an infinity, which is why to_tf32 quiets a NaN first."""
    x = tf32_inputs()
    bits = x.view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    expected = np.where(finite, bits + np.uint32(0x1000), bits) & np.uint32(0xFFFFE000)
    out = rounded_bits(warp_checks, x, raw=True)
    np.testing.assert_array_equal(out, expected)
    low_payload = np.array([0x7F800001, 0xFF801FFF], np.uint32).view(np.float32)
    assert rounded_bits(warp_checks, low_payload, raw=True).tolist() == [0x7F800000, 0xFF800000]


def mma_operands(warps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    b = rng.standard_normal((warps, 8, 8)).astype(np.float32)
    c = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    return a, b, c


def run_mma(module, a, b, c, round_operands: bool):
    d = np.full(c.shape, np.nan, np.float32)
    module.launch("mma_tiles", (1, 1, 1), (32 * a.shape[0], 1, 1), (a, b, c, d, np.int32(round_operands)))
    return d


def truncate_to_tf32(x):
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("round_operands", [True, False])
def test_mma_is_a_matrix_product_per_warp(warp_checks, round_operands):
    """Each warp's fragments, loaded by the PTX ISA's layout, multiply as the matrices they hold:
    operands rounded by cvt.rna when asked, else their low 13 bits ignored; FP32 sums."""
    a, b, c = mma_operands(3)
    d = run_mma(warp_checks, a, b, c, round_operands)
    to_tf32 = round_to_tf32 if round_operands else truncate_to_tf32
    reference = np.matmul(to_tf32(a).astype(np.float64), to_tf32(b).astype(np.float64)) + c
    np.testing.assert_allclose(d, reference, rtol=1e-6, atol=1e-6)
    plain = np.matmul(a.astype(np.float64), b.astype(np.float64)) + c
    assert np.abs(d - plain).max() > 1e-4  # the operands really were cut to TF32


def test_mma_fragments_pick_the_right_elements(warp_checks):
    """One nonzero element in A and one in B at a time: D has exactly the one product, where the
    layout puts it (a wrong lane or register in the emulated gather would move or lose it)."""
    zero_c = np.zeros((1, 16, 8), np.float32)
    for row, k, col in [(0, 0, 0), (9, 5, 3), (15, 7, 7), (3, 4, 6), (12, 2, 1)]:
        a, b = np.zeros((1, 16, 8), np.float32), np.zeros((1, 8, 8), np.float32)
        a[0, row, k], b[0, k, col] = 2.0, 3.0
        d = run_mma(warp_checks, a, b, zero_c, True)
        expected = np.zeros((1, 16, 8), np.float32)
        expected[0, row, col] = 6.0
        np.testing.assert_array_equal(d, expected)


@pytest.mark.parametrize("kernel,message", [
    ("lanes_at_different_barriers", "deadlock"),
    ("shuffle_with_returned_lanes", "lane that has returned"),
    ("shuffle_outside_the_mask", "outside its mask"),
])
def test_misuse_is_an_error_not_a_hang(warp_checks, kernel, message):
    from tests.emulation.emulated_backend import EmulationError

    with pytest.raises(EmulationError, match=message):
        warp_checks.launch(kernel, (1, 1, 1), (32, 1, 1), (np.zeros(32, np.float32),))
    out, expected = run_shuffles(warp_checks, 0, 1, 32)  # the next launch runs as usual
    np.testing.assert_array_equal(out, expected)


def test_dynamic_shared_memory_is_undefined_until_written_and_guarded(warp_checks):
    """A block's dynamic shared memory (`extern __shared__` on a GPU) holds NaN until the block writes
    it, block after block (a GPU leaves it undefined: a kernel that reads what it never wrote fails its
    test here), and a write past the bytes the launch gave stops the launch."""
    from tests.emulation.emulated_backend import EmulationError

    out = np.zeros(64, np.float32)
    warp_checks.launch("dynamic_shared", (2, 1, 1), (32, 1, 1), (out, np.int32(0)), shared=32 * 4)
    expected = np.array([b * 32 + (t + 1) % 32 for b in range(2) for t in range(32)], np.float32)
    expected[[4, 36]] = np.nan  # the second block sees none of the first's values
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(EmulationError, match="wrote past its 128 bytes of dynamic shared memory"):
        warp_checks.launch("dynamic_shared", (1, 1, 1), (32, 1, 1), (out, np.int32(1)), shared=32 * 4)
