// sample_batch -- NumpyBackend.sample_batch: gather `batch` random pixels for every network.
// Network `net` draws with its own seed, so its batches do not depend on the networks beside it.
// Pixel index of sample i at step s is splitmix64(seed + GOLDEN * (s * batch + i + 1)) % n_pixels,
// the same counter-based hash as inr_cli.backends.numpy_backend.batch_indices, so both backends
// draw identical batches and a resumed run draws what an uninterrupted one would.
// The step is read from device memory (advance_schedule moves it), keeping the launch graph-safe.
// coords (n_pixels, in) is shared; targets (networks, n_pixels, out); outputs (networks, batch, ...).
// Launch: grid (any, networks); grid-stride loop over the batch.

extern "C" __global__ void sample_batch(const float* __restrict__ coords, const float* __restrict__ targets,
                                        float* __restrict__ batch_coords, float* __restrict__ batch_targets,
                                        long long n_pixels, int batch, int in_features, int out_features,
                                        const unsigned long long* __restrict__ seeds,
                                        const long long* __restrict__ step)
{
    const int net = blockIdx.y;
    const unsigned long long seed = seeds[net];
    targets += (long long)net * n_pixels * out_features;
    batch_coords += (long long)net * batch * in_features;
    batch_targets += (long long)net * batch * out_features;
    unsigned long long base = (unsigned long long)(*step) * (unsigned long long)batch;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < batch; i += stride) {
        unsigned long long x = seed + 0x9E3779B97F4A7C15ULL * (base + (unsigned long long)i + 1ULL);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        x = x ^ (x >> 31);
        long long pixel = (long long)(x % (unsigned long long)n_pixels);
        for (int c = 0; c < in_features; ++c) batch_coords[i * in_features + c] = coords[pixel * in_features + c];
        for (int c = 0; c < out_features; ++c) batch_targets[i * out_features + c] = targets[pixel * out_features + c];
    }
}
