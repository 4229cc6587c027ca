// matmul -- NumpyBackend.matmul: C = op(A) @ op(B), row-major float32, op transposing on request,
// and the fused layer operations NumpyBackend.linear_forward / linear_backward_input.
// The three shapes a layer needs, with no transpose ever materialised:
//   forward            Z  = X  W^T   (nt)    X (rows, in),  W (out, in)
//   input gradient     dX = dZ W     (nn)    dZ (rows, out)
//   weight gradient    dW = dZ^T X   (tn)    reduced over the batch: split-K, see below
//
// Tiling: a block computes a BM x BN tile of C, walking K in steps of BK through shared memory,
// with one of two engines (--precision). FP32 (SimtTile): each thread holds a TM x TN register
// block. TF32 (MmaTile): each warp multiplies its part of the tile on tensor cores, mma.sync
// m16n8k8 with FP32 accumulation, the operands rounded to TF32 (cvt.rna) as they enter shared
// memory; the thin tiles run the FP32 engine on operands rounded the same way, which is the same
// arithmetic (products of TF32 values are exact in FP32). The next K-tile is fetched from global memory into
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
// Tile configurations (host picks by shape, inr_cli/backends/launch.py), each in FP32 and TF32:
//   128x128 (8x8 per thread; 8 warps of 64x32) general; 128x64 and 64x128 for 64-wide layers;
//   256x8 for the output layer (N <= 8); 8x256 for its weight gradient (M <= 8).
// Launch: block Tile::THREADS threads, grid (ceil(N / BN), ceil(M / BM), networks * splits).

#include "activation_math.cuh"
#include "tensor_core.cuh"

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
__device__ __forceinline__ bool aligned8(const void* p) { return ((unsigned long long)p & 7) == 0; }

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

// Registers -> shared; with ROUND every element rounded to TF32 on the way (once per element, not
// once per use).
template <int SO, int SC, int THREADS, bool C_IS_K, int WIDTH, bool ROUND>
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
        float4 value = stage[l];
        if constexpr (ROUND)
            value = make_float4(tf32_value(value.x), tf32_value(value.y), tf32_value(value.z), tf32_value(value.w));
        if constexpr (C_IS_K) {
            smem[c + 0][o] = value.x;
            smem[c + 1][o] = value.y;
            smem[c + 2][o] = value.z;
            smem[c + 3][o] = value.w;
        } else {
            *reinterpret_cast<float4*>(&smem[o][c]) = value;
        }
    }
}

// The epilogue of one element of C at (gm, gn), at = gm * N + gn (EPI_* above).
template <int EPI>
__device__ __forceinline__ void epilogue_store(float* out, long long at, int gn, float v, const float* bias,
                                               float* a_out, const float* z_in, const float* a_in, int kind,
                                               float omega0)
{
    if (EPI == EPI_BIAS_ACT) {
        v += bias[gn];
        out[at] = v;
        a_out[at] = activate(v, kind, omega0);
    } else if (EPI == EPI_ACT_GRAD) {
        out[at] = v * activation_derivative(z_in[at], a_in[at], kind, omega0);
    } else {
        out[at] = v;
    }
}

// What a tile engine's epilogue needs besides its accumulators.
struct Epilogue {
    float* out;  // C, at this split's slice
    int M, N, m0, n0;
    const float* bias;
    float* a_out;
    const float* z_in;
    const float* a_in;
    int kind;
    float omega0;
};

