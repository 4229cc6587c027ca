// matmul -- NumpyBackend.matmul: C = op(A) @ op(B), row-major float32, op transposing on request.
// The three shapes a layer needs, with no transpose ever materialised:
//   forward            Z  = X  W^T   (nt)    X (rows, in),  W (out, in)
//   input gradient     dX = dZ W     (nn)    dZ (rows, out)
//   weight gradient    dW = dZ^T X   (tn)    reduced over the batch: split-K, see below
//
// Tiling: a block computes a BM x BN tile of C, walking K in steps of BK through shared memory;
// each thread holds a TM x TN register block. Thread (tx, ty) owns rows ty + i * (BM / TM) and
// columns tx + j * (BN / TN): neighbouring threads read neighbouring shared-memory words (no bank
// conflicts) and write neighbouring addresses of C (coalesced). Every load and store is bounds-
// checked, so M, N and K need not be multiples of the tile.
//
// Split-K: blockIdx.z takes the slice [z * k_per_split, (z + 1) * k_per_split) of K and writes its
// partial product to C + z * M * N; with gridDim.z > 1 the host sums those slices with
// column_reduce. This keeps the GPU busy on dW, whose output is tiny and whose K is the batch.
//
// Tile configurations (host picks by shape, inr_cli/backends/launch.py):
//   128x128 (8x8 per thread) general; 128x64 and 64x128 for 64-wide layers;
//   256x8 for the output layer (N <= 8); 8x256 for its weight gradient (M <= 8).
// Launch: block (BM / TM) * (BN / TN) threads, grid (ceil(N / BN), ceil(M / BM), splits).

#define SMEM_PAD 4

template <int BM, int BN, int BK, int TM, int TN, bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void matmul_tile(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, int M, int N, int K, int k_per_split)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int ROW_STEP = BM / TM;
    constexpr int COL_STEP = BN / TN;
    __shared__ float As[BK][BM + SMEM_PAD];
    __shared__ float Bs[BK][BN + SMEM_PAD];

    const int tid = threadIdx.x;
    const int tx = tid % COL_STEP;
    const int ty = tid / COL_STEP;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = k_begin + k_per_split < K ? k_begin + k_per_split : K;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
#pragma unroll
        for (int e = tid; e < BM * BK; e += THREADS) {
            // Walk memory in its own order: along k for A (rows, K), along m for A^T stored (K, M).
            const int m = TRANS_A ? e % BM : e / BK;
            const int k = TRANS_A ? e / BM : e % BK;
            const int gm = m0 + m, gk = k0 + k;
            float value = 0.0f;
            if (gm < M && gk < k_end) value = TRANS_A ? A[(long long)gk * M + gm] : A[(long long)gm * K + gk];
            As[k][m] = value;
        }
#pragma unroll
        for (int e = tid; e < BN * BK; e += THREADS) {
            const int n = TRANS_B ? e / BK : e % BN;
            const int k = TRANS_B ? e % BK : e / BN;
            const int gn = n0 + n, gk = k0 + k;
            float value = 0.0f;
            if (gn < N && gk < k_end) value = TRANS_B ? B[(long long)gn * K + gk] : B[(long long)gk * N + gn];
            Bs[k][n] = value;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty + i * ROW_STEP];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx + j * COL_STEP];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

    float* out = C + (long long)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = m0 + ty + i * ROW_STEP;
        if (gm >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gn = n0 + tx + j * COL_STEP;
            if (gn < N) out[(long long)gm * N + gn] = acc[i][j];
        }
    }
}

#define MATMUL_KERNEL(name, BM, BN, BK, TM, TN, TA, TB)                                                   \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN))                                   \
        name(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, \
             int K, int k_per_split)                                                                      \
    {                                                                                                     \
        matmul_tile<BM, BN, BK, TM, TN, TA, TB>(A, B, C, M, N, K, k_per_split);                           \
    }

#define MATMUL_ALL_TRANSPOSES(tile, BM, BN, BK, TM, TN)                \
    MATMUL_KERNEL(matmul_##tile##_nn, BM, BN, BK, TM, TN, false, false) \
    MATMUL_KERNEL(matmul_##tile##_nt, BM, BN, BK, TM, TN, false, true)  \
    MATMUL_KERNEL(matmul_##tile##_tn, BM, BN, BK, TM, TN, true, false)

MATMUL_ALL_TRANSPOSES(128x128, 128, 128, 8, 8, 8)
MATMUL_ALL_TRANSPOSES(128x64, 128, 64, 8, 8, 4)
MATMUL_ALL_TRANSPOSES(64x128, 64, 128, 8, 4, 8)
MATMUL_ALL_TRANSPOSES(256x8, 256, 8, 16, 4, 2)
MATMUL_ALL_TRANSPOSES(8x256, 8, 256, 16, 2, 4)
