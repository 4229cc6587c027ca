// hashgrid_encode_*, hashgrid_backward_* -- NumpyBackend.hashgrid_encode / hashgrid_backward
// (numpy_ops.py): the multiresolution hash grid of inr_cli.core.encodings.HashGrid (Mueller et al. 2022).
//
// levels is HashGrid.level_table, [L, 4] int64 per level: resolution N (cells across), offset and size
// of its table (in entries of F features), and whether it is hashed. A point (u, v) in [-1, 1]^2 lies
// at ((u + 1) N/2, (v + 1) N/2) on the level's grid, clamped to [0, N]; its cell (i, j) is that
// rounded down, the last cell for a point on the far edge; its features the bilinear interpolation
// of the cell's four corners, summed as the reference sums them, so the encoding is the reference's
// bit for bit. A corner (a, b) is entry a + b (N + 1) of a dense level and (a XOR b * prime) mod size
// of a hashed one, in uint32 arithmetic (prime: encodings.HASH_PRIME). Each network's tables are the
// first entries * F floats of its parameter vector. The backward adds each point's gradient into the
// corners' entries with atomics (points share corners, and hashed vertices share entries);
// hashgrid_zero clears the tables' gradient first.
//
// Three ways to run them, chosen by the launcher (launch.HASHGRID_VARIANTS), each timed on a GPU by
// benchmarks/gpu_goals.py:
//   _f<F>_rows    one thread a point of one level, a block's threads across the levels of its points
//                 (block (L, points)): a warp reads and writes whole rows of the [rows, L F] encoding;
//   _f<F>_levels  one thread a point, a level a block (grid.y), as tiny-cuda-nn's grid encoding: a
//                 block's threads read one table; a point's F features are a scattered sector;
//   _any          the first kernels: any F, 64-bit indices, a remainder on every hashed corner, one
//                 atomic per feature; what the others fall back to beyond their limits.
// The _f<F> kernels (F = 1, 2, 4) index in 32 bits (the launcher keeps rows L F and the tables below
// 2^31 floats), take a mask on power-of-two tables, read a corner's F features in one vector load and,
// on sm_90, add them with one vector atomic (red.global.add.v2/v4.f32; _scalar: one a feature), where
// the network's tables and rows are aligned for it (a stride between networks that is not a multiple
// of F leaves them to one float at a time).

// red.global.add.v2/v4.f32 exists from sm_90 on (PTX ISA 8.1); the emulation runs them as sm_90 does.
#if defined(INR_CUDA_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
#define HASHGRID_VECTOR_ATOMICS 1
#else
#define HASHGRID_VECTOR_ATOMICS 0
#endif

// The cell (i, j) of (u, v) on a level of N cells and its corners' bilinear weights, corners in the
// order (i, j), (i+1, j), (i, j+1), (i+1, j+1), rounded as the reference rounds them.
__device__ __forceinline__ void hashgrid_cell(float u, float v, int resolution, int& i, int& j, float weights[4])
{
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
    i = (int)cx;
    j = (int)cy;
}

// sum over the corners of weight * feature, as the reference adds them: (c0 + c1) + (c2 + c3), each
// product rounded (no fused multiply-add), so the encoding is the reference's exactly.
__device__ __forceinline__ float hashgrid_interpolate(const float w[4], float t0, float t1, float t2, float t3)
{
    return __fadd_rn(__fadd_rn(__fmul_rn(w[0], t0), __fmul_rn(w[1], t1)),
                     __fadd_rn(__fmul_rn(w[2], t2), __fmul_rn(w[3], t3)));
}

// ---- _any: any F, 64-bit ------------------------------------------------------------------------

__device__ __forceinline__ void hashgrid_corners(float u, float v, const long long* level, unsigned int prime,
                                                 long long entries[4], float weights[4])
{
    const int resolution = (int)level[0];
    const unsigned int size = (unsigned int)level[2];
    int i, j;
    hashgrid_cell(u, v, resolution, i, j, weights);
    for (int c = 0; c < 4; ++c) {
        const int a = i + (c & 1), b = j + (c >> 1);
        if (level[3] != 0) {
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
__device__ void hashgrid_level_any(const float* __restrict__ x, float* tables, float* values,
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
                point[f] = hashgrid_interpolate(weights, tables[entries[0] * features + f],
                                                tables[entries[1] * features + f], tables[entries[2] * features + f],
                                                tables[entries[3] * features + f]);
            }
        }
    }
}

extern "C" __global__ void hashgrid_encode_any(const float* __restrict__ x, const float* __restrict__ tables,
                                               float* __restrict__ out, const long long* __restrict__ levels,
                                               long long rows, int n_levels, int features, long long stride_x,
                                               long long stride_tables, long long stride_out,
                                               unsigned long long prime)
{
    hashgrid_level_any<false>(x, (float*)tables, out, levels, rows, n_levels, features, stride_x, stride_tables,
                              stride_out, prime);
}