// The FP32 engine (and TF32 on thin tiles, ROUND: its operands rounded to TF32 on their way into
// shared memory, so that its FP32 sums of exact products are TF32's). Each thread holds a TM x TN
// register block, rows and columns as fragment_index places them.
template <int BM_, int BN_, int BK_, int TM, int TN, bool ROUND_>
struct SimtTile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 4, THREADS = (BM / TM) * (BN / TN);
    static constexpr bool ROUND = ROUND_;
    float acc[TM][TN];

    __device__ __forceinline__ void clear()
    {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    }

    __device__ __forceinline__ void multiply(const float (*As)[BM + PAD], const float (*Bs)[BN + PAD])
    {
        const int tid = threadIdx.x;
        const int tx = tid % (BN / TN), ty = tid / (BN / TN);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            load_fragment<BM, TM>(As[k], ty, a);
            load_fragment<BN, TN>(Bs[k], tx, b);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
    }

    template <int EPI>
    __device__ __forceinline__ void store(const Epilogue& e) const
    {
        const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
        const int M = e.M, N = e.N;
        float* out = e.out;
        // Columns come in groups of 4 adjacent ones when TN % 4 == 0: with N % 4 == 0 those are
        // written (and the epilogue's z and a read) as one 16-byte access, so a warp's stores
        // coalesce fully. Each network's operands start wherever its stride puts them, so alignment
        // is checked too.
        const bool vector_ok = (TN % 4 == 0) && (N % 4 == 0) && aligned16(out) &&
                               (EPI != EPI_BIAS_ACT || (aligned16(e.bias) && aligned16(e.a_out))) &&
                               (EPI != EPI_ACT_GRAD || (aligned16(e.z_in) && aligned16(e.a_in)));
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int gm = e.m0 + fragment_index<BM, TM>(ty, i);
            if (gm >= M) continue;
#pragma unroll
            for (int j0 = 0; j0 < TN; j0 += (TN % 4 == 0 ? 4 : 1)) {
                const int gn0 = e.n0 + fragment_index<BN, TN>(tx, j0);
                const long long at = (long long)gm * N + gn0;
                if (vector_ok && gn0 + 3 < N) {
                    float v[4] = {acc[i][j0], acc[i][j0 + 1], acc[i][j0 + 2], acc[i][j0 + 3]};
                    if (EPI == EPI_BIAS_ACT) {
                        const float4 b4 = *reinterpret_cast<const float4*>(e.bias + gn0);
                        v[0] += b4.x; v[1] += b4.y; v[2] += b4.z; v[3] += b4.w;
                        *reinterpret_cast<float4*>(out + at) = make_float4(v[0], v[1], v[2], v[3]);
                        *reinterpret_cast<float4*>(e.a_out + at) = make_float4(
                            activate(v[0], e.kind, e.omega0), activate(v[1], e.kind, e.omega0),
                            activate(v[2], e.kind, e.omega0), activate(v[3], e.kind, e.omega0));
                    } else if (EPI == EPI_ACT_GRAD) {
                        const float4 z4 = *reinterpret_cast<const float4*>(e.z_in + at);
                        const float4 a4 = *reinterpret_cast<const float4*>(e.a_in + at);
                        *reinterpret_cast<float4*>(out + at) = make_float4(
                            v[0] * activation_derivative(z4.x, a4.x, e.kind, e.omega0),
                            v[1] * activation_derivative(z4.y, a4.y, e.kind, e.omega0),
                            v[2] * activation_derivative(z4.z, a4.z, e.kind, e.omega0),
                            v[3] * activation_derivative(z4.w, a4.w, e.kind, e.omega0));
                    } else {
                        *reinterpret_cast<float4*>(out + at) = make_float4(v[0], v[1], v[2], v[3]);
                    }
                    continue;
                }
#pragma unroll
                for (int r = 0; r < (TN % 4 == 0 ? 4 : 1); ++r) {
                    const int gn = e.n0 + fragment_index<BN, TN>(tx, j0 + r);
                    if (gn < N)
                        epilogue_store<EPI>(out, (long long)gm * N + gn, gn, acc[i][j0 + r], e.bias, e.a_out, e.z_in,
                                            e.a_in, e.kind, e.omega0);
                }
            }
        }
    }
};

// The TF32 tensor-core engine: WARPS_M x WARPS_N warps, each multiplying a (BM / WARPS_M) x
// (BN / WARPS_N) part of the tile by mma.sync m16n8k8 (kernels/tensor_core.cuh) with FP32
// accumulation; the operands sit in shared memory already rounded to TF32. A row of 8 floats of
// padding makes the fragment reads conflict-free: lane (g, t) reads [k0 + t][r0 + g], bank
// 8 t + g.
template <int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N>
struct MmaTile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 8, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr bool ROUND = true;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
    static_assert(WM % 16 == 0 && WN % 8 == 0 && BK % 8 == 0, "a warp's part is whole m16n8k8 tiles");
    float acc[MI][NI][4];

    __device__ __forceinline__ void clear()
    {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    }

    __device__ __forceinline__ void multiply(const float (*As)[BM + PAD], const float (*Bs)[BN + PAD])
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
        const int r0 = (warp / WARPS_N) * WM + g, c0 = (warp % WARPS_N) * WN + g;
