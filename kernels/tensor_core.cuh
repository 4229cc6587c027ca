// The tensor-core instructions the kernels use, one device function each, as inline PTX; beside
// each, the emulated version that tests/emulation compiles instead (INR_CUDA_EMULATION), written
// from the PTX ISA's definition of the instruction. tests/test_emulation.py holds the emulated
// versions to NumPy (numpy_ops.round_to_tf32, a plain matrix product); tests/test_gpu.py holds the
// instructions to the same references on a GPU.
#pragma once

// cvt.rna.tf32.f32: x rounded to TF32 (sign, 8 exponent bits, the top 10 of 23 mantissa bits),
// to nearest with ties away from zero; the 13 low bits of the result are 0. For sm_80 and sm_90
// ptxas writes the instruction as integer arithmetic (its SASS: half a TF32 unit added to the bits
// of a finite x, the carry running into the exponent where it must, up to infinity past the
// largest TF32 value; then the 13 low bits cleared, whatever x is). So infinities keep their bits,
// and a NaN keeps its sign and the top of its payload: a NaN whose payload lies only in the 13 low
// bits comes out an infinity (0x7F800001 -> 0x7F800000, as an H200 gave).
__device__ __forceinline__ unsigned int cvt_rna_tf32(float x)
{
#ifdef INR_CUDA_EMULATION
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;
    return bits & 0xffffe000u;
#else
    unsigned int out;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(out) : "f"(x));
    return out;
#endif
}

// x as the kernels hand it to the tensor cores (numpy_ops.round_to_tf32): a NaN quieted first (its
// quiet bit set, as IEEE 754 quiets a signalling NaN), then cvt.rna. A NaN must stay a NaN: as an
// infinity it could vanish further on (a ReLU or a sigmoid of -inf is 0) where a NaN reaches the
// loss and the training loop's divergence guard.
__device__ __forceinline__ unsigned int to_tf32(float x)
{
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;
    return cvt_rna_tf32(__uint_as_float(bits));
}

// to_tf32's value as a float (its 13 low mantissa bits 0): what a product's FP32 FMAs read where they
// stand in for the tensor cores, or an operand rounded once as it is stored.
__device__ __forceinline__ float tf32_value(float x) { return __uint_as_float(to_tf32(x)); }

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d = A B + c for one warp, A 16x8 (row
// major), B 8x8 (column major), c and d 16x8 in FP32, every lane holding a fragment of each. With
// g = lane / 4 and t = lane % 4 (the PTX ISA's groupID and threadID_in_group):
//   a[0] = A[g][t]      a[1] = A[g + 8][t]      a[2] = A[g][t + 4]      a[3] = A[g + 8][t + 4]
//   b[0] = B[t][g]      b[1] = B[t + 4][g]
//   c[0], d[0] = [g][2t]   c[1], d[1] = [g][2t + 1]   c[2], d[2] = [g + 8][2t]   c[3], d[3] = [g + 8][2t + 1]
// a and b hold TF32 values (to_tf32); the tensor core reads their top 19 bits. Every lane of the
// warp must execute it, with the same instruction (.sync.aligned).
__device__ __forceinline__ void mma_tf32_16x8x8(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                const float c[4])
{
#ifdef INR_CUDA_EMULATION
    // Each lane gathers the whole warp's registers and computes its own four elements: the products
    // of TF32 values are exact in FP32, summed in FP32 in k order after c. The hardware sums in an
    // order and with internal roundings of its own, so the two agree within FP32 rounding.
    struct Operands { unsigned int a[4], b[2]; };
    const Operands mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
    Operands lanes[32];
    emu::warp_gather(emu::FULL_MASK, &mine, sizeof mine, lanes);
    const unsigned int g = emu::lane_id() / 4, t = emu::lane_id() % 4;
    auto A = [&](unsigned int row, unsigned int k) {
        return __uint_as_float(lanes[(row % 8) * 4 + k % 4].a[(row >= 8) + 2 * (k >= 4)] & 0xffffe000u);
    };
    auto B = [&](unsigned int k, unsigned int col) {
        return __uint_as_float(lanes[col * 4 + k % 4].b[k >= 4] & 0xffffe000u);
    };
    for (int i = 0; i < 4; ++i) {
        const unsigned int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float sum = c[i];
        for (unsigned int k = 0; k < 8; ++k) sum += A(row, k) * B(k, col);
        d[i] = sum;
    }
#else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
#endif
}
