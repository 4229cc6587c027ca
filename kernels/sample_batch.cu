// sample_batch -- NumpyBackend.sample_batch: gather `batch` random pixels for every network.
// Network `net` draws with its own seed, so its batches do not depend on the networks beside it.
// Pixel index of sample i at step s is splitmix64(seed + GOLDEN * (s * batch + i + 1)) % n_pixels,
// the same counter-based hash as inr_cli.backends.numpy_backend.batch_indices, so both backends
// draw identical batches and a resumed run draws what an uninterrupted one would.
// The step is read from device memory (advance_schedule moves it), keeping the launch graph-safe.
// No table of coordinates: pixel p's (u, v) is computed from its column p % width and row p / width
// in double, as inr_cli.core.coords.pixel_coords does (the bits of coords.pixel_grid). Its colour is
// read as the image is kept: sample_batch_u8 converts an 8-bit value v to v / 255.0f (the bits of
// core.pixels.as_floats), sample_batch_f32 copies float32 values.
// targets (networks, n_pixels, out); outputs batch_coords (networks, batch, 2), batch_targets
// (networks, batch, out). Launch: grid (any, networks); grid-stride loop over the batch.

__device__ __forceinline__ float to_value(unsigned char v) { return (float)v / 255.0f; }
__device__ __forceinline__ float to_value(float v) { return v; }

// The centre of pixel x of n across [-1, 1]: coords.axis_centres, in double then rounded once.
__device__ __forceinline__ float axis_centre(long long x, long long n)
{
    return (float)(((double)x + 0.5) / (double)n * 2.0 - 1.0);
}

template <typename T>
__device__ void sample_batch_impl(const T* __restrict__ targets, float* __restrict__ batch_coords,
                                  float* __restrict__ batch_targets, long long n_pixels, long long width, int batch,
                                  int out_features, const unsigned long long* __restrict__ seeds,
                                  const long long* __restrict__ step)
{
    const int net = blockIdx.y;
    const unsigned long long seed = seeds[net];
    const long long height = n_pixels / width;
    targets += (long long)net * n_pixels * out_features;
    batch_coords += (long long)net * batch * 2;
    batch_targets += (long long)net * batch * out_features;
    unsigned long long base = (unsigned long long)(*step) * (unsigned long long)batch;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < batch; i += stride) {
        unsigned long long x = seed + 0x9E3779B97F4A7C15ULL * (base + (unsigned long long)i + 1ULL);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        x = x ^ (x >> 31);
        long long pixel = (long long)(x % (unsigned long long)n_pixels);
        batch_coords[i * 2] = axis_centre(pixel % width, width);
        batch_coords[i * 2 + 1] = axis_centre(pixel / width, height);
        for (int c = 0; c < out_features; ++c)
            batch_targets[i * out_features + c] = to_value(targets[pixel * out_features + c]);
    }
}

#define SAMPLE_BATCH_KERNEL(name, T)                                                                                \
    extern "C" __global__ void name(const T* __restrict__ targets, float* __restrict__ batch_coords,                \
                                    float* __restrict__ batch_targets, long long n_pixels, long long width,          \
                                    int batch, int out_features, const unsigned long long* __restrict__ seeds,       \
                                    const long long* __restrict__ step)                                              \
    {                                                                                                                \
        sample_batch_impl<T>(targets, batch_coords, batch_targets, n_pixels, width, batch, out_features, seeds,     \
                             step);                                                                                  \
    }

SAMPLE_BATCH_KERNEL(sample_batch_u8, unsigned char)
SAMPLE_BATCH_KERNEL(sample_batch_f32, float)
