// Activations -- NumpyBackend.bias_activation and NumpyBackend.activation_backward.
// Activation codes match ACTIVATIONS in inr_cli/backends/numpy_backend.py:
//   0 linear, 1 sigmoid, 2 sine (sin(omega0 * z), SIREN), 3 relu.
// bias_activation fuses the bias add with the activation: one pass over z instead of two.
// Launch: any 1-D grid; grid-stride loops over rows * cols elements.

__device__ __forceinline__ float activate(float z, int kind, float omega0)
{
    switch (kind) {
        case 1: return 1.0f / (1.0f + expf(-z));
        case 2: return sinf(omega0 * z);
        case 3: return z > 0.0f ? z : 0.0f;
        default: return z;
    }
}

// The column of element i needs i % cols: a 64-bit modulo costs several times a 32-bit one, so
// the index type is chosen by the size of the array.
template <typename Index>
__device__ __forceinline__ void bias_activation_loop(float* z, const float* __restrict__ bias, float* a,
                                                     Index n, Index cols, int kind, float omega0)
{
    Index stride = (Index)gridDim.x * blockDim.x;
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = z[i] + bias[i % cols];
        z[i] = v;
        a[i] = activate(v, kind, omega0);
    }
}

// z += bias (per column) in place; a = act(z). a may alias z (inference).
extern "C" __global__ void bias_activation(float* z, const float* __restrict__ bias, float* a,
                                           long long rows, int cols, int kind, float omega0)
{
    long long n = rows * cols;
    if (n < 0xFFFFFFFFLL - 0xFFFFFFLL)
        bias_activation_loop<unsigned int>(z, bias, a, (unsigned int)n, (unsigned int)cols, kind, omega0);
    else
        bias_activation_loop<long long>(z, bias, a, n, (long long)cols, kind, omega0);
}

// grad <- grad * act'(z) in place, given z and a = act(z) from the forward pass.
extern "C" __global__ void activation_backward(float* __restrict__ grad, const float* __restrict__ z,
                                               const float* __restrict__ a, long long n, int kind,
                                               float omega0)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d;
        switch (kind) {
            case 1: d = a[i] * (1.0f - a[i]); break;
            case 2: d = omega0 * cosf(omega0 * z[i]); break;
            case 3: d = z[i] > 0.0f ? 1.0f : 0.0f; break;
            default: d = 1.0f;
        }
        grad[i] *= d;
    }
}
