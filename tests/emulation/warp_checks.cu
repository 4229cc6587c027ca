// Kernels that exercise warps: under the emulation (tests/test_emulation.py) they check that its
// lanes meet and exchange values as the hardware's do; on a GPU (tests/test_gpu.py) the same
// kernels and the same expectations check the hardware, and so the emulation's reading of it.
// Launch: one block of blockDim.x threads (1-D) unless said otherwise.

#include "tensor_core.cuh"

// out[t * 4 + i]: what thread t received from shuffle i of value[t]: __shfl_sync from lane
// (7 t + src) of its segment, __shfl_up_sync and __shfl_down_sync by delta, __shfl_xor_sync with
// delta as the lane mask; every segment `width` lanes wide.
extern "C" __global__ void shuffles(const float* value, float* out, int src, int delta, int width)
{
    const int t = threadIdx.x;
    const float v = value[t];
    out[t * 4 + 0] = __shfl_sync(0xffffffffu, v, 7 * t + src, width);
    out[t * 4 + 1] = __shfl_up_sync(0xffffffffu, v, delta, width);
    out[t * 4 + 2] = __shfl_down_sync(0xffffffffu, v, delta, width);
    out[t * 4 + 3] = __shfl_xor_sync(0xffffffffu, v, delta, width);
}

// out[t]: the sum of value over thread t's warp, by the butterfly of __shfl_xor_sync.
extern "C" __global__ void warp_sums(const float* value, float* out)
{
    float v = value[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    out[threadIdx.x] = v;
}

// out[t * 3 + i]: __ballot_sync, __any_sync, __all_sync of predicate[t] over thread t's warp.
extern "C" __global__ void votes(const int* predicate, unsigned int* out)
{
    const int t = threadIdx.x;
    out[t * 3 + 0] = __ballot_sync(0xffffffffu, predicate[t]);
    out[t * 3 + 1] = __any_sync(0xffffffffu, predicate[t]);
    out[t * 3 + 2] = __all_sync(0xffffffffu, predicate[t]);
}

// Threads from `live` on return at once; the others meet at __syncthreads and read what their
// neighbour wrote before it: out[t] = written[(t + 1) % live].
extern "C" __global__ void barrier_after_returns(const float* written, float* out, int live)
{
    __shared__ float values[1024];
    const int t = threadIdx.x;
    if (t >= live) return;
    values[t] = written[t];
    __syncthreads();
    out[t] = values[(t + 1) % live];
}

// out[i] = the bits of to_tf32(x[i]) (raw == 0) or of the bare instruction cvt_rna_tf32(x[i]) (raw != 0),
// over a grid-stride loop.
extern "C" __global__ void round_tf32(const float* x, unsigned int* out, int n, int raw)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = raw ? cvt_rna_tf32(x[i]) : to_tf32(x[i]);
}

// Warp w of the block: d[w] = a[w] b[w] + c[w] by one mma_tf32_16x8x8, each lane loading its
// fragments as the PTX ISA lays them out (a: 16x8 row-major, b: 8x8 stored as b[k][n], c and d:
// 16x8 row-major). round != 0 rounds a and b with to_tf32; 0 hands the tensor core the raw FP32
// bits (it reads their top 19).
extern "C" __global__ void mma_tiles(const float* a, const float* b, const float* c, float* d, int round)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    a += warp * 128;
    b += warp * 64;
    c += warp * 128;
    d += warp * 128;
    auto operand = [&](float x) { return round ? to_tf32(x) : __float_as_uint(x); };
    const unsigned int af[4] = {operand(a[g * 8 + t]), operand(a[(g + 8) * 8 + t]), operand(a[g * 8 + t + 4]),
                                operand(a[(g + 8) * 8 + t + 4])};
    const unsigned int bf[2] = {operand(b[t * 8 + g]), operand(b[(t + 4) * 8 + g])};
    const float cf[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    float df[4];
    mma_tf32_16x8x8(df, af, bf, cf);
    d[g * 8 + 2 * t] = df[0];
    d[g * 8 + 2 * t + 1] = df[1];
    d[(g + 8) * 8 + 2 * t] = df[2];
    d[(g + 8) * 8 + 2 * t + 1] = df[3];
}

#ifdef INR_CUDA_EMULATION
// Misuse the emulation must report rather than hang on (a GPU would hang or read garbage).
// One warp of 32 threads.
extern "C" __global__ void lanes_at_different_barriers(float* out)
{
    if (threadIdx.x < 16) __syncwarp();
    else __syncthreads();
    out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void shuffle_with_returned_lanes(float* out)
{
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0);
}

extern "C" __global__ void shuffle_outside_the_mask(float* out)
{
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1.0f, 20);
}

// Dynamic shared memory as the emulation gives it: every thread but the sixth writes its index, then
// reads its neighbour's (the fifth reads what nobody wrote); with past_end, thread 0 writes one float
// past the bytes the launch gave.
extern "C" __global__ void dynamic_shared(float* out, int past_end)
{
    float* shared = emu::dynamic_shared();
    if (threadIdx.x != 5) shared[threadIdx.x] = (float)(blockIdx.x * blockDim.x + threadIdx.x);
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = shared[(threadIdx.x + 1) % blockDim.x];
    if (threadIdx.x == 0 && past_end) shared[blockDim.x] = 1.0f;
}
#endif
