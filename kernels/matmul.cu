// matmul -- NumpyBackend.matmul: C = op(A) @ op(B), row-major float32, op transposing on request,
// and the fused layer operations NumpyBackend.linear_forward / linear_backward_input.
// The three shapes a layer needs, with no transpose ever materialised:
//   forward            Z  = X  W^T   (nt)    X (rows, in),  W (out, in)
//   input gradient     dX = dZ W     (nn)    dZ (rows, out)
//   weight gradient    dW = dZ^T X   (tn)    reduced over the batch: split-K, see below
//
// Tiling: a block computes a BM x BN tile of C, walking K in steps of BK through shared memory;
// each thread holds a TM x TN register block. The next K-tile is fetched from global memory into
// registers while the current one is multiplied out of shared memory (two shared buffers, one
// barrier per K-tile). A thread's rows are groups of 4 adjacent rows (ty * 4 + r, repeated every
// BM / (TM / 4) rows) so each group is one 16-byte shared-memory read; neighbouring threads own
// neighbouring groups, so reads are conflict-free and writes of C coalesce. Tiles whose TM or TN
// is not a multiple of 4 use one row per step instead (ty + i * BM / TM). Every load and store is
// bounds-checked, so M, N and K need not be multiples of the tile.
//
// Networks: every operand is a stack [networks, rows, cols] whose 2-D slices are row-major; the
// host passes each operand's stride between networks (0: one matrix shared by all networks, as the
// coordinates are). blockIdx.z = network * splits + split, so one launch covers every network.
//
// Split-K: split s takes the slice [s * k_per_split, (s + 1) * k_per_split) of K and writes its
// partial product to C + network * stride_c + s * M * N; with splits > 1 the host sums those slices
// with column_reduce. This keeps the GPU busy on dW, whose output is tiny and whose K is the batch.
//
// Epilogues (fused, so the activations never make a separate pass over memory):
//   EPI_NONE      C = acc
//   EPI_BIAS_ACT  z = acc + bias[col]; C = z; a_out = act(z)              (linear_forward)
//   EPI_ACT_GRAD  C = acc * act'(z_in, a_in)                              (linear_backward_input)
//
// Tile configurations (host picks by shape, inr_cli/backends/launch.py):
//   128x128 (8x8 per thread) general; 128x64 and 64x128 for 64-wide layers;
//   256x8 for the output layer (N <= 8); 8x256 for its weight gradient (M <= 8).
// Launch: block (BM / TM) * (BN / TN) threads, grid (ceil(N / BN), ceil(M / BM), networks * splits).

#include "activation_math.cuh"

#define SMEM_PAD 4
// Blocks per SM the compiler must fit in registers. With 2, two 128x128 blocks share an SM and
// hide each other's load latency: on an H100 the SIREN 512 step took 7.2 ms against 9.2 ms with 1
// (dev/matmul/harness.py, variants 0 and 1, measures both).
#ifndef MATMUL_MIN_BLOCKS
#define MATMUL_MIN_BLOCKS 2
#endif
#define EPI_NONE 0
#define EPI_BIAS_ACT 1
#define EPI_ACT_GRAD 2

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15) == 0; }

// Row (or column) of register i of a thread at position t, for a tile side S with R registers.
template <int S, int R>
__device__ __forceinline__ int fragment_index(int t, int i)
{
    if constexpr (R % 4 == 0) return (i / 4) * (S / (R / 4)) + t * 4 + (i % 4);
    else return t + i * (S / R);
}

template <int S, int R>
__device__ __forceinline__ void load_fragment(const float* row, int t, float* out)
{
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int g = 0; g < R / 4; ++g) {
            const float4 v = *reinterpret_cast<const float4*>(row + g * (S / (R / 4)) + t * 4);
            out[g * 4 + 0] = v.x;
            out[g * 4 + 1] = v.y;
            out[g * 4 + 2] = v.z;
            out[g * 4 + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < R; ++i) out[i] = row[t + i * (S / R)];
    }
}

