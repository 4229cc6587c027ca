// Activation functions and their derivatives, shared by activations.cu and the fused epilogues
// of matmul.cu. The codes (ACT_*) are in constants.cuh.
#pragma once

#include "constants.cuh"

// sin and cos of x = omega0 * z after reducing x to [-pi, pi] (Cody-Waite, two-part 2*pi), then the
// hardware approximations, accurate to ~1e-6 there. The library sinf/cosf carry a slow path for
// huge arguments that costs registers and local memory in every epilogue that inlines them.
__device__ __forceinline__ float reduce_to_pi(float x)
{
    const float k = rintf(x * 0.15915494309189535f);  // 1 / (2 pi)
    float r = fmaf(-k, 6.28318548202514648f, x);    // 2 pi, rounded to float
    return fmaf(-k, -1.7484556000744883e-7f, r);      // 2 pi - that float
}

__device__ __forceinline__ float fast_sine(float x) { return __sinf(reduce_to_pi(x)); }
__device__ __forceinline__ float fast_cosine(float x) { return __cosf(reduce_to_pi(x)); }

__device__ __forceinline__ float activate(float z, int kind, float omega0)
{
    switch (kind) {
        case ACT_SIGMOID: return 1.0f / (1.0f + expf(-z));
        case ACT_SINE: return fast_sine(omega0 * z);
        case ACT_RELU: return z > 0.0f ? z : 0.0f;
        default: return z;
    }
}

// d act / d z, given z and a = act(z) (sigmoid uses a, sine and relu use z).
__device__ __forceinline__ float activation_derivative(float z, float a, int kind, float omega0)
{
    switch (kind) {
        case ACT_SIGMOID: return a * (1.0f - a);
        case ACT_SINE: return omega0 * fast_cosine(omega0 * z);
        case ACT_RELU: return z > 0.0f ? 1.0f : 0.0f;
        default: return 1.0f;
    }
}
