// Activations -- NumpyBackend.bias_activation and NumpyBackend.activation_backward.
// Activation codes and formulas: activation_math.cuh. Arrays hold every network's rows one after
// another ([networks, rows, cols]); bias has one row per network, stride_bias apart. Inside a training step these passes are
// fused into the matmul epilogues (matmul.cu); the standalone kernels serve the output layer's
// sigmoid and any caller that has z already.
// bias_activation fuses the bias add with the activation: one pass over z instead of two.
// Launch: any 1-D grid; grid-stride loops over rows * cols elements.

#include "activation_math.cuh"

// The column of element i needs i % cols and its network i / (rows * cols): 64-bit division costs
// several times a 32-bit one, so the index type is chosen by the size of the array.
template <typename Index>
__device__ __forceinline__ void bias_activation_loop(float* z, const float* __restrict__ bias, float* a, Index n,
                                                     Index rows, Index cols, long long stride_bias, int kind,
                                                     float omega0)
{
    Index stride = (Index)gridDim.x * blockDim.x;
    const Index per_network = rows * cols;
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = z[i] + bias[(long long)(i / per_network) * stride_bias + i % cols];
        z[i] = v;
        a[i] = activate(v, kind, omega0);
    }
}

// z += bias (per network and column) in place; a = act(z). a may alias z (inference).
extern "C" __global__ void bias_activation(float* z, const float* __restrict__ bias, float* a, long long networks,
                                           long long rows, int cols, long long stride_bias, int kind,
                                           float omega0)
{
    long long n = networks * rows * cols;
    if (n < 0xFFFFFFFFLL - 0xFFFFFFLL)
        bias_activation_loop<unsigned int>(z, bias, a, (unsigned int)n, (unsigned int)rows, (unsigned int)cols,
                                           stride_bias, kind, omega0);
    else
        bias_activation_loop<long long>(z, bias, a, n, rows, (long long)cols, stride_bias, kind, omega0);
}

// grad <- grad * act'(z) in place, given z and a = act(z) from the forward pass.
extern "C" __global__ void activation_backward(float* __restrict__ grad, const float* __restrict__ z,
                                               const float* __restrict__ a, long long n, int kind,
                                               float omega0)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        grad[i] *= activation_derivative(z[i], a[i], kind, omega0);
    }
}