// Global -> registers -> shared for one operand tile. The tile is SO x SC in the operand's own
// memory order (SC along the contiguous dimension), read as float4 along SC when the operand's
// row length is a multiple of 4 and its base is 16-byte aligned, element by element otherwise
// (and at ragged edges). Shared memory always holds [k][m or n]: when SC runs along k the tile is
// transposed on the way in.
template <int SO, int SC, int THREADS>
__device__ __forceinline__ void fetch_tile(const float* __restrict__ G, long long ld, int o0, int c0, int o_lim,
                                           int c_lim, bool vec, float4* stage)
{
    constexpr int VECS = SO * SC / 4;
    constexpr int LOADS = (VECS + THREADS - 1) / THREADS;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
        const int v = threadIdx.x + l * THREADS;
        if (v >= VECS) break;
        const int go = o0 + v / (SC / 4);
        const int gc = c0 + (v % (SC / 4)) * 4;
        if (go < o_lim && vec && gc + 3 < c_lim) {
            stage[l] = *reinterpret_cast<const float4*>(G + go * ld + gc);
        } else {
            const float* row = G + go * ld;
            const bool in = go < o_lim;
            stage[l] = make_float4(in && gc < c_lim ? row[gc] : 0.0f, in && gc + 1 < c_lim ? row[gc + 1] : 0.0f,
                                   in && gc + 2 < c_lim ? row[gc + 2] : 0.0f, in && gc + 3 < c_lim ? row[gc + 3] : 0.0f);
        }
    }
}

template <int SO, int SC, int THREADS, bool C_IS_K, int WIDTH>
__device__ __forceinline__ void stash_tile(float (*smem)[WIDTH], const float4* stage)
{
    constexpr int VECS = SO * SC / 4;
    constexpr int LOADS = (VECS + THREADS - 1) / THREADS;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
        const int v = threadIdx.x + l * THREADS;
        if (v >= VECS) break;
        const int o = v / (SC / 4);
        const int c = (v % (SC / 4)) * 4;
        if constexpr (C_IS_K) {
            smem[c + 0][o] = stage[l].x;
            smem[c + 1][o] = stage[l].y;
            smem[c + 2][o] = stage[l].z;
            smem[c + 3][o] = stage[l].w;
        } else {
            *reinterpret_cast<float4*>(&smem[o][c]) = stage[l];
        }
    }
}

template <int BM, int BN, int BK, int TM, int TN, bool TRANS_A, bool TRANS_B, int EPI>
__device__ __forceinline__ void matmul_tile(const float* __restrict__ A, const float* __restrict__ B,
                                            float* C, int M, int N, int K, int k_per_split, int split,
                                            const float* __restrict__ bias, float* a_out,
                                            const float* z_in, const float* a_in, int kind, float omega0)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ __align__(16) float As[2][BK][BM + SMEM_PAD];
    __shared__ __align__(16) float Bs[2][BK][BN + SMEM_PAD];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int k_begin = split * k_per_split;
    const int k_end = k_begin + k_per_split < K ? k_begin + k_per_split : K;

    // Operand tiles in their own memory order: A is (BM x BK) with k contiguous, or (BK x BM)
    // when transposed; B is (BK x BN), or (BN x BK) when transposed.
    constexpr int A_SO = TRANS_A ? BK : BM, A_SC = TRANS_A ? BM : BK;
    constexpr int B_SO = TRANS_B ? BN : BK, B_SC = TRANS_B ? BK : BN;
    constexpr int A_LOADS = (A_SO * A_SC / 4 + THREADS - 1) / THREADS;
    constexpr int B_LOADS = (B_SO * B_SC / 4 + THREADS - 1) / THREADS;
    const bool vec_a = (TRANS_A ? M : K) % 4 == 0 && aligned16(A);
    const bool vec_b = (TRANS_B ? K : N) % 4 == 0 && aligned16(B);
    float4 a_stage[A_LOADS], b_stage[B_LOADS];
    auto fetch = [&](int k0) {
        if (TRANS_A) fetch_tile<A_SO, A_SC, THREADS>(A, M, k0, m0, k_end, M, vec_a, a_stage);
        else fetch_tile<A_SO, A_SC, THREADS>(A, K, m0, k0, M, k_end, vec_a, a_stage);
        if (TRANS_B) fetch_tile<B_SO, B_SC, THREADS>(B, K, n0, k0, N, k_end, vec_b, b_stage);
        else fetch_tile<B_SO, B_SC, THREADS>(B, N, k0, n0, k_end, N, vec_b, b_stage);
    };
    auto stash = [&](int buffer) {
        stash_tile<A_SO, A_SC, THREADS, !TRANS_A, BM + SMEM_PAD>(As[buffer], a_stage);
        stash_tile<B_SO, B_SC, THREADS, TRANS_B, BN + SMEM_PAD>(Bs[buffer], b_stage);
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    int buffer = 0;
    if (k_begin < k_end) {
        fetch(k_begin);
        stash(0);
    }
    __syncthreads();
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) fetch(k0 + BK);  // global loads in flight while we multiply
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            load_fragment<BM, TM>(As[buffer][k], ty, a);
            load_fragment<BN, TN>(Bs[buffer][k], tx, b);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) stash(buffer ^ 1);  // the other buffer: nobody reads it in this K-tile
        __syncthreads();
        buffer ^= 1;
    }

    float* out = C + (long long)split * M * N;
    // Columns come in groups of 4 adjacent ones when TN % 4 == 0: with N % 4 == 0 those are written
    // (and the epilogue's z and a read) as one 16-byte access, so a warp's stores coalesce fully.
    // Each network's operands start wherever its stride puts them, so alignment is checked too.
    const bool vector_ok = (TN % 4 == 0) && (N % 4 == 0) && aligned16(out) &&
                           (EPI != EPI_BIAS_ACT || (aligned16(bias) && aligned16(a_out))) &&
                           (EPI != EPI_ACT_GRAD || (aligned16(z_in) && aligned16(a_in)));
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = m0 + fragment_index<BM, TM>(ty, i);
        if (gm >= M) continue;
