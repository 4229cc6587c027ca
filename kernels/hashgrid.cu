// hashgrid_encode, hashgrid_backward -- NumpyBackend.hashgrid_encode / hashgrid_backward (numpy_ops.py):
// the multiresolution hash grid of inr_cli.core.encodings.HashGrid (Mueller et al. 2022).
//
// levels is HashGrid.level_table, [L, 4] int64 per level: resolution N (cells across), offset and size
// of its table (in entries of F features), and whether it is hashed. A point (u, v) in [-1, 1]^2 lies
// at ((u + 1) N/2, (v + 1) N/2) on the level's grid, clamped to [0, N]; its cell (i, j) is that
// rounded down, the last cell for a point on the far edge; its features the bilinear interpolation
// of the cell's four corners. A corner (a, b) is entry a + b (N + 1) of a dense level and
// (a XOR b * prime) mod size of a hashed one, in uint32 arithmetic (prime: encodings.HASH_PRIME).
// Each network's tables are the first entries * F floats of its parameter vector.
//
// Launch: grid (any, L, networks); one thread a point of one level (the level is the block's, so its
// table is what the block's threads read), grid-stride over the points. The backward adds each
// point's gradient into the corners' entries with atomicAdd (points share corners, and hashed
// vertices share entries); hashgrid_zero clears the tables' gradient first.

__device__ __forceinline__ void hashgrid_corners(float u, float v, const long long* level, unsigned int prime,
                                                 long long entries[4], float weights[4])
{
    const int resolution = (int)level[0];
    const unsigned int size = (unsigned int)level[2];
    const bool hashed = level[3] != 0;
    const float half = 0.5f * (float)resolution;  // exact: N is far below 2^24
    // (u + 1) * N/2 as the reference rounds it: the sum first, then the product (nothing to fuse).
    const float px = fminf(fmaxf((u + 1.0f) * half, 0.0f), (float)resolution);
    const float py = fminf(fmaxf((v + 1.0f) * half, 0.0f), (float)resolution);
    const float cx = fminf(floorf(px), (float)(resolution - 1));
    const float cy = fminf(floorf(py), (float)(resolution - 1));
    const float fx = px - cx, fy = py - cy;
    const float gx = 1.0f - fx, gy = 1.0f - fy;
    weights[0] = gx * gy;
    weights[1] = fx * gy;
    weights[2] = gx * fy;
    weights[3] = fx * fy;
    const int i = (int)cx, j = (int)cy;
    for (int c = 0; c < 4; ++c) {
        const int a = i + (c & 1), b = j + (c >> 1);
        if (hashed) {
            entries[c] = (long long)((((unsigned int)a) ^ ((unsigned int)b * prime)) % size);
        } else {
            entries[c] = (long long)a + (long long)b * (resolution + 1);
        }
    }
}

// One level (blockIdx.y) of one network (blockIdx.z), grid-stride over the points r. x: [networks or 1,
// rows, 2] (stride_x 0: one table of points for all); tables: stride_tables floats between networks;
// values: [networks, rows, L * F], stride_values floats between networks.
// Forward:  values[net, r, level * F + f] = sum over the corners of weight * tables[net, (offset + entry) * F + f].
// Backward: tables[net, (offset + entry) * F + f] += weight * values[net, r, level * F + f], for every point
//           and corner (tables: the gradient, cleared by hashgrid_zero; values: dL/d(encoding)).
template <bool BACKWARD>
__device__ void hashgrid_level(const float* __restrict__ x, float* tables, float* values,
                               const long long* __restrict__ levels, long long rows, int n_levels, int features,
                               long long stride_x, long long stride_tables, long long stride_values,
                               unsigned long long prime)
{
    const int level = blockIdx.y;
    const long long net = blockIdx.z;
    x += net * stride_x;
    tables += net * stride_tables + levels[4 * level + 1] * features;
    values += net * stride_values + (long long)level * features;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        long long entries[4];
        float weights[4];
        hashgrid_corners(x[2 * r], x[2 * r + 1], levels + 4 * level, (unsigned int)prime, entries, weights);
        float* point = values + r * n_levels * features;
        for (int f = 0; f < features; ++f) {
            if (BACKWARD) {
                for (int c = 0; c < 4; ++c) atomicAdd(&tables[entries[c] * features + f], weights[c] * point[f]);
            } else {
                float sum = 0.0f;
                for (int c = 0; c < 4; ++c) sum += weights[c] * tables[entries[c] * features + f];
                point[f] = sum;
            }
        }
    }
}

extern "C" __global__ void hashgrid_encode(const float* __restrict__ x, const float* __restrict__ tables,
                                           float* __restrict__ out, const long long* __restrict__ levels,
                                           long long rows, int n_levels, int features, long long stride_x,
                                           long long stride_tables, long long stride_out, unsigned long long prime)
{
    hashgrid_level<false>(x, (float*)tables, out, levels, rows, n_levels, features, stride_x, stride_tables,
                          stride_out, prime);
}

extern "C" __global__ void hashgrid_backward(const float* __restrict__ x, float* __restrict__ table_grads,
                                             const float* __restrict__ grad, const long long* __restrict__ levels,
                                             long long rows, int n_levels, int features, long long stride_x,
                                             long long stride_tables, long long stride_grad, unsigned long long prime)
{
    hashgrid_level<true>(x, table_grads, (float*)grad, levels, rows, n_levels, features, stride_x, stride_tables,
                         stride_grad, prime);
}

// table_grads[net, 0:count] = 0 for every network (stride_tables floats apart).
// Launch: grid (any, networks); grid-stride over count.
extern "C" __global__ void hashgrid_zero(float* __restrict__ table_grads, long long count, long long stride_tables)
{
    table_grads += (long long)blockIdx.y * stride_tables;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) table_grads[i] = 0.0f;
}
