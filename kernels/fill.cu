// fill -- NumpyBackend.fill: out[i] = value for every i < n.
// Replaces the original system's host-to-device copy of a ones tensor each step; here it zeroes
// the gradients and the optimizer moments of a fresh run on the device, with no host copy.
// Launch: any 1-D grid; a grid-stride loop covers n.

extern "C" __global__ void fill(float* __restrict__ out, float value, long long n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = value;
    }
}
