// Activation functions and their derivatives, shared by activations.cu and the fused epilogues
// of matmul.cu. Codes match ACTIVATION_CODES in inr_cli/backends/launch.py:
//   0 linear, 1 sigmoid, 2 sine (sin(omega0 * z), SIREN), 3 relu.
#pragma once

__device__ __forceinline__ float activate(float z, int kind, float omega0)
{
    switch (kind) {
        case 1: return 1.0f / (1.0f + expf(-z));
        case 2: return sinf(omega0 * z);
        case 3: return z > 0.0f ? z : 0.0f;
        default: return z;
    }
}

// d act / d z, given z and a = act(z) (sigmoid uses a, sine and relu use z).
__device__ __forceinline__ float activation_derivative(float z, float a, int kind, float omega0)
{
    switch (kind) {
        case 1: return a * (1.0f - a);
        case 2: return omega0 * cosf(omega0 * z);
        case 3: return z > 0.0f ? 1.0f : 0.0f;
        default: return 1.0f;
    }
}