#pragma unroll
        for (int j0 = 0; j0 < TN; j0 += (TN % 4 == 0 ? 4 : 1)) {
            const int gn0 = n0 + fragment_index<BN, TN>(tx, j0);
            const long long at = (long long)gm * N + gn0;
            if (vector_ok && gn0 + 3 < N) {
                float v[4] = {acc[i][j0], acc[i][j0 + 1], acc[i][j0 + 2], acc[i][j0 + 3]};
                if (EPI == EPI_BIAS_ACT) {
                    const float4 b4 = *reinterpret_cast<const float4*>(bias + gn0);
                    v[0] += b4.x; v[1] += b4.y; v[2] += b4.z; v[3] += b4.w;
                    *reinterpret_cast<float4*>(out + at) = make_float4(v[0], v[1], v[2], v[3]);
                    *reinterpret_cast<float4*>(a_out + at) = make_float4(
                        activate(v[0], kind, omega0), activate(v[1], kind, omega0),
                        activate(v[2], kind, omega0), activate(v[3], kind, omega0));
                } else if (EPI == EPI_ACT_GRAD) {
                    const float4 z4 = *reinterpret_cast<const float4*>(z_in + at);
                    const float4 a4 = *reinterpret_cast<const float4*>(a_in + at);
                    *reinterpret_cast<float4*>(out + at) = make_float4(
                        v[0] * activation_derivative(z4.x, a4.x, kind, omega0),
                        v[1] * activation_derivative(z4.y, a4.y, kind, omega0),
                        v[2] * activation_derivative(z4.z, a4.z, kind, omega0),
                        v[3] * activation_derivative(z4.w, a4.w, kind, omega0));
                } else {
                    *reinterpret_cast<float4*>(out + at) = make_float4(v[0], v[1], v[2], v[3]);
                }
                continue;
            }
#pragma unroll
            for (int r = 0; r < (TN % 4 == 0 ? 4 : 1); ++r) {
                const int gn = n0 + fragment_index<BN, TN>(tx, j0 + r);
                if (gn >= N) continue;
                const long long at1 = (long long)gm * N + gn;
                float v = acc[i][j0 + r];
                if (EPI == EPI_BIAS_ACT) {
                    v += bias[gn];
                    out[at1] = v;
                    a_out[at1] = activate(v, kind, omega0);
                } else if (EPI == EPI_ACT_GRAD) {
                    out[at1] = v * activation_derivative(z_in[at1], a_in[at1], kind, omega0);
                } else {
                    out[at1] = v;
                }
            }
        }
    }
}

