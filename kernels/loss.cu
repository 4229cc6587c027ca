// mse_loss -- NumpyBackend.mse_loss, first half, for every network: with n = rows * cols elements
// per network and scale = 1 / n,
//   grad[i] = 2 * scale * (pred[i] - target[i])
//   partial[net * gridDim.x + blockIdx.x] = scale * sum over this block's elements of (pred - target)^2
// The host then runs column_reduce over partial (gridDim.x rows, 1 column, per network) into the
// networks' loss scalars, which stay on the device until the logging interval reads them.
// Launch: block LOSS_THREADS (constants.cuh), grid (any, networks); grid-stride loop within a network.

#include "constants.cuh"

extern "C" __global__ void mse_loss(const float* __restrict__ pred, const float* __restrict__ target,
                                    float* __restrict__ grad, float* __restrict__ partial, long long n,
                                    float scale)
{
    __shared__ float sums[LOSS_THREADS];
    const long long offset = blockIdx.y * n;
    pred += offset;
    target += offset;
    grad += offset;
    float sum = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float diff = pred[i] - target[i];
        grad[i] = 2.0f * scale * diff;
        sum += diff * diff;
    }
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int width = LOSS_THREADS / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) sums[threadIdx.x] += sums[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = sums[0] * scale;
}