extern "C" __global__ void hashgrid_backward_any(const float* __restrict__ x, float* __restrict__ table_grads,
                                                 const float* __restrict__ grad, const long long* __restrict__ levels,
                                                 long long rows, int n_levels, int features, long long stride_x,
                                                 long long stride_tables, long long stride_grad,
                                                 unsigned long long prime)
{
    hashgrid_level_any<true>(x, table_grads, (float*)grad, levels, rows, n_levels, features, stride_x,
                             stride_tables, stride_grad, prime);
}

// ---- _f<F>: F features a level, 32-bit ----------------------------------------------------------

// A level's row of the level table, as the _f<F> kernels use it. mask: size - 1 where the size is a
// power of two (a hashed table always is), else 0 and the remainder is taken.
struct HashLevel {
    int resolution;
    unsigned int size, mask;
    bool hashed;
};

__device__ __forceinline__ HashLevel hashgrid_level_row(const long long* level)
{
    const unsigned int size = (unsigned int)level[2];
    return {(int)level[0], size, (size & (size - 1)) == 0 ? size - 1 : 0u, level[3] != 0};
}

__device__ __forceinline__ void hashgrid_corners32(float u, float v, const HashLevel& level, unsigned int prime,
                                                   unsigned int entries[4], float weights[4])
{
    int i, j;
    hashgrid_cell(u, v, level.resolution, i, j, weights);
    if (level.hashed) {
        const unsigned int row0 = (unsigned int)j * prime, row1 = row0 + prime;  // (j + 1) prime, wrapping alike
        const unsigned int hashes[4] = {(unsigned int)i ^ row0, (unsigned int)(i + 1) ^ row0, (unsigned int)i ^ row1,
                                        (unsigned int)(i + 1) ^ row1};
        for (int c = 0; c < 4; ++c) entries[c] = level.mask ? hashes[c] & level.mask : hashes[c] % level.size;
    } else {
        entries[0] = (unsigned int)i + (unsigned int)j * (unsigned int)(level.resolution + 1);
        entries[1] = entries[0] + 1;
        entries[2] = entries[0] + (unsigned int)(level.resolution + 1);
        entries[3] = entries[2] + 1;
    }
}

// F floats at p into v: one vector load where `vector` (p then aligned to F floats), else one at a time.
template <int F>
__device__ __forceinline__ void hashgrid_load(const float* p, float v[F], bool vector)
{
#ifdef INR_CUDA_EMULATION
    if (vector && F > 1) emu::check_aligned(p, 4 * F, "hashgrid_load");
#endif
    if constexpr (F == 2) {
        if (vector) {
            const float2 t = *reinterpret_cast<const float2*>(p);
            v[0] = t.x;
            v[1] = t.y;
            return;
        }
    } else if constexpr (F == 4) {
        if (vector) {
            const float4 t = *reinterpret_cast<const float4*>(p);
            v[0] = t.x;
            v[1] = t.y;
            v[2] = t.z;
            v[3] = t.w;
            return;
        }
    }
    for (int f = 0; f < F; ++f) v[f] = p[f];
}

template <int F>
__device__ __forceinline__ void hashgrid_store(float* p, const float v[F], bool vector)
{
#ifdef INR_CUDA_EMULATION
    if (vector && F > 1) emu::check_aligned(p, 4 * F, "hashgrid_store");
#endif
    if constexpr (F == 2) {
        if (vector) {
            *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
            return;
        }
    } else if constexpr (F == 4) {
        if (vector) {
            *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
            return;
        }
    }
    for (int f = 0; f < F; ++f) p[f] = v[f];
}

// p[f] += v[f], atomically: with VECTOR (sm_90) and `vector` (p aligned to F floats) one
// red.global.add.v2.f32 or .v4.f32 for the F features, else one atomicAdd each. Like atomicAdd on
// floats in global memory, the vector forms flush subnormals to zero.
template <int F, bool VECTOR>
__device__ __forceinline__ void hashgrid_add(float* p, const float v[F], bool vector)
{
#if HASHGRID_VECTOR_ATOMICS
    if constexpr (VECTOR && (F == 2 || F == 4)) {
        if (vector) {
#ifdef INR_CUDA_EMULATION
            emu::check_aligned(p, 4 * F, "red.global.add.v2/v4.f32");
            for (int f = 0; f < F; ++f) atomicAdd(p + f, v[f]);
#else
            if constexpr (F == 2) {
                asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v[0]), "f"(v[1]) : "memory");
            } else {
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]),
                             "f"(v[2]), "f"(v[3]) : "memory");
            }
#endif
            return;
        }
    }
#endif
    for (int f = 0; f < F; ++f) atomicAdd(p + f, v[f]);
}

__device__ __forceinline__ bool hashgrid_aligned(const float* p, int floats)
{
    return ((unsigned long long)p & (unsigned long long)(4 * floats - 1)) == 0;
}