#define MATMUL_KERNEL(name, BM, BN, BK, TM, TN, TA, TB)                                                   \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MATMUL_MIN_BLOCKS)                 \
        name(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, \
             int K, int k_per_split, int splits, long long stride_a, long long stride_b, long long stride_c) \
    {                                                                                                     \
        const long long net = blockIdx.z / splits;                                                              \
        matmul_tile<BM, BN, BK, TM, TN, TA, TB, EPI_NONE>(A + net * stride_a, B + net * stride_b,         \
                                                          C + net * stride_c, M, N, K, k_per_split,       \
                                                          (int)(blockIdx.z % splits), nullptr, nullptr, nullptr, \
                                                          nullptr, 0, 0.0f);                              \
    }

// linear_forward: z = X W^T + bias, a = act(z). a may alias z (inference: no separate z kept).
// z and a share one layout (stride_z between networks).
#define FORWARD_KERNEL(name, BM, BN, BK, TM, TN)                                                           \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MATMUL_MIN_BLOCKS)                  \
        name(const float* __restrict__ X, const float* __restrict__ W, const float* __restrict__ bias,     \
             float* z, float* a, int M, int N, int K, int kind, float omega0, long long stride_x,          \
             long long stride_w, long long stride_bias, long long stride_z)                                \
    {                                                                                                      \
        const long long net = blockIdx.z;                                                                        \
        matmul_tile<BM, BN, BK, TM, TN, false, true, EPI_BIAS_ACT>(                                        \
            X + net * stride_x, W + net * stride_w, z + net * stride_z, M, N, K, K, 0,                     \
            bias + net * stride_bias, a + net * stride_z, nullptr, nullptr, kind, omega0);                 \
    }

// linear_backward_input: out = (dZ W) * act'(z_prev, a_prev), the previous layer's dZ in one pass.
// z_prev, a_prev and out share one layout (stride_prev between networks).
#define BACKWARD_INPUT_KERNEL(name, BM, BN, BK, TM, TN)                                                     \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MATMUL_MIN_BLOCKS)                   \
        name(const float* __restrict__ dZ, const float* __restrict__ W, const float* __restrict__ z_prev,   \
             const float* __restrict__ a_prev, float* __restrict__ out, int M, int N, int K, int kind,      \
             float omega0, long long stride_dz, long long stride_w, long long stride_prev)                  \
    {                                                                                                       \
        const long long net = blockIdx.z;                                                                   \
        matmul_tile<BM, BN, BK, TM, TN, false, false, EPI_ACT_GRAD>(                                        \
            dZ + net * stride_dz, W + net * stride_w, out + net * stride_prev, M, N, K, K, 0, nullptr,      \
            nullptr, z_prev + net * stride_prev, a_prev + net * stride_prev, kind, omega0);                 \
    }

#define MATMUL_ALL(tile, BM, BN, BK, TM, TN)                                  \
    MATMUL_KERNEL(matmul_##tile##_nn, BM, BN, BK, TM, TN, false, false)       \
    MATMUL_KERNEL(matmul_##tile##_nt, BM, BN, BK, TM, TN, false, true)        \
    MATMUL_KERNEL(matmul_##tile##_tn, BM, BN, BK, TM, TN, true, false)        \
    FORWARD_KERNEL(linear_forward_##tile, BM, BN, BK, TM, TN)                 \
    BACKWARD_INPUT_KERNEL(linear_backward_input_##tile, BM, BN, BK, TM, TN)

MATMUL_ALL(128x128, 128, 128, 16, 8, 8)
MATMUL_ALL(128x64, 128, 64, 16, 8, 4)
MATMUL_ALL(64x128, 64, 128, 16, 4, 8)
MATMUL_ALL(256x8, 256, 8, 16, 4, 2)
MATMUL_ALL(8x256, 8, 256, 16, 2, 4)