#pragma unroll
        for (int k0 = 0; k0 < BK; k0 += 8) {
            unsigned int a[MI][4], b[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                a[i][0] = __float_as_uint(As[k0 + t][r0 + 16 * i]);
                a[i][1] = __float_as_uint(As[k0 + t][r0 + 16 * i + 8]);
                a[i][2] = __float_as_uint(As[k0 + t + 4][r0 + 16 * i]);
                a[i][3] = __float_as_uint(As[k0 + t + 4][r0 + 16 * i + 8]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                b[j][0] = __float_as_uint(Bs[k0 + t][c0 + 8 * j]);
                b[j][1] = __float_as_uint(Bs[k0 + t + 4][c0 + 8 * j]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_tf32_16x8x8(acc[i][j], a[i], b[j], acc[i][j]);
        }
    }

    // A lane holds the pairs of adjacent columns (2t, 2t + 1) of rows g and g + 8 of each m16n8
    // tile: each pair is one 8-byte access where N is even and the pointers allow.
    template <int EPI>
    __device__ __forceinline__ void store(const Epilogue& e) const
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
        const bool pair_ok = e.N % 2 == 0 && aligned8(e.out) &&
                             (EPI != EPI_BIAS_ACT || (aligned8(e.bias) && aligned8(e.a_out))) &&
                             (EPI != EPI_ACT_GRAD || (aligned8(e.z_in) && aligned8(e.a_in)));
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int gm = e.m0 + (warp / WARPS_N) * WM + 16 * i + g + 8 * half;
                if (gm >= e.M) continue;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int gn = e.n0 + (warp % WARPS_N) * WN + 8 * j + 2 * t;
                    const long long at = (long long)gm * e.N + gn;
                    float v0 = acc[i][j][2 * half], v1 = acc[i][j][2 * half + 1];
                    if (pair_ok && gn + 1 < e.N) {
                        if (EPI == EPI_BIAS_ACT) {
                            const float2 b2 = *reinterpret_cast<const float2*>(e.bias + gn);
                            v0 += b2.x;
                            v1 += b2.y;
                            *reinterpret_cast<float2*>(e.out + at) = make_float2(v0, v1);
                            *reinterpret_cast<float2*>(e.a_out + at) =
                                make_float2(activate(v0, e.kind, e.omega0), activate(v1, e.kind, e.omega0));
                        } else if (EPI == EPI_ACT_GRAD) {
                            const float2 z2 = *reinterpret_cast<const float2*>(e.z_in + at);
                            const float2 a2 = *reinterpret_cast<const float2*>(e.a_in + at);
                            *reinterpret_cast<float2*>(e.out + at) =
                                make_float2(v0 * activation_derivative(z2.x, a2.x, e.kind, e.omega0),
                                            v1 * activation_derivative(z2.y, a2.y, e.kind, e.omega0));
                        } else {
                            *reinterpret_cast<float2*>(e.out + at) = make_float2(v0, v1);
                        }
                        continue;
                    }
                    if (gn < e.N)
                        epilogue_store<EPI>(e.out, at, gn, v0, e.bias, e.a_out, e.z_in, e.a_in, e.kind, e.omega0);
                    if (gn + 1 < e.N)
                        epilogue_store<EPI>(e.out, at + 1, gn + 1, v1, e.bias, e.a_out, e.z_in, e.a_in, e.kind,
                                            e.omega0);
                }
            }
    }
};

// One block's BM x BN tile of C through either engine: the next K-tile is fetched from global
// memory into registers while the current one is multiplied out of shared memory (two shared
// buffers, one barrier per K-tile), then the epilogue.
template <class Tile, bool TRANS_A, bool TRANS_B, int EPI>
__device__ __forceinline__ void matmul_tile(const float* __restrict__ A, const float* __restrict__ B,
                                            float* C, int M, int N, int K, int k_per_split, int split,
                                            const float* __restrict__ bias, float* a_out,
                                            const float* z_in, const float* a_in, int kind, float omega0)
{
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, PAD = Tile::PAD, THREADS = Tile::THREADS;
    __shared__ __align__(16) float As[2][BK][BM + PAD];
    __shared__ __align__(16) float Bs[2][BK][BN + PAD];

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
        stash_tile<A_SO, A_SC, THREADS, !TRANS_A, BM + PAD, Tile::ROUND>(As[buffer], a_stage);
        stash_tile<B_SO, B_SC, THREADS, TRANS_B, BN + PAD, Tile::ROUND>(Bs[buffer], b_stage);
    };

    Tile tile;
    tile.clear();
    int buffer = 0;
    if (k_begin < k_end) {
        fetch(k_begin);
        stash(0);
    }
    __syncthreads();
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) fetch(k0 + BK);  // global loads in flight while we multiply
        tile.multiply(As[buffer], Bs[buffer]);
        if (more) stash(buffer ^ 1);  // the other buffer: nobody reads it in this K-tile
        __syncthreads();
        buffer ^= 1;
    }
    tile.template store<EPI>(Epilogue{C + (long long)split * M * N, M, N, m0, n0, bias, a_out, z_in, a_in, kind,
                                      omega0});
}

#define MATMUL_KERNEL(name, TILE, TA, TB)                                                                  \
    extern "C" __global__ void __launch_bounds__(TILE::THREADS, MATMUL_MIN_BLOCKS)                         \
        name(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, \
             int K, int k_per_split, int splits, long long stride_a, long long stride_b, long long stride_c) \
    {                                                                                                     \
        const long long net = blockIdx.z / splits;                                                        \
        matmul_tile<TILE, TA, TB, EPI_NONE>(A + net * stride_a, B + net * stride_b, C + net * stride_c, M, N, K, \
                                            k_per_split, (int)(blockIdx.z % splits), nullptr, nullptr, nullptr, \
                                            nullptr, 0, 0.0f);                                            \
    }