// The point r's level `level` of one network: its F features (forward) or their gradient added into
// the tables (backward). As hashgrid_level_any, in 32-bit indices.
template <int F, bool BACKWARD, bool VECTOR>
__device__ __forceinline__ void hashgrid_point(const float* __restrict__ x, float* tables, float* values,
                                               const HashLevel& level, unsigned int r, unsigned int row_width,
                                               unsigned int prime, bool vector)
{
    unsigned int entries[4];
    float weights[4];
    hashgrid_corners32(x[2 * r], x[2 * r + 1], level, prime, entries, weights);
    float* point = values + r * row_width;
    if (BACKWARD) {
        float grad[F], share[F];
        hashgrid_load<F>(point, grad, vector);
        for (int c = 0; c < 4; ++c) {
            for (int f = 0; f < F; ++f) share[f] = weights[c] * grad[f];
            hashgrid_add<F, VECTOR>(tables + entries[c] * F, share, vector);
        }
    } else {
        float corner[4][F], sum[F];
        for (int c = 0; c < 4; ++c) hashgrid_load<F>(tables + entries[c] * F, corner[c], vector);
        for (int f = 0; f < F; ++f) sum[f] = hashgrid_interpolate(weights, corner[0][f], corner[1][f], corner[2][f],
                                                                   corner[3][f]);
        hashgrid_store<F>(point, sum, vector);
    }
}

// ROWS: block (L, points), grid (any, 1, networks): thread (level, point of the block). Else block
// (points), grid (any, L, networks): the level is blockIdx.y. Grid-stride over the points either way;
// arguments as hashgrid_level_any's, rows L F and the tables below 2^31 floats.
template <int F, bool BACKWARD, bool ROWS, bool VECTOR>
__device__ void hashgrid_level_f(const float* __restrict__ x, float* tables, float* values,
                                 const long long* __restrict__ levels, unsigned int rows, int n_levels,
                                 long long stride_x, long long stride_tables, long long stride_values,
                                 unsigned int prime)
{
    const int level = ROWS ? threadIdx.x : blockIdx.y;
    const long long net = blockIdx.z;
    const unsigned int per_block = ROWS ? blockDim.y : blockDim.x;
    const unsigned int stride = gridDim.x * per_block;
    x += net * stride_x;
    tables += net * stride_tables + levels[4 * level + 1] * F;
    values += net * stride_values + level * F;
    const HashLevel row = hashgrid_level_row(levels + 4 * level);
    const bool vector = hashgrid_aligned(tables, F) && hashgrid_aligned(values, F);  // the same for all the block
    const unsigned int row_width = (unsigned int)n_levels * F;
    for (unsigned int r = blockIdx.x * per_block + (ROWS ? threadIdx.y : threadIdx.x); r < rows; r += stride) {
        hashgrid_point<F, BACKWARD, VECTOR>(x, tables, values, row, r, row_width, prime, vector);
    }
}

#define HASHGRID_ENCODE(F, MAP, ROWS)                                                                               \
    extern "C" __global__ void hashgrid_encode_f##F##_##MAP(                                                        \
        const float* __restrict__ x, const float* __restrict__ tables, float* __restrict__ out,                     \
        const long long* __restrict__ levels, int rows, int n_levels, long long stride_x, long long stride_tables,  \
        long long stride_out, unsigned long long prime)                                                             \
    {                                                                                                               \
        hashgrid_level_f<F, false, ROWS, false>(x, (float*)tables, out, levels, (unsigned int)rows, n_levels,       \
                                                stride_x, stride_tables, stride_out, (unsigned int)prime);          \
    }

#define HASHGRID_BACKWARD(F, NAME, ROWS, VECTOR)                                                                    \
    extern "C" __global__ void hashgrid_backward_f##F##_##NAME(                                                     \
        const float* __restrict__ x, float* __restrict__ table_grads, const float* __restrict__ grad,               \
        const long long* __restrict__ levels, int rows, int n_levels, long long stride_x, long long stride_tables,  \
        long long stride_grad, unsigned long long prime)                                                            \
    {                                                                                                               \
        hashgrid_level_f<F, true, ROWS, VECTOR>(x, table_grads, (float*)grad, levels, (unsigned int)rows, n_levels, \
                                                stride_x, stride_tables, stride_grad, (unsigned int)prime);         \
    }

#define HASHGRID_KERNELS(F, MAP, ROWS) HASHGRID_ENCODE(F, MAP, ROWS) HASHGRID_BACKWARD(F, MAP, ROWS, true)

HASHGRID_KERNELS(1, rows, true)
HASHGRID_KERNELS(2, rows, true)
HASHGRID_KERNELS(4, rows, true)
HASHGRID_KERNELS(1, levels, false)
HASHGRID_KERNELS(2, levels, false)
HASHGRID_KERNELS(4, levels, false)
// The rows kernels' backward with one atomic a feature: what the vector atomics win, timed beside them.
HASHGRID_BACKWARD(2, rows_scalar, true, false)
HASHGRID_BACKWARD(4, rows_scalar, true, false)

// table_grads[net, 0:count] = 0 for every network (stride_tables floats apart).
// Launch: grid (any, networks); grid-stride over count.
extern "C" __global__ void hashgrid_zero(float* __restrict__ table_grads, long long count, long long stride_tables)
{
    table_grads += (long long)blockIdx.y * stride_tables;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) table_grads[i] = 0.0f;
}
