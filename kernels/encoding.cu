// fourier_features -- NumpyBackend.fourier_features: Gaussian Fourier features (Tancik et al. 2020).
// Given the projection p = x B^T (rows, m), computed by matmul, write
//   out[r, j] = cos(2 pi p[r, j]),  out[r, m + j] = sin(2 pi p[r, j])        (out is rows x 2m)
// The arguments reach a few hundred radians for sigma = 10, so they are reduced to [-pi, pi]
// before the hardware sine (activation_math.cuh).
// Launch: any 1-D grid; grid-stride loop over rows * m.

#include "activation_math.cuh"

extern "C" __global__ void fourier_features(const float* __restrict__ projection, float* __restrict__ out,
                                            long long rows, int m)
{
    const long long n = rows * m;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long row = i / m;
        const int j = (int)(i - row * m);
        const float angle = 6.28318530717958648f * projection[i];
        out[row * 2 * m + j] = fast_cosine(angle);
        out[row * 2 * m + m + j] = fast_sine(angle);
    }
}