// linear_forward: z = X W^T + bias, a = act(z). a may alias z (inference: no separate z kept).
// z and a share one layout (stride_z between networks).
#define FORWARD_KERNEL(name, TILE)                                                                         \
    extern "C" __global__ void __launch_bounds__(TILE::THREADS, MATMUL_MIN_BLOCKS)                          \
        name(const float* __restrict__ X, const float* __restrict__ W, const float* __restrict__ bias,     \
             float* z, float* a, int M, int N, int K, int kind, float omega0, long long stride_x,          \
             long long stride_w, long long stride_bias, long long stride_z)                                \
    {                                                                                                      \
        const long long net = blockIdx.z;                                                                  \
        matmul_tile<TILE, false, true, EPI_BIAS_ACT>(X + net * stride_x, W + net * stride_w, z + net * stride_z, \
                                                     M, N, K, K, 0, bias + net * stride_bias, a + net * stride_z, \
                                                     nullptr, nullptr, kind, omega0);                      \
    }

// linear_backward_input: out = (dZ W) * act'(z_prev, a_prev), the previous layer's dZ in one pass.
// z_prev, a_prev and out share one layout (stride_prev between networks).
#define BACKWARD_INPUT_KERNEL(name, TILE)                                                                   \
    extern "C" __global__ void __launch_bounds__(TILE::THREADS, MATMUL_MIN_BLOCKS)                           \
        name(const float* __restrict__ dZ, const float* __restrict__ W, const float* __restrict__ z_prev,   \
             const float* __restrict__ a_prev, float* __restrict__ out, int M, int N, int K, int kind,      \
             float omega0, long long stride_dz, long long stride_w, long long stride_prev)                  \
    {                                                                                                       \
        const long long net = blockIdx.z;                                                                   \
        matmul_tile<TILE, false, false, EPI_ACT_GRAD>(dZ + net * stride_dz, W + net * stride_w,             \
                                                      out + net * stride_prev, M, N, K, K, 0, nullptr, nullptr, \
                                                      z_prev + net * stride_prev, a_prev + net * stride_prev, \
                                                      kind, omega0);                                        \
    }

#define MATMUL_ALL(tile, TILE)                                    \
    MATMUL_KERNEL(matmul_##tile##_nn, TILE, false, false)         \
    MATMUL_KERNEL(matmul_##tile##_nt, TILE, false, true)          \
    MATMUL_KERNEL(matmul_##tile##_tn, TILE, true, false)          \
    FORWARD_KERNEL(linear_forward_##tile, TILE)                   \
    BACKWARD_INPUT_KERNEL(linear_backward_input_##tile, TILE)

// The tiles (inr_cli/backends/launch.py's TILES: name, BM, BN, BK, threads). FP32: SimtTile<BM,
// BN, BK, TM, TN, false>; TF32 (prefix tf32_): tensor cores where a tile is wide both ways,
// MmaTile<BM, BN, BK, WARPS_M, WARPS_N>, and the FP32 engine on rounded operands on the thin ones.
using Tile128x128 = SimtTile<128, 128, 16, 8, 8, false>;
using Tile128x64 = SimtTile<128, 64, 16, 8, 4, false>;
using Tile64x128 = SimtTile<64, 128, 16, 4, 8, false>;
using Tile256x8 = SimtTile<256, 8, 16, 4, 2, false>;
using Tile8x256 = SimtTile<8, 256, 16, 2, 4, false>;
using TileTf32_128x128 = MmaTile<128, 128, 16, 2, 4>;
using TileTf32_128x64 = MmaTile<128, 64, 16, 4, 2>;
using TileTf32_64x128 = MmaTile<64, 128, 16, 2, 4>;
using TileTf32_256x8 = SimtTile<256, 8, 16, 4, 2, true>;
using TileTf32_8x256 = SimtTile<8, 256, 16, 2, 4, true>;

MATMUL_ALL(128x128, Tile128x128)
MATMUL_ALL(128x64, Tile128x64)
MATMUL_ALL(64x128, Tile64x128)
MATMUL_ALL(256x8, Tile256x8)
MATMUL_ALL(8x256, Tile8x256)
MATMUL_ALL(tf32_128x128, TileTf32_128x128)
MATMUL_ALL(tf32_128x64, TileTf32_128x64)
MATMUL_ALL(tf32_64x128, TileTf32_64x128)
MATMUL_ALL(tf32_256x8, TileTf32_256x8)
MATMUL_ALL(tf32_8x256, TileTf32_8x256)
