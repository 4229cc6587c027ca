// Variant 02: the plainest correct kernel, one thread per element of C, both operands read straight
// from global memory. Not a candidate: the floor that the tuned variants are measured from (as
// llm.c's dev/cuda kernels start from their kernel 1), and the harness's own check in CI.
//
// The variant contract (dev/matmul/harness.py): C (M x N) = op(A) op(B), row-major float32, one
// matrix; A is M x K (K x M for tn), B is N x K for nt and K x N for nn and tn.
#define VARIANT_BM 16
#define VARIANT_BN 16
#define VARIANT_THREADS 256

template <bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void naive(const float* A, const float* B, float* C, int M, int N, int K)
{
    const int col = blockIdx.x * VARIANT_BN + threadIdx.x % VARIANT_BN;
    const int row = blockIdx.y * VARIANT_BM + threadIdx.x / VARIANT_BN;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < K; ++i) {
        const float a = TRANS_A ? A[(long long)i * M + row] : A[(long long)row * K + i];
        const float b = TRANS_B ? B[(long long)col * K + i] : B[(long long)i * N + col];
        acc += a * b;
    }
    C[(long long)row * N + col] = acc;
}

extern "C" __global__ void matmul_nt(const float* A, const float* B, float* C, int M, int N, int K)
{
    naive<false, true>(A, B, C, M, N, K);
}

extern "C" __global__ void matmul_nn(const float* A, const float* B, float* C, int M, int N, int K)
{
    naive<false, false>(A, B, C, M, N, K);
}

extern "C" __global__ void matmul_tn(const float* A, const float* B, float* C, int M, int N, int K)
{
    naive<true, false>(A, B, C, M, N, K);
}
